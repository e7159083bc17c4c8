"""The ``shmstream`` command: every subcommand against real streams."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid

import numpy as np
import pytest

import shmstream
from shmstream import cli, registry

import support


@pytest.fixture
def name():
    n = f"test-cli-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    yield n
    shmstream.unlink(n)


def test_no_arguments_prints_help_and_returns_1(capsys):
    assert cli.main([]) == 1
    out = capsys.readouterr().out
    assert "usage: shmstream" in out
    for command in ("list", "stat", "unlink", "purge", "watch", "demo", "bench"):
        assert command in out


def test_list_prints_a_table_with_the_kind_and_the_user_visible_name(name, capsys):
    with shmstream.create(name, shape=(2,), dtype=np.float32):
        assert cli.main(["list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["KIND", "SIZE", "CREATOR", "NAME"]
    row = [line for line in lines if line.endswith(name)]
    assert len(row) == 1 and row[0].split()[0] == "stream"
    assert f"{os.getpid()} (alive)" in row[0]
    assert not any(line.endswith(("_meta", "_gpu")) for line in lines)


def test_list_shows_a_stream_a_channel_a_shared_array_and_a_running_loader(make_name, capsys):
    torch = pytest.importorskip("torch")
    from shmstream.torch import DataLoader

    class Rows(torch.utils.data.Dataset):
        def __len__(self):
            return 8

        def __getitem__(self, i):
            return torch.full((256,), float(i))

    stream_name, channel_name, array_name = make_name(), make_name(), make_name()
    me = f"{os.getpid()} (alive)"
    with shmstream.create(stream_name, shape=(2,)), shmstream.channel(channel_name, 4096):
        arr = shmstream.share(np.arange(3), name=array_name)
        loader = DataLoader(Rows(), batch_size=4, num_workers=1)
        batches = iter(loader)
        next(batches)  # the loader's pool and a slot exist now
        try:
            assert cli.main(["list"]) == 0
            rows = [line.split() for line in capsys.readouterr().out.splitlines()[1:]]
            mine = {row[-1]: row[0] for row in rows if me in " ".join(row)}
            assert mine.get(stream_name) == "stream"
            assert mine.get(channel_name) == "channel"
            assert mine.get(array_name) == "array"
            assert "loader-pool" in mine.values(), rows
            assert cli.main(["list", "--kind", "channel"]) == 0
            kinds = {line.split()[0] for line in capsys.readouterr().out.splitlines()[1:]}
            assert kinds == {"channel"}
        finally:
            del batches, loader, arr


def test_list_names_prints_bare_stream_names_as_pyshmem_does(name, capsys):
    with shmstream.create(name, shape=(2,), dtype=np.float32):
        assert cli.main(["list", "--names"]) == 0
    assert name in capsys.readouterr().out.splitlines()


def test_ls_is_an_alias_of_list(name, capsys):
    with shmstream.create(name, shape=(2,)):
        assert cli.main(["ls", "--names"]) == 0
    assert name in capsys.readouterr().out.splitlines()


def test_stat_prints_aligned_metadata(name, capsys):
    with shmstream.create(name, shape=(2, 3), dtype=np.float64):
        assert cli.main(["stat", name]) == 0
    out = capsys.readouterr().out
    assert "name:" in out and name in out
    assert "float64" in out
    assert "(2, 3)" in out
    assert "creator_pid:" in out and str(os.getpid()) in out


def test_stat_json_is_machine_readable(name, capsys):
    with shmstream.create(name, shape=(4,), dtype=np.int16):
        assert cli.main(["stat", "--json", name]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["name"] == name
    assert info["shape"] == [4]
    assert info["dtype"] == "int16"


def test_stat_of_a_missing_stream_is_one_line_on_stderr(capsys):
    missing = f"test-cli-missing-{uuid.uuid4().hex}"
    assert cli.main(["stat", missing]) != 0
    captured = capsys.readouterr()
    assert captured.out == ""
    err = captured.err.strip()
    assert len(err.splitlines()) == 1
    assert "does not exist" in err
    assert "Traceback" not in err


def test_unlink_destroys_each_name_and_returns_0(capsys):
    names = [f"test-cli-rm-{uuid.uuid4().hex[:8]}" for _ in range(2)]
    for n in names:
        shmstream.create(n, shape=(1,)).close()
    try:
        assert cli.main(["unlink", *names]) == 0
        for n in names:
            with pytest.raises(FileNotFoundError):
                shmstream.open(n)
        captured = capsys.readouterr()
        assert all(f"unlinked {n!r}" in captured.out for n in names)
        # names that do not exist: exit status 0, and the text says so
        assert cli.main(["unlink", *names]) == 0
        captured = capsys.readouterr()
        assert "unlinked" not in captured.out
        assert all(f"nothing named {n!r}" in captured.err for n in names)
    finally:
        for n in names:
            shmstream.unlink(n)


def _entry(name):
    return registry.Entry("/shmstream-" + name, name, "stream", 0, None, None, None)


def test_purge_passes_the_cuda_flag_and_prints_removed_names(monkeypatch, capsys):
    calls = []

    def fake_purge(*, include_cuda_orphans=False):
        calls.append(include_cuda_orphans)
        return registry.PurgeResult(
            [_entry("a"), _entry("b")],
            [registry.Skipped("/shmstream-f", "a FIFO, not a regular file")],
            ["cuda.shm.1.ffff.0"] if include_cuda_orphans else [],
        )

    monkeypatch.setattr(shmstream, "purge", fake_purge)
    assert cli.main(["purge"]) == 0
    assert cli.main(["purge", "--include-cuda-orphans"]) == 0
    assert calls == [False, True]
    captured = capsys.readouterr()
    assert "'a'" in captured.out and "'b'" in captured.out
    assert captured.out.count("purged CUDA IPC file 'cuda.shm.1.ffff.0'") == 1
    assert "skipped /shmstream-f: a FIFO, not a regular file" in captured.err


def test_purge_goes_through_the_public_function_as_pyshmem_s_cli_test_expects(monkeypatch):
    # pyshmem 1.4.0's test_cli_purge_cuda_orphans_requires_explicit_flag,
    # with shmstream for pyshmem: a plain function returning a plain list.
    calls = []

    def fake_purge(*, include_cuda_orphans=False):
        calls.append(include_cuda_orphans)
        return []

    monkeypatch.setattr(shmstream, "purge", fake_purge)
    assert cli.main(["purge"]) == 0
    assert cli.main(["purge", "--include-cuda-orphans"]) == 0
    assert calls == [False, True]


def test_purge_removes_real_streams(monkeypatch, name, capsys):
    # Only our stream is in scope: other tests' streams must survive.
    real = shmstream.purge

    def scoped_purge(*, include_cuda_orphans=False):
        assert include_cuda_orphans is False
        removed = []
        for e in registry.scan(("stream",)):
            if e.name == name:
                shmstream.unlink(e.name)
                removed.append(e)
        return registry.PurgeResult(removed, [], [])

    assert callable(real)
    monkeypatch.setattr(shmstream, "purge", scoped_purge)
    shmstream.create(name, shape=(1,)).close()
    assert cli.main(["purge"]) == 0
    assert name in capsys.readouterr().out
    assert name not in shmstream.list_streams()


def test_watch_refreshes_count_times_then_exits_0(name, capsys):
    with shmstream.create(name, shape=(8,), dtype=np.float32) as h:
        h.write(np.ones(8, np.float32))
        h.write(np.ones(8, np.float32))
        assert cli.main(["watch", name, "--interval", "0.05", "--count", "2"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.strip()]
    assert len(lines) == 2  # not a TTY: one line per refresh
    assert all(name in line and "count 2" in line for line in lines)
    assert "rate" in lines[0] and "missed" in lines[0] and "age" in lines[0]
    assert "creator alive" in lines[0]


def test_watch_sees_a_writer_in_another_process(name, capsys):
    h = shmstream.create(name, shape=(4,), dtype=np.float32)
    code = (
        "import shmstream, numpy as np\n"
        f"h = shmstream.open({name!r})\n"
        "i = 0\n"
        "while True:\n"  # until killed
        "    i += 1; h.write(np.full(4, i, np.float32))\n"
    )
    child = subprocess.Popen([sys.executable, "-c", code])
    try:
        support.wait_until(lambda: h.count > 0, what="the other process writing")
        assert cli.main(["watch", name, "--interval", "0.2", "--count", "2"]) == 0
    finally:
        child.kill()
        child.wait(timeout=30)
        h.close()
    out = capsys.readouterr().out
    counts = [
        int(line.split("count ")[1].split()[0]) for line in out.splitlines() if "count " in line
    ]
    assert len(counts) == 2 and counts[0] > 0 and counts[1] >= counts[0]


def test_watch_missing_stream_fails_cleanly(capsys):
    assert cli.main(["watch", f"test-cli-missing-{uuid.uuid4().hex}", "--count", "1"]) != 0
    err = capsys.readouterr().err
    assert "does not exist" in err and "Traceback" not in err


def test_demo_runs_and_leaves_no_stream(capsys):
    # Only the demo's own stream is checked: other test sessions on this
    # machine may create and remove streams meanwhile.
    demo_stream = f"shmstream-demo-{os.getpid()}"
    assert cli.main(["demo", "--seconds", "1", "--shape", "64x64"]) == 0
    out = capsys.readouterr().out
    assert "written" in out and "read" in out
    assert "removed" in out and demo_stream in out
    assert demo_stream not in shmstream.list_streams()


def _children_of(pid: int) -> set[int]:
    kids = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                kids.add(int(entry))
    return kids


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in "ZX"
    except OSError:
        return True


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_demo_stopped_by_a_signal_stops_its_children_and_removes_its_stream(sig):
    demo = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "shmstream.cli",
            "demo",
            "--seconds",
            "600",
            "--shape",
            "8x8",
            "--rate",
            "100",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    stream = f"shmstream-demo-{demo.pid}"
    try:
        # the demo is running once its producer has published frames
        support.wait_until(
            lambda: stream in shmstream.list_streams() and shmstream.stat(stream)["count"] > 0,
            what="the demo's producer writing",
        )
        children = _children_of(demo.pid)
        assert len(children) >= 2
        demo.send_signal(sig)
        out, err = demo.communicate(timeout=support.WAIT)
    finally:
        demo.kill()
    assert demo.returncode == 0, err
    assert f"stopped by {sig.name}" in out and "removed" in out
    assert "leaked" not in err  # no resource_tracker warnings
    assert stream not in shmstream.list_streams()
    support.wait_until(lambda: all(_gone(c) for c in children), what="the demo's children ending")


def test_demo_reader_figures_are_current_after_every_frame(name, spawn, ctx):
    # The status line puts the writer's count beside the consumer's counters,
    # sampled at one instant, so the consumer must publish its counters as it
    # reads, not in batches: written in lockstep, every frame shows at once.
    # (A consumer that reported every 0.25 s never shows frame 2 here.)
    from shmstream.cli import demo

    h = shmstream.create(name, shape=(16,), dtype=np.uint8, notify=True)
    stop, ready = ctx.Event(), ctx.Barrier(2)
    report = ctx.Array("d", 4, lock=False)
    consumer = spawn(demo._demo_consumer, name, stop, ready, report, os.getpid())
    try:
        ready.wait(timeout=support.WAIT)
        for k in range(1, 21):
            h.write(np.full(16, k, np.uint8))
            support.wait_until(
                lambda k=k: report[demo._FRAMES] >= k, what=f"the consumer counting frame {k}"
            )
            assert report[demo._FRAMES] == k
        assert report[demo._LAT_N] == 20 and report[demo._MISSED] == 0
    finally:
        stop.set()
        consumer.join()
        h.close()


def test_version_prints_the_package_version(capsys):
    assert cli.main(["--version"]) == 0
    assert shmstream.__version__ in capsys.readouterr().out


def test_console_entry_runs_as_module():
    proc = subprocess.run(
        [sys.executable, "-m", "shmstream", "list"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0


def test_an_array_named_like_a_loader_pool_is_listed_as_an_array(make_name, capsys):
    # A pool is marked in its header (flags bit 3), not recognised by name.
    from shmstream.loader import _loader_pool

    name = _loader_pool.ROOT_PREFIX + make_name()
    arr = shmstream.share(np.arange(3), name=name)
    try:
        assert shmstream.stat(name)["kind"] == "array"
        assert cli.main(["list", "--kind", "array"]) == 0
        assert name in capsys.readouterr().out
    finally:
        del arr
        shmstream.unlink(name)


def _shmstream(*args, cwd=None):
    """The real ``shmstream`` command (its console entry, as a user runs it)."""
    return subprocess.run(
        [sys.executable, "-m", "shmstream", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=cwd,
    )


def test_unlink_of_a_directory_entry_says_why_and_exits_1_removing_the_rest():
    # list skips a directory with shmstream's prefix; unlink of it was a raw
    # "[Errno 21] Is a directory". In a private /dev/shm: nobody else's files.
    reason = support.private_shm_available()
    if reason:
        pytest.skip(reason)
    proc = support.run_in_private_shm(
        """
        import os, subprocess, sys
        import shmstream
        os.mkdir("/dev/shm/shmstream-adir")
        shmstream.create("other", shape=(2,)).close()
        p = subprocess.run([sys.executable, "-m", "shmstream", "unlink", "/shmstream-adir",
                            "other"], capture_output=True, text=True)
        print(p.returncode, "|", p.stdout, "|", p.stderr)
        print("left:", sorted(os.listdir("/dev/shm")))
        os.rmdir("/dev/shm/shmstream-adir")
        """
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert out.startswith("1 |"), out
    assert "/shmstream-adir is a directory in /dev/shm, not a shared-memory object" in out
    assert "rmdir" in out and "Is a directory" not in out
    assert "unlinked 'other'" in out and "left: ['shmstream-adir']" in out


def test_record_wait_says_that_it_waits_and_for_how_long(name, tmp_path):
    proc = _shmstream("record", name, "-o", str(tmp_path / "rec"), "--wait", "0.2")
    assert proc.returncode == 1
    assert f"waiting up to 0.2 s for stream {name!r} to be created" in proc.stderr
    assert "record waited 0.2 s for it to be created" in proc.stderr
    without = _shmstream("record", name, "-o", str(tmp_path / "rec"))
    assert without.returncode == 1 and "waiting" not in without.stderr


def test_bench_help_outside_a_checkout_exits_0_saying_where_the_benchmarks_are(tmp_path):
    proc = _shmstream("bench", "--help", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "python -m benchmarks" in proc.stdout and "checkout" in proc.stdout
    run = _shmstream("bench", "stream", cwd=tmp_path)  # not help: still the usage error
    assert run.returncode == 2 and "checkout" in run.stderr


def test_stat_help_names_every_kind_it_accepts():
    proc = _shmstream("stat", "--help")
    assert proc.returncode == 0
    assert "DataLoader slot pool" in " ".join(proc.stdout.split())


# A signal at a known point of the create (issue 47, bug 2): the demo's
# create sends it to its own process just after the segment is made,
# before the create returns to the demo.
SIGNAL_IN_CREATE = """
import os, signal, sys
import shmstream
from shmstream import cli

