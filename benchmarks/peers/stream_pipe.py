"""``os.pipe()`` as a stream-benchmark peer: the kernel wake-up reference of
the ping-pong's 64 B wake-up rows. 8 bytes each way over two pipes,
blocking reads, between the same two processes as the other rows. Always
available; it has no other rows."""

from __future__ import annotations

import os
import time
from array import array
from collections.abc import Callable
from typing import Any

from .._common import BenchError, call_quietly
from .._stream.peer import STOP, Names, Peer, Requester, check_request

PIPE = "os.pipe"


class PipePeer(Peer):
    name = "pipe"
    module = "os"
    wakeup_variants = {PIPE: "wake-up: blocking read, 8 B each way"}

    def label(self) -> str:
        return "os.pipe() (kernel)"

    def requester(self, variant: str, payload: int, names: Names) -> Requester:
        pc = time.perf_counter_ns
        req_r, req_w = os.pipe()
        ack_r, ack_w = os.pipe()
        write, read = os.write, os.read

        def rt(seq: int, n: int, lat: array) -> int:
            for i in range(n):
                seq += 1
                msg = seq.to_bytes(8, "little")
                t0 = pc()
                write(req_w, msg)
                got = read(ack_r, 8)
                lat[i] = pc() - t0
                if got != msg:
                    raise BenchError(f"pipe ack {got!r}, expected seq {seq}")
            return seq

        def close() -> None:
            call_quietly(os.close, req_w)
            call_quietly(os.close, ack_r)

        # the responder's ends go to it as descriptors (the scenario closes
        # its copies once they are sent)
        return Requester(rt, {}, close, fds=[req_r, ack_w])

    def respond(self, ready: Callable[[], None], variant: str, payload: int, **kwargs: Any) -> int:
        req_r, ack_w = kwargs["fds"]
        try:
            read, write = os.read, os.write
            expected = 1
            ready()
            while True:
                msg = read(req_r, 8)
                if len(msg) != 8:
                    raise BenchError(f"pipe request of {len(msg)} bytes (requester gone?)")
                s = int.from_bytes(msg, "little")
                if s not in (STOP, expected):
                    check_request(s, expected, s)
                write(ack_w, msg)
                if s == STOP:
                    return expected - 1
                expected += 1
        finally:
            os.close(req_r)
            os.close(ack_w)
