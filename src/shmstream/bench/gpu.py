"""GPU stream benchmark: ``shmstream bench gpu`` (or ``python -m
shmstream.bench.gpu``), shmstream and pyshmem 1.4.0 GPU streams in the same run.

Sections (each row: shmstream, pyshmem, ratio):

a. round trip: ``write(device tensor)`` then ``read()`` in one process, float32
   100x100, 1000x1000, 10000x10000, performance mode (no CPU mirror) and
   compatibility mode (``cpu_mirror=True``). Hz and payload GB/s (payload
   bytes x round trips per second; each round trip moves the payload twice).
b. matrix-vector pipeline: a float32 N x N matrix kept in a stream; each step
   publishes a vector to a second stream (uploaded from a NumPy array, or
   already resident on the device), reads both back as snapshots and computes
   ``y = M @ v`` with torch. Hz and GFLOP/s (2 N^2 per step).
c. cross-process ping-pong: 64 KiB float32 payloads echoed by a spawned
   process through two GPU streams; round trips/s, p50 and p99 latency.

Needs a CUDA device and torch (the tensors and the matmul); pyshmem is
optional (its column says n/a without it). STATUS: written on a machine
without a GPU; never run. docs/gpu.md says how to run it.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import sys
import time
import uuid
from typing import Any, Callable

import numpy as np

SIZES = (100, 1000, 10000)
PING_BYTES = 64 * 1024


def _lib(impl: str) -> Any:
    if impl == "shmstream":
        import shmstream

        return shmstream
    import pyshmem

    return pyshmem


def _rate(fn: Callable[[], Any], seconds: float, sync: Callable[[], None]) -> float:
    """Calls per second of fn over about `seconds` (after a warm-up)."""
    for _ in range(3):
        fn()
    sync()
    n, t0 = 0, time.perf_counter()
    deadline = t0 + seconds
    while True:
        fn()
        n += 1
        if n % 8 == 0 and time.perf_counter() >= deadline:
            break
    sync()
    return n / (time.perf_counter() - t0)


def _roundtrip(impl: str, size: int, mirror: bool, seconds: float, torch: Any) -> float:
    lib = _lib(impl)
    name = f"bench-gpu-{uuid.uuid4().hex[:10]}"
    h = lib.create(name, shape=(size, size), dtype=np.float32, gpu_device="cuda:0",
                   cpu_mirror=mirror)
    try:
        src = torch.rand(size, size, device="cuda:0")

        def step() -> None:
            h.write(src)
            h.read()

        return _rate(step, seconds, torch.cuda.synchronize)
    finally:
        h.close()
        lib.unlink(name)


def _matvec(impl: str, n: int, resident: bool, seconds: float, torch: Any) -> float:
    lib = _lib(impl)
    tag = uuid.uuid4().hex[:10]
    m = lib.create(f"bench-gpu-m-{tag}", shape=(n, n), dtype=np.float32, gpu_device="cuda:0")
    v = lib.create(f"bench-gpu-v-{tag}", shape=(n,), dtype=np.float32, gpu_device="cuda:0")
    try:
        m.write(torch.rand(n, n, device="cuda:0"))
        vec = torch.rand(n, device="cuda:0") if resident else np.random.rand(n).astype(np.float32)

        def step() -> None:
            v.write(vec)
            y = m.read() @ v.read()
            del y

        return _rate(step, seconds, torch.cuda.synchronize)
    finally:
        for h, nm in ((m, f"bench-gpu-m-{tag}"), (v, f"bench-gpu-v-{tag}")):
            h.close()
            lib.unlink(nm)


def _echo(impl: str, ping: str, pong: str, rounds: int, ready: Any) -> None:
    lib = _lib(impl)
    a = lib.open(ping, gpu_device="cuda:0")
    b = lib.open(pong, gpu_device="cuda:0")
    ready.set()
    seen = a.count
    for _ in range(rounds):
        x = a.read_after(seen, timeout=30)
        seen = a.last_read_count
        b.write(x)
    a.close()
    b.close()


def _pingpong(impl: str, rounds: int, torch: Any) -> tuple[float, float, float]:
    lib = _lib(impl)
    tag = uuid.uuid4().hex[:10]
    ping, pong = f"bench-gpu-ping-{tag}", f"bench-gpu-pong-{tag}"
    shape = (PING_BYTES // 4,)
    a = lib.create(ping, shape=shape, dtype=np.float32, gpu_device="cuda:0")
    b = lib.create(pong, shape=shape, dtype=np.float32, gpu_device="cuda:0")
    ctx = mp.get_context("spawn")
    ready = ctx.Event()
    p = ctx.Process(target=_echo, args=(impl, ping, pong, rounds, ready))
    p.start()
    try:
        if not ready.wait(120):
            raise RuntimeError(f"{impl} echo process did not start")
        src = torch.rand(shape, device="cuda:0")
        lat = []
        seen = b.count
        t0 = time.perf_counter()
        for _ in range(rounds):
            t = time.perf_counter()
            a.write(src)
            b.read_after(seen, timeout=30)
            seen = b.last_read_count
            lat.append(time.perf_counter() - t)
        total = time.perf_counter() - t0
        p.join(60)
        lat_us = np.array(lat) * 1e6
        return rounds / total, float(np.percentile(lat_us, 50)), float(np.percentile(lat_us, 99))
    finally:
        if p.is_alive():
            p.kill()
        for h, nm in ((a, ping), (b, pong)):
            h.close()
            lib.unlink(nm)


def _ratio(ours: float, theirs: float | None) -> str:
    return "-" if not theirs else f"x{ours / theirs:.2f}"


def _fmt(x: float | None, unit: str = "") -> str:
    return "n/a" if x is None else f"{x:,.1f}{unit}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="shmstream bench gpu", description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=2.0, help="time per measurement (default 2)")
    p.add_argument("--quick", action="store_true", help="0.3 s per measurement, skip 10000x10000")
    p.add_argument("--matvec-n", type=int, default=4096, help="matrix size N (default 4096)")
    p.add_argument("--rounds", type=int, default=2000, help="ping-pong round trips (default 2000)")
    p.add_argument("--no-pyshmem", action="store_true", help="leave the pyshmem column out")
    p.add_argument("--json", metavar="PATH", help="write the raw results as JSON")
    args = p.parse_args(argv)

    import shmstream

    if not shmstream.gpu_available():
        from shmstream.gpu import device as _gpu

        print(f"shmstream bench gpu: no CUDA device: {_gpu.unavailable_reason()}", file=sys.stderr)
        return 1
    try:
        import torch
    except ImportError:
        print("shmstream bench gpu: needs torch (pip install torch==2.13.0)", file=sys.stderr)
        return 1
    impls = ["shmstream"]
    if not args.no_pyshmem:
        try:
            import pyshmem

            if pyshmem.gpu_available():
                impls.append("pyshmem")
        except ImportError:
            pass
    seconds = 0.3 if args.quick else args.seconds
    sizes = SIZES[:2] if args.quick else SIZES
    results: dict[str, Any] = {
        "device": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "impls": impls,
        "roundtrip": [],
        "matvec": [],
        "pingpong": [],
    }

    print(f"GPU: {results['device']}  torch {torch.__version__}  peers: {', '.join(impls)}")
    print("\na. round trip write+read, float32 (Hz; payload GB/s)")
    print(f"{'shape':>12} {'mode':>12} {'shmstream':>22} {'pyshmem':>22} {'ratio':>7}")
    for size in sizes:
        nbytes = size * size * 4
        for mirror in (False, True):
            hz = {i: _roundtrip(i, size, mirror, seconds, torch) for i in impls}
            row = {"size": size, "cpu_mirror": mirror, "hz": hz, "bytes": nbytes}
            results["roundtrip"].append(row)
            cells = [
                f"{_fmt(hz.get(i))} Hz {(hz[i] * nbytes / 1e9 if i in hz else 0):6.2f} GB/s"
                if i in hz else "n/a" for i in ("shmstream", "pyshmem")
            ]
            mode = "cpu_mirror" if mirror else "performance"
            print(f"{size}x{size:<7} {mode:>12} {cells[0]:>22} {cells[1]:>22} "
                  f"{_ratio(hz['shmstream'], hz.get('pyshmem')):>7}")

    n = args.matvec_n
    flops = 2.0 * n * n
    print(f"\nb. matrix-vector pipeline, N={n} (Hz; GFLOP/s)")
    for resident in (False, True):
        hz = {i: _matvec(i, n, resident, seconds, torch) for i in impls}
        results["matvec"].append({"n": n, "device_vector": resident, "hz": hz})
        label = "device vector" if resident else "host upload"
        cells = [f"{hz[i]:,.1f} Hz {hz[i] * flops / 1e9:7.2f} GFLOP/s" if i in hz else "n/a"
                 for i in ("shmstream", "pyshmem")]
        print(f"{label:>14} {cells[0]:>30} {cells[1]:>30} "
              f"{_ratio(hz['shmstream'], hz.get('pyshmem')):>7}")

    rounds = 200 if args.quick else args.rounds
    print(f"\nc. cross-process ping-pong, {PING_BYTES // 1024} KiB, {rounds} round trips")
    for impl in impls:
        rate, p50, p99 = _pingpong(impl, rounds, torch)
        results["pingpong"].append({"impl": impl, "rate": rate, "p50_us": p50, "p99_us": p99})
        print(f"{impl:>10}: {rate:,.0f} round trips/s  p50 {p50:.1f} us  p99 {p99:.1f} us")

    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
