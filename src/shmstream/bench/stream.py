"""Stream benchmark: shmstream vs pyshmem vs iceoryx2 vs a raw
``multiprocessing.shared_memory`` + NumPy baseline, in one run.

    python -m shmstream.bench stream [--quick] [--repeats N] [--json PATH]

Sections
  (a) round trip in one process: write a float32 array, read it back
      (100x100, 128x128, 1000x1000; 10000x10000 with --huge).
  (b) cross-process ping-pong: request of 64 B / 64 KiB / 4 MiB on stream A,
      the responder waits for it, reads it and writes a 64 B ack on stream B.
      Round trips/s and p50/p95/p99 latency. Two rows per implementation:
      "copy" (the responder copies the request into its own array) and
      "zero-copy" (it reads the sequence words in place: shmstream with
      ``read_new_view()``, pyshmem with ``wait_for_count`` +
      ``with locked(): read(safe=False)``,
      iceoryx2 in the received sample, the raw baseline in the segment with
      a re-check of its published word). For 64 B also two wake-up rows:
      shmstream with ``spin_us=0`` on both ends (futex sleep at once) and a
      plain ``os.pipe()`` ping-pong (blocking 8-byte reads) between the same
      two processes.
  (c) fan-out: one writer, two reader processes, 64 KiB frames: frames/s
      delivered per reader, missed frames (from sequence numbers, checked
      against shmstream's own counter), torn frames (every 8-byte word of a
      frame carries its sequence number). shmstream with its default two
      payload slots and with ``slots=1``.

Method: every implementation does the same work: the producer's NumPy array
is copied into shared memory, the consumer ends up with its own NumPy array
(a preallocated ``out=`` buffer where the API has one); (b)'s zero-copy rows
are the one exception, labelled as such, and compared zero-copy with
zero-copy. Rows are measured
round-robin (impl A, B, C, D, A, B, ...) ``--repeats`` times and the median is
reported, so drift on a noisy machine hits every column alike. Processes are
spawned once per run and reused (start-up is not measured); each measurement
warms up before it is timed. Payloads carry sequence numbers that are checked:
a mismatch is an error, not a statistic.

Peers: pyshmem 1.4.0 (``read(out=)``, ``wait_for_count`` for ping-pong because
its ``read_new`` is edge-triggered and can deadlock request/response);
iceoryx2 (publish-subscribe over a u8 slice, loaned samples, busy-polling
``receive()``, its own file prefix so it leaves nothing behind); the raw
baseline (one seqlock/counter word + payload in a ``SharedMemory`` segment,
busy-polled, relying on x86-64 store ordering, no resource tracker).
"""
from __future__ import annotations

import argparse
import ctypes
import glob
import importlib
import os
import shutil
import sys
import time
from array import array
from typing import Any, Callable

import numpy as np

from ._common import (
    NA_HINT,
    BenchError,
    Results,
    Worker,
    call_quietly,
    fmt_bytes,
    fmt_hz,
    fmt_ratio,
    fmt_us,
    median,
    peer_version,
    progress,
    raw_shm,
    raw_unlink,
    render_table,
    try_import,
)

STOP = (1 << 64) - 1  # sequence number that ends a responder / reader
ABORT = STOP - 1  # fan-out control word: the writer failed
WAIT_S = 10.0  # a single wait longer than this is a hang, not a measurement
IMPLS = ("shmstream", "pyshmem", "iceoryx2", "mpshm")

_ROUNDTRIP_SHAPES = ((100, 100), (128, 128), (1000, 1000))
_HUGE_SHAPE = (10000, 10000)
_PINGPONG_PAYLOADS = (64, 64 << 10, 4 << 20)
_FANOUT_PAYLOAD = 64 << 10
_ACK = 64


# =============================================================== peers


class Peers:
    """Which implementations can run here, with labels and reasons."""

    def __init__(self, self_module: str, wanted: list[str]) -> None:
        self.self_module = self_module
        self.mod: dict[str, Any] = {}
        self.missing: dict[str, str] = {}
        for impl in wanted:
            if impl == "shmstream":
                mod, why = try_import(self_module)
                if mod is not None and not hasattr(mod, "create"):
                    mod, why = None, f"{self_module}.create is missing (stream API not built)"
            elif impl == "pyshmem":
                mod, why = try_import("pyshmem")
            elif impl == "iceoryx2":
                mod, why = try_import("iceoryx2")
            else:
                mod, why = np, None
            if mod is None:
                self.missing[impl] = why or "not importable"
            else:
                self.mod[impl] = mod
        self.wanted = wanted

    def label(self, impl: str) -> str:
        if impl == "shmstream":
            if self.self_module != "shmstream":
                return f"shmstream ({self.self_module})"
            return f"shmstream {peer_version('shmstream') or ''}".strip()
        if impl == "pyshmem":
            return f"pyshmem {peer_version('pyshmem') or ''}".strip()
        if impl == "iceoryx2":
            return f"iceoryx2 {peer_version('iceoryx2') or ''}".strip()
        return "mp.shared_memory+numpy"

    def na(self, impl: str) -> str:
        return NA_HINT if impl in ("pyshmem", "iceoryx2") else f"n/a ({self.missing.get(impl, '')})"

    @property
    def available(self) -> list[str]:
        return [i for i in self.wanted if i in self.mod]


# ======================================================= name hygiene


class Names:
    """Unique names for this run, and the record needed to remove them."""

    def __init__(self) -> None:
        self.prefix = f"shmsbench-{os.getpid()}"
        self.n = 0
        self.streams: list[tuple[Any, str]] = []  # (package, name)
        self.raw: list[str] = []
        # iceoryx2 is pointed at its own file prefix and root dir so that
        # everything it creates can be removed by prefix at the end.
        self.iox_prefix = f"shmsbench{os.getpid()}_"
        self.iox_root = f"/tmp/shmsbench_iox2_{os.getpid()}/"

    def new(self, tag: str) -> str:
        self.n += 1
        return f"{self.prefix}-{tag}-{self.n}"

    def stream(self, pkg: Any, tag: str) -> str:
        name = self.new(tag)
        self.streams.append((pkg, name))
        return name

    def raw_name(self, tag: str) -> str:
        name = f"shmsb{os.getpid()}_{tag}{self.n + 1}"
        self.n += 1
        self.raw.append(name)
        return name

    def cleanup(self) -> None:
        for pkg, name in self.streams:
            call_quietly(pkg.unlink, name)
        for name in self.raw:
            call_quietly(raw_unlink, name)
        for path in glob.glob(f"/dev/shm/{self.iox_prefix}*"):
            call_quietly(os.unlink, path)
        shutil.rmtree(self.iox_root, ignore_errors=True)


