"""What a peer says is input (issue 32): forged acks, frames, batches and
ends of stream from a plain Zenoh session on loopback that puts records
made with the bridge's own wire encoder on the bridge's keys; a rogue
"exporter" (a plain session with liveliness tokens and a metadata
queryable of its choosing) reached by a glob import; a poison message, a
flood of samples and a dead import worker.

Synchronised on the bridges' own state, the status streams and the mirrors'
counters, never on sleeps.
"""

from __future__ import annotations

import contextlib
import queue
import uuid
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

zenoh = pytest.importorskip(
    "zenoh",
    reason="eclipse-zenoh is not installed: pip install 'shmstream[zenoh]' "
    "(the test extra includes it)",
)

from test_bridge import SHAPE, Pair, _frame, _status_until  # noqa: E402

import shmstream  # noqa: E402
from shmstream.bridge import (  # noqa: E402
    Bridge,
    _keys,
    _wire,
    make_config,
    mirror_status,
    status_name,
)

import support  # noqa: E402
from bridge_util import BridgeProc, auth, endpoint, free_port  # noqa: E402

WAIT = support.WAIT


@pytest.fixture
def pair(make_name):
    p = Pair(make_name)
    try:
        yield p
    finally:
        p.close()


def _session(listen: tuple[str, ...] = (), connect: tuple[str, ...] = ()) -> Any:
    """A plain Zenoh session on loopback, no bridge, with the suite's
    credentials: what an authenticated peer sends is still input."""
    return zenoh.open(make_config(listen=listen, connect=connect, **auth()))


def _publisher(session: Any, key: str) -> Any:
    pub = session.declare_publisher(key, congestion_control=zenoh.CongestionControl.BLOCK)
    support.wait_until(lambda: pub.matching_status.matching, what=f"a subscriber of {key}")
    return pub


def _exists(name: str) -> bool:
    try:
        shmstream.stat(name)
    except FileNotFoundError:
        return False
    return True


def _generation(name: str) -> int:
    return _wire.generation_id(shmstream.stat(name)["instance_id"])


# ---- channels: acks --------------------------------------------------------------


def test_forged_acks_neither_lose_messages_nor_bind_a_ghost(make_name):
    """A made-up importer id saying "delivered up to 2**62" (which released
    every message unsent) or "delivered 0" (which kept the channel bound to
    the ghost for ever) binds nothing; the bound importer's own id saying
    2**62 counts no further than what was sent."""
    name = make_name("acked")
    prefix = make_name("m") + "/"
    local = prefix + name
    ns = f"ns{uuid.uuid4().hex[:8]}"
    ep = endpoint(free_port())
    ghost = "ab" * 16
    tx = shmstream.channel(name, 1 << 16)
    gen = _generation(name)
    keys = _keys.Keys("shmstream", ns)
    with Bridge(exports=[name], namespace=ns, listen=[ep], **auth()) as exporter:
        exporter.wait_for_export(name, timeout=WAIT)
        export = exporter._exports[name]
        acks: queue.Queue = queue.Queue()
        on_ack = export.on_ack

        def spy(*args: Any) -> None:  # Zenoh's thread: the export has taken the ack
            on_ack(*args)
            acks.put(repr(args))

        export.on_ack = spy

        def taken(*words: str) -> None:
            while True:
                got = acks.get(timeout=WAIT)
                if all(w in got for w in words):
                    return

        forger = _session(connect=(ep,))
        importer = rx = None
        try:
            pub = _publisher(forger, keys.ack(name))
            pub.put(_wire.pack_ack(gen, 2**62, ghost))
            taken(ghost, str(2**62))
            pub.put(_wire.pack_ack(gen, 0, ghost))
            taken(ghost, "delivered=0")
            importer = BridgeProc(
                imports=[name],
                remote_namespace=ns,
                local_prefix=prefix,
                connect=[ep],
                namespace="importer",
                unlink_on_close=True,
            )
            importer.wait_import(local)
            rx = shmstream.open_channel(local)
            for i in range(200):
                tx.send(i.to_bytes(4, "little") * 8, type_id=i, timeout=WAIT)
            for i in range(200):
                msg = rx.recv(timeout=WAIT)
                assert (msg.type_id, bytes(msg.data)) == (i, i.to_bytes(4, "little") * 8)
            # The bound importer's id is public (its liveliness token).
            pub.put(_wire.pack_ack(gen, 2**62, importer.id))
            taken(importer.id, str(2**62))
            for i in range(200, 400):
                tx.send(i.to_bytes(4, "little") * 8, type_id=i, timeout=WAIT)
            for i in range(200, 400):
                msg = rx.recv(timeout=WAIT)
                assert (msg.type_id, bytes(msg.data)) == (i, i.to_bytes(4, "little") * 8)
            st = mirror_status(local)
            assert st["lost_messages"] == 0 and st["bad_samples"] == 0
            assert export._bound == importer.id
        finally:
            if rx is not None:
                rx.close()
            if importer is not None:
                importer.stop()
            forger.close()
    tx.close()
    shmstream.unlink_channel(name)


