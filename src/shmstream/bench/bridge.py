"""``shmstream bench bridge``: streams through two shmstream bridges over
Eclipse Zenoh, against plain zenoh-python and pyzmq over tcp://, all on
127.0.0.1 in one run, interleaved round by round.

    python -m shmstream.bench bridge [--rounds N] [--seconds S] [--rate HZ] [--quick] [--json PATH]

Processes: a sender and a receiver worker (spawned once, reused), and for
the bridged rows two bridge processes: bridge A exports the sender's
streams and imports the receiver's back; bridge B the other way round.

Sections
  ping-pong   a request of 64 B / 64 KiB, a 64 B answer; round trips for
              ``--seconds``, p50 / p99 of one round trip.
              bridged: the sender writes stream req, the receiver reads its
              mirror (read_new) and writes stream ack, the sender reads ack's
              mirror: source -> bridge A -> Zenoh -> bridge B -> mirror and
              back. zenoh: a publisher puts the request, the receiver's
              subscriber callback puts the answer, the sender waits with
              ``recv()`` on its subscriber (faster here than a callback and an
              Event). pyzmq: PAIR sockets over tcp://, send / recv.
  one-way     frames of 64 KiB / 4 MiB sent as fast as the sender can for
              ``--seconds``; frames/s and GB/s the receiver gets.
              bridged: the sender writes a stream; the receiver reads its
              mirror with read_new(out=) (latest value: frames the bridge
              could not carry in time are counted as missed, not queued).
              zenoh: put with congestion control DROP, the receiver's
              callback takes each payload out (``to_bytes()``). pyzmq:
              PUSH/PULL over tcp:// (queues, never drops). ``--rate HZ``: every
              sender offers HZ frames/s instead (can the path carry a
              stream of that rate?). Each row also gives the CPU time of all
              its processes (bridges included) per frame received.

Every receiver takes the payload out as bytes or into its own array, and
checks sequence numbers (a mismatch is an error, not a statistic).
Targets (issue 16): bridged ping-pong p50 <= 1.5x zenoh's, bridged one-way
rate >= 0.8x zenoh's, bridged p99 <= 3x its p50.
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import time
import uuid
from array import array
from typing import Any, Callable, Iterator

import numpy as np

from ._workers import Worker
from ._common import (
    BenchError,
    Results,
    call_quietly,
    fmt_bytes,
    fmt_hz,
    fmt_ratio,
    fmt_us,
    median,
    peer_version,
    progress,
    render_table,
    try_import,
)

STOP = (1 << 64) - 1
HELLO = STOP - 1  # the in-process ponger's first answer: it reads its requests now
ACK_BYTES = 64
PING_SIZES = (64, 64 << 10)
THR_SIZES = (64 << 10, 4 << 20)
IMPLS = ("bridged", "inproc", "zenoh", "pyzmq")
BRIDGED = ("bridged", "inproc")  # the rows held to the targets
WARMUP_S = 0.2
SETUP_S = 30.0


def _zenoh_config(listen: list[str] = (), connect: list[str] = ()) -> Any:  # type: ignore[assignment]
    from shmstream.bridge._session import make_config

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


# ------------------------------------------------------ worker tasks: ping-pong


def _task(name: str) -> Callable[..., Any]:
    """A worker task of this module by name (workers run module-level functions)."""
    return globals()[name]


def _ping_through(ready: Callable[[], None], write: Callable[..., None], a: Any, size: int,
                  seconds: float, what: str) -> dict:
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


def ping_bridged(ready: Callable[[], None], req: str, ack_mirror: str, size: int,
                 seconds: float) -> dict:
    import shmstream

    with shmstream.open(req) as h, _open_when_there(ack_mirror, readonly=True) as a:
        return _ping_through(ready, h.write, a, size, seconds, "bridged")


def pong_bridged(ready: Callable[[], None], req_mirror: str, ack: str, size: int) -> int:
    import shmstream

    with _open_when_there(req_mirror, readonly=True) as r, shmstream.open(ack) as h:
        ready()
        return _answer(r, h.write, size)


def _inproc_bridge(exports: list[str], imports: list[str], side: str, other: str,
                   **endpoints: Any) -> Any:
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
    return Bridge(exports=exports, imports=imports, namespace=f"in{side}",
                  remote_namespace=f"in{other}", local_prefix=f"i{side}/",
                  unlink_on_close=True, **endpoints).start()


def ping_inproc(ready: Callable[[], None], req: str, ack: str, connect: str, size: int,
                seconds: float) -> dict:
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


def send_bridged(ready: Callable[[], None], name: str, size: int, seconds: float,
                 rate: float | None = None) -> int:
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


def send_inproc(ready: Callable[[], None], name: str, mirror: str, connect: str, size: int,
                seconds: float, rate: float | None = None) -> int:
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


def send_zenoh(ready: Callable[[], None], connect: str, size: int, seconds: float,
               rate: float | None = None) -> int:
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
        s.put("bench/thr", b"", attachment=STOP.to_bytes(8, "little"),
              congestion_control=zenoh.CongestionControl.BLOCK)
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


def send_pyzmq(ready: Callable[[], None], addr: str, size: int, seconds: float,
               rate: float | None = None) -> int:
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


# ----------------------------------------------------------------- the run


class Setup:
    """Names, ports, streams and the two bridges for one run."""

    def __init__(self, impls: list[str], spin_us: float | None) -> None:
        import shmstream

        self.base = f"bench-bridge-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self.made: list[str] = []
        self.bridges: list[Any] = []
        self.stop = mp.get_context("spawn").Event()
        if "inproc" in impls:  # written through the workers' own bridges
            for size in PING_SIZES:
                self._make(shmstream, self.ireq(size), size)
                self._make(shmstream, self.iack(size), ACK_BYTES)
            for size in THR_SIZES:
                self._make(shmstream, self.ithr(size), size)
        if "bridged" not in impls:
            return
        for size in PING_SIZES:
            self._make(shmstream, self.req(size), size)
            self._make(shmstream, self.ack(size), ACK_BYTES)
        for size in THR_SIZES:
            self._make(shmstream, self.thr(size), size)
        ep = f"tcp/127.0.0.1:{_free_port()}"
        common = dict(scan_interval=0.5, unlink_on_close=True, spin_us=spin_us)
        self._bridge(dict(exports=[f"{self.base}/a/*"], imports=[f"{self.base}/b/*"],
                          namespace="benchA", local_prefix="mA/", listen=[ep], **common))
        self._bridge(dict(exports=[f"{self.base}/b/*"], imports=[f"{self.base}/a/*"],
                          namespace="benchB", local_prefix="mB/", connect=[ep], **common))

    def _make(self, shmstream: Any, name: str, size: int) -> None:
        shmstream.create(name, shape=(size,), dtype=np.uint8).close()
        self.made.append(name)

    def _bridge(self, kwargs: dict) -> None:
        ctx = mp.get_context("spawn")
        ready = ctx.Event()
        p = ctx.Process(target=_run_bridge, args=(kwargs, ready, self.stop), daemon=True)
        p.start()
        self.bridges.append(p)
        _wait(lambda: ready.is_set() or not p.is_alive(), "a bridge to start")
        if not p.is_alive():
            raise BenchError(f"a bridge process died at start (exit code {p.exitcode})")

    def req(self, size: int) -> str:
        return f"{self.base}/a/req{size}"

    def ack(self, size: int) -> str:
        return f"{self.base}/b/ack{size}"

    def thr(self, size: int) -> str:
        return f"{self.base}/a/thr{size}"

    # The in-process rows' streams: under c/ and d/, which the two bridge
    # processes (a/* and b/*) do not export.
    def ireq(self, size: int) -> str:
        return f"{self.base}/c/req{size}"

    def iack(self, size: int) -> str:
        return f"{self.base}/d/ack{size}"

    def ithr(self, size: int) -> str:
        return f"{self.base}/c/thr{size}"

    def close(self) -> None:
        import shmstream

        self.stop.set()
        for p in self.bridges:
            p.join(30)
            if p.is_alive():
                p.kill()
                p.join(5)
        for name in self.made:
            call_quietly(shmstream.unlink, name)
        for name in self.made:  # mirrors and status streams a killed bridge left
            for local in (f"mA/{name}", f"mB/{name}", f"iA/{name}", f"iB/{name}"):
                call_quietly(shmstream.unlink, local)
                call_quietly(shmstream.unlink, local + "@bridge")


def _cpu_seconds(pids: list[int]) -> float | None:
    """CPU time (user + system, all threads) the processes ``pids`` have
    used so far, from /proc; None where /proc is not Linux's."""
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", encoding="ascii") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            return None
        total += int(fields[11]) + int(fields[12])  # utime, stime (man 5 proc)
    return total / tick


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _measure(kind: str, impl: str, size: int, cfg: argparse.Namespace, setup: Setup,
             sender: Worker, receiver: Worker) -> dict:
    """One measurement: start the receiving side, then the sending side."""
    recv_args: dict[str, Any]
    send_args: dict[str, Any]
    port = _free_port()
    zep, zaddr = f"tcp/127.0.0.1:{port}", f"tcp://127.0.0.1:{port}"
    if kind == "ping":
        if impl == "bridged":
            recv_args = dict(req_mirror=f"mB/{setup.req(size)}", ack=setup.ack(size), size=size)
            send_args = dict(req=setup.req(size), ack_mirror=f"mA/{setup.ack(size)}", size=size)
        elif impl == "inproc":
            names = dict(req=setup.ireq(size), ack=setup.iack(size), size=size)
            recv_args, send_args = dict(listen=zep, **names), dict(connect=zep, **names)
        elif impl == "zenoh":
            recv_args, send_args = dict(listen=zep, size=size), dict(connect=zep, size=size)
        else:
            recv_args, send_args = dict(addr=zaddr, size=size), dict(addr=zaddr, size=size)
        receiver.start(_task(f"pong_{impl}"), **recv_args)
        receiver.expect("ready", SETUP_S)
        sender.start(_task(f"ping_{impl}"), seconds=cfg.seconds, **send_args)
        sender.expect("ready", SETUP_S)
        out = sender.expect("done", cfg.seconds + SETUP_S)
        receiver.expect("done", SETUP_S)
        return out
    pids = [sender.proc.pid, receiver.proc.pid]
    if impl == "bridged":
        pids += [p.pid for p in setup.bridges]
        recv_args = dict(mirror=f"mB/{setup.thr(size)}", size=size)
        send_args = dict(name=setup.thr(size), size=size)
    elif impl == "inproc":
        recv_args = dict(name=setup.ithr(size), listen=zep, size=size)
        send_args = dict(name=setup.ithr(size), mirror=f"iB/{setup.ithr(size)}", connect=zep,
                         size=size)
    elif impl == "zenoh":
        recv_args, send_args = dict(listen=zep, size=size), dict(connect=zep, size=size)
    else:
        recv_args, send_args = dict(addr=zaddr, size=size), dict(addr=zaddr, size=size)
    receiver.start(_task(f"recv_{impl}"), **recv_args)
    receiver.expect("ready", SETUP_S)
    sender.start(_task(f"send_{impl}"), seconds=cfg.seconds, rate=cfg.rate, **send_args)
    sender.expect("ready", SETUP_S)
    cpu0, t0 = _cpu_seconds(pids), time.perf_counter()
    sent = sender.expect("done", cfg.seconds + SETUP_S)
    out = receiver.expect("done", SETUP_S + 30)
    cpu1, t1 = _cpu_seconds(pids), time.perf_counter()
    out["sent"] = sent
    if cpu0 is not None and cpu1 is not None:
        # Every process of the row (bridges included), from the sender's
        # start to the receiver's end: CPU per frame the receiver got, and
        # how many of the machine's cores the row kept busy.
        out["cpu_s"] = cpu1 - cpu0
        out["cpu_cores"] = (cpu1 - cpu0) / (t1 - t0)
        out["cpu_us_per_frame"] = (cpu1 - cpu0) / (out["rate"] * (t1 - t0)) * 1e6
    return out


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="shmstream bench bridge",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default 5)")
    ap.add_argument("--seconds", type=float, default=1.0,
                    help="seconds per measurement (default 1)")
    ap.add_argument("--quick", action="store_true", help="1 round of 0.3 s (smoke run)")
    ap.add_argument("--peers", default=",".join(IMPLS),
                    help=f"comma-separated subset of {','.join(IMPLS)}")
    ap.add_argument("--bridge-spin-us", type=float, default=5.0, metavar="US",
                    help="the bridges' spin_us (default 5, the bridge's default)")
    ap.add_argument("--rate", type=float, metavar="HZ",
                    help="one-way: senders offer HZ frames/s (sleeping between them) "
                         "instead of as many as they can")
    ap.add_argument("--sections", default="ping,oneway",
                    help="comma-separated subset of ping,oneway (default both)")
    ap.add_argument("--json", metavar="PATH", help="write every measurement as JSON")
    return ap


