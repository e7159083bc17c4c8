"""The worker tasks of ``python -m benchmarks bridge`` (bench/bridge.py): the
pingers and pongers, senders and receivers of every row, and the bridge
process of the "bridged" rows. Workers run them by name; each takes the
payload out and checks sequence numbers (a mismatch is an error)."""

from __future__ import annotations

import time
from array import array
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from ._common import BenchError

STOP = (1 << 64) - 1
HELLO = STOP - 1  # the in-process ponger's first answer: it reads its requests now
ACK_BYTES = 64
WARMUP_S = 0.2
SETUP_S = 30.0


def _zenoh_config(listen: list[str] = (), connect: list[str] = ()) -> Any:  # type: ignore[assignment]
    from shmstream.bridge import make_config

    return make_config(None, list(listen), list(connect))


def _wait(pred: Callable[[], Any], what: str, timeout: float = SETUP_S) -> Any:
    """Set-up only (never inside a timed loop): poll until ``pred()``."""
    deadline = time.monotonic() + timeout
    while True:
        value = pred()
        if value:
            return value
        if time.monotonic() > deadline:
            raise BenchError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.01)


def _open_when_there(name: str, readonly: bool = False) -> Any:
    import shmstream

    def attempt() -> Any:
        try:
            return shmstream.open(name, readonly=readonly)
        except FileNotFoundError:
            return None

    return _wait(attempt, f"stream {name!r} (made by a bridge)")


def _time_pings(seconds: float, exchange: Callable[[int], int]) -> array:
    """Round trips for WARMUP_S (untimed), then ``seconds`` of timed ones:
    ``exchange(k)`` runs round trip k, checks that the answer carries k, and
    returns its nanoseconds."""
    lat = array("d")
    k = 0
    for phase, dur in (("warm", WARMUP_S), ("timed", seconds)):
        end = time.perf_counter() + dur
        while time.perf_counter() < end:
            k += 1
            ns = exchange(k)
            if phase == "timed":
                lat.append(ns)
    return lat


