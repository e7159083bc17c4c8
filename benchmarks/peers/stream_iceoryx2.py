"""iceoryx2 as a stream-benchmark peer: publish-subscribe over a u8 slice,
loaned samples, busy-polling ``receive()`` (its Python API has no blocking
receive without a WaitSet), pointed at its own file prefix and root dir so
that it leaves nothing behind.

Round trip: loan, memmove in, send; receive, memmove out. Ping-pong: the
responder memmoves the request out (copy) or reads the sequence words in
the received sample (zero-copy). Fan-out: the writer fills the loan in place.
"""

from __future__ import annotations

import ctypes
import time
from array import array
from collections.abc import Callable
from typing import Any

import numpy as np

from .._common import NA_HINT, BenchError, call_quietly
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
from ._iceoryx2 import node as iox_node
from .stream_shmstream import pattern


def _service(iox: Any, node: Any, name: str, create: bool, subscribers: int = 1) -> Any:
    builder = (
        node.service_builder(iox.ServiceName.new(name))
        .publish_subscribe(iox.Slice[ctypes.c_uint8])
        .max_publishers(1)
        .max_subscribers(subscribers)
        .max_nodes(subscribers + 1)
        .history_size(0)
        .subscriber_max_buffer_size(1)
        .enable_safe_overflow(True)
    )
    return builder.create() if create else builder.open()


def _views(words: int) -> Callable[[int], np.ndarray]:
    """A uint64 NumPy view of a loaned/received sample, cached by address:
    samples come from a fixed pool, so views are built once per slot."""
    cache: dict[int, np.ndarray] = {}
    ctype = ctypes.c_uint64 * words

    def view(ptr: int) -> np.ndarray:
        v = cache.get(ptr)
        if v is None:
            v = cache[ptr] = np.frombuffer(ctype.from_address(ptr), dtype=np.uint64)  # type: ignore[call-overload]
        return v

    return view


def _close(*objs: Any) -> None:
    for obj in objs:
        if obj is not None and hasattr(obj, "delete"):
            call_quietly(obj.delete)