real_create = shmstream.create

def create(*args, **kwargs):
    handle = real_create(*args, **kwargs)
    os.kill(os.getpid(), signal.{sig})
    return handle

shmstream.create = create
sys.exit(cli.main(["demo", "--seconds", "600", "--shape", "8x8"]))
"""


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM", "SIGHUP"])
def test_demo_signalled_while_it_creates_removes_its_stream(sig):
    demo = subprocess.Popen(
        [sys.executable, "-c", SIGNAL_IN_CREATE.format(sig=sig)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    stream = f"shmstream-demo-{demo.pid}"
    try:
        out, err = demo.communicate(timeout=support.WAIT)
    finally:
        demo.kill()
        left = stream in shmstream.list_streams()
        shmstream.unlink(stream)
    assert not left, (demo.returncode, out, err)
    assert demo.returncode == 0, err
    assert "while creating" in out and "removed" in out


@pytest.mark.parametrize(
    "command", [["stat", "NAME"], ["list"], ["watch", "--count", "1000000", "NAME"]]
)
def test_a_closed_standard_output_ends_the_command_quietly(name, command):
    """issue 47, bug 10: ``shmstream stat NAME | head -1`` said "error:
    [Errno 32] Broken pipe" and exited 1. The pipe's read end is closed
    before the command starts, so its first write meets the closed pipe."""
    with shmstream.create(name, shape=(2,), dtype=np.float32) as h:
        h.write(np.ones(2, np.float32))
        read_end, write_end = os.pipe()
        os.close(read_end)
        try:
            proc = subprocess.run(
                [sys.executable, "-m", "shmstream", *(name if a == "NAME" else a for a in command)],
                stdout=write_end,
                stderr=subprocess.PIPE,
                text=True,
                timeout=support.WAIT,
                check=False,
            )
        finally:
            os.close(write_end)
    assert proc.stderr == "" and proc.returncode == cli.STDOUT_CLOSED, proc.stderr


def child_make_channel_and_stream(chan: str, stream: str) -> None:
    shmstream.channel(chan, 4096)  # the process exits holding it: its creator is dead after
    shmstream.create(stream, shape=(2,))


def test_purge_abandoned_keeps_streams_and_says_why_it_keeps_what_is_in_use(name, spawn, capsys):
    """issue 47: 'purge --abandoned' is the safe purge (never a stream),
    and what purge keeps although ``list`` shows its creator dead (bug
    11: a DataLoader pool whose workers still hold leases) is explained."""
    chan = name + "-chan"
    spawn(child_make_channel_and_stream, chan, name).result()
    rx = shmstream.open_channel(chan)  # a live process holds an end
    try:
        assert cli.main(["purge", "--abandoned"]) == 0
        err = capsys.readouterr().err
        assert "kept" in err and chan in err and "creator is dead" in err, err
        assert name in shmstream.list_streams()  # a stream is never abandoned
        assert chan in shmstream.list_channels()
    finally:
        rx.close()
        shmstream.unlink_channel(chan)