# ---- channels: batches -------------------------------------------------------------


def test_forged_batches_neither_close_nor_reset_a_live_channel_mirror(pair):
    """A forged end of stream (closed the mirror: ChannelClosedError while
    the producer sent on) and a forged batch of another generation (reset
    the delivered position: everything again) are counted and dropped."""
    name = pair.name("q")
    tx = shmstream.channel(name, 4096)
    local = pair.mirror(name)
    pair.importer.wait_import(local)
    rx = shmstream.open_channel(local)
    forger = _session(connect=(pair.importer_ep,))
    try:
        tx.send(b"one", type_id=1)
        assert bytes(rx.recv(timeout=WAIT).data) == b"one"
        gen = _generation(name)
        pub = _publisher(forger, _keys.Keys("shmstream", pair.namespace).data(name))
        pub.put(b"", attachment=_wire.pack_batch_head(gen, 0, 0, _wire.EOF))
        _status_until(local, lambda st: st["bad_samples"] == 1, "the forged end of stream")
        end = _wire.record_span(0, 5)
        payload = bytearray()
        _wire.pack_records(payload, [(end, 9, b"", b"forge")])
        pub.put(bytes(payload), attachment=_wire.pack_batch_head(gen ^ 1, end, 1))
        _status_until(local, lambda st: st["bad_samples"] == 2, "the other generation")
        tx.send(b"two", type_id=2)
        msg = rx.recv(timeout=WAIT)
        assert (msg.type_id, bytes(msg.data)) == (2, b"two")  # not "one" again, not "forge"
        st = mirror_status(local)
        assert not st["eof"] and st["lost_messages"] == 0
        tx.close()  # the real end of stream still closes the mirror
        with pytest.raises(shmstream.ChannelClosedError):
            rx.recv(timeout=WAIT)
        assert mirror_status(local)["eof"]
    finally:
        forger.close()
        rx.close()


def test_a_zero_itemsize_message_crosses_and_the_worker_goes_on(pair):
    """np.empty(3, np.dtype([])) killed the import worker (np.frombuffer):
    nothing more was delivered. It crosses as a local channel carries it,
    and a batch that cannot be decoded is counted, not fatal."""
    name = pair.name("empty")
    tx = shmstream.channel(name, 4096)
    local = pair.mirror(name)
    pair.importer.wait_import(local)
    rx = shmstream.open_channel(local)
    forger = _session(connect=(pair.importer_ep,))
    try:
        tx.send(np.empty(3, np.dtype([])), type_id=7)
        msg = rx.recv(timeout=WAIT)
        assert msg.type_id == 7 and msg.array.dtype == np.dtype([]) and msg.array.shape == (3,)
        # A record whose array description NumPy refuses (3 * 2**62 empty items).
        name2 = pair.name("probe")
        probe = shmstream.channel(name2, 4096)
        probe_rx = shmstream.open_channel(name2)
        probe.send(np.empty(3, np.dtype([])))
        with probe_rx.drain_zero_copy(1, timeout=WAIT) as got:
            meta = bytearray(got[0].meta)
        probe.close()
        probe_rx.close()
        shmstream.unlink_channel(name2)
        meta[8:16] = (3 << 62).to_bytes(8, "little")
        end = _wire.record_span(len(meta), 0) + 10**6
        payload = bytearray()
        _wire.pack_records(payload, [(end, 1, bytes(meta), b"")])
        pub = _publisher(forger, _keys.Keys("shmstream", pair.namespace).data(name))
        pub.put(bytes(payload), attachment=_wire.pack_batch_head(_generation(name), end, 1))
        _status_until(local, lambda st: st["bad_samples"] == 1, "the poison batch")
        tx.send(b"after", type_id=8)
        msg = rx.recv(timeout=WAIT)
        assert (msg.type_id, bytes(msg.data)) == (8, b"after")
        assert mirror_status(local)["importer_alive"]
        # A stream of that dtype crosses too (np.frombuffer refused its frames).
        s_name = pair.name("empty-stream")
        src = shmstream.create(s_name, shape=(3,), dtype=np.dtype([]))
        src.write(np.empty(3, np.dtype([])), frame_id=5)
        s_local = pair.mirror(s_name)
        pair.importer.wait_import(s_local)
        m = shmstream.open(s_local, readonly=True)
        got = m.read_after_publication(0, timeout=WAIT)
        assert got.frame_id == 5 and got.payload.shape == (3,)
        m.close()
        src.unlink()
    finally:
        forger.close()
        rx.close()
        tx.close()