def main(argv: list[str]) -> int:
    cfg = _parser().parse_args(argv)
    if cfg.quick:
        cfg.rounds, cfg.seconds = 1, 0.3
    if cfg.rate is not None and not cfg.rate > 0:
        print(f"shmstream bench bridge: --rate must be a positive number of frames/s, got {cfg.rate}")
        return 2
    impls = [i for i in cfg.peers.split(",") if i]
    bad = [i for i in impls if i not in IMPLS]
    if bad or not impls:
        print(f"shmstream bench bridge: unknown peers {bad}; choose from {','.join(IMPLS)}")
        return 2
    zenoh, why = try_import("zenoh")
    if zenoh is None:
        print(f"shmstream bench bridge: needs eclipse-zenoh ({why}); "
              'pip install "shmstream[zenoh]"')
        return 2
    if "pyzmq" in impls and try_import("zmq")[0] is None:
        progress("pyzmq is not installed: its rows are left out (pip install shmstream[bench])")
        impls.remove("pyzmq")
    res = Results("bridge", argv)
    res.meta["versions"].update({d: peer_version(d) for d in ("eclipse-zenoh", "pyzmq")})
    res.meta.update(rounds=cfg.rounds, seconds=cfg.seconds, bridge_spin_us=cfg.bridge_spin_us,
                    rate=cfg.rate,
                    shmstream_spin_us=os.environ.get("SHMSTREAM_SPIN_US"))
    setup = Setup(impls, cfg.bridge_spin_us)
    sender, receiver = Worker(), Worker()
    runs: dict[tuple[str, str, int], list[dict]] = {}
    try:
        for rnd in range(cfg.rounds):
            for kind, sizes in (("ping", PING_SIZES), ("oneway", THR_SIZES)):
                if kind not in cfg.sections.split(","):
                    continue
                for size in sizes:
                    for impl in impls:
                        progress(f"round {rnd + 1}/{cfg.rounds}: {kind} {fmt_bytes(size)} {impl}")
                        out = _measure(kind, impl, size, cfg, setup, sender, receiver)
                        runs.setdefault((kind, impl, size), []).append(out)
                        res.add(round=rnd, kind=kind, impl=impl, size=size, **out)
    finally:
        sender.close()
        receiver.close()
        setup.close()
    _report(res, runs, impls, cfg)
    if cfg.json:
        res.dump(cfg.json)
        progress(f"wrote {cfg.json}")
    return 0