# ============================================================ iceoryx2


def _iox_node(prefix: str, root: str) -> tuple[Any, Any]:
    iox = importlib.import_module("iceoryx2")
    iox.set_log_level(iox.LogLevel.Error)
    cfg = iox.config.default()
    cfg.global_cfg.prefix = iox.FileName.new(prefix)
    cfg.global_cfg.root_path = iox.Path.new(root)
    node = iox.NodeBuilder.new().config(cfg).create(iox.ServiceType.Ipc)
    return iox, node


def _iox_service(iox: Any, node: Any, name: str, create: bool, subscribers: int = 1) -> Any:
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


def _iox_views(words: int) -> Callable[[int], np.ndarray]:
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


def _iox_close(*objs: Any) -> None:
    for obj in objs:
        if obj is not None and hasattr(obj, "delete"):
            call_quietly(obj.delete)


# ================================================ (a) round trip, one process


def _pattern(shape: tuple[int, ...]) -> np.ndarray:
    return np.random.default_rng(1).random(shape, dtype=np.float32)


def _rt_setup(impl: str, variant: str, peers: Peers, names: Names, shape: tuple[int, ...]):
    """Returns (loop(n), check(), cleanup()) for one round-trip row."""
    src = _pattern(shape)
    out = np.empty(shape, np.float32)
    nbytes = src.nbytes

    if impl in ("shmstream", "pyshmem"):
        pkg = peers.mod[impl]
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
                raise BenchError(f"{impl}: round trip returned different data")

        def cleanup() -> None:
            call_quietly(r.close)
            call_quietly(w.close)
            call_quietly(pkg.unlink, name)

        return loop, check, cleanup

    if impl == "iceoryx2":
        iox, node = _iox_node(names.iox_prefix, names.iox_root)
        svc = _iox_service(iox, node, names.new("rt"), create=True)
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

        def check() -> None:
            out[...] = 0
            loop(1)
            if not np.array_equal(out, src):
                raise BenchError("iceoryx2: round trip returned different data")

        def cleanup() -> None:
            nonlocal svc, node
            _iox_close(sub, pub)
            svc = node = None

        return loop, check, cleanup

    # mpshm: seqlock word (odd while writing) + payload, one segment
    seg_name = names.raw_name("rt")
    seg = raw_shm(seg_name, 64 + nbytes, create=True)
    ctrl = seg.buf[:8].cast("Q")
    data = np.ndarray(shape, np.float32, seg.buf, 64)
    state = [0]

    def loop(n: int) -> None:  # type: ignore[no-redef]
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

    def check() -> None:  # type: ignore[no-redef]
        out[...] = 0
        loop(1)
        if not np.array_equal(out, src):
            raise BenchError("mpshm: round trip returned different data")

    def cleanup() -> None:  # type: ignore[no-redef]
        nonlocal data
        data = None  # type: ignore[assignment]
        ctrl.release()
        seg.close()
        call_quietly(raw_unlink, seg_name)

    return loop, check, cleanup


def _calibrate(loop: Callable[[int], Any], seconds: float) -> int:
    """Warm up and return an iteration count that takes about ``seconds``."""
    n = 1
    while True:
        t0 = time.perf_counter()
        loop(n)
        dt = time.perf_counter() - t0
        if dt >= min(0.05, seconds / 2) or n >= 1 << 24:
            return max(1, int(n * seconds / max(dt, 1e-9)))
        n *= 4 if dt < 0.005 else 2