def _rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def _send_numbered(name: str, n: int) -> int:
    tx = shmstream.open_channel(name, role="producer")
    for i in range(n):
        tx.send(i.to_bytes(8, "little"), type_id=i % 100, timeout=WAIT)
    tx.close()
    return n


def test_the_channel_import_queue_is_bounded_and_counts_its_drops(pair, spawn):
    """The import queued every sample before any check, without a bound
    (800 x 1 MiB: 53 -> 1234 MiB). With the mirror full (its worker waits),
    a flood of 1 MiB samples is dropped and counted; then every genuine
    message still arrives, once, in order."""
    name = pair.name("flood")
    shmstream.channel(name, 4096).close()  # made here; a child produces into it
    local = pair.mirror(name)
    pair.importer.wait_import(local)
    rx = shmstream.open_channel(local)
    forger = _session(connect=(pair.importer_ep,))
    n, floods = 400, 300
    try:
        producer = spawn(_send_numbered, name, n)
        support.wait_until(  # the mirror's ring is full: the import worker waits
            lambda: rx.stat()["head"] - rx.stat()["tail"] > rx.capacity - 128,
            what="a full mirror ring",
        )
        pid = pair.importer.process.pid
        before = _rss_mib(pid)
        pub = _publisher(forger, _keys.Keys("shmstream", pair.namespace).data(name))
        junk = bytes(1 << 20)
        for _ in range(floods):
            pub.put(junk, attachment=b"junk")
        st = _status_until(local, lambda st: st["dropped_samples"] >= floods - 10, "the drops")
        grown = _rss_mib(pid) - before
        assert grown < 150, f"the importing bridge grew by {grown:.0f} MiB"
        for i in range(n):
            msg = rx.recv(timeout=WAIT)
            assert int.from_bytes(bytes(msg.data), "little") == i, f"message {i}"
        assert producer.result() == n
        st = _status_until(
            local,
            lambda st: st["dropped_samples"] + st["bad_samples"] == floods,
            "every forged sample dropped or refused",
        )
        assert st["lost_messages"] == 0
    finally:
        forger.close()
        rx.close()


@contextlib.contextmanager
def _in_process_import(pair: Pair, what: str) -> Iterator[tuple[Any, str, Any]]:
    """A channel of the pair's exporter imported by a bridge in this process
    (so a test can reach its mirror), as (producer end, mirror name, the
    import's mirror object). The pair's own importer is stopped: one channel
    has one importer."""
    pair.importer.stop()
    name = pair.name(what)
    tx = shmstream.channel(name, 4096)
    prefix = pair.local_prefix + "in-process/"
    local = prefix + name
    pair.mirrors.append(local)
    try:
        with Bridge(
            imports=[name],
            remote_namespace=pair.namespace,
            local_prefix=prefix,
            connect=[pair.ep],
            **auth(),
        ) as bridge:
            bridge.wait_for_import(local, timeout=WAIT)
            yield tx, local, bridge._locals[local].mirror
    finally:
        tx.close()