def _fmt_cpu(value: float | None, fmt: str) -> str:
    return "-" if value is None else fmt.format(value)


def _report(res: Results, runs: dict, impls: list[str], cfg: argparse.Namespace) -> None:
    zv, qv = peer_version("eclipse-zenoh"), peer_version("pyzmq")
    label = {"bridged": "shmstream bridge x2 (Zenoh)",
             "inproc": "shmstream bridge x2 in-process (publisher)",
             "zenoh": f"zenoh-python {zv}",
             "pyzmq": f"pyzmq {qv} tcp://"}
    sections = cfg.sections.split(",")
    judged = [i for i in BRIDGED if i in impls] if "zenoh" in impls else []
    name = {"bridged": "bridged", "inproc": "in-process bridged"}

    def med(kind: str, impl: str, size: int, key: str) -> float:
        return median([r[key] for r in runs.get((kind, impl, size), [])])

    def med_or_none(kind: str, impl: str, size: int, key: str) -> float | None:
        values = [r[key] for r in runs.get((kind, impl, size), []) if key in r]
        return median(values) if values else None

    def vs_zenoh(kind: str, impl: str, size: int, key: str) -> str:
        if impl not in BRIDGED or "zenoh" not in impls:
            return ""
        return fmt_ratio(med(kind, impl, size, key), med(kind, "zenoh", size, key))

    tables, verdict = [], []
    if "ping" in sections:
        rows = []
        for size in PING_SIZES:
            for impl in impls:
                p50, p99 = med("ping", impl, size, "p50_ns"), med("ping", impl, size, "p99_ns")
                rows.append([fmt_bytes(size), label[impl], fmt_us(p50), fmt_us(p99),
                             f"{p99 / p50:.1f}", vs_zenoh("ping", impl, size, "p50_ns")])
            for impl in judged:
                b, z = med("ping", impl, size, "p50_ns"), med("ping", "zenoh", size, "p50_ns")
                b99 = med("ping", impl, size, "p99_ns")
                verdict.append(f"ping-pong {fmt_bytes(size)}: {name[impl]} p50 {b / z:.2f}x "
                               f"zenoh's (target <= 1.5x: {'met' if b <= 1.5 * z else 'MISSED'}); "
                               f"p99/p50 {b99 / b:.1f} (target <= 3: "
                               f"{'met' if b99 <= 3 * b else 'MISSED'})")
        tables.append(render_table(
            ["request", "implementation", "p50 us", "p99 us", "p99/p50", "p50 vs zenoh"], rows,
            title=f"ping-pong: request of SIZE, 64 B answer, one round trip; median of "
                  f"{cfg.rounds} rounds of {cfg.seconds:g} s", left=2))
    if "oneway" in sections:
        rows = []
        for size in THR_SIZES:
            for impl in impls:
                rate = med("oneway", impl, size, "rate")
                rows.append([fmt_bytes(size), label[impl], fmt_hz(rate, "/s"),
                             f"{rate * size / 1e9:.2f}",
                             _fmt_cpu(med_or_none("oneway", impl, size, "cpu_us_per_frame"),
                                      "{:.0f}"),
                             _fmt_cpu(med_or_none("oneway", impl, size, "cpu_cores"), "{:.2f}"),
                             vs_zenoh("oneway", impl, size, "rate")])
            for impl in judged:
                b, z = med("oneway", impl, size, "rate"), med("oneway", "zenoh", size, "rate")
                verdict.append(f"one-way {fmt_bytes(size)}: {name[impl]} {b / z:.2f}x zenoh's "
                               f"rate (target >= 0.8x: {'met' if b >= 0.8 * z else 'MISSED'})")
        tables.append(render_table(
            ["frame", "implementation", "frames/s", "GB/s", "CPU us/frame", "cores busy",
             "vs zenoh"], rows,
            title=f"one-way: frames the receiver gets, "
                  f"{f'senders offering {cfg.rate:g}/s' if cfg.rate else 'sender as fast as it can'}"
                  f"; median of {cfg.rounds} rounds of {cfg.seconds:g} s; CPU of every process "
                  f"of the row (bridges included) per frame received, and cores it kept busy "
                  f"(of {os.cpu_count()})", left=2))
    if verdict:
        tables.append("targets (issue 16):\n" + "\n".join("  " + v for v in verdict))
    for table in tables:
        res.tables.append(table)
        print(table + "\n")
