"""shmstream's streams as a stream-benchmark peer (and the base of pyshmem's,
whose create/open/read/write API shmstream shares; only the waits differ).

Round trip: ``write`` then ``read()`` or ``read(out=)``. Ping-pong: the
requester waits with ``read_new(out=)``; the responder reads with
``read_new(out=)`` (copy) or ``with read_new_view()`` (zero-copy: no lock, a
view of the published slot, checked on exit); ``spin_us=0`` on both ends is
the wake-up row (futex sleep at once). Fan-out: the default two payload
slots and ``slots=1``; readers ``read_new(out=)`` and report
``total_missed_writes``.
"""

from __future__ import annotations

import time
from array import array
from collections.abc import Callable
from typing import Any

import numpy as np

from .._common import BenchError, call_quietly
from .._stream.peer import (
    ACK,
    COPY,
    STOP,
    WAIT_S,
    ZERO_COPY,
    FanReader,
    FanWriter,
    Names,
    Peer,
    Requester,
    RoundTrip,
    check_request,
    ping_buffers,
)

NOSPIN = "spin_us=0"
SLOTS2, SLOTS1 = "slots=2 (default)", "slots=1"


def pattern(shape: tuple[int, ...]) -> np.ndarray:
    """The array every round-trip row writes."""
    return np.random.default_rng(1).random(shape, dtype=np.float32)


class ShmstreamPeer(Peer):
    name = "shmstream"
    module = "shmstream"
    roundtrip_variants = ("read()", "read(out=)")
    pingpong_variants = {
        COPY: "copy: read_new(out=)",
        ZERO_COPY: "zero-copy: read_new_view()",
    }
    wakeup_variants = {NOSPIN: "wake-up: copy, spin_us=0 both ends (futex)"}
    fanout_variants: tuple[str, ...] = (SLOTS2, SLOTS1)
    counts_missed = True

    def unusable(self, mod: Any) -> str | None:
        if not hasattr(mod, "create"):
            return f"{self.module}.create is missing (stream API not built)"
        return None

    def label(self) -> str:
        if self.module != "shmstream":  # --self-module: another build of it
            return f"shmstream ({self.module})"
        return super().label()

    # ------------------------------------------------------ round trip

    def roundtrip(self, variant: str, shape: tuple[int, ...], names: Names) -> RoundTrip:
        pkg = self.mod
        src = pattern(shape)
        out = np.empty(shape, np.float32)
        name = names.stream(pkg, "rt")
        w = pkg.create(name, shape=shape, dtype=np.float32)
        r = pkg.open(name)
        write, read = w.write, r.read
        if variant == "read(out=)":

            def loop(n: int) -> None:
                for _ in range(n):
                    write(src)
                    read(out=out)
        else:

            def loop(n: int) -> None:
                for _ in range(n):
                    write(src)
                    read()

        def check() -> None:
            got = r.read()
            if not np.array_equal(got, src):
                raise BenchError(f"{self.name}: round trip returned different data")

        def close() -> None:
            call_quietly(r.close)
            call_quietly(w.close)
            call_quietly(pkg.unlink, name)

        return RoundTrip(loop, check, close)

    # ------------------------------------------------------- ping-pong

    def requester(self, variant: str, payload: int, names: Names) -> Requester:
        """The requester is the same for the copy and zero-copy rows (they
        differ in how the responder reads the request); ``spin_us=0`` turns
        off the spin of its wait for the ack."""
        pkg = self.mod
        a = names.stream(pkg, "ppA")
        b = names.stream(pkg, "ppB")
        ha = pkg.create(a, shape=(payload,), dtype=np.uint8)
        hb = pkg.create(b, shape=(ACK,), dtype=np.uint8)

        def close() -> None:
            call_quietly(ha.close)
            call_quietly(hb.close)
            call_quietly(pkg.unlink, a)
            call_quietly(pkg.unlink, b)

        return Requester(self._round_trips(ha, hb, variant, payload), {"a": a, "b": b}, close)

    def _round_trips(
        self, ha: Any, hb: Any, variant: str, payload: int
    ) -> Callable[[int, int, array], int]:
        pc = time.perf_counter_ns
        req, r64, last, ack, k64 = ping_buffers(payload)
        write = ha.write
        if variant == NOSPIN:
            hb.spin_us = 0  # per handle: a per-call spin_us= leaves the fast path
        read_new = hb.read_new

        def rt(seq: int, n: int, lat: array) -> int:
            for i in range(n):
                seq += 1
                r64[0] = seq
                r64[last] = seq
                t0 = pc()
                write(req)
                read_new(timeout=WAIT_S, out=ack)
                lat[i] = pc() - t0
                if k64[0] != seq:
                    raise BenchError(f"ack carries seq {int(k64[0])}, expected {seq}")
            return seq

        return rt

    def respond(self, ready: Callable[[], None], variant: str, payload: int, **kwargs: Any) -> int:
        pkg = self.mod
        ha = pkg.open(kwargs["a"])
        hb = pkg.open(kwargs["b"])
        try:
            if variant == NOSPIN:
                ha.spin_us = 0
            buf, _, last, ack, k64 = ping_buffers(payload)
            write = hb.write
            expected = 1
            get = self._request_reader(ha, variant, buf, last)
            ready()
            while True:
                s, t = get()
                if s == STOP:
                    k64[0] = s
                    write(ack)
                    return expected - 1
                if s != expected or t != s:
                    check_request(s, expected, t)
                k64[0] = s
                write(ack)
                expected += 1
        finally:
            ha.close()
            hb.close()

    def _request_reader(
        self, ha: Any, variant: str, buf: np.ndarray, last: int
    ) -> Callable[[], tuple[int, int]]:
        """``get()`` -> the (first, last) words of the next request."""
        if variant == ZERO_COPY:
            read_new_view = ha.read_new_view
            u64 = np.uint64

            def get() -> tuple[int, int]:
                with read_new_view(timeout=WAIT_S) as pub:
                    v = pub.payload.view(u64)
                    s, t = int(v[0]), int(v[last])
                return s, t

            return get
        read_new = ha.read_new
        b64 = buf.view(np.uint64)

        def get_copy() -> tuple[int, int]:
            read_new(timeout=WAIT_S, out=buf)
            return int(b64[0]), int(b64[last])

        return get_copy

    # --------------------------------------------------------- fan-out

    def fan_writer(self, variant: str, payload: int, names: Names) -> FanWriter:
        pkg = self.mod
        name = names.stream(pkg, "fan")
        extra = {"slots": 1} if variant == SLOTS1 else {}
        h = pkg.create(name, shape=(payload,), dtype=np.uint8, **extra)
        write = h.write
        frame = np.zeros(payload, np.uint8)
        f64 = frame.view(np.uint64)

        def publish(seq: int) -> None:
            f64.fill(seq)
            write(frame)

        def close() -> None:
            call_quietly(h.close)
            call_quietly(pkg.unlink, name)

        return FanWriter(publish, {"name": name}, close)

    def fan_reader(self, payload: int, buf: Any, **kwargs: Any) -> FanReader:
        h = self.mod.open(kwargs["name"])
        read_new = h.read_new
        base: list[int | None] = [None]

        def get() -> bool:
            try:
                read_new(timeout=0.05, out=buf)
            except TimeoutError:
                return False
            if base[0] is None:
                base[0] = h.total_missed_writes
            return True

        def missed() -> int:
            return int(h.total_missed_writes - (base[0] or 0))

        return FanReader(get, h.close, missed)
