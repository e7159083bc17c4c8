"""pyshmem 1.4.0 as a stream-benchmark peer: the same create/open/read/write
calls as shmstream (round trip and fan-out are inherited), its own waits.

Its ``read_new`` is edge-triggered at the call and deadlocks
request/response, so ping-pong uses its documented level-triggered way,
``wait_for_count`` then ``read(out=)``; zero-copy is ``wait_for_count`` then
``with locked(): read(safe=False)``.
"""

from __future__ import annotations

import time
from array import array
from collections.abc import Callable
from typing import Any

import numpy as np

from .._common import NA_HINT, BenchError
from .._stream.peer import COPY, WAIT_S, ZERO_COPY, Peer, ping_buffers
from .stream_shmstream import ShmstreamPeer


class PyshmemPeer(ShmstreamPeer):
    name = "pyshmem"
    module = "pyshmem"
    install_hint = NA_HINT
    pingpong_variants = {
        COPY: "copy: wait_for_count + read(out=)",
        ZERO_COPY: "zero-copy: locked() + read(safe=False)",
    }
    wakeup_variants: dict[str, str] = {}
    fanout_variants = ("",)

    def unusable(self, mod: Any) -> str | None:
        return None

    def label(self) -> str:
        return Peer.label(self)

    def _round_trips(
        self, ha: Any, hb: Any, variant: str, payload: int
    ) -> Callable[[int, int, array], int]:
        pc = time.perf_counter_ns
        req, r64, last, ack, k64 = ping_buffers(payload)
        write = ha.write
        wait_for_count, read = hb.wait_for_count, hb.read
        seen = [hb.count]

        def rt(seq: int, n: int, lat: array) -> int:
            nb = seen[0]
            for i in range(n):
                seq += 1
                r64[0] = seq
                r64[last] = seq
                t0 = pc()
                write(req)
                nb = wait_for_count(after=nb, timeout=WAIT_S)
                read(out=ack)
                lat[i] = pc() - t0
                if k64[0] != seq:
                    raise BenchError(f"ack carries seq {int(k64[0])}, expected {seq}")
            seen[0] = nb
            return seq

        return rt

    def _request_reader(
        self, ha: Any, variant: str, buf: np.ndarray, last: int
    ) -> Callable[[], tuple[int, int]]:
        na = ha.count
        wait_for_count = ha.wait_for_count
        if variant == ZERO_COPY:
            locked, read = ha.locked, ha.read
            u64 = np.uint64

            def get() -> tuple[int, int]:
                nonlocal na
                na = wait_for_count(after=na, timeout=WAIT_S)
                with locked():
                    v = read(safe=False).view(u64)
                    s, t = int(v[0]), int(v[last])
                return s, t

            return get
        read = ha.read
        b64 = buf.view(np.uint64)

        def get_copy() -> tuple[int, int]:
            nonlocal na
            na = wait_for_count(after=na, timeout=WAIT_S)
            read(out=buf)
            return int(b64[0]), int(b64[last])

        return get_copy