def _section_roundtrip(cfg: argparse.Namespace, peers: Peers, names: Names, res: Results) -> None:
    shapes = list(_ROUNDTRIP_SHAPES) + ([_HUGE_SHAPE] if cfg.huge else [])
    rows = [(i, v) for i in peers.wanted for v in (
        ("read()", "read(out=)") if i in ("shmstream", "pyshmem") else
        ("loan+copy / receive+copy",) if i == "iceoryx2" else ("seqlock copy",)
    )]
    hz: dict[tuple[str, str, tuple[int, ...]], list[float]] = {}
    for shape in shapes:
        setups = {}
        try:
            for impl, variant in rows:
                if impl not in peers.mod:
                    continue
                try:
                    setups[(impl, variant)] = _rt_setup(impl, variant, peers, names, shape)
                except Exception as exc:  # noqa: BLE001
                    res.error(f"(a) {impl} {variant} {shape}: setup failed: {exc}")
            counts: dict[tuple[str, str], int] = {}
            for rep in range(cfg.repeats):
                for key, (loop, check, _) in setups.items():
                    impl, variant = key
                    try:
                        if key not in counts:
                            counts[key] = _calibrate(loop, cfg.seconds)
                        else:
                            loop(max(1, counts[key] // 20))  # re-warm after the others ran
                        n = counts[key]
                        t0 = time.perf_counter_ns()
                        loop(n)
                        dt = (time.perf_counter_ns() - t0) / 1e9
                        check()
                    except Exception as exc:  # noqa: BLE001
                        res.error(f"(a) {impl} {variant} {shape}: {exc}")
                        continue
                    rate = n / dt
                    hz.setdefault((impl, variant, shape), []).append(rate)
                    nbytes = int(np.prod(shape)) * 4
                    res.add(section="a", shape=list(shape), impl=impl, variant=variant,
                            repeat=rep, iterations=n, seconds=dt, hz=rate,
                            gbps=rate * nbytes / 1e9)
                    progress(f"(a) {'x'.join(map(str, shape))} {impl} {variant} "
                             f"rep {rep + 1}/{cfg.repeats}: {fmt_hz(rate)}")
        finally:
            for _, _, cleanup in setups.values():
                call_quietly(cleanup)

    headers = ["implementation"] + [
        f"{'x'.join(map(str, s))} ({fmt_bytes(int(np.prod(s)) * 4)})" for s in shapes
    ]
    table_rows = []
    for impl, variant in rows:
        cells = [f"{peers.label(impl)} {variant}"]
        for shape in shapes:
            if impl not in peers.mod:
                cells.append(peers.na(impl))
                continue
            vals = hz.get((impl, variant, shape))
            if not vals:
                cells.append("error")
                continue
            m = median(vals)
            cells.append(f"{fmt_hz(m)}, {m * int(np.prod(shape)) * 4 / 1e9:.2f} GB/s")
        table_rows.append(cells)

    def best(impl: str, shape: tuple[int, ...]) -> float:
        vals = [median(v) for (i, _, s), v in hz.items() if i == impl and s == shape and v]
        return max(vals) if vals else float("nan")

    if "shmstream" in peers.mod:
        for peer in peers.wanted:
            if peer == "shmstream":
                continue
            cells = [f"shmstream best vs {peers.label(peer)} best"]
            for shape in shapes:
                cells.append(fmt_ratio(best("shmstream", shape), best(peer, shape))
                             if peer in peers.mod else peers.na(peer))
            table_rows.append(cells)
    title = (f"(a) write + read round trip in one process, float32, "
             f"median of {cfg.repeats}; rate in round trips/s, GB/s = payload bytes x rate")
    _emit(res, render_table(headers, table_rows, title))


# ===================================================== (b) ping-pong

# Requester side (this process): returns rt(seq, n, lat) -> last seq, where
# each round trip increments seq, stamps it into the first and last 8 bytes
# of the request, publishes it, waits for the ack and checks the ack's seq.


def _pp_requester(impl: str, variant: str, peers: Peers, names: Names, payload: int):
    """The requester is the same for the copy and zero-copy rows (they differ
    in how the responder reads the request); ``spin_us=0`` turns off the
    spin of shmstream's wait for the ack."""
    pc = time.perf_counter_ns
    if impl == "pipe":
        # kernel wake-up reference: 8 bytes each way over two os.pipe()s,
        # blocking reads. kw["fds"] are the responder's ends (sent to it,
        # then closed here by _pingpong_once).
        req_r, req_w = os.pipe()
        ack_r, ack_w = os.pipe()
        write, read = os.write, os.read

        def rt(seq: int, n: int, lat: array) -> int:  # type: ignore[no-redef]
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

        def cleanup() -> None:  # type: ignore[no-redef]
            call_quietly(os.close, req_w)
            call_quietly(os.close, ack_r)

        return rt, {"fds": [req_r, ack_w]}, cleanup

    req = np.zeros(payload, np.uint8)
    r64 = req.view(np.uint64)
    last = payload // 8 - 1
    ack = np.zeros(_ACK, np.uint8)
    k64 = ack.view(np.uint64)
    mono = time.monotonic

    if impl in ("shmstream", "pyshmem"):
        pkg = peers.mod[impl]
        a = names.stream(pkg, "ppA")
        b = names.stream(pkg, "ppB")
        ha = pkg.create(a, shape=(payload,), dtype=np.uint8)
        hb = pkg.create(b, shape=(_ACK,), dtype=np.uint8)
        write = ha.write
        if impl == "shmstream":
            if variant == "spin_us=0":
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
        else:
            # pyshmem's read_new is edge-triggered at the call and deadlocks
            # request/response; its documented level-triggered way is
            # wait_for_count + read.
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

        def cleanup() -> None:
            call_quietly(ha.close)
            call_quietly(hb.close)
            call_quietly(pkg.unlink, a)
            call_quietly(pkg.unlink, b)

        return rt, {"a": a, "b": b, "lib": peers.self_module if impl == "shmstream" else "pyshmem"}, cleanup

    if impl == "iceoryx2":
        iox, node = _iox_node(names.iox_prefix, names.iox_root)
        a, b = names.new("ppA"), names.new("ppB")
        sa = _iox_service(iox, node, a, create=True)
        sb = _iox_service(iox, node, b, create=True)
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
                mm(ackp, r.payload_ptr, _ACK)
                r.delete()
                lat[i] = pc() - t0
                if k64[0] != seq:
                    raise BenchError(f"ack carries seq {int(k64[0])}, expected {seq}")
            return seq

        def cleanup() -> None:
            nonlocal sa, sb, node
            _iox_close(sub, pub)
            sa = sb = node = None

        kw = {"a": a, "b": b, "prefix": names.iox_prefix, "root": names.iox_root}

        def connect() -> None:
            pub.update_connections()

        rt.connect = connect  # type: ignore[attr-defined]
        return rt, kw, cleanup

    # mpshm: control word (published seq) + payload per direction
    a, b = names.raw_name("ppA"), names.raw_name("ppB")
    seg_a = raw_shm(a, 64 + payload, create=True)
    seg_b = raw_shm(b, 64 + _ACK, create=True)
    ca, cb = seg_a.buf[:8].cast("Q"), seg_b.buf[:8].cast("Q")
    ca[0] = cb[0] = 0
    da = np.ndarray(payload, np.uint8, seg_a.buf, 64)
    db = np.ndarray(_ACK, np.uint8, seg_b.buf, 64)

    def rt(seq: int, n: int, lat: array) -> int:  # type: ignore[no-redef]
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

    def cleanup() -> None:  # type: ignore[no-redef]
        nonlocal da, db
        da = db = None  # type: ignore[assignment]
        ca.release()
        cb.release()
        seg_a.close()
        seg_b.close()
        call_quietly(raw_unlink, a)
        call_quietly(raw_unlink, b)

    return rt, {"a": a, "b": b}, cleanup


# Responder side (worker process tasks). Each acks every request with its
# seq, checks that requests arrive in order with intact first/last words, and
# returns after acking STOP.


def _check_req(s: int, expected: int, tail: int) -> None:
    if s != expected or tail != s:
        raise BenchError(f"request seq {s} (tail {tail}), expected {expected}")


def pong_stream(ready: Callable[[], None], a: str, b: str, payload: int, lib: str,
                zero_copy: bool = False, spin_us: float | None = None) -> int:
    """Copy: ``read_new(out=)`` (pyshmem: ``wait_for_count`` + ``read(out=)``).
    Zero-copy: shmstream ``with read_new_view() as pub:`` (no lock; a view of
    the published slot, checked on exit); pyshmem ``wait_for_count`` then
    ``with locked(): read(safe=False)``. The sequence words are read from the
    live slot and the ack is written after the block."""
    pkg = importlib.import_module(lib)
    ha = pkg.open(a)
    hb = pkg.open(b)
    try:
        if spin_us is not None:
            ha.spin_us = spin_us
        buf = np.empty(payload, np.uint8)
        b64 = buf.view(np.uint64)
        last = payload // 8 - 1
        ack = np.zeros(_ACK, np.uint8)
        k64 = ack.view(np.uint64)
        write = hb.write
        expected = 1
        na = ha.count
        if zero_copy and lib == "shmstream":
            read_new_view = ha.read_new_view
            u64 = np.uint64

            def get() -> tuple[int, int]:
                with read_new_view(timeout=WAIT_S) as pub:
                    v = pub.payload.view(u64)
                    s, t = int(v[0]), int(v[last])
                return s, t
        elif zero_copy:
            wait_for_count, locked, read = ha.wait_for_count, ha.locked, ha.read
            u64 = np.uint64

            def get() -> tuple[int, int]:
                nonlocal na
                na = wait_for_count(after=na, timeout=WAIT_S)
                with locked():
                    v = read(safe=False).view(u64)
                    s, t = int(v[0]), int(v[last])
                return s, t
        elif lib == "pyshmem":
            wait_for_count, read = ha.wait_for_count, ha.read

            def get() -> tuple[int, int]:
                nonlocal na
                na = wait_for_count(after=na, timeout=WAIT_S)
                read(out=buf)
                return int(b64[0]), int(b64[last])
        else:
            read_new = ha.read_new

            def get() -> tuple[int, int]:
                read_new(timeout=WAIT_S, out=buf)
                return int(b64[0]), int(b64[last])
        ready()
        while True:
            s, t = get()
            if s == STOP:
                k64[0] = s
                write(ack)
                return expected - 1
            if s != expected or t != s:
                _check_req(s, expected, t)
            k64[0] = s
            write(ack)
            expected += 1
    finally:
        ha.close()
        hb.close()


def pong_iceoryx2(ready: Callable[[], None], a: str, b: str, payload: int,
                  prefix: str, root: str, zero_copy: bool = False) -> int:
    """Copy: ``memmove`` the received sample out. Zero-copy: read the
    sequence words in the received sample, in place, then release it."""
    iox, node = _iox_node(prefix, root)
    sa = _iox_service(iox, node, a, create=False)
    sb = _iox_service(iox, node, b, create=False)
    sub = sa.subscriber_builder().create()
    pub = sb.publisher_builder().initial_max_slice_len(_ACK).create()
    try:
        buf = np.empty(payload, np.uint8)
        b64 = buf.view(np.uint64)
        last = payload // 8 - 1
        ack = np.zeros(_ACK, np.uint8)
        k64 = ack.view(np.uint64)
        loan, receive, mm = pub.loan_slice_uninit, sub.receive, ctypes.memmove
        bufp, ackp = buf.ctypes.data, ack.ctypes.data
        view = _iox_views(payload // 8)
        mono = time.monotonic
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
                    now = mono()
                    if not deadline:
                        deadline = now + WAIT_S
                    elif now > deadline:
                        raise BenchError("no request from the iceoryx2 requester")
            if zero_copy:
                v = view(r.payload_ptr)
                s, t = int(v[0]), int(v[last])
                r.delete()
            else:
                mm(bufp, r.payload_ptr, payload)
                r.delete()
                s, t = int(b64[0]), int(b64[last])
            if s != STOP and (s != expected or t != s):
                _check_req(s, expected, t)
            k64[0] = s
            out = loan(_ACK)
            mm(out.payload_ptr, ackp, _ACK)
            out.assume_init().send()
            if s == STOP:
                return expected - 1
            expected += 1
    finally:
        _iox_close(sub, pub)


def pong_mpshm(ready: Callable[[], None], a: str, b: str, payload: int,
               zero_copy: bool = False) -> int:
    """Copy: ``np.copyto`` the payload out. Zero-copy: read the sequence
    words in the segment, then re-read the published word (the seqlock
    check: a change means a write overlapped, so read again)."""
    seg_a = raw_shm(a)
    seg_b = raw_shm(b)
    ca, cb = seg_a.buf[:8].cast("Q"), seg_b.buf[:8].cast("Q")
    da = np.ndarray(payload, np.uint8, seg_a.buf, 64)
    db = np.ndarray(_ACK, np.uint8, seg_b.buf, 64)
    da64 = da.view(np.uint64)
    try:
        buf = np.empty(payload, np.uint8)
        b64 = buf.view(np.uint64)
        last = payload // 8 - 1
        ack = np.zeros(_ACK, np.uint8)
        k64 = ack.view(np.uint64)
        copyto = np.copyto
        mono = time.monotonic
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
                    now = mono()
                    if not deadline:
                        deadline = now + WAIT_S
                    elif now > deadline:
                        raise BenchError("no request from the raw requester")
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
                _check_req(s, expected, t)
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


def pong_pipe(ready: Callable[[], None], fds: list[int]) -> int:
    """The kernel wake-up reference: blocking 8-byte reads on an os.pipe()."""
    req_r, ack_w = fds
    try:
        read, write = os.read, os.write
        expected = 1
        ready()
        while True:
            msg = read(req_r, 8)
            if len(msg) != 8:
                raise BenchError(f"pipe request of {len(msg)} bytes (requester gone?)")
            s = int.from_bytes(msg, "little")
            if s != STOP and s != expected:
                _check_req(s, expected, s)
            write(ack_w, msg)
            if s == STOP:
                return expected - 1
            expected += 1
    finally:
        os.close(req_r)
        os.close(ack_w)


# Row variants of (b): every peer gets a copy row and a zero-copy row (the
# responder reads the request in place); 64 B also gets the wake-up rows.
_PP_COPY, _PP_ZC, _PP_NOSPIN, _PP_PIPE = "copy", "zero-copy", "spin_us=0", "os.pipe"


def _pp_rows(peers: Peers, payload: int) -> list[tuple[str, str]]:
    rows = [(impl, v) for impl in peers.wanted for v in (_PP_COPY, _PP_ZC)]
    if payload == _PINGPONG_PAYLOADS[0]:
        rows += [("shmstream", _PP_NOSPIN), ("pipe", _PP_PIPE)]
    return rows


_PP_VARIANT_TEXT = {
    ("shmstream", _PP_COPY): "copy: read_new(out=)",
    ("shmstream", _PP_ZC): "zero-copy: read_new_view()",
    ("shmstream", _PP_NOSPIN): "wake-up: copy, spin_us=0 both ends (futex)",
    ("pyshmem", _PP_COPY): "copy: wait_for_count + read(out=)",
    ("pyshmem", _PP_ZC): "zero-copy: locked() + read(safe=False)",
    ("iceoryx2", _PP_COPY): "copy: receive + memmove",
    ("iceoryx2", _PP_ZC): "zero-copy: receive, read in place",
    ("mpshm", _PP_COPY): "copy: np.copyto",
    ("mpshm", _PP_ZC): "zero-copy: read in place + seq re-check",
    ("pipe", _PP_PIPE): "wake-up: blocking read, 8 B each way",
}


def _section_pingpong(cfg: argparse.Namespace, peers: Peers, names: Names, res: Results,
                      workers: list[Worker]) -> None:
    stats: dict[tuple[str, str, int], dict[str, list[float]]] = {}
    for payload in _PINGPONG_PAYLOADS:
        rows = [(i, v) for i, v in _pp_rows(peers, payload) if i in peers.mod or i == "pipe"]
        for rep in range(cfg.repeats):
            for impl, variant in rows:
                try:
                    r = _pingpong_once(impl, variant, payload, cfg, peers, names, workers[0])
                except BenchError as exc:
                    res.error(f"(b) {impl} {variant} {fmt_bytes(payload)}: {exc}")
                    continue
                d = stats.setdefault((impl, variant, payload), {})
                for k, v in r.items():
                    d.setdefault(k, []).append(v)
                res.add(section="b", payload=payload, impl=impl, variant=variant, repeat=rep, **r)
                progress(f"(b) ping-pong {fmt_bytes(payload)} {impl} {variant} "
                         f"rep {rep + 1}/{cfg.repeats}: "
                         f"{fmt_hz(r['rt_per_s'], '/s')} p50 {fmt_us(r['p50_ns'])} us")

    def rate(impl: str, variant: str, payload: int) -> float:
        return median(stats.get((impl, variant, payload), {}).get("rt_per_s", []))

    def best(impl: str, payload: int) -> float:
        vals = [rate(impl, v, payload) for v in (_PP_COPY, _PP_ZC)]
        vals = [v for v in vals if v == v]
        return max(vals) if vals else float("nan")

    headers = ["payload", "implementation", "responder reads the request", "round trips/s",
               "p50 us", "p95 us", "p99 us", "p99/p50", "shmstream like-for-like",
               "shmstream best vs best"]
    table = []
    for payload in _PINGPONG_PAYLOADS:
        for impl, variant in _pp_rows(peers, payload):
            label = "os.pipe() (kernel)" if impl == "pipe" else peers.label(impl)
            head = [fmt_bytes(payload), label, _PP_VARIANT_TEXT[(impl, variant)]]
            if impl != "pipe" and impl not in peers.mod:
                table.append(head + [peers.na(impl)] + [""] * 6)
                continue
            got = stats.get((impl, variant, payload))
            if not got:
                table.append(head + ["error"] + [""] * 6)
                continue
            r_s = median(got["rt_per_s"])
            p50, p99 = median(got["p50_ns"]), median(got["p99_ns"])
            if impl == "pipe":
                like = fmt_ratio(rate("shmstream", _PP_NOSPIN, payload), r_s)
            elif impl == "shmstream":
                like = ""
            else:
                like = fmt_ratio(rate("shmstream", variant, payload), r_s)
            bvb = ("" if impl in ("shmstream", "pipe")
                   else fmt_ratio(best("shmstream", payload), best(impl, payload)))
            table.append(head + [
                fmt_hz(r_s, "/s"), fmt_us(p50), fmt_us(median(got["p95_ns"])), fmt_us(p99),
                f"{p99 / p50:.1f}" if p50 > 0 else "-", like, bvb,
            ])
    title = (f"(b) cross-process ping-pong: request of PAYLOAD on stream A, 64 B ack on "
             f"stream B; median of {cfg.repeats}; latency = one round trip; the requester "
             f"always copies its request in (write) and its ack out. "
             f"\"like-for-like\" = shmstream's round trips/s with the same kind of read "
             f"(copy vs copy, zero-copy vs zero-copy; on the os.pipe row: shmstream "
             f"spin_us=0 vs the pipe); \"best vs best\" = the faster of shmstream's "
             f"copy/zero-copy rows vs the faster of this peer's")
    _emit(res, render_table(headers, table, title, left=3))


def _pingpong_once(impl: str, variant: str, payload: int, cfg: argparse.Namespace,
                   peers: Peers, names: Names, worker: Worker) -> dict[str, float]:
    rt, kw, cleanup = _pp_requester(impl, variant, peers, names, payload)
    started = False
    try:
        task = {"shmstream": "pong_stream", "pyshmem": "pong_stream",
                "iceoryx2": "pong_iceoryx2", "mpshm": "pong_mpshm",
                "pipe": "pong_pipe"}[impl]
        if impl != "pipe":
            kw["payload"] = payload
        if variant == _PP_ZC:
            kw["zero_copy"] = True
        if variant == _PP_NOSPIN:
            kw["spin_us"] = 0
        fds = kw.pop("fds", [])
        try:
            worker.start(task, fds=fds, **kw)
            started = True
        finally:
            for fd in fds:  # the responder has its own copies now
                os.close(fd)
        worker.expect("ready")
        if hasattr(rt, "connect"):
            rt.connect()
        # warm up, then size the run to about cfg.seconds
        warm_n = 50 if cfg.quick else 200
        lat = array("q", bytes(8 * warm_n))
        t0 = time.perf_counter()
        seq = rt(0, warm_n, lat)
        per = (time.perf_counter() - t0) / warm_n
        n = max(20, min(2_000_000, int(cfg.seconds / per)))
        lat = array("q", bytes(8 * n))
        t0 = time.perf_counter_ns()
        seq = rt(seq, n, lat)
        dt = (time.perf_counter_ns() - t0) / 1e9
        rt(STOP - 1, 1, array("q", bytes(8)))
        handled = worker.expect("done")
        started = False
        if handled != seq:
            raise BenchError(f"responder handled {handled} requests, requester sent {seq}")
        ns = np.frombuffer(lat, dtype=np.int64)
        p50, p95, p99 = np.percentile(ns, [50, 95, 99])
        return {"rt_per_s": n / dt, "p50_ns": float(p50), "p95_ns": float(p95),
                "p99_ns": float(p99), "round_trips": n, "seconds": dt}
    finally:
        if started:
            # the worker may still wait for a request; a failed run costs it
            # WAIT_S at most (a pipe responder gets EOF once our ends are
            # closed), then it reports an error we drain here
            if impl == "pipe":
                cleanup()
                cleanup = lambda: None  # noqa: E731
            try:
                worker.expect("done", timeout=WAIT_S + 5)
            except BenchError:
                pass
        cleanup()


# ======================================================= (c) fan-out


def _reader_loop(get: Callable[[], bool], b64: np.ndarray, tmp: np.ndarray,
                 fin: memoryview) -> dict[str, Any]:
    """Shared reader body. ``get()`` fills b64 with a frame newer than the
    last one and returns True, or returns False after ~50 ms without one.
    ``fin[0]`` is STOP while the writer runs, then the last seq written (or
    ABORT). Frames: every 8-byte word holds the frame's seq."""
    mono = time.monotonic
    frames = missed = torn = 0
    last = -1
    first_t = 0.0
    deadline = mono() + WAIT_S
    not_equal = np.not_equal
    while True:
        if not get():
            f = fin[0]
            if f == ABORT:
                raise BenchError("writer aborted")
            if f != STOP:
                break  # writer done and nothing newer arrived
            if mono() > deadline:
                raise BenchError(f"reader saw no new frame for {WAIT_S:.0f} s")
            continue
        s = int(b64[0])
        not_equal(b64, s, out=tmp)
        if tmp.any():
            torn += 1
            continue
        if last >= 0:
            if s <= last:
                raise BenchError(f"frame seq went from {last} to {s}")
            missed += s - last - 1
        else:
            first_t = time.perf_counter()
        last = s
        frames += 1
        if s == fin[0]:
            break
        deadline = mono() + WAIT_S
    seconds = time.perf_counter() - first_t if frames else 0.0
    return {"frames": frames, "missed": missed, "torn": torn, "seconds": seconds}


def fan_stream(ready: Callable[[], None], name: str, ctl: str, payload: int, lib: str) -> dict:
    pkg = importlib.import_module(lib)
    h = pkg.open(name)
    seg = raw_shm(ctl)
    fin = seg.buf[:8].cast("Q")
    try:
        buf = np.empty(payload, np.uint8)
        b64 = buf.view(np.uint64)
        tmp = np.empty(b64.shape, bool)
        read_new = h.read_new
        base = [None]

        def get() -> bool:
            try:
                read_new(timeout=0.05, out=buf)
            except TimeoutError:
                return False
            if base[0] is None:
                base[0] = h.total_missed_writes
            return True

        ready()
        out = _reader_loop(get, b64, tmp, fin)
        out["lib_missed"] = h.total_missed_writes - (base[0] or 0)
        return out
    finally:
        fin.release()
        seg.close()
        h.close()


def fan_iceoryx2(ready: Callable[[], None], name: str, ctl: str, payload: int,
                 prefix: str, root: str) -> dict:
    iox, node = _iox_node(prefix, root)
    svc = _iox_service(iox, node, name, create=False, subscribers=2)
    sub = svc.subscriber_builder().create()
    seg = raw_shm(ctl)
    fin = seg.buf[:8].cast("Q")
    try:
        buf = np.empty(payload, np.uint8)
        b64 = buf.view(np.uint64)
        tmp = np.empty(b64.shape, bool)
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

        ready()
        out = _reader_loop(get, b64, tmp, fin)
        out["lib_missed"] = None
        return out
    finally:
        fin.release()
        seg.close()
        _iox_close(sub)


def fan_mpshm(ready: Callable[[], None], name: str, ctl: str, payload: int) -> dict:
    seg = raw_shm(name)
    cseg = raw_shm(ctl)
    fin = cseg.buf[:8].cast("Q")
    ctrl = seg.buf[:8].cast("Q")
    data = np.ndarray(payload, np.uint8, seg.buf, 64)
    try:
        buf = np.empty(payload, np.uint8)
        b64 = buf.view(np.uint64)
        tmp = np.empty(b64.shape, bool)
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

        ready()
        out = _reader_loop(get, b64, tmp, fin)
        out["lib_missed"] = None
        return out
    finally:
        data = None  # type: ignore[assignment]
        ctrl.release()
        fin.release()
        seg.close()
        cseg.close()


_FAN_DEFAULT, _FAN_SLOTS1 = "slots=2 (default)", "slots=1"


def _fan_rows(peers: Peers) -> list[tuple[str, str]]:
    return [(impl, v) for impl in peers.wanted
            for v in ((_FAN_DEFAULT, _FAN_SLOTS1) if impl == "shmstream" else ("",))]


def _fanout_once(impl: str, variant: str, cfg: argparse.Namespace, peers: Peers,
                 names: Names, workers: list[Worker]) -> dict[str, Any]:
    payload = _FANOUT_PAYLOAD
    words = payload // 8
    ctl = names.raw_name("fin")
    cseg = raw_shm(ctl, 64, create=True)
    fin = cseg.buf[:8].cast("Q")
    fin[0] = STOP
    frame = np.zeros(payload, np.uint8)
    f64 = frame.view(np.uint64)
    pc = time.perf_counter
    started = 0
    seq = 0
    cleanup: Callable[[], None] = lambda: None
    kw: dict[str, Any]
    try:
        if impl in ("shmstream", "pyshmem"):
            pkg = peers.mod[impl]
            name = names.stream(pkg, "fan")
            extra = {"slots": 1} if variant == _FAN_SLOTS1 else {}
            h = pkg.create(name, shape=(payload,), dtype=np.uint8, **extra)
            write = h.write
            task, kw = "fan_stream", {"lib": peers.self_module if impl == "shmstream" else "pyshmem"}

            def publish(seq: int) -> None:
                f64.fill(seq)
                write(frame)

            def cleanup() -> None:
                call_quietly(h.close)
                call_quietly(pkg.unlink, name)
        elif impl == "iceoryx2":
            iox, node = _iox_node(names.iox_prefix, names.iox_root)
            name = names.new("fan")
            svc = _iox_service(iox, node, name, create=True, subscribers=2)
            pub = svc.publisher_builder().initial_max_slice_len(payload).create()
            loan = pub.loan_slice_uninit
            view = _iox_views(words)
            task, kw = "fan_iceoryx2", {"prefix": names.iox_prefix, "root": names.iox_root}

            def publish(seq: int) -> None:
                s = loan(payload)  # zero-copy: the frame is made in the loan
                view(s.payload_ptr).fill(seq)
                s.assume_init().send()

            def cleanup() -> None:
                nonlocal svc, node
                _iox_close(pub)
                svc = node = None
        else:
            name = names.raw_name("fan")
            seg = raw_shm(name, 64 + payload, create=True)
            ctrl = seg.buf[:8].cast("Q")
            ctrl[0] = 0
            data = np.ndarray(payload, np.uint8, seg.buf, 64)
            data64 = data.view(np.uint64)
            task, kw = "fan_mpshm", {}

            def publish(seq: int) -> None:
                ctrl[0] = 2 * seq - 1
                data64.fill(seq)  # written in place, like a loan
                ctrl[0] = 2 * seq

            def cleanup() -> None:
                nonlocal data, data64
                data = data64 = None  # type: ignore[assignment]
                ctrl.release()
                seg.close()
                call_quietly(raw_unlink, name)

        for w in workers[:2]:
            w.start(task, name=name, ctl=ctl, payload=payload, **kw)
            started += 1
        for w in workers[:2]:
            w.expect("ready")
        if impl == "iceoryx2":
            pub.update_connections()
        seconds = max(cfg.seconds * 2, 0.1)
        t0 = pc()
        end = t0 + seconds
        while True:
            for _ in range(32):
                seq += 1
                publish(seq)
            if pc() >= end:
                break
        dt = pc() - t0
        fin[0] = seq
        readers = [w.expect("done", timeout=WAIT_S + 5) for w in workers[:2]]
        started = 0
        out: dict[str, Any] = {"written_per_s": seq / dt, "written": seq, "seconds": dt}
        for i, r in enumerate(readers):
            # delivered per second of the writer's run (a reader that got two
            # frames in 3 us must not count as 600k frames/s)
            out[f"r{i}_per_s"] = r["frames"] / dt
            out[f"r{i}_seconds"] = r["seconds"]
            out[f"r{i}_frames"] = r["frames"]
            out[f"r{i}_missed"] = r["missed"]
            out[f"r{i}_lib_missed"] = r["lib_missed"]
            out[f"r{i}_torn"] = r["torn"]
        return out
    finally:
        if started:
            fin[0] = ABORT  # readers stop within ~50 ms and report an error
            for w in workers[:started]:
                try:
                    w.expect("done", timeout=WAIT_S + 5)
                except BenchError:
                    pass
        fin.release()
        cseg.close()
        call_quietly(raw_unlink, ctl)
        cleanup()


def _section_fanout(cfg: argparse.Namespace, peers: Peers, names: Names, res: Results,
                    workers: list[Worker]) -> None:
    stats: dict[tuple[str, str], dict[str, list[Any]]] = {}
    rows_run = [(i, v) for i, v in _fan_rows(peers) if i in peers.mod]
    for rep in range(cfg.repeats):
        for impl, variant in rows_run:
            what = f"{impl} {variant}".strip()
            try:
                r = _fanout_once(impl, variant, cfg, peers, names, workers)
            except BenchError as exc:
                res.error(f"(c) {what}: {exc}")
                continue
            res.add(section="c", payload=_FANOUT_PAYLOAD, impl=impl, variant=variant,
                    repeat=rep, **r)
            for i in (0, 1):
                if impl == "shmstream" and r[f"r{i}_missed"] != r[f"r{i}_lib_missed"]:
                    res.error(f"(c) {what} reader {i}: missed from sequence numbers "
                              f"{r[f'r{i}_missed']} != total_missed_writes {r[f'r{i}_lib_missed']}")
                if impl == "shmstream" and r[f"r{i}_torn"]:
                    res.error(f"(c) {what} reader {i}: {r[f'r{i}_torn']} torn frames")
            d = stats.setdefault((impl, variant), {})
            for k, v in r.items():
                d.setdefault(k, []).append(v)
            progress(f"(c) fan-out {what} rep {rep + 1}/{cfg.repeats}: written "
                     f"{fmt_hz(r['written_per_s'], '/s')}, readers {fmt_hz(r['r0_per_s'], '/s')} "
                     f"{fmt_hz(r['r1_per_s'], '/s')}, missed {r['r0_missed']}/{r['r1_missed']}, "
                     f"torn {r['r0_torn'] + r['r1_torn']}")

    def per_reader(key: tuple[str, str]) -> float:
        d = stats.get(key)
        if not d:
            return float("nan")
        return median([(a + b) / 2 for a, b in zip(d["r0_per_s"], d["r1_per_s"])])

    def slower_reader(key: tuple[str, str]) -> float:
        d = stats.get(key)
        if not d:
            return float("nan")
        return median([min(a, b) for a, b in zip(d["r0_per_s"], d["r1_per_s"])])

    headers = ["implementation", "written/s", "reader 1 frames/s", "reader 2 frames/s",
               "missed % (r1/r2)", "missed = library counter", "torn (all runs)",
               "shmstream vs this (mean reader)", "shmstream vs this (slower reader)"]
    rows = []
    ours_key = ("shmstream", _FAN_DEFAULT)
    for impl, variant in _fan_rows(peers):
        label = f"{peers.label(impl)} {variant}".strip()
        if impl not in peers.mod:
            rows.append([label, peers.na(impl)] + [""] * 7)
            continue
        d = stats.get((impl, variant))  # type: ignore[assignment]
        if not d:
            rows.append([label, "error"] + [""] * 7)
            continue

        def pct(i: int) -> float:
            return median([m / (m + f) * 100 if m + f else 0.0
                           for m, f in zip(d[f"r{i}_missed"], d[f"r{i}_frames"])])

        if impl in ("shmstream", "pyshmem"):
            agree = all(d[f"r{i}_missed"][k] == d[f"r{i}_lib_missed"][k]
                        for i in (0, 1) for k in range(len(d["r0_missed"])))
            agree_s = "yes" if agree else "NO"
        else:
            agree_s = "n/a"
        mine = (impl, variant) == ours_key
        rows.append([
            label, fmt_hz(median(d["written_per_s"]), "/s"),
            fmt_hz(median(d["r0_per_s"]), "/s"), fmt_hz(median(d["r1_per_s"]), "/s"),
            f"{pct(0):.1f} / {pct(1):.1f}", agree_s,
            str(sum(d["r0_torn"]) + sum(d["r1_torn"])),
            "" if mine else fmt_ratio(per_reader(ours_key), per_reader((impl, variant))),
            "" if mine else fmt_ratio(slower_reader(ours_key), slower_reader((impl, variant))),
        ])
    title = (f"(c) fan-out: one writer, two reader processes, {fmt_bytes(_FANOUT_PAYLOAD)} "
             f"frames, writer as fast as it can; median of {cfg.repeats}; ratios = frames/s "
             f"delivered per reader by shmstream {_FAN_DEFAULT} vs this row (mean of the two "
             f"readers; the slower reader of each run)")
    _emit(res, render_table(headers, rows, title))


# ================================================================ main


def _emit(res: Results, table: str) -> None:
    res.tables.append(table)
    print(table)
    print(flush=True)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="shmstream bench stream",
        description=(
            "Stream benchmark: shmstream vs pyshmem vs iceoryx2 vs raw "
            "multiprocessing.shared_memory, interleaved, median of repeats."
        ),
    )
    p.add_argument("--quick", action="store_true",
                   help="short runs (one repeat, ~0.03 s per measurement); checks, not numbers")
    p.add_argument("--repeats", type=int, default=None, metavar="N",
                   help="measurements per row, median reported (default 5; 1 with --quick)")
    p.add_argument("--seconds", type=float, default=None, metavar="S",
                   help="time per measurement (default 0.4; 0.03 with --quick)")
    p.add_argument("--json", metavar="PATH", help="write raw results and tables as JSON")
    p.add_argument("--huge", action="store_true",
                   help="add a 10000x10000 float32 (400 MB) round-trip column")
    p.add_argument("--sections", default="abc", metavar="abc",
                   help="which sections to run: any of a, b, c (default abc)")
    p.add_argument("--peers", default=",".join(IMPLS), metavar="LIST",
                   help=f"implementations to run (default {','.join(IMPLS)})")
    p.add_argument("--self-module", default="shmstream", help=argparse.SUPPRESS)
    return p


def main(argv: list[str] | None = None) -> int:
    cfg = _parser().parse_args(argv)
    if cfg.repeats is None:
        cfg.repeats = 1 if cfg.quick else 5
    if cfg.seconds is None:
        cfg.seconds = 0.03 if cfg.quick else 0.4
    if cfg.repeats < 1 or cfg.seconds <= 0:
        print("shmstream bench stream: error: --repeats and --seconds must be positive",
              file=sys.stderr)
        return 2
    wanted = [p.strip() for p in cfg.peers.split(",") if p.strip()]
    bad = [p for p in wanted if p not in IMPLS]
    if bad or "shmstream" not in wanted:
        print(f"shmstream bench stream: error: --peers takes a list of {', '.join(IMPLS)} "
              "including shmstream", file=sys.stderr)
        return 2
    sections = set(cfg.sections)
    if not sections <= set("abc") or not sections:
        print("shmstream bench stream: error: --sections takes letters from 'abc'",
              file=sys.stderr)
        return 2

    res = Results("stream", argv or [])
    peers = Peers(cfg.self_module, wanted)
    res.meta["peers_missing"] = peers.missing
    res.meta["repeats"] = cfg.repeats
    res.meta["seconds_per_measurement"] = cfg.seconds
    for impl, why in peers.missing.items():
        progress(f"{impl} not available: {why}")
    print(f"# shmstream bench stream  ({res.meta['date_utc']}, python {res.meta['python']}, "
          f"{res.meta['cpu_count']} CPUs, repeats {cfg.repeats}, {cfg.seconds:g} s each)")
    print()
    names = Names()
    workers: list[Worker] = []
    try:
        if "a" in sections:
            _section_roundtrip(cfg, peers, names, res)
        if sections & set("bc"):
            workers = [Worker(__name__) for _ in range(2 if "c" in sections else 1)]
            # the workers import numpy and the peers once, here, before timing
            for w in workers:
                w.start("warm_imports", impls=peers.available, self_module=cfg.self_module)
            for w in workers:
                w.expect("done", timeout=120)
        if "b" in sections:
            _section_pingpong(cfg, peers, names, res, workers)
        if "c" in sections:
            _section_fanout(cfg, peers, names, res, workers)
    finally:
        for w in workers:
            call_quietly(w.close)
        names.cleanup()
        if cfg.json:
            res.dump(cfg.json)
            progress(f"raw results written to {cfg.json}")
    if res.errors:
        print(f"{len(res.errors)} error(s):", file=sys.stderr)
        for e in res.errors:
            print(f"  {e}", file=sys.stderr)
        return 1
    return 0


def warm_imports(ready: Callable[[], None], impls: list[str], self_module: str) -> None:
    for impl in impls:
        if impl == "shmstream":
            importlib.import_module(self_module)
        elif impl in ("pyshmem", "iceoryx2"):
            importlib.import_module(impl)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