def test_what_a_full_import_queue_dropped_is_sent_again(pair):
    """Samples a full queue drops are counted in dropped_samples, and the
    importer asks the exporter to send again past what it delivered: every
    message still arrives, once, in order."""
    with _in_process_import(pair, "resend") as (tx, local, mirror):
        rx = shmstream.open_channel(local)
        try:
            tx.send(b"first", type_id=100)
            assert bytes(rx.recv(timeout=WAIT).data) == b"first"
            room = mirror._queue_bytes
            mirror._queue_bytes = 0  # the queue is full: every sample is dropped
            for i in range(10):
                tx.send(i.to_bytes(8, "little"), type_id=i)
            _status_until(local, lambda st: st["dropped_samples"] >= 1, "a dropped batch")
            mirror._queue_bytes = room
            for i in range(10):
                msg = rx.recv(timeout=WAIT)
                assert (msg.type_id, int.from_bytes(bytes(msg.data), "little")) == (i, i)
            tx.send(b"last", type_id=100)
            assert bytes(rx.recv(timeout=WAIT).data) == b"last"
            st = mirror_status(local)
            assert st["lost_messages"] == 0 and st["bad_samples"] == 0
        finally:
            rx.close()


def test_an_import_worker_that_dies_shows_in_mirror_status(pair):
    """A worker stopped by an unexpected error (here the mirror's send
    raising) is logged and mirror_status says importer_alive False, where it
    said all was well."""
    with _in_process_import(pair, "dies") as (tx, local, mirror):

        class Broken:
            def __init__(self, real: Any) -> None:
                self.real = real

            def send(self, *args: Any, **kwargs: Any) -> None:
                raise RuntimeError("the mirror broke (injected)")

            def __getattr__(self, attr: str) -> Any:
                return getattr(self.real, attr)

        real = mirror.tx
        mirror.tx = Broken(real)
        try:
            assert mirror_status(local)["importer_alive"]
            tx.send(b"x")
            st = _status_until(local, lambda st: not st["importer_alive"], "the dead worker")
            assert st["failed"]
        finally:
            mirror.tx = real


# ---- streams ---------------------------------------------------------------------


def test_forged_frames_neither_freeze_nor_break_a_mirror(pair):
    """Count 2**64-2 froze the mirror (every genuine frame a "duplicate");
    the same with another generation made every genuine frame raise in the
    Zenoh callback. Counts are bounded, a generation comes only from the
    exporter, and genuine frames keep arriving."""
    name = pair.name("img")
    src = shmstream.create(name, shape=SHAPE, dtype=np.int64)
    src.write(_frame(1), frame_id=1001)
    local = pair.mirror(name)
    pair.importer.wait_import(local)
    m = shmstream.open(local, readonly=True)
    forger = _session(connect=(pair.importer_ep,))
    try:
        assert (m.read_after_publication(0, timeout=WAIT).payload == 1).all()
        gen = _generation(name)
        layout = _wire.layout_id(SHAPE, "int64")
        forged = np.full(SHAPE, -1, np.int64).tobytes()
        pub = _publisher(forger, _keys.Keys("shmstream", pair.namespace).data(name))
        pub.put(forged, attachment=_wire.pack_frame_head(2**64 - 2, 0, 1, layout, gen))
        _status_until(local, lambda st: st["bad_samples"] == 1, "the count out of bounds")
        # A count within bounds: for all the mirror can tell, the source's.
        pub.put(forged, attachment=_wire.pack_frame_head(2**62, 0, 1, layout, gen))
        got = m.read_new_publication(timeout=WAIT)
        assert (got.payload == -1).all() and got.count <= 1 + 2**32
        pub.put(forged, attachment=_wire.pack_frame_head(2**62, 0, 1, layout, gen ^ 1))
        _status_until(local, lambda st: st["bad_samples"] == 2, "the unconfirmed generation")
        last = got.count
        for i in range(2, 40):
            src.write(_frame(i), frame_id=i + 1000)
            got = m.read_after_publication(last, timeout=WAIT)
            assert (got.payload == i).all() and got.frame_id == i + 1000, i
            assert got.count == last + 1
            last = got.count
        assert mirror_status(local)["bad_samples"] == 2
    finally:
        forger.close()
        m.close()
        src.unlink()


# ---- a rogue exporter ------------------------------------------------------------


