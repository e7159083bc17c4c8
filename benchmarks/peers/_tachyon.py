"""Tachyon (riyaneel/Tachyon: ``pip install tachyon-ipc``, ``import
tachyon``) as a peer of ``bench channel``: an SPSC ring over shared memory,
the design our channels answer. Optional: when it does not import, its rows
say ``skipped: <why>`` (it is not a dependency). 0.5.1 builds with Debian's
clang 19 (its LTO objects need lld)::

    PATH=/usr/lib/llvm-19/bin:$PATH CC=clang-19 CXX=clang++-19 \
        LDFLAGS=-fuse-ld=lld pip install tachyon-ipc==0.5.1

Each scenario does what shmstream's rows do. A bus is one direction; the
producer ``listen``s (blocking until the consumer ``connect``s through a UNIX
socket the listener creates). 32 B throughput: one ``acquire_tx`` per
message, a flush every 64 (Tachyon's batching, as shmstream's ``batch=64``),
the consumer ``drain_batch``es. Ping-pong: two buses, one message per call.
Frames: 1 KiB float32[256] frames, each wrapped with ``torch.from_dlpack``
(Tachyon exports bytes, so ``.view(torch.float32)``); the tensor is dropped
inside the batch, which Tachyon requires (it has no pin).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from .._common import latency_summary, ping_latencies

SPAWN = mp.get_context("spawn")
CAPACITY = 1 << 22
FLUSH_EVERY = 64
_STOP = 1  # type_id of the ping-pong's last message


def unavailable() -> str | None:
    """Why Tachyon cannot run here (None: it imports)."""
    try:
        import tachyon  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - any import failure is a skip reason
        return (
            f"skipped: tachyon does not import ({type(exc).__name__}: {exc}); "
            "pip install tachyon-ipc (0.5.1 needs clang 19 and lld to build)"
        )
    return None


def _path(tag: str) -> str:
    return os.path.join(
        tempfile.gettempdir(), f"bench-tachyon-{tag}-{os.getpid()}-{uuid.uuid4().hex[:8]}.sock"
    )


def _connect(path: str, timeout: float = 60.0) -> Any:
    """A consumer bus on ``path``, once its listener has made the socket."""
    import tachyon

    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError(f"no Tachyon listener at {path}")
        time.sleep(0.001)
    bus = tachyon.TachyonBus()
    bus.connect(socket_path=path)
    return bus


def _listen(path: str, timeout: float = 60.0) -> Any:
    """A producer bus on ``path``; listen() blocks until the consumer comes,
    so it runs in a thread bounded by ``timeout``."""
    import tachyon

    bus = tachyon.TachyonBus()
    failed: list[BaseException] = []

    def listen() -> None:
        try:
            bus.listen(socket_path=path, capacity=CAPACITY)
        except BaseException as exc:  # noqa: BLE001 - reported below
            failed.append(exc)

    t = threading.Thread(target=listen, daemon=True)
    t.start()
    t.join(timeout)
    if t.is_alive() or failed:
        raise failed[0] if failed else TimeoutError(f"nobody connected to {path}")
    return bus


def _sender(bus: Any) -> Callable[..., None]:
    """``put(payload, type_id=0)``: one message, not flushed. Tachyon's
    acquire_tx raises instead of waiting when the ring is full: then flush
    (the consumer may be waiting for what is pending) and try again, for at
    most a minute."""
    import tachyon

    acquire, flush = bus.acquire_tx, bus.flush

    def loan(size: int) -> Any:
        try:
            return acquire(size)
        except tachyon.TachyonError:
            deadline = time.monotonic() + 60
            while True:
                flush()
                os.sched_yield()
                try:
                    return acquire(size)
                except tachyon.TachyonError:
                    if time.monotonic() > deadline:
                        raise

    def put(payload: bytes, type_id: int = 0) -> None:
        size = len(payload)
        with loan(size) as tx:
            with memoryview(tx) as m:
                m[:size] = payload
            tx.actual_size = size
            tx.type_id = type_id

    return put


def _produce(path: str, n: int, size: int, ready: Any) -> None:
    """Spawned: listen on ``path`` and send ``n`` messages of ``size`` bytes."""
    import tachyon

    bus = tachyon.TachyonBus()
    ready.set()
    bus.listen(socket_path=path, capacity=CAPACITY)
    put, flush, payload = _sender(bus), bus.flush, bytes(size)
    for i in range(n):
        put(payload)
        if i % FLUSH_EVERY == FLUSH_EVERY - 1:
            flush()
    flush()
    bus.destroy()


def _consume(n: int, size: int, per_message: Callable[[Any], None] | None) -> float:
    """Receive ``n`` messages (the first batch untimed); messages/s."""
    path = _path("thr")
    ready = SPAWN.Event()
    p = SPAWN.Process(target=_produce, args=(path, n, size, ready))
    p.start()
    bus = None
    try:
        ready.wait(60)
        bus = _connect(path)
        drain = bus.drain_batch
        got = first = 0
        t0 = 0.0
        while got < n:
            with drain(1024, 10000) as batch:
                k = len(batch)
                if per_message is not None:
                    for i in range(k):
                        per_message(batch[i])
            got += k
            if not first:
                first, t0 = got, time.perf_counter()
        return (n - first) / (time.perf_counter() - t0)
    finally:
        p.join(30)
        p.kill()
        if bus is not None:
            bus.destroy()
        if os.path.exists(path):
            os.unlink(path)


def thr(n: int) -> dict[str, float]:
    """32 B messages Python -> Python: msgs/s."""
    return {"msgs_per_s": _consume(n, 32, None)}


def frames(n: int, frame_bytes: int) -> float:
    """1 KiB frames, each a float32 torch tensor through DLPack: frames/s."""
    import torch

    from_dlpack, f32 = torch.from_dlpack, torch.float32

    def wrap(view: Any) -> None:
        from_dlpack(view).view(f32)

    return _consume(n, frame_bytes, wrap)


def _pong(path_ping: str, path_pong: str, ready: Any) -> None:
    """Spawned: answer each ping with its bytes until the stop message."""
    rx = _connect(path_ping)
    tx = _listen(path_pong)
    ready.set()
    put, flush, acquire = _sender(tx), tx.flush, rx.acquire_rx
    while True:
        with acquire() as g:
            with memoryview(g) as m:
                data = m[: g.actual_size].tobytes()
            stop = g.type_id == _STOP
        put(data)
        flush()
        if stop:
            break
    tx.destroy()
    rx.destroy()


def ping(n: int, msg: bytes) -> dict[str, float]:
    """32 B ping-pong round trips: p50/p99 in microseconds."""
    a, b = _path("ping"), _path("pong")
    ready = SPAWN.Event()
    p = SPAWN.Process(target=_pong, args=(a, b, ready))
    p.start()
    tx = rx = None
    try:
        tx = _listen(a)
        rx = _connect(b)
        ready.wait(60)
        put, flush, acquire = _sender(tx), tx.flush, rx.acquire_rx

        def send(m: bytes) -> None:
            put(m)
            flush()

        def recv() -> bytes:
            with acquire() as g:
                with memoryview(g) as v:
                    return v[: g.actual_size].tobytes()

        lat = ping_latencies(send, msg, recv, n)
        put(msg, _STOP)
        flush()
        recv()
        return latency_summary(lat)
    finally:
        p.join(10)
        p.kill()
        for bus in (tx, rx):
            if bus is not None:
                bus.destroy()
        for path in (a, b):
            if os.path.exists(path):
                os.unlink(path)
