"""The raw baseline as a stream-benchmark peer: ``multiprocessing.shared_memory``
+ NumPy, one control word + payload per segment, busy-polled, relying on
x86-64 store ordering, no resource tracker. What a careful hand-written
version costs, with none of a library's checks.

Round trip and fan-out: a seqlock (the word is odd while a write is in
progress; a reader re-checks it after copying). Ping-pong: the word is the
published seq; the responder copies the payload out (copy) or reads the
sequence words in the segment and re-reads the word (zero-copy).
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
    loop_check,
    ping_buffers,
    wait_deadline,
)
from ._rawshm import raw_shm, raw_unlink
from .stream_shmstream import pattern


class MpshmPeer(Peer):
    name = "mpshm"
    module = "numpy"
    roundtrip_variants = ("seqlock copy",)
    pingpong_variants = {
        COPY: "copy: np.copyto",
        ZERO_COPY: "zero-copy: read in place + seq re-check",
    }
    fanout_variants = ("",)

    def label(self) -> str:
        return "mp.shared_memory+numpy"

    # ------------------------------------------------------ round trip

    def roundtrip(self, variant: str, shape: tuple[int, ...], names: Names) -> RoundTrip:
        src = pattern(shape)
        out = np.empty(shape, np.float32)
        seg_name = names.raw_name("rt")
        seg = raw_shm(seg_name, 64 + src.nbytes, create=True)
        ctrl = seg.buf[:8].cast("Q")
        data = np.ndarray(shape, np.float32, seg.buf, 64)
        state = [0]

        def loop(n: int) -> None:
            seq = state[0]
            copyto = np.copyto
            for _ in range(n):
                seq += 1
                ctrl[0] = 2 * seq - 1  # odd: write in progress
                copyto(data, src)
                ctrl[0] = 2 * seq  # even: published
                while True:  # seqlock read
                    s1 = ctrl[0]
                    if s1 & 1:
                        continue
                    copyto(out, data)
                    if ctrl[0] == s1:
                        break
            state[0] = seq

        def close() -> None:
            nonlocal data
            data = None  # type: ignore[assignment]
            ctrl.release()
            seg.close()
            call_quietly(raw_unlink, seg_name)

        return RoundTrip(loop, loop_check(self.name, loop, out, src), close)

    # ------------------------------------------------------- ping-pong

    def requester(self, variant: str, payload: int, names: Names) -> Requester:
        pc = time.perf_counter_ns
        mono = time.monotonic
        req, r64, last, ack, k64 = ping_buffers(payload)
        a, b = names.raw_name("ppA"), names.raw_name("ppB")
        seg_a = raw_shm(a, 64 + payload, create=True)
        seg_b = raw_shm(b, 64 + ACK, create=True)
        ca, cb = seg_a.buf[:8].cast("Q"), seg_b.buf[:8].cast("Q")
        ca[0] = cb[0] = 0
        da = np.ndarray(payload, np.uint8, seg_a.buf, 64)
        db = np.ndarray(ACK, np.uint8, seg_b.buf, 64)

        def rt(seq: int, n: int, lat: array) -> int:
            copyto = np.copyto
            hard = mono() + WAIT_S + n * 1e-3
            for i in range(n):
                seq += 1
                r64[0] = seq
                r64[last] = seq
                t0 = pc()
                copyto(da, req)
                ca[0] = seq  # publish (x86-64: stores are not reordered)
                spins = 0
                while cb[0] != seq:
                    spins += 1
                    if spins > 100000:
                        spins = 0
                        if mono() > hard:
                            raise BenchError("no ack from the raw responder")
                copyto(ack, db)
                lat[i] = pc() - t0
                if k64[0] != seq:
                    raise BenchError(f"ack carries seq {int(k64[0])}, expected {seq}")
            return seq

        def close() -> None:
            nonlocal da, db
            da = db = None  # type: ignore[assignment]
            ca.release()
            cb.release()
            seg_a.close()
            seg_b.close()
            call_quietly(raw_unlink, a)
            call_quietly(raw_unlink, b)

        return Requester(rt, {"a": a, "b": b}, close)

    def respond(self, ready: Callable[[], None], variant: str, payload: int, **kwargs: Any) -> int:
        seg_a = raw_shm(kwargs["a"])
        seg_b = raw_shm(kwargs["b"])
        ca, cb = seg_a.buf[:8].cast("Q"), seg_b.buf[:8].cast("Q")
        da = np.ndarray(payload, np.uint8, seg_a.buf, 64)
        db = np.ndarray(ACK, np.uint8, seg_b.buf, 64)
        da64 = da.view(np.uint64)
        zero_copy = variant == ZERO_COPY
        try:
            buf, b64, last, ack, k64 = ping_buffers(payload)
            copyto = np.copyto
            seen = ca[0]
            expected = 1
            ready()
            while True:
                spins = 0
                deadline = 0.0
                while ca[0] == seen:
                    spins += 1
                    if spins > 100000:
                        spins = 0
                        deadline = wait_deadline(deadline, "no request from the raw requester")
                if zero_copy:
                    while True:
                        seen = ca[0]
                        s, t = int(da64[0]), int(da64[last])
                        if ca[0] == seen:
                            break
                else:
                    seen = ca[0]
                    copyto(buf, da)
                    s, t = int(b64[0]), int(b64[last])
                if s != STOP and (s != expected or t != s or s != seen):
                    check_request(s, expected, t)
                k64[0] = s
                copyto(db, ack)
                cb[0] = s
                if s == STOP:
                    return expected - 1
                expected += 1
        finally:
            da = db = da64 = None  # type: ignore[assignment]
            ca.release()
            cb.release()
            seg_a.close()
            seg_b.close()

    # --------------------------------------------------------- fan-out

    def fan_writer(self, variant: str, payload: int, names: Names) -> FanWriter:
        name = names.raw_name("fan")
        seg = raw_shm(name, 64 + payload, create=True)
        ctrl = seg.buf[:8].cast("Q")
        ctrl[0] = 0
        data = np.ndarray(payload, np.uint8, seg.buf, 64)
        data64 = data.view(np.uint64)

        def publish(seq: int) -> None:
            ctrl[0] = 2 * seq - 1
            data64.fill(seq)  # written in place, like a loan
            ctrl[0] = 2 * seq

        def close() -> None:
            nonlocal data, data64
            data = data64 = None  # type: ignore[assignment]
            ctrl.release()
            seg.close()
            call_quietly(raw_unlink, name)

        return FanWriter(publish, {"name": name}, close)

    def fan_reader(self, payload: int, buf: Any, **kwargs: Any) -> FanReader:
        seg = raw_shm(kwargs["name"])
        ctrl = seg.buf[:8].cast("Q")
        data = np.ndarray(payload, np.uint8, seg.buf, 64)
        copyto = np.copyto
        mono = time.monotonic
        seen = [ctrl[0]]

        def get() -> bool:
            t_end = 0.0
            spins = 0
            while True:  # seqlock read of a frame newer than the last one
                s1 = ctrl[0]
                if s1 != seen[0] and not s1 & 1:
                    copyto(buf, data)
                    if ctrl[0] == s1:
                        seen[0] = s1
                        return True
                    continue
                spins += 1
                if spins > 1000:
                    spins = 0
                    now = mono()
                    if not t_end:
                        t_end = now + 0.05
                    elif now > t_end:
                        return False

        def close() -> None:
            nonlocal data
            data = None  # type: ignore[assignment]
            ctrl.release()
            seg.close()

        return FanReader(get, close)