class RogueExporter:
    """A plain Zenoh session that plays an exporting bridge: it declares
    export tokens and answers metadata queries with what it is given
    (a dict, or bytes sent as they are)."""

    def __init__(self, namespace: str, exports: dict[str, tuple[str, Any]]) -> None:
        self.ep = endpoint(free_port())
        self.session = _session(listen=(self.ep,))
        self.keys = _keys.Keys("shmstream", namespace)
        self.id = str(self.session.zid())
        self.exports = exports
        self.head = f"shmstream/@meta/{self.keys.ns}/"
        self.queryable = self.session.declare_queryable(self.head + "**", self._on_query)
        self.tokens = [
            self.session.liveliness().declare_token(self.keys.live(self.id, kind, name))
            for name, (kind, _) in exports.items()
        ]

    def _on_query(self, query: Any) -> None:
        key = str(query.key_expr)
        entry = self.exports.get(_keys.decode(key[len(self.head) :]))
        if entry is not None:
            meta = entry[1]
            query.reply(key, meta if isinstance(meta, bytes) else _wire.dumps(meta))

    def close(self) -> None:
        self.session.close()


def _stream_meta(name: str, dims: list, dtype: str = "uint8", **changes: Any) -> dict:
    """Good metadata of a stream, with ``changes`` (None: leave the key out)."""
    shape = dims
    meta = {
        "kind": "stream",
        "name": name,
        "shape": shape,
        "dtype": dtype,
        "notify": False,
        "layout": _wire.layout_id(shape, dtype),
        "generation": 7,
        "producer_alive": True,
    }
    meta.update(changes)
    return {k: v for k, v in meta.items() if v is not None}


def _importer(p: Pair, rogue: RogueExporter, prefix: str, **kwargs: Any) -> BridgeProc:
    return BridgeProc(
        imports=[f"{p.group}/*"],
        remote_namespace=p.namespace,
        local_prefix=prefix,
        connect=[p.ep, rogue.ep],
        namespace="importer2",
        unlink_on_close=True,
        **kwargs,
    )


def _refused(bridge: BridgeProc, done: Any, what: str) -> dict[str, str]:
    """Wait until ``done(refused)`` for the bridge's refused imports
    (local name -> why)."""

    def check() -> dict[str, str] | None:
        refused = bridge.call("refused")
        return refused if done(refused) else None

    return support.wait_until(check, what=what)


def test_bad_metadata_refuses_that_export_alone(pair):
    """Metadata without "shape" ended `bridge --import '*'` at start with a
    KeyError; capacity 2**70 with a TypeError; the good export beside them
    was never imported."""
    g = pair.group
    bad = {
        f"{g}/noshape": ("stream", _stream_meta(f"{g}/noshape", [4], shape=None)),
        f"{g}/hugecap": (
            "channel",
            {
                "kind": "channel",
                "name": f"{g}/hugecap",
                "capacity": 2**70,
                "generation": 1,
                "producer_alive": True,
            },
        ),
        f"{g}/object": ("stream", _stream_meta(f"{g}/object", [4], "|O8")),
        f"{g}/badlayout": ("stream", _stream_meta(f"{g}/badlayout", [4], layout=5)),
        f"{g}/notjson": ("stream", b"{"),
        f"{g}/kind": ("stream", dict(_stream_meta(f"{g}/kind", [4]), kind="channel")),
    }
    good = pair.name("good")
    src = shmstream.create(good, shape=(4,))
    rogue = RogueExporter(pair.namespace, bad)
    prefix = pair.local_prefix + "2/"
    mirrors = [prefix + n for n in (good, *bad)]
    pair.mirrors.extend(mirrors)
    try:
        pair.exporter.wait_export(good)
        importer = _importer(pair, rogue, prefix)
        try:
            importer.wait_import(prefix + good)
            refused = _refused(
                importer, lambda f: all(prefix + n in f for n in bad), "the bad metadata"
            )
            assert all("bad metadata" in refused[prefix + n] for n in bad), refused
            assert set(importer.call("imported")) == {prefix + good}
            assert all(not _exists(prefix + n) for n in bad)
        finally:
            importer.stop()
    finally:
        rogue.close()
        src.unlink()