class Iceoryx2Peer(Peer):
    name = "iceoryx2"
    module = "iceoryx2"
    install_hint = NA_HINT
    roundtrip_variants = ("loan+copy / receive+copy",)
    pingpong_variants = {
        COPY: "copy: receive + memmove",
        ZERO_COPY: "zero-copy: receive, read in place",
    }
    fanout_variants = ("",)

    # ------------------------------------------------------ round trip

    def roundtrip(self, variant: str, shape: tuple[int, ...], names: Names) -> RoundTrip:
        src = pattern(shape)
        out = np.empty(shape, np.float32)
        nbytes = src.nbytes
        iox, node = iox_node(names.iox_prefix, names.iox_root)
        svc = _service(iox, node, names.new("rt"), create=True)
        pub = svc.publisher_builder().initial_max_slice_len(nbytes).create()
        sub = svc.subscriber_builder().create()
        loan, receive, mm = pub.loan_slice_uninit, sub.receive, ctypes.memmove
        sp, op = src.ctypes.data, out.ctypes.data

        def loop(n: int) -> None:
            for _ in range(n):
                s = loan(nbytes)
                mm(s.payload_ptr, sp, nbytes)
                s.assume_init().send()
                r = receive()
                mm(op, r.payload_ptr, nbytes)
                r.delete()

        def close() -> None:
            nonlocal svc, node
            _close(sub, pub)
            svc = node = None

        return RoundTrip(loop, loop_check(self.name, loop, out, src), close)

    # ------------------------------------------------------- ping-pong

    def requester(self, variant: str, payload: int, names: Names) -> Requester:
        pc = time.perf_counter_ns
        mono = time.monotonic
        req, r64, last, ack, k64 = ping_buffers(payload)
        iox, node = iox_node(names.iox_prefix, names.iox_root)
        a, b = names.new("ppA"), names.new("ppB")
        sa = _service(iox, node, a, create=True)
        sb = _service(iox, node, b, create=True)
        pub = sa.publisher_builder().initial_max_slice_len(payload).create()
        sub = sb.subscriber_builder().create()
        loan, receive, mm = pub.loan_slice_uninit, sub.receive, ctypes.memmove
        reqp, ackp = req.ctypes.data, ack.ctypes.data

        def rt(seq: int, n: int, lat: array) -> int:
            hard = mono() + WAIT_S + n * 1e-3
            for i in range(n):
                seq += 1
                r64[0] = seq
                r64[last] = seq
                t0 = pc()
                s = loan(payload)
                mm(s.payload_ptr, reqp, payload)
                s.assume_init().send()
                r = receive()
                spins = 0
                while r is None:
                    r = receive()
                    spins += 1
                    if spins > 100000:
                        spins = 0
                        pub.update_connections()
                        if mono() > hard:
                            raise BenchError("no ack from the iceoryx2 responder")
                mm(ackp, r.payload_ptr, ACK)
                r.delete()
                lat[i] = pc() - t0
                if k64[0] != seq:
                    raise BenchError(f"ack carries seq {int(k64[0])}, expected {seq}")
            return seq

        def close() -> None:
            nonlocal sa, sb, node
            _close(sub, pub)
            sa = sb = node = None

        kw = {"a": a, "b": b, "prefix": names.iox_prefix, "root": names.iox_root}
        return Requester(rt, kw, close, connect=pub.update_connections)

    def respond(self, ready: Callable[[], None], variant: str, payload: int, **kwargs: Any) -> int:
        iox, node = iox_node(kwargs["prefix"], kwargs["root"])
        sa = _service(iox, node, kwargs["a"], create=False)
        sb = _service(iox, node, kwargs["b"], create=False)
        sub = sa.subscriber_builder().create()
        pub = sb.publisher_builder().initial_max_slice_len(ACK).create()
        zero_copy = variant == ZERO_COPY
        try:
            buf, b64, last, ack, k64 = ping_buffers(payload)
            loan, receive, mm = pub.loan_slice_uninit, sub.receive, ctypes.memmove
            bufp, ackp = buf.ctypes.data, ack.ctypes.data
            view = _views(payload // 8)
            expected = 1
            ready()
            while True:
                r = receive()
                spins = 0
                deadline = 0.0
                while r is None:
                    r = receive()
                    spins += 1
                    if spins > 100000:
                        spins = 0
                        pub.update_connections()
                        deadline = wait_deadline(deadline, "no request from the iceoryx2 requester")
                if zero_copy:
                    v = view(r.payload_ptr)
                    s, t = int(v[0]), int(v[last])
                    r.delete()
                else:
                    mm(bufp, r.payload_ptr, payload)
                    r.delete()
                    s, t = int(b64[0]), int(b64[last])
                if s != STOP and (s != expected or t != s):
                    check_request(s, expected, t)
                k64[0] = s
                out = loan(ACK)
                mm(out.payload_ptr, ackp, ACK)
                out.assume_init().send()
                if s == STOP:
                    return expected - 1
                expected += 1
        finally:
            _close(sub, pub)

    # --------------------------------------------------------- fan-out

    def fan_writer(self, variant: str, payload: int, names: Names) -> FanWriter:
        iox, node = iox_node(names.iox_prefix, names.iox_root)
        name = names.new("fan")
        svc = _service(iox, node, name, create=True, subscribers=2)
        pub = svc.publisher_builder().initial_max_slice_len(payload).create()
        loan = pub.loan_slice_uninit
        view = _views(payload // 8)

        def publish(seq: int) -> None:
            s = loan(payload)  # zero-copy: the frame is made in the loan
            view(s.payload_ptr).fill(seq)
            s.assume_init().send()

        def close() -> None:
            nonlocal svc, node
            _close(pub)
            svc = node = None

        kw = {"name": name, "prefix": names.iox_prefix, "root": names.iox_root}
        return FanWriter(publish, kw, close, connect=pub.update_connections)

    def fan_reader(self, payload: int, buf: Any, **kwargs: Any) -> FanReader:
        iox, node = iox_node(kwargs["prefix"], kwargs["root"])
        svc = _service(iox, node, kwargs["name"], create=False, subscribers=2)
        sub = svc.subscriber_builder().create()
        receive, mm, bufp = sub.receive, ctypes.memmove, buf.ctypes.data
        mono = time.monotonic

        def get() -> bool:
            r = receive()
            if r is None:
                t_end = mono() + 0.05
                spins = 0
                while r is None:
                    r = receive()
                    spins += 1
                    if spins > 1000:
                        spins = 0
                        if mono() > t_end:
                            return False
            mm(bufp, r.payload_ptr, payload)
            r.delete()
            return True

        def close() -> None:
            nonlocal svc, node
            _close(sub)
            svc = node = None

        return FanReader(get, close)