def _percentiles(lat: array) -> dict[str, float]:
    s = sorted(lat)
    n = len(s)
    return {"n": n, "p50_ns": s[n // 2], "p99_ns": s[min(n - 1, int(n * 0.99))]}


# ---------------------------------------------------------------- bridges


def _run_bridge(kwargs: dict, ready: Any, stop: Any) -> None:
    import signal

    from shmstream.bridge import Bridge

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    bridge = Bridge(**kwargs).start()
    try:
        ready.set()
        stop.wait()
    finally:
        bridge.close()


def _ping_through(
    ready: Callable[[], None],
    write: Callable[..., None],
    a: Any,
    size: int,
    seconds: float,
    what: str,
) -> dict:
    """The pinger's loop for both bridged rows: ``write(buf, frame_id=k)``
    publishes request k, ``a`` (the answers' mirror) brings answer k."""
    buf = np.zeros(size, np.uint8)
    seq = buf[:8].view(np.uint64)
    got = np.empty(ACK_BYTES, np.uint8)
    got_seq = got[:8].view(np.uint64)
    perf = time.perf_counter_ns

    def exchange(k: int) -> int:
        seq[0] = k
        t0 = perf()
        write(buf, frame_id=k)
        a.read_new(timeout=10, out=got)
        while got_seq[0] < k:  # an older answer (the one a new mirror fetched)
            a.read_new(timeout=10, out=got)
        t1 = perf()
        if got_seq[0] != k:
            raise BenchError(f"{what} ping {k}: answer carries {got_seq[0]}")
        return t1 - t0

    ready()
    lat = _time_pings(seconds, exchange)
    seq[0] = STOP
    write(buf)
    return _percentiles(lat)


def _answer(r: Any, write: Callable[..., None], size: int) -> int:
    """The ponger's loop for both bridged rows: each request read from the
    mirror ``r`` is answered with ``write``; returns the answers."""
    buf = np.empty(size, np.uint8)
    seq = buf[:8].view(np.uint64)
    out = np.zeros(ACK_BYTES, np.uint8)
    out_seq = out[:8].view(np.uint64)
    n = 0
    while True:
        r.read_new(timeout=30, out=buf)
        if seq[0] == STOP:
            return n
        if seq[0] == 0:
            continue  # _inproc_bridge's frame of zeros
        out_seq[0] = seq[0]
        write(out)
        n += 1


def ping_bridged(
    ready: Callable[[], None], req: str, ack_mirror: str, size: int, seconds: float
) -> dict:
    import shmstream

    with shmstream.open(req) as h, _open_when_there(ack_mirror, readonly=True) as a:
        return _ping_through(ready, h.write, a, size, seconds, "bridged")


def pong_bridged(ready: Callable[[], None], req_mirror: str, ack: str, size: int) -> int:
    import shmstream

    with _open_when_there(req_mirror, readonly=True) as r, shmstream.open(ack) as h:
        ready()
        return _answer(r, h.write, size)


def _inproc_bridge(
    exports: list[str], imports: list[str], side: str, other: str, **endpoints: Any
) -> Any:
    """A bridge in this worker (the "inproc" rows): it exports the stream
    this process writes and imports the one it reads, as ``i<side>/<name>``.
    Each exported stream first gets a frame of zeros (number 0, which the
    readers skip): a new mirror fetches the source's latest frame, and that
    must not be the last round's STOP."""
    import shmstream
    from shmstream.bridge import Bridge

    for name in exports:
        with shmstream.open(name) as h:
            h.write(np.zeros(h.shape, h.dtype), frame_id=0)
    return Bridge(
        exports=exports,
        imports=imports,
        namespace=f"in{side}",
        remote_namespace=f"in{other}",
        local_prefix=f"i{side}/",
        unlink_on_close=True,
        insecure=True,  # the unauthenticated baseline, as the "bridged" rows
        **endpoints,
    ).start()


def ping_inproc(
    ready: Callable[[], None], req: str, ack: str, connect: str, size: int, seconds: float
) -> dict:
    import shmstream

    bridge = _inproc_bridge([req], [ack], "A", "B", connect=[connect])
    try:
        bridge.wait_for_import(f"iA/{ack}", timeout=SETUP_S)
        with shmstream.open(f"iA/{ack}", readonly=True) as a, bridge.publisher(req) as pub:
            got = np.empty(ACK_BYTES, np.uint8)

            def ponger_ready() -> bool:
                a.read(out=got)
                return bool(got[:8].view(np.uint64)[0] == HELLO)

            _wait(ponger_ready, "the in-process ponger's hello")
            return _ping_through(ready, pub.write, a, size, seconds, "in-process bridged")
    finally:
        bridge.close()


def pong_inproc(ready: Callable[[], None], req: str, ack: str, listen: str, size: int) -> int:
    import shmstream

    bridge = _inproc_bridge([ack], [req], "B", "A", listen=[listen])
    ready()  # the pinger's bridge connects to this one: only then can the import be made
    try:
        bridge.wait_for_import(f"iB/{req}", timeout=SETUP_S)
        with shmstream.open(f"iB/{req}", readonly=True) as r, bridge.publisher(ack) as pub:
            hello = np.zeros(ACK_BYTES, np.uint8)
            hello[:8].view(np.uint64)[0] = HELLO  # the pinger starts once it sees this
            pub.write(hello)
            return _answer(r, pub.write, size)
    finally:
        bridge.close()


def ping_zenoh(ready: Callable[[], None], connect: str, size: int, seconds: float) -> dict:
    import zenoh

    s = zenoh.open(_zenoh_config(connect=[connect]))
    try:
        pub = s.declare_publisher("bench/ping", express=True)
        sub = s.declare_subscriber("bench/pong")
        _wait(lambda: pub.matching_status, "the zenoh ponger")
        payload = bytearray(size)
        perf = time.perf_counter_ns

        def exchange(k: int) -> int:
            payload[:8] = k.to_bytes(8, "little")
            req = bytes(payload)  # (not timed: an immutable copy to put)
            t0 = perf()
            pub.put(req)
            answer = sub.recv().payload.to_bytes()
            t1 = perf()
            if int.from_bytes(answer[:8], "little") != k:
                raise BenchError(f"zenoh ping {k}: answer carries another number")
            return t1 - t0

        ready()
        lat = _time_pings(seconds, exchange)
        pub.put(STOP.to_bytes(8, "little") + bytes(size - 8))
        return _percentiles(lat)
    finally:
        s.close()


def pong_zenoh(ready: Callable[[], None], listen: str, size: int) -> int:
    import threading

    import zenoh

    s = zenoh.open(_zenoh_config(listen=[listen]))
    done = threading.Event()
    count = [0]
    try:
        pub = s.declare_publisher("bench/pong", express=True)

        def on_ping(sample: Any) -> None:
            data = sample.payload.to_bytes()
            if data[:8] == STOP.to_bytes(8, "little"):
                done.set()
                return
            pub.put(data[:8] + bytes(ACK_BYTES - 8))
            count[0] += 1

        s.declare_subscriber("bench/ping", on_ping)
        ready()
        if not done.wait(600):
            raise BenchError("zenoh ponger: no stop")
        return count[0]
    finally:
        s.close()


def ping_pyzmq(ready: Callable[[], None], addr: str, size: int, seconds: float) -> dict:
    import zmq

    ctx = zmq.Context()
    sock = ctx.socket(zmq.PAIR)
    sock.connect(addr)
    try:
        payload = bytearray(size)
        perf = time.perf_counter_ns

        def exchange(k: int) -> int:
            payload[:8] = k.to_bytes(8, "little")
            t0 = perf()
            sock.send(payload)
            answer = sock.recv()
            t1 = perf()
            if int.from_bytes(answer[:8], "little") != k:
                raise BenchError(f"pyzmq ping {k}: answer carries another number")
            return t1 - t0

        ready()
        lat = _time_pings(seconds, exchange)
        sock.send(STOP.to_bytes(8, "little") + bytes(size - 8))
        return _percentiles(lat)
    finally:
        sock.close(linger=1000)
        ctx.term()


def pong_pyzmq(ready: Callable[[], None], addr: str, size: int) -> int:
    import zmq

    ctx = zmq.Context()
    sock = ctx.socket(zmq.PAIR)
    sock.bind(addr)
    ready()
    n = 0
    tail = bytes(ACK_BYTES - 8)
    try:
        while True:
            data = sock.recv()
            if data[:8] == STOP.to_bytes(8, "little"):
                return n
            sock.send(data[:8] + tail)
            n += 1
    finally:
        sock.close(linger=1000)
        ctx.term()


# ------------------------------------------------------- worker tasks: one-way


def _frame_numbers(seconds: float, rate: float | None) -> Iterator[int]:
    """1, 2, 3, ... for WARMUP_S + ``seconds``: as fast as the caller sends,
    or ``rate`` numbers a second on an absolute schedule (sleeping between
    them; a late sender catches up instead of drifting)."""
    start = time.perf_counter()
    end = start + seconds + WARMUP_S
    period = 1.0 / rate if rate else 0.0
    k = 0
    while True:
        now = time.perf_counter()
        if now >= end:
            return
        if period:
            due = start + k * period
            if due > now:
                time.sleep(due - now)
        k += 1
        yield k


def send_bridged(
    ready: Callable[[], None], name: str, size: int, seconds: float, rate: float | None = None
) -> int:
    import shmstream

    h = shmstream.open(name)
    frame = np.zeros(size, np.uint8)
    ready()
    k = 0
    try:
        for k in _frame_numbers(seconds, rate):
            h.write(frame, frame_id=k)
        h.write(frame, frame_id=STOP)
    finally:
        h.close()
    return k


def recv_bridged(ready: Callable[[], None], mirror: str, size: int) -> dict:
    m = _open_when_there(mirror, readonly=True)
    out = np.empty(size, np.uint8)
    ready()
    frames, last, t_first, t_last = 0, 0, 0.0, 0.0
    try:
        while True:
            pub = m.read_new_publication(timeout=30, out=out)
            if pub.frame_id == STOP:
                break
            if pub.frame_id == 0:
                continue  # _inproc_bridge's frame of zeros
            if pub.frame_id <= last:
                raise BenchError(f"bridged one-way: frame {pub.frame_id} after {last}")
            last = pub.frame_id
            t_last = time.perf_counter()
            if frames == 0:
                t_first = t_last
            frames += 1
    finally:
        m.close()
    return _rate(frames - 1, t_first, t_last, size)


def send_inproc(
    ready: Callable[[], None],
    name: str,
    mirror: str,
    connect: str,
    size: int,
    seconds: float,
    rate: float | None = None,
) -> int:
    bridge = _inproc_bridge([name], [], "A", "B", connect=[connect])
    k = 0
    try:
        _open_when_there(mirror, readonly=True).close()  # the receiver's bridge imports it
        frame = np.zeros(size, np.uint8)
        with bridge.publisher(name) as pub:
            ready()
            for k in _frame_numbers(seconds, rate):
                pub.write(frame, frame_id=k)
            pub.write(frame, frame_id=STOP)
    finally:
        bridge.close()
    return k


def recv_inproc(ready: Callable[[], None], name: str, listen: str, size: int) -> dict:
    bridge = _inproc_bridge([], [name], "B", "A", listen=[listen])
    try:
        ready()  # the sender's bridge connects to this one
        bridge.wait_for_import(f"iB/{name}", timeout=SETUP_S)
        return recv_bridged(lambda: None, f"iB/{name}", size)
    finally:
        bridge.close()


def _rate(frames: int, t0: float, t1: float, size: int) -> dict:
    """Frames after the first one over the time from the first to the last."""
    dt = t1 - t0
    if frames < 2 or dt <= 0:
        raise BenchError("one-way: fewer than 3 frames arrived")
    return {"frames": frames, "seconds": dt, "rate": frames / dt, "gbps": frames * size / dt / 1e9}


def send_zenoh(
    ready: Callable[[], None], connect: str, size: int, seconds: float, rate: float | None = None
) -> int:
    import zenoh

    s = zenoh.open(_zenoh_config(connect=[connect]))
    try:
        pub = s.declare_publisher("bench/thr", congestion_control=zenoh.CongestionControl.DROP)
        _wait(lambda: pub.matching_status, "the zenoh receiver")
        payload = bytes(size)
        ready()
        k = 0
        for k in _frame_numbers(seconds, rate):
            pub.put(payload, attachment=k.to_bytes(8, "little"))
        s.put(
            "bench/thr",
            b"",
            attachment=STOP.to_bytes(8, "little"),
            congestion_control=zenoh.CongestionControl.BLOCK,
        )
        return k
    finally:
        s.close()


def recv_zenoh(ready: Callable[[], None], listen: str, size: int) -> dict:
    import threading

    import zenoh

    s = zenoh.open(_zenoh_config(listen=[listen]))
    done = threading.Event()
    st: dict[str, Any] = {"frames": 0, "last": 0, "t0": 0.0, "t1": 0.0, "error": None}
    try:

        def on_frame(sample: Any) -> None:
            k = int.from_bytes(sample.attachment.to_bytes(), "little")
            if k == STOP:
                done.set()
                return
            data = sample.payload.to_bytes()
            if len(data) != size or k <= st["last"]:
                st["error"] = f"zenoh one-way: frame {k} ({len(data)} B) after {st['last']}"
            st["last"] = k
            st["t1"] = time.perf_counter()
            if st["frames"] == 0:
                st["t0"] = st["t1"]
            st["frames"] += 1

        s.declare_subscriber("bench/thr", on_frame)
        ready()
        if not done.wait(600):
            raise BenchError("zenoh receiver: no stop")
    finally:
        s.close()
    if st["error"]:
        raise BenchError(st["error"])
    return _rate(st["frames"] - 1, st["t0"], st["t1"], size)


def send_pyzmq(
    ready: Callable[[], None], addr: str, size: int, seconds: float, rate: float | None = None
) -> int:
    import zmq

    ctx = zmq.Context()
    sock = ctx.socket(zmq.PUSH)
    sock.setsockopt(zmq.SNDHWM, 16)  # a bounded queue, as the others have
    sock.connect(addr)
    payload = bytes(size)
    ready()
    k = 0
    try:
        for k in _frame_numbers(seconds, rate):
            sock.send_multipart([k.to_bytes(8, "little"), payload], copy=False)
        sock.send_multipart([STOP.to_bytes(8, "little"), b""])
    finally:
        sock.close(linger=30000)
        ctx.term()
    return k


def recv_pyzmq(ready: Callable[[], None], addr: str, size: int) -> dict:
    import zmq

    ctx = zmq.Context()
    sock = ctx.socket(zmq.PULL)
    sock.setsockopt(zmq.RCVHWM, 16)
    sock.bind(addr)
    ready()
    frames, last, t0, t1 = 0, 0, 0.0, 0.0
    try:
        while True:
            head, data = sock.recv_multipart()
            k = int.from_bytes(head, "little")
            if k == STOP:
                break
            if len(data) != size or k != last + 1:
                raise BenchError(f"pyzmq one-way: frame {k} ({len(data)} B) after {last}")
            last = k
            t1 = time.perf_counter()
            if frames == 0:
                t0 = t1
            frames += 1
    finally:
        sock.close(linger=0)
        ctx.term()
    return _rate(frames - 1, t0, t1, size)