@pytest.mark.parametrize("cap", ["max_mirrors", "max_mirror_bytes"])
def test_a_rogue_exporter_cannot_make_more_mirrors_than_the_caps(pair, cap):
    """A rogue exporter reached by a glob import made 82 mirrors (1.8 GB)
    until /dev/shm was full. Mirrors are capped in number and bytes."""
    names = [f"{pair.group}/big{i}" for i in range(4)]
    exports = {n: ("stream", _stream_meta(n, [256, 1024])) for n in names}  # 256 KiB each
    rogue = RogueExporter(pair.namespace, exports)
    prefix = pair.local_prefix + "3/"
    pair.mirrors.extend(prefix + n for n in names)
    limits = {"max_mirrors": 2} if cap == "max_mirrors" else {"max_mirror_bytes": 600 << 10}
    try:
        importer = _importer(pair, rogue, prefix, **limits)
        try:
            refused = _refused(importer, lambda f: len(f) == 2, "two imports refused")
            assert all(cap in why for why in refused.values()), refused
            made = importer.call("imported")
            assert len(made) == 2 and not set(made) & set(refused)
        finally:
            importer.stop()
    finally:
        rogue.close()


def test_an_announced_name_equal_to_a_local_stream_is_not_adopted(pair):
    """With no local prefix, an export named like a local stream was adopted
    as its mirror: the peer's frames landed in a stream a local producer
    writes. An import opens an existing segment only if it is a mirror."""
    local = pair.name("cam")  # a local stream of this host, same shape and dtype
    h = shmstream.create(local, shape=(4,), dtype=np.uint8)
    h.write(np.arange(4, dtype=np.uint8))
    rogue = RogueExporter(pair.namespace, {local: ("stream", _stream_meta(local, [4]))})
    try:
        importer = _importer(pair, rogue, "")
        try:
            refused = _refused(importer, lambda f: local in f, "the local name")
            assert "not a bridge mirror" in refused[local], refused
            assert local not in importer.call("imported")
        finally:
            importer.stop()
        assert h.count == 1 and not _exists(status_name(local))
    finally:
        rogue.close()
        h.unlink()


def test_a_source_made_again_is_followed_without_bad_samples(pair):
    """Generations come from the exporter only; a source made again (a new
    generation, counts restarting) is still followed at once, for a stream
    and for a channel, and none of its frames counts as bad."""
    s_name, c_name = pair.name("again"), pair.name("again-q")
    src = shmstream.create(s_name, shape=SHAPE, dtype=np.int64)
    src.write(_frame(1), frame_id=1001)
    tx = shmstream.channel(c_name, 4096)
    s_local, c_local = pair.mirror(s_name), pair.mirror(c_name)
    pair.importer.wait_import(s_local)
    pair.importer.wait_import(c_local)
    m = shmstream.open(s_local, readonly=True)
    rx = shmstream.open_channel(c_local)
    try:
        assert (m.read_after_publication(0, timeout=WAIT).payload == 1).all()
        tx.send(b"old", type_id=1)
        assert bytes(rx.recv(timeout=WAIT).data) == b"old"
        old = _generation(s_name)
        src.unlink()
        src = shmstream.create(s_name, shape=SHAPE, dtype=np.int64)
        assert _generation(s_name) != old
        tx.close()
        with pytest.raises(shmstream.ChannelClosedError):
            rx.recv(timeout=WAIT)  # the old source's end of stream
        shmstream.unlink_channel(c_name)
        tx = shmstream.channel(c_name, 4096)
        last = m.count
        for i in range(2, 30):  # written until the mirror follows the new stream
            src.write(_frame(i), frame_id=i + 1000)
            try:
                got = m.read_after_publication(last, timeout=0.5)
            except TimeoutError:
                continue
            assert (got.payload == got.payload.flat[0]).all() and got.count > last
            last = got.count
            if got.frame_id == i + 1000:
                break
        else:
            raise AssertionError("the mirror never followed the stream made again")
        tx.send(b"new", type_id=2)

        def received() -> Any:  # the mirror re-opens for the new producer
            try:
                return rx.recv(timeout=0)
            except (TimeoutError, shmstream.ChannelClosedError):
                return None

        msg = support.wait_until(received, what="the new producer's message")
        assert (msg.type_id, bytes(msg.data)) == (2, b"new")
        assert mirror_status(s_local)["bad_samples"] == 0
        assert mirror_status(c_local)["bad_samples"] == 0
    finally:
        rx.close()
        m.close()
        tx.close()
        src.unlink()
