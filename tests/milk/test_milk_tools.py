"""milk streams seen by the rest of shmstream (docs/milk.md, "The command,
the viewer, record and the bridge"): ``shmstream list``, ``stat`` and
``watch`` run as commands in child processes, ``shmstream view`` answered on its picture
socket and its table, ``shmstream record`` then ``replay``, and a bridge
that exports a milk stream to another bridge process.

Every milk stream lives in a private directory named by ``MILK_SHM_DIR``
(set for this process and so for its children) and is written by another
process. Synchronised on events, counts and the bridges' own answers,
never on sleeps.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import urllib.parse
import urllib.request

import numpy as np
import pytest

import shmstream
from shmstream import milk

import support

WAIT = support.WAIT
SHAPE = (4, 6)


@pytest.fixture
def milk_dir(tmp_path, monkeypatch) -> str:
    d = tmp_path / "milk-shm"
    d.mkdir()
    monkeypatch.setenv("MILK_SHM_DIR", str(d))
    return str(d)


def cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """``shmstream ARGS`` as a user runs it, in a child process."""
    return subprocess.run(
        [sys.executable, "-m", "shmstream", *args],
        capture_output=True,
        text=True,
        timeout=WAIT,
        check=False,
        env=os.environ if env is None else env,
    )


def frame(k: int, dtype: str = "f4") -> np.ndarray:
    """Frame k: every pixel k, so a torn frame shows."""
    return np.full(SHAPE, k, dtype)


# ---- children --------------------------------------------------------------------


def child_write_and_exit(directory: str, name: str, frames: int, cb_size: int) -> None:
    with milk.create(name, SHAPE, "f4", dir=directory, cb_size=cb_size) as s:
        for k in range(1, frames + 1):
            s.write(frame(k))


def child_claim_and_hold(directory: str, name: str, ready, done) -> None:
    with milk.open(name, dir=directory) as s:
        s.claim()
        ready.set()
        done.wait(WAIT)


def child_write_on_go(directory: str, name: str, made, go, frames: int) -> None:
    """Create the stream and write frame 1; on ``go``, frames 2 to ``frames``
    (each waits for nothing: the reader counts what it misses)."""
    with milk.create(name, SHAPE, "f4", dir=directory) as s:
        s.write(frame(1))
        made.set()
        go.wait(WAIT)
        for k in range(2, frames + 1):
            s.write(frame(k))


def child_write_until(directory: str, name: str, made, stop) -> int:
    """Write frames as fast as possible until ``stop``; the last count."""
    with milk.create(name, SHAPE, "f4", dir=directory) as s:
        s.write(frame(1))
        made.set()
        k = 1
        while not stop.is_set():
            k += 1
            s.write(frame(k))
        return k


# ---- list and stat ----------------------------------------------------------------


def test_list_and_stat_show_milk_streams_marked_as_milk(milk_dir, ctx, spawn):
    spawn(child_write_and_exit, milk_dir, "wfs", 3, 0).result()  # its creator is gone
    with open(os.path.join(milk_dir, "old.im.shm"), "wb") as f:  # another version
        f.write(b"1.00".ljust(32, b"\0") + bytes(600))
    ready, done = ctx.Event(), ctx.Event()
    holder = spawn(child_claim_and_hold, milk_dir, "wfs", ready, done)
    holder.wait_event(ready)
    try:
        out = cli("list")
        assert out.returncode == 0, out.stderr
        [row] = [line for line in out.stdout.splitlines() if "milk:wfs" in line]
        assert row.split()[0] == "milk" and "(dead)" in row
        # the file milk cannot be read by shmstream is named, with the reason
        assert "old.im.shm" in out.stderr and "version '1.00'" in out.stderr
        listed = json.loads(cli("list", "--kind", "milk", "--json").stdout)
        assert [(e["name"], e["kind"]) for e in listed] == [("milk:wfs", "milk")]
        assert listed[0]["segname"] == os.path.join(milk_dir, "wfs.im.shm")
        info = json.loads(cli("stat", "milk:wfs", "--json").stdout)
        assert info["kind"] == "milk" and info["shape"] == list(SHAPE)
        assert info["dtype"] == "float32" and info["count"] == 3
        assert info["readers"] == [holder.pid] and info["creator_alive"] is False
        assert info["segment"] == os.path.join(milk_dir, "wfs.im.shm")
        text = cli("stat", "milk:wfs").stdout
        assert "kind:" in text and "milk" in text and "(4, 6)" in text
    finally:
        done.set()
        holder.result()


def test_a_missing_milk_stream_is_a_clear_error(milk_dir):
    out = cli("stat", "milk:nothing")
    assert out.returncode == 1
    assert "no milk stream named 'milk:nothing'" in out.stderr
    assert os.path.join(milk_dir, "nothing.im.shm") in out.stderr


def test_without_milk_s_directory_list_shows_no_milk_stream(milk_dir, spawn):
    if os.path.isdir(milk.layout.DEFAULT_DIR):
        pytest.skip("/milk/shm exists on this machine: milk's directory is always there")
    spawn(child_write_and_exit, milk_dir, "wfs", 1, 0).result()
    env = {k: v for k, v in os.environ.items() if k != "MILK_SHM_DIR"}
    out = cli("list", "--kind", "milk", env=env)
    assert out.returncode == 0 and "milk:wfs" not in out.stdout
    assert "milk:wfs" in cli("list", "--kind", "milk").stdout  # with it: there


def test_a_shmstream_stream_of_the_same_name_comes_first(milk_dir, spawn):
    spawn(child_write_and_exit, milk_dir, "twin", 1, 0).result()
    assert shmstream.stat("milk:twin")["kind"] == "milk"
    s = shmstream.create("milk:twin", shape=(2,), dtype=np.uint8)
    try:
        assert shmstream.stat("milk:twin")["kind"] == "stream"
    finally:
        s.close()
        shmstream.unlink("milk:twin")


def test_watch_follows_a_milk_stream(milk_dir, ctx, spawn):
    made, stop = ctx.Event(), ctx.Event()
    writer = spawn(child_write_until, milk_dir, "w", made, stop)
    writer.wait_event(made)
    try:
        out = cli("watch", "milk:w", "--count", "2", "--interval", "0.2")
    finally:
        stop.set()
    writer.result()
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert len(lines) == 2 and all(line.startswith("milk:w  count ") for line in lines)
    assert "creator alive" in lines[-1] and "age " in lines[-1]
    assert int(lines[-1].split()[2]) > 1  # the count went on while it watched


# ---- view -------------------------------------------------------------------------


def _pictures(url: str, until) -> list[dict]:
    """Headers of the picture socket's messages up to the first ``until``
    accepts; each acknowledged as the page does."""
    websockets = pytest.importorskip("websockets", reason="the 'view' extra is not installed")

    async def run() -> list[dict]:
        async with websockets.connect(url) as ws:
            got: list[dict] = []
            while not (got and until(got[-1])):
                raw = await asyncio.wait_for(ws.recv(), WAIT)
                (length,) = struct.unpack("<I", raw[:4])
                got.append(json.loads(raw[4 : 4 + length]))
                await ws.send('{"ack": 1}')
            return got

    return asyncio.run(run())


def test_view_draws_a_milk_stream_and_lists_it(milk_dir, ctx, spawn):
    pytest.importorskip("starlette", reason="the 'view' extra is not installed")
    from view_util import start_cli, stop_cli

    made, go = ctx.Event(), ctx.Event()
    writer = spawn(child_write_on_go, milk_dir, "cam", made, go, 2)
    writer.wait_event(made)
    proc, url = start_cli("milk:cam")
    try:
        ws = url.replace("http://", "ws://", 1).replace("/?", "/ws?", 1)
        first = _pictures(ws, lambda h: h.get("kind") == "image")[-1]
        assert (first["name"], first["count"], first["max"]) == ("milk:cam", 1, 1)
        go.set()
        writer.result()
        last = _pictures(ws, lambda h: h.get("kind") == "image" and h.get("count") == 2)[-1]
        assert last["max"] == 2 and last["shape"] == list(SHAPE)
        parts = urllib.parse.urlsplit(url)
        token = urllib.parse.parse_qs(parts.query)["token"][0]
        api = f"{parts.scheme}://{parts.netloc}/api/segments?token={token}"
        with urllib.request.urlopen(api, timeout=WAIT) as r:
            rows = json.loads(r.read())["rows"]
        [row] = [r for r in rows if r["name"] == "milk:cam"]
        assert row["kind"] == "milk" and row["count"] == 2
    finally:
        err = stop_cli(proc)
    assert "Traceback" not in err, err


# ---- record and replay -------------------------------------------------------------


def test_record_a_milk_circular_buffer_then_replay_it(milk_dir, spawn, tmp_path, name):
    spawn(child_write_and_exit, milk_dir, "rec", 5, 8).result()
    out_dir = str(tmp_path / "recording")
    out = cli("record", "milk:rec", "-o", out_dir, "--backlog", "--frames", "5", "--quiet")
    assert out.returncode == 0, out.stderr
    rec = shmstream.load_recording(out_dir)
    assert rec.name == "milk:rec" and rec.counts.tolist() == [1, 2, 3, 4, 5]
    assert [float(f[0, 0]) for f in rec.frames] == [1, 2, 3, 4, 5]
    assert all((f == f[0, 0]).all() for f in rec.frames)
    stats = shmstream.replay(out_dir, name, rate=float("inf"))
    assert stats.frames == 5
    with shmstream.open(name, readonly=True) as s:
        batch = s.read_since(0, timeout=0)
        assert batch.counts.tolist() == [1, 2, 3, 4, 5]
        assert np.array_equal(batch.frames, rec.frames[:])


def test_record_a_milk_stream_without_history_under_a_fast_writer(milk_dir, ctx, spawn, tmp_path):
    made, stop = ctx.Event(), ctx.Event()
    writer = spawn(child_write_until, milk_dir, "fast", made, stop)
    writer.wait_event(made)
    out_dir = str(tmp_path / "recording")
    try:
        out = cli("record", "milk:fast", "-o", out_dir, "--frames", "20", "--quiet")
    finally:
        stop.set()
    last = writer.result()
    assert out.returncode == 0, out.stderr
    rec = shmstream.load_recording(out_dir)
    counts = rec.counts.tolist()
    assert len(counts) == 20 and counts == sorted(set(counts)) and counts[-1] <= last
    for c, f in zip(counts, rec.frames):  # never torn: every pixel is its count
        assert (f == c).all(), f"frame {c} is torn"


# ---- the bridge ---------------------------------------------------------------------


def test_a_bridge_exports_a_milk_stream(milk_dir, ctx, spawn, make_name):
    pytest.importorskip("zenoh", reason="eclipse-zenoh is not installed")
    from bridge_util import BridgeProc, endpoint, free_port

    made, go = ctx.Event(), ctx.Event()
    frames = 30
    writer = spawn(child_write_on_go, milk_dir, "bcam", made, go, frames)
    writer.wait_event(made)
    ep = endpoint(free_port())
    namespace = make_name("ns")[-20:]
    prefix = make_name("m") + "/"
    local = prefix + "milk:bcam"
    exporter = BridgeProc(exports=["milk:bcam"], namespace=namespace, listen=[ep])
    importer = None
    try:
        importer = BridgeProc(
            imports=["milk:bcam"],
            remote_namespace=namespace,
            local_prefix=prefix,
            connect=[ep],
            namespace="importer",
            unlink_on_close=True,
        )
        importer.wait_import(local)
        with shmstream.open(local, readonly=True) as m:
            assert m.shape == SHAPE and m.dtype == np.float32
            pub = m.read_after_publication(0, timeout=WAIT)
            assert pub.count == 1 and (pub.payload == 1).all()
            go.set()
            while m.last_read_count < frames:
                pub = m.read_new_publication(timeout=WAIT)
                assert (pub.payload == pub.count).all(), f"frame {pub.count} is torn"
        writer.result()
    finally:
        if importer is not None:
            importer.stop()
        exporter.stop()
        from shmstream.bridge import status_name

        for n in (local, status_name(local)):
            try:
                shmstream.unlink(n)
            except FileNotFoundError:
                pass


# ---- unlink ---------------------------------------------------------------------------

OTHER_UID = 65534  # a second local user (tests/common/test_owner.py's)


def test_unlink_removes_a_milk_stream_file_and_open_readers_keep_theirs(milk_dir, spawn):
    spawn(child_write_and_exit, milk_dir, "gone", 2, 0).result()
    path = os.path.join(milk_dir, "gone.im.shm")
    reader = milk.open("gone")
    try:
        out = cli("unlink", "milk:gone")
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == "unlinked 'milk:gone'"
        assert not os.path.exists(path)  # one file: milk's semaphores were in it
        assert reader.read().tolist() == frame(2).tolist()  # the mapping stays
        with pytest.raises(FileNotFoundError):
            shmstream.stat("milk:gone")
        again = cli("unlink", "milk:gone")
        assert again.returncode == 0 and "nothing named 'milk:gone'" in again.stderr
    finally:
        reader.close()


def test_unlink_of_a_directory_in_milk_s_place_says_so_and_leaves_it(milk_dir):
    os.mkdir(os.path.join(milk_dir, "odd.im.shm"))
    out = cli("unlink", "milk:odd")
    assert out.returncode == 1
    assert "is a directory" in out.stderr and "rmdir" in out.stderr
    assert os.path.isdir(os.path.join(milk_dir, "odd.im.shm"))


def _unlink_as_other_user(name: str) -> str:
    """shmstream.unlink(name) as uid OTHER_UID: what it raised, or 'removed'."""
    os.setgid(OTHER_UID)
    os.setuid(OTHER_UID)
    try:
        shmstream.unlink(name)
    except PermissionError as exc:
        return f"{type(exc).__name__}: {exc}"
    return "removed"


def test_unlink_refuses_another_user_s_milk_stream_in_a_shared_directory(monkeypatch, spawn):
    # milk's directory is often open to all (mode 0777, no sticky bit): the
    # kernel would let anyone remove anything; the rule of /dev/shm holds.
    if os.geteuid() != 0:
        pytest.skip("needs root to act as a second local user")
    shared = tempfile.mkdtemp(prefix="milk-shared-")  # /tmp: reachable by that user
    try:
        os.chmod(shared, 0o777)
        monkeypatch.setenv("MILK_SHM_DIR", shared)
        with milk.create("mine", SHAPE, "f4", mode=0o666) as s:
            s.write(frame(1))
        path = os.path.join(shared, "mine.im.shm")
        what = spawn(_unlink_as_other_user, "milk:mine").result()
        assert what.startswith("ShmstreamPermissionError") and "belongs to uid 0" in what
        assert os.path.exists(path)
        os.chown(path, OTHER_UID, OTHER_UID)  # its owner may
        assert spawn(_unlink_as_other_user, "milk:mine").result() == "removed"
        assert not os.path.exists(path)
    finally:
        shutil.rmtree(shared, ignore_errors=True)
