"""GPU stream benchmark: ``python -m benchmarks gpu`` (from a
checkout), shmstream and pyshmem 1.4.0 GPU streams in the same run.

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
d. bandwidth reference: a device-to-device copy of the 10000x10000 float32
   payload (torch ``copy_``) beside each library's 10000x10000 round trip
   counted per copy (a round trip is two payload copies), in payload GB/s.

Needs a CUDA device and torch (the tensors and the matmul); pyshmem is
optional (its column says n/a without it). tools/gpu_check.sh runs it on a
GPU machine with the device tests (docs/gpu.md).

Method: each rate is taken over about ``--seconds`` after a calibration
that also warms up (``_common.loop_rate``), with the device synchronised at
the end of every timed loop; ping-pong latencies come after 100 untimed
round trips (``_common.ping_latencies``).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import sys
import uuid
from collections.abc import Callable
from typing import Any

import numpy as np

from ._common import (
    JSON_HELP,
    Results,
    emit,
    fmt_hz,
    fmt_ratio,
    fmt_us,
    latency_summary,
    loop_rate,
    ping_latencies,
    render_table,
)

SIZES = (100, 1000, 10000)
PING_BYTES = 64 * 1024
PING_WARM = 100  # untimed round trips before the timed ones
IMPLS = ("shmstream", "pyshmem")


def _lib(impl: str) -> Any:
    if impl == "shmstream":
        import shmstream

        return shmstream
    import pyshmem

    return pyshmem


def _synced(step: Callable[[], Any], sync: Callable[[], None]) -> Callable[[int], None]:
    """``loop(n)``: n steps, then wait for the device, so a timed loop
    counts the work it queued."""

    def loop(n: int) -> None:
        for _ in range(n):
            step()
        sync()

    return loop


def _roundtrip(impl: str, size: int, mirror: bool, seconds: float, torch: Any) -> float:
    lib = _lib(impl)
    name = f"bench-gpu-{uuid.uuid4().hex[:10]}"
    h = lib.create(
        name, shape=(size, size), dtype=np.float32, gpu_device="cuda:0", cpu_mirror=mirror
    )
    try:
        src = torch.rand(size, size, device="cuda:0")

        def step() -> None:
            h.write(src)
            h.read()

        return loop_rate(_synced(step, torch.cuda.synchronize), seconds)
    finally:
        h.close()
        lib.unlink(name)


def _d2d(size: int, seconds: float, torch: Any) -> float:
    """Copies per second of one size x size float32 buffer into another on
    the device: the bandwidth a payload copy can reach."""
    src = torch.rand(size, size, device="cuda:0")
    dst = torch.empty_like(src)
    return loop_rate(_synced(lambda: dst.copy_(src), torch.cuda.synchronize), seconds)


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

        return loop_rate(_synced(step, torch.cuda.synchronize), seconds)
    finally:
        for h, nm in ((m, f"bench-gpu-m-{tag}"), (v, f"bench-gpu-v-{tag}")):
            h.close()
            lib.unlink(nm)


def _echo(impl: str, ping: str, pong: str, rounds: int, ready: Any) -> None:
    lib = _lib(impl)
    a = lib.open(ping, gpu_device="cuda:0")
    b = lib.open(pong, gpu_device="cuda:0")
    seen = a.count  # before ready: the first request may come right after it
    ready.set()
    for _ in range(rounds):
        x = a.read_after(seen, timeout=30)
        seen = a.last_read_count
        b.write(x)
    a.close()
    b.close()


def _pingpong(impl: str, rounds: int, torch: Any) -> dict[str, float]:
    lib = _lib(impl)
    tag = uuid.uuid4().hex[:10]
    ping, pong = f"bench-gpu-ping-{tag}", f"bench-gpu-pong-{tag}"
    shape = (PING_BYTES // 4,)
    a = lib.create(ping, shape=shape, dtype=np.float32, gpu_device="cuda:0")
    b = lib.create(pong, shape=shape, dtype=np.float32, gpu_device="cuda:0")
    ctx = mp.get_context("spawn")
    ready = ctx.Event()
    p = ctx.Process(target=_echo, args=(impl, ping, pong, PING_WARM + rounds, ready))
    try:
        p.start()
        if not ready.wait(120):
            raise RuntimeError(f"{impl} echo process did not start")
        src = torch.rand(shape, device="cuda:0")
        seen = b.count

        def recv() -> Any:
            nonlocal seen
            got = b.read_after(seen, timeout=30)
            seen = b.last_read_count
            return got

        lat = ping_latencies(a.write, src, recv, rounds, warm=PING_WARM)
        p.join(60)
        return {"rate": rounds / (sum(lat) / 1e9), **latency_summary(lat)}
    finally:
        if p.is_alive():
            p.kill()
        for h, nm in ((a, ping), (b, pong)):
            h.close()
            lib.unlink(nm)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks gpu", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--seconds", type=float, default=2.0, help="time per measurement (default 2)")
    p.add_argument("--quick", action="store_true", help="0.3 s per measurement, skip 10000x10000")
    p.add_argument("--matvec-n", type=int, default=4096, help="matrix size N (default 4096)")
    p.add_argument("--rounds", type=int, default=2000, help="ping-pong round trips (default 2000)")
    p.add_argument("--no-pyshmem", action="store_true", help="leave the pyshmem column out")
    p.add_argument("--json", metavar="PATH", help=JSON_HELP)
    args = p.parse_args(argv)

    import shmstream

    if not shmstream.gpu_available():
        from shmstream.gpu import device as _gpu

        print(
            f"python -m benchmarks gpu: no CUDA device: {_gpu.unavailable_reason()}",
            file=sys.stderr,
        )
        return 1
    try:
        import torch
    except ImportError:
        print("python -m benchmarks gpu: needs torch (pip install torch==2.13.0)", file=sys.stderr)
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
    res = Results("gpu", argv or [])
    res.meta["versions"]["torch"] = torch.__version__
    results: dict[str, Any] = {
        "device": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "impls": impls,
        "roundtrip": [],
        "matvec": [],
        "pingpong": [],
    }
    res.meta["device"] = results["device"]

    def cells(hz: dict[str, float], per_call: float, unit: str) -> list[str]:
        """A shmstream and a pyshmem cell (rate, and rate x per_call in
        ``unit``), and the ratio."""
        out = [
            f"{fmt_hz(hz[i])}, {hz[i] * per_call:.2f} {unit}" if i in hz else "n/a" for i in IMPLS
        ]
        return [*out, fmt_ratio(hz["shmstream"], hz.get("pyshmem"))]

    print(f"GPU: {results['device']}  torch {torch.__version__}  peers: {', '.join(impls)}")
    print()
    rows = []
    for size in sizes:
        nbytes = size * size * 4
        for mirror in (False, True):
            hz = {i: _roundtrip(i, size, mirror, seconds, torch) for i in impls}
            results["roundtrip"].append(
                {"size": size, "cpu_mirror": mirror, "hz": hz, "bytes": nbytes}
            )
            for i, v in hz.items():
                res.add(section="a", impl=i, size=size, cpu_mirror=mirror, hz=v, bytes=nbytes)
            mode = "cpu_mirror" if mirror else "performance"
            rows.append([f"{size}x{size}", mode, *cells(hz, nbytes / 1e9, "GB/s")])
    emit(
        res,
        render_table(
            ["shape", "mode", *IMPLS, "ratio"],
            rows,
            "a. round trip write+read, float32 (Hz; payload GB/s)",
            left=2,
        ),
    )

    if SIZES[-1] in sizes:
        size = SIZES[-1]
        nbytes = size * size * 4
        ref = _d2d(size, seconds, torch) * nbytes / 1e9
        results["d2d_gbs"] = ref
        res.add(section="d", impl="torch copy_", size=size, gbs=ref)
        rows = [["device-to-device copy (torch)", f"{ref:.1f}", "100%"]]
        for entry in results["roundtrip"]:
            if entry["size"] != size or entry["cpu_mirror"]:
                continue
            for i, hz in entry["hz"].items():
                per_copy = 2 * hz * nbytes / 1e9
                res.add(section="d", impl=i, size=size, gbs=per_copy)
                rows.append(
                    [f"{i} round trip, per copy", f"{per_copy:.1f}", f"{per_copy / ref:.0%}"]
                )
        emit(
            res,
            render_table(
                ["copy", "GB/s", "of d2d"],
                rows,
                f"d. bandwidth reference, {size}x{size} float32 (payload GB/s per copy)",
            ),
        )

    n = args.matvec_n
    rows = []
    for resident in (False, True):
        hz = {i: _matvec(i, n, resident, seconds, torch) for i in impls}
        results["matvec"].append({"n": n, "device_vector": resident, "hz": hz})
        for i, v in hz.items():
            res.add(section="b", impl=i, n=n, device_vector=resident, hz=v)
        label = "device vector" if resident else "host upload"
        rows.append([label, *cells(hz, 2.0 * n * n / 1e9, "GFLOP/s")])
    emit(
        res,
        render_table(
            ["vector", *IMPLS, "ratio"], rows, f"b. matrix-vector pipeline, N={n} (Hz; GFLOP/s)"
        ),
    )

    rounds = 200 if args.quick else args.rounds
    rows = []
    for impl in impls:
        r = _pingpong(impl, rounds, torch)
        results["pingpong"].append({"impl": impl, **r})
        res.add(section="c", impl=impl, bytes=PING_BYTES, round_trips=rounds, **r)
        rows.append(
            [impl, fmt_hz(r["rate"], "/s"), fmt_us(r["p50_us"] * 1e3), fmt_us(r["p99_us"] * 1e3)]
        )
    emit(
        res,
        render_table(
            ["implementation", "round trips/s", "p50 us", "p99 us"],
            rows,
            f"c. cross-process ping-pong, {PING_BYTES // 1024} KiB, {rounds} round trips",
        ),
    )

    # "device" ... "pingpong": what this file held before it had the
    # common sections
    res.save(args.json, quick=args.quick, **results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
