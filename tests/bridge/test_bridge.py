"""The bridge end to end: two bridge processes on 127.0.0.1 sharing this
machine's /dev/shm (the importer mirrors under a local prefix), real
streams and channels at both ends, a bridge killed with SIGKILL and started
again, bad samples put straight into Zenoh under the bridge's keys.

Synchronised on the bridges' own state (a bridge child answers "import
made"), on the mirrors' counters (``read_after``, ``wait_for_count``) and on
the status streams (``read_new`` wakes on each change), never on sleeps.
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from typing import Any, NamedTuple

import numpy as np
import pytest

zenoh = pytest.importorskip(
    "zenoh",
    reason="eclipse-zenoh is not installed: pip install 'shmstream[zenoh]' "
    "(the test extra includes it)",
)

import shmstream  # noqa: E402
from shmstream.bridge import (  # noqa: E402
    Bridge,
    _keys,
    _wire,
    make_config,
    mirror_status,
    remote_exports,
    status_name,
)
from shmstream.errors import ChannelBrokenError, ChannelClosedError  # noqa: E402

import support  # noqa: E402
from bridge_util import BridgeProc, auth, auth_argv, endpoint, free_port  # noqa: E402

WAIT = support.WAIT
SHAPE = (32, 32)  # int64: 8 KiB frames


class Pair:
    """An exporting bridge (listens) and an importing bridge (connects) for
    the names ``<group>/*``; mirrors are ``<local prefix><name>``."""

    def __init__(self, make_name) -> None:
        self.group = make_name("g")
        self.local_prefix = make_name("m") + "/"
        self.namespace = f"ns{uuid.uuid4().hex[:8]}"
        self.ep = endpoint(free_port())
        self.importer_ep = endpoint(free_port())  # for tests that talk to the importer directly
        self.mirrors: list[str] = []
        self.sources: list[str] = []
        self.exporter = self.start_exporter()
        self.importer = BridgeProc(
            imports=[f"{self.group}/*"],
            remote_namespace=self.namespace,
            local_prefix=self.local_prefix,
            connect=[self.ep],
            listen=[self.importer_ep],
            namespace="importer",
            unlink_on_close=True,
        )

    def start_exporter(self) -> BridgeProc:
        return BridgeProc(exports=[f"{self.group}/*"], namespace=self.namespace, listen=[self.ep])

    def name(self, leaf: str) -> str:
        """A source name under the exported glob (removed at the end)."""
        self.sources.append(f"{self.group}/{leaf}")
        return self.sources[-1]

    def mirror(self, name: str) -> str:
        local = self.local_prefix + name
        self.mirrors.append(local)
        return local

    def close(self) -> None:
        self.importer.stop()
        self.exporter.stop()
        names = self.sources + [n for m in self.mirrors for n in (m, status_name(m))]
        for n in names:  # sources, and mirrors a failed test may leave
            try:
                shmstream.unlink(n)
            except Exception:  # noqa: BLE001
                pass


@pytest.fixture
def pair(make_name):
    p = Pair(make_name)
    try:
        yield p
    finally:
        p.close()


def _status_until(local: str, predicate, what: str) -> dict:
    """Wait on the mirror's status stream until ``predicate(mirror_status)``."""
    h = shmstream.open(status_name(local), readonly=True)
    try:
        while True:
            st = mirror_status(local)
            if predicate(st):
                return st
            try:
                h.read_new(timeout=WAIT)
            except TimeoutError:
                raise AssertionError(
                    f"{local!r}: no status change within {WAIT} s waiting for "
                    f"{what}; last status {st}"
                ) from None
    finally:
        h.close()


def _frame(i: int) -> np.ndarray:
    return np.full(SHAPE, i, dtype=np.int64)


def _check(pub, source_count: int | None = None) -> None:
    """Every word of the frame equals its count; its frame id is count + 1000."""
    if source_count is not None:
        assert pub.count == source_count
    assert (pub.payload == pub.count).all(), f"frame {pub.count} carries other words"
    assert pub.frame_id == pub.count + 1000


class _Mirrored(NamedTuple):
    src: Any  # the source stream, frame 1 written
    producer: Any  # the child sending the channel's messages
    s_local: str  # the stream's mirror
    c_local: str  # the channel's mirror
    m: Any  # a reader of the stream's mirror
    rx: Any  # the consumer of the channel's mirror


def _mirror_stream_and_channel(pair, spawn, s_suffix: str, c_suffix: str, n_msgs: int) -> _Mirrored:
    """A stream (frame 1 written) and a channel of n_msgs messages (sent by a
    child), both exported and imported, with a reader of each mirror."""
    s_name, c_name = pair.name(s_suffix), pair.name(c_suffix)
    src = shmstream.create(s_name, shape=SHAPE, dtype=np.int64)
    src.write(_frame(1), frame_id=1001)
    producer = spawn(_produce_messages, c_name, 8192, n_msgs)
    s_local, c_local = pair.mirror(s_name), pair.mirror(c_name)
    pair.importer.wait_import(s_local)
    pair.importer.wait_import(c_local)
    return _Mirrored(
        src,
        producer,
        s_local,
        c_local,
        shmstream.open(s_local, readonly=True),
        shmstream.open_channel(c_local),
    )


def _write_burst(name: str, first: int, n: int) -> None:
    h = shmstream.open(name)
    for i in range(first, first + n):
        h.write(_frame(i), frame_id=i + 1000)
    h.close()


# ---- streams -------------------------------------------------------------------


def test_stream_frames_arrive_with_count_frame_id_write_time_shape_and_slots(pair, spawn):
    name = pair.name("cam")
    src = shmstream.create(name, shape=SHAPE, dtype=np.int64, slots=3)
    src.write(_frame(1), frame_id=1001)  # made before any importer: fetched as the latest
    local = pair.mirror(name)
    pair.importer.wait_import(local)
    m = shmstream.open(local, readonly=True)
    try:
        assert (m.shape, m.dtype, m.to_config().get("slots")) == (SHAPE, np.dtype(np.int64), 3)
        _check(m.read_after_publication(0, timeout=WAIT), 1)
        # Lockstep: every frame arrives, with its count, frame id and write time.
        for i in range(2, 201):
            src.write(_frame(i), frame_id=i + 1000)
            pub = m.read_after_publication(i - 1, timeout=WAIT)
            _check(pub, i)
            assert pub.missed_publications == 0
            assert abs(pub.write_time - src.write_time) < 1e-6
        # Full speed from another process: frames the link cannot carry are
        # dropped, never torn, and the far end counts them as missed; the
        # last frame always arrives.
        n = 3000
        writer = spawn(_write_burst, name, 201, n)
        reads = 0
        missed_before = m.total_missed_writes
        while m.last_read_count < 200 + n:
            pub = m.read_new_publication(timeout=WAIT)
            _check(pub)
            reads += 1
        writer.result()
        assert m.last_read_count == 200 + n
        assert reads + (m.total_missed_writes - missed_before) == n
        assert abs(shmstream.stat(local)["write_time"] - src.write_time) < 1e-6
        assert m.producer_alive()  # the importing bridge writes the mirror
        st = mirror_status(local)
        assert st["source_alive"] and st["bad_samples"] == 0
    finally:
        m.close()
        src.unlink()


def test_a_publisher_puts_each_frame_from_the_writing_thread(pair, spawn):
    """Bridge.publisher(name): the writer in the exporting bridge's process
    writes the stream and puts the frame itself; frames another process
    writes meanwhile still cross (the export thread looks every IDLE_S), and
    after close() the export thread carries every write again."""
    pair.exporter.stop()  # this test's exporting bridge runs here, in the writer's process
    name = pair.name("cam")
    src = shmstream.create(name, shape=SHAPE, dtype=np.int64)
    src.write(_frame(1), frame_id=1001)
    local = pair.mirror(name)
    with Bridge(
        exports=[name], namespace=pair.namespace, connect=[pair.importer_ep], **auth()
    ) as bridge:
        pair.importer.wait_import(local)
        m = shmstream.open(local, readonly=True)
        try:
            _check(m.read_after_publication(0, timeout=WAIT), 1)
            with pytest.raises(ValueError, match="exports no stream 'nope'"):
                bridge.publisher("nope")
            with bridge.publisher(name) as pub:
                for i in range(2, 201):  # lockstep: every frame, with its metadata
                    pub.write(_frame(i), frame_id=i + 1000)
                    got = m.read_after_publication(i - 1, timeout=WAIT)
                    _check(got, i)
                    assert got.missed_publications == 0
                    assert abs(got.write_time - src.write_time) < 1e-6
                assert pub.frames_put == 199  # all of them put by the writing thread
                spawn(_write_burst, name, 201, 1).result()  # another writer
                _check(m.read_after_publication(200, timeout=WAIT), 201)
                pub.write(_frame(202), frame_id=1202)
                _check(m.read_after_publication(201, timeout=WAIT), 202)
            with pytest.raises(RuntimeError, match="closed publisher"):
                pub.write(_frame(203))
            src.write(_frame(203), frame_id=1203)  # the export thread's again
            _check(m.read_after_publication(202, timeout=WAIT), 203)
            late = bridge.publisher(name)
        finally:
            m.close()
    with pytest.raises(RuntimeError, match="get a new publisher"):
        late.write(_frame(204))  # its bridge is closed: refused before writing
    assert src.count == 203
    late.close()
    src.unlink()


def test_exporter_killed_then_restarted_the_mirror_says_so_then_resumes(pair, spawn):
    n_msgs = 20000
    src, producer, s_local, c_local, m, rx = _mirror_stream_and_channel(
        pair, spawn, "pose", "log", n_msgs
    )
    try:
        _check(m.read_after_publication(0, timeout=WAIT), 1)
        got = _receive(rx, 0, 5000)
        # The bridge's Zenoh session has no file in /dev/shm (Zenoh's own
        # shared-memory transport is off), so its death can leave none there.
        with open(f"/proc/{pair.exporter.process.pid}/maps") as maps:
            assert ".zenoh" not in maps.read()
        pair.exporter.kill()  # SIGKILL: no goodbye, as when its host dies
        st = _status_until(s_local, lambda st: not st["exporter_alive"], "the exporter to be gone")
        assert st["source_alive"] is False and st["importer_alive"] is True
        _status_until(c_local, lambda st: not st["exporter_alive"], "the exporter to be gone")
        # Frames written while the exporter is away do not reach the mirror...
        for i in range(2, 12):
            src.write(_frame(i), frame_id=i + 1000)
        assert m.count == 1
        pair.exporter = pair.start_exporter()  # same port, same namespace
        _status_until(s_local, lambda st: st["exporter_alive"], "the exporter to be back")
        # ...the latest one does when it is back, to the same reader handle.
        pub = m.read_new_publication(timeout=WAIT)
        _check(pub, 11)
        assert pub.missed_publications == 9
        for i in range(12, 40):
            src.write(_frame(i), frame_id=i + 1000)
            _check(m.read_after_publication(i - 1, timeout=WAIT), i)
        # The channel lost nothing and repeated nothing across the kill.
        got = _receive(rx, got, n_msgs - got)
        assert got == n_msgs
        producer.result()
        with pytest.raises(ChannelClosedError):
            rx.recv(timeout=WAIT)
        st = mirror_status(c_local)
        assert st["eof"] and st["lost_messages"] == 0 and st["bad_samples"] == 0
    finally:
        rx.close()
        m.close()
        src.unlink()


def test_a_silent_exporter_is_noticed_by_the_lease_then_resumes(pair):
    """SIGSTOP: the exporting bridge neither answers nor closes its
    connection, as when its host hangs or the cable is pulled. Only Zenoh's
    lease (3 s with the bridge's defaults) can tell."""
    name = pair.name("imu")
    src = shmstream.create(name, shape=SHAPE, dtype=np.int64)
    src.write(_frame(1), frame_id=1001)
    local = pair.mirror(name)
    pair.importer.wait_import(local)
    m = shmstream.open(local, readonly=True)
    pid = pair.exporter.process.pid
    try:
        _check(m.read_after_publication(0, timeout=WAIT), 1)
        os.kill(pid, signal.SIGSTOP)
        t0 = time.monotonic()
        _status_until(local, lambda st: not st["exporter_alive"], "the lease to expire")
        noticed = time.monotonic() - t0
        assert noticed < 20, f"a silent exporter took {noticed:.1f} s to notice"
        src.write(_frame(2), frame_id=1002)
        os.kill(pid, signal.SIGCONT)
        _status_until(local, lambda st: st["exporter_alive"], "the exporter to be back")
        _check(m.read_after_publication(1, timeout=WAIT), 2)  # the same reader resumes
    finally:
        os.kill(pid, signal.SIGCONT)
        m.close()
        src.unlink()


def _producer_until(name: str, ready, leave) -> None:
    h = shmstream.create(name, shape=SHAPE, dtype=np.int64)
    h.write(_frame(1), frame_id=1001)
    ready.set()
    leave.wait(WAIT)
    h.close()  # and the process exits: the stream stays, its producer is gone


def test_the_source_producer_exiting_shows_in_the_mirror_status(pair, spawn, ctx):
    name = pair.name("temp")
    ready, leave = ctx.Event(), ctx.Event()
    child = spawn(_producer_until, name, ready, leave)
    child.wait_event(ready)
    local = pair.mirror(name)
    pair.importer.wait_import(local)
    _status_until(local, lambda st: st["source_alive"], "the source to be alive")
    leave.set()
    child.result()
    st = _status_until(local, lambda st: not st["producer_alive"], "the producer to be gone")
    assert st["exporter_alive"] and not st["source_alive"]


def test_glob_exports_skip_mirrors_and_status_streams(pair):
    name = pair.name("loop")
    src = shmstream.create(name, shape=(2,))
    local = pair.mirror(name)
    try:
        pair.importer.wait_import(local)
        # A bridge exporting everything under the mirrors' prefix finds the
        # mirror and its status stream there, and exports neither.
        relay = Bridge(
            exports=f"{pair.local_prefix}*", namespace=f"relay{uuid.uuid4().hex[:6]}", **auth()
        )
        relay.start()
        try:
            assert {local, status_name(local)} <= set(shmstream.list_streams())
            assert relay.exported == []
        finally:
            relay.close()
        # Named exactly, a mirror is exported (a deliberate relay).
        relay = Bridge(exports=local, namespace=f"relay{uuid.uuid4().hex[:6]}", **auth()).start()
        try:
            assert relay.exported == [local]
        finally:
            relay.close()
    finally:
        src.unlink()


# ---- channels -------------------------------------------------------------------


def _message(i: int):
    if i % 7 == 0:
        return np.arange(i, i + 3, dtype=np.int64), 1000
    return i.to_bytes(8, "little") * (1 + i % 3), i % 100


def _produce_messages(name: str, capacity: int, n: int) -> int:
    tx = shmstream.channel(name, capacity)
    deadline = time.monotonic() + 4 * WAIT
    for i in range(n):
        obj, type_id = _message(i)
        while True:
            try:
                tx.send(obj, type_id=type_id, timeout=WAIT)
                break
            except ChannelBrokenError:
                # The exporting bridge (the consumer) died with the ring full;
                # a restarted one takes its end over. Poll for that.
                assert time.monotonic() < deadline, "no consumer came back"
                time.sleep(0.01)
    tx.close()
    return n


def _receive(rx, start: int, n: int) -> int:
    """Receive messages start..start+n-1 and check each one; returns start+n."""
    for i in range(start, start + n):
        msg = rx.recv(timeout=WAIT)
        obj, type_id = _message(i)
        assert msg.type_id == type_id, f"message {i}: type_id {msg.type_id}"
        if isinstance(obj, np.ndarray):
            assert msg.array.dtype == obj.dtype and (msg.array == obj).all(), f"message {i}"
        else:
            assert bytes(msg.data) == obj, f"message {i}: {bytes(msg.data)[:16]!r}"
    return start + n


def test_channel_of_100000_messages_arrives_complete_in_order_then_ends(pair, spawn):
    name = pair.name("events")
    n = 100_000
    producer = spawn(_produce_messages, name, 1 << 16, n)
    local = pair.mirror(name)
    pair.importer.wait_import(local)
    rx = shmstream.open_channel(local)
    try:
        assert _receive(rx, 0, n) == n
        assert producer.result() == n
        with pytest.raises(ChannelClosedError):  # the source producer closed: so does the mirror
            rx.recv(timeout=WAIT)
        st = mirror_status(local)
        assert st["kind"] == "channel" and st["eof"] and not st["producer_alive"]
        assert st["lost_messages"] == 0 and st["bad_samples"] == 0
    finally:
        rx.close()


def _index(msg) -> int:
    """The number of a message made by _message()."""
    if msg.type_id == 1000:
        return int(msg.array[0])
    return int.from_bytes(bytes(msg.data)[:8], "little")


def test_importer_killed_then_restarted_mirrors_continue(pair, spawn):
    n_msgs = 20000
    src, producer, s_local, c_local, m, rx = _mirror_stream_and_channel(
        pair, spawn, "odo", "cmd", n_msgs
    )
    try:
        _check(m.read_after_publication(0, timeout=WAIT), 1)
        got = _receive(rx, 0, 5000)
        pair.importer.kill()
        assert not m.producer_alive()  # the mirror's writer is the importing bridge
        assert mirror_status(s_local)["importer_alive"] is False
        pair.importer = BridgeProc(**pair.importer.kwargs)
        pair.importer.wait_import(s_local)
        pair.importer.wait_import(c_local)
        # The stream: the latest frame (1) is not published again; the next is.
        src.write(_frame(2), frame_id=1002)
        pub = m.read_new_publication(timeout=WAIT)
        _check(pub, 2)
        assert pub.missed_publications == 0
        # The channel: everything, in order; a message the dead importer had
        # put in the mirror but not yet recorded may come twice (at least
        # once), never out of order.
        duplicates = 0
        while got < n_msgs:
            msg = rx.recv(timeout=WAIT)
            i = _index(msg)
            if i < got:
                duplicates += 1
                continue
            assert i == got, f"message {i} arrived where {got} was due"
            _obj, type_id = _message(i)
            assert msg.type_id == type_id
            got += 1
        assert duplicates <= 1000, duplicates
        producer.result()
        with pytest.raises(ChannelClosedError):
            rx.recv(timeout=WAIT)
    finally:
        rx.close()
        m.close()
        src.unlink()


def test_a_second_exporter_of_a_name_in_one_namespace_is_refused(pair):
    name = pair.name("dup")
    src = shmstream.create(name, shape=(2,))
    try:
        pair.exporter.wait_export(name)
        other = Bridge(exports=name, namespace=pair.namespace, connect=[pair.ep], **auth())
        with pytest.raises(ValueError, match="already exports that name"):
            other.start()
    finally:
        src.unlink()


# ---- bad input -----------------------------------------------------------------


def test_bad_samples_under_the_bridge_keys_are_counted_and_dropped(pair):
    s_name, c_name = pair.name("img"), pair.name("q")
    src = shmstream.create(s_name, shape=SHAPE, dtype=np.int64)
    src.write(_frame(1), frame_id=1001)
    tx = shmstream.channel(c_name, 4096)
    s_local, c_local = pair.mirror(s_name), pair.mirror(c_name)
    pair.importer.wait_import(s_local)
    pair.importer.wait_import(c_local)
    m = shmstream.open(s_local, readonly=True)
    # A rogue writer with the password, right next to the importing bridge
    # (the bridges' own configuration: no file in /dev/shm).
    session = zenoh.open(make_config(connect=[pair.importer_ep], **auth()))
    try:
        _check(m.read_after_publication(0, timeout=WAIT), 1)
        keys = _keys.Keys("shmstream", pair.namespace)
        layout = _wire.layout_id(SHAPE, "int64")
        good_bytes = _frame(99).tobytes()
        head = _wire.pack_frame_head(99, 1099, 1, layout, 12345)
        bad = [
            (good_bytes, None),  # no header
            (good_bytes, b"XXXX" + head[4:]),  # wrong magic
            (good_bytes[:-8], head),  # wrong size
            (
                good_bytes,
                _wire.pack_frame_head(99, 1099, 1, layout ^ 1, 12345),
            ),  # other dtype/shape
            (
                np.full(SHAPE, 99, np.float64).tobytes(),
                _wire.pack_frame_head(99, 1099, 1, _wire.layout_id(SHAPE, "float64"), 12345),
            ),
        ]
        pubs = {
            k: session.declare_publisher(k)
            for k in (keys.data(s_name), keys.status(s_name), keys.data(c_name))
        }
        for k, p in pubs.items():  # the importer's subscriptions are known here
            support.wait_until(lambda p=p: p.matching_status, what=f"a subscriber of {k}")
        for payload, attachment in bad:
            pubs[keys.data(s_name)].put(payload, attachment=attachment)
        pubs[keys.status(s_name)].put(b"not json")
        _status_until(s_local, lambda st: st["bad_samples"] == 6, "6 bad samples")
        for attachment in (None, b"short", _wire.pack_batch_head(1, 10**6, 3)):
            pubs[keys.data(c_name)].put(b"\x00" * 40, attachment=attachment)
        _status_until(c_local, lambda st: st["bad_samples"] == 3, "3 bad samples")
        # Nothing bad was written; good data still flows.
        assert m.count == 1 and (m.read() == 1).all()
        src.write(_frame(2), frame_id=1002)
        _check(m.read_after_publication(1, timeout=WAIT), 2)
        tx.send(b"after the bad ones", type_id=5)
        rx = shmstream.open_channel(c_local)
        msg = rx.recv(timeout=WAIT)
        assert (msg.type_id, bytes(msg.data)) == (5, b"after the bad ones")
        rx.close()
        assert mirror_status(s_local)["bad_samples"] == 6
    finally:
        session.close()
        m.close()
        tx.close()
        src.unlink()


def test_import_onto_a_local_stream_of_another_shape_fails_at_start(pair):
    name = pair.name("depth")
    src = shmstream.create(name, shape=(4,), dtype=np.float32)
    local = pair.mirror(name)
    clash = shmstream.create(local, shape=(5,), dtype=np.float32)
    try:
        pair.exporter.wait_export(name)
        bridge = Bridge(
            imports=name,
            remote_namespace=pair.namespace,
            local_prefix=pair.local_prefix,
            connect=[pair.ep],
            **auth(),
        )
        with pytest.raises(ValueError, match=r"exists with shape \(5,\)"):
            bridge.start()
        assert shmstream.stat(local)["shape"] == [5]
    finally:
        clash.unlink()
        src.unlink()


# ---- discovery -------------------------------------------------------------------


def test_list_remote_tells_nobody_answered_from_nothing_exported(pair, capsys):
    # A dead port is not "no remote exports": NoPeerError and exit 1; a
    # reachable bridge that exports nothing is an empty list and exit 0.
    from shmstream.cli import main

    dead = endpoint(free_port())
    with pytest.raises(shmstream.NoPeerError, match="nobody answered"):
        remote_exports(connect=[dead], timeout=0.5, **auth())
    assert main(["list", "--remote", "--connect", dead, "--timeout", "0.5", *auth_argv()]) == 1
    assert "nobody answered" in capsys.readouterr().err
    assert remote_exports(connect=[pair.ep], key_prefix="nothing-here", timeout=2, **auth()) == []
    assert (
        main(
            [
                "list",
                "--remote",
                "--connect",
                pair.ep,
                "--key-prefix",
                "nothing-here",
                "--timeout",
                "2",
                *auth_argv(),
            ]
        )
        == 0
    )
    assert "export nothing" in capsys.readouterr().err


def test_a_bridge_whose_connect_endpoint_is_dead_says_so_within_seconds():
    # It used to run for ever without a word. The warning comes after 3 s
    # (PEER_WARN_AFTER_S); the test reads stderr until it appears.
    import select
    import subprocess
    import sys

    dead = endpoint(free_port())
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "shmstream",
            "bridge",
            "--import",
            "x",
            "--connect",
            dead,
            "--namespace",
            f"dead{os.getpid()}",
            *auth_argv(),
        ],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + support.WAIT
        seen = []
        while time.monotonic() < deadline:
            # a bridge that says nothing must fail the test, not hang it
            if not select.select([proc.stderr], [], [], deadline - time.monotonic())[0]:
                break
            line = proc.stderr.readline()
            if not line:
                break
            seen.append(line)
            if "no Zenoh peer answers at" in line:
                break
        assert any(f"no Zenoh peer answers at {dead}" in ln for ln in seen), seen
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=support.WAIT)


def test_list_remote_shows_what_other_bridges_export(pair, capsys):
    s_name, c_name = pair.name("a b/温度"), pair.name("chan")
    src = shmstream.create(s_name, shape=(2,))
    tx = shmstream.channel(c_name, 4096)
    try:
        pair.exporter.wait_export(s_name)
        pair.exporter.wait_export(c_name)
        found = remote_exports(connect=[pair.ep], timeout=5, **auth())
        ours = {(e["kind"], e["name"]) for e in found if e["namespace"] == pair.namespace}
        assert ours == {("stream", s_name), ("channel", c_name)}
        key = next(e["key"] for e in found if e["name"] == s_name)
        assert key == f"shmstream/{pair.namespace}/{_keys.encode_name(s_name)}"
        from shmstream.cli import main

        for argv in (
            ["list", "--remote", "--connect", pair.ep, "--timeout", "5", *auth_argv()],
            ["bridge", "--list", "--connect", pair.ep, "--timeout", "5", *auth_argv()],
        ):
            assert main(argv) == 0
            out = capsys.readouterr().out
            lines = [ln.split() for ln in out.splitlines()]
            assert lines[0][:3] == ["namespace", "kind", "name"]
            assert [pair.namespace, "channel", c_name] in [ln[:3] for ln in lines]
            assert any(
                ln[0] == pair.namespace and ln[1] == "stream" and key in ln for ln in lines
            ), out
    finally:
        tx.close()
        src.unlink()


def test_publisher_threads_and_the_export_thread_keep_exact_counts(make_name):
    """StreamExport's counters are written by every publisher's thread and by
    the export thread: with many publishers writing, opening and closing at
    once (and the interpreter switching threads as often as it can), none of
    its counts loses an update: every put is counted once, the newest count
    is the stream's, and the publishers all leave."""
    import itertools
    import sys
    import threading

    class CountingPublisher:  # counts the puts (next() on a count is atomic)
        def __init__(self, pub: Any) -> None:
            self.pub, self.calls = pub, itertools.count()

        def put(self, *args: Any, **kwargs: Any) -> None:
            next(self.calls)
            self.pub.put(*args, **kwargs)

        def __getattr__(self, attr: str) -> Any:
            return getattr(self.pub, attr)

    class YieldingInt(int):  # lets another thread run inside `x += 1`
        def __add__(self, other: int) -> YieldingInt:  # type: ignore[override]
            value = int(self) + other
            time.sleep(0)  # releases the GIL
            return YieldingInt(value)

        def __sub__(self, other: int) -> YieldingInt:  # type: ignore[override]
            return self + -other

    name = make_name("race")
    src = shmstream.create(name, shape=(4,), dtype=np.int64)
    n_threads, n_frames = 6, 300
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        with Bridge(
            exports=[name],
            namespace=f"ns{uuid.uuid4().hex[:8]}",
            listen=[endpoint(free_port())],
            **auth(),
        ) as bridge:
            support.wait_until(lambda: name in bridge._exports, what="the export")
            export = bridge._exports[name]
            counting = export._pub = CountingPublisher(export._pub)
            # `x += 1` on an attribute is one bytecode step apart from its
            # write-back, which CPython's switch interval rarely splits; these
            # ints give the GIL away between the read and the write-back, so an
            # unguarded counter loses updates in practically every run.
            export.frames_sent = YieldingInt(export.frames_sent)
            export._publishers = YieldingInt(export._publishers)
            start = threading.Barrier(n_threads)
            put: list[int] = []

            def writer(t: int) -> None:
                start.wait()
                total = 0
                for k in range(n_frames):
                    with bridge.publisher(name) as pub:  # publishers come and go
                        for _ in range(3):
                            pub.write(np.full(4, t * 10_000 + k, np.int64))
                        total += pub.frames_put
                put.append(total)

            threads = [threading.Thread(target=writer, args=(t,)) for t in range(n_threads)]
            for th in threads:
                th.start()
            for th in threads:
                th.join()
            assert sum(put) == n_threads * n_frames * 3
            assert export.frames_sent == next(counting.calls) >= sum(put)
            assert export._sent_count == src.count == sum(put)
            assert export._publishers == 0
    finally:
        sys.setswitchinterval(switch)
        src.unlink()


def _produce_with_a_bfloat16_message(name: str) -> None:
    import torch

    tx = shmstream.channel(name, 1 << 16)
    tx.send(np.arange(3, dtype=np.int16), type_id=1)
    tx.send(torch.ones(3, dtype=torch.bfloat16), type_id=2)
    tx.send(b"after", type_id=3)
    tx.close()


def test_a_bfloat16_message_is_dropped_alone_by_the_bridge_and_counted(pair, spawn):
    pytest.importorskip("torch")
    name = pair.name("bf16")
    producer = spawn(_produce_with_a_bfloat16_message, name)
    local = pair.mirror(name)
    pair.importer.wait_import(local)
    rx = shmstream.open_channel(local)
    try:
        first = rx.recv(timeout=WAIT)
        assert first.type_id == 1 and first.array.tolist() == [0, 1, 2]
        after = rx.recv(timeout=WAIT)  # the bfloat16 message between is not carried
        assert after.type_id == 3 and after.data == b"after"
        producer.result()
        st = mirror_status(local)
        assert st["bad_samples"] == 1 and st["lost_messages"] == 0
    finally:
        rx.close()
