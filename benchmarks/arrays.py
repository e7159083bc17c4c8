"""Shared arrays in a process pool: the multiprocessing.shared_memory article's
experiment, shmstream.share() against passing the array to the pool.

    python -m benchmarks arrays [--rows N] [--workers N] [--repeats N]
                                     [--start-method M] [--json PATH]

A record array of ``--rows`` rows (datetime64[ns], float64 with a NaN every
10th row, 6-character unicode: 40 bytes a row, 400 MB at 10 M rows) is built
once. Each of ``--workers`` pool processes (default ``os.cpu_count()``) gets
one task: take the array, ``np.nansum`` its float column, and report its
private memory while it still holds the array (Private_Clean + Private_Dirty
from /proc/self/smaps_rollup; RSS would count the shared pages it touched).

Methods, measured in the same run, round-robin ``--repeats`` times, each time
in a freshly started pool (start-up and a warm-up task are not timed):

* ``shmstream``: ``share(arr)`` once (its copy time is reported apart), the
  task argument is the SharedArray (a ~300-byte descriptor; workers attach).
* ``pickled``: the task argument is the array itself (what people do today).
* ``stdlib shm``: ``multiprocessing.shared_memory`` by hand (name, shape,
  dtype as the argument; workers wrap ``shm.buf`` in an ndarray), the
  article's approach, without the resource tracker.

Timed: ``pool.map`` of the tasks, from submit to the last result. Every
worker's sum is checked against the parent's.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import time
from typing import Any

import numpy as np

from shmstream import share
from ._common import JSON_HELP, BenchError, Results, emit, fmt_ratio, median, progress, render_table
from .peers._rawshm import raw_shm, raw_unlink

METHODS = ("shmstream", "pickled", "stdlib shm")
DTYPE = np.dtype([("t", "M8[ns]"), ("x", "f8"), ("s", "U6")])


def private_bytes() -> int:
    """Private_Clean + Private_Dirty of this process, in bytes."""
    total = 0
    with open("/proc/self/smaps_rollup", encoding="ascii") as f:
        for line in f:
            if line.startswith(("Private_Clean:", "Private_Dirty:")):
                total += int(line.split()[1]) * 1024
    return total


def make_records(rows: int) -> np.recarray:
    r: Any = np.empty(rows, DTYPE).view(np.recarray)
    r.t = np.datetime64("2020-01-01T00:00:00", "ns") + np.arange(rows, dtype=np.int64) * 1_000_000
    x = np.linspace(0.0, 1.0, rows)
    x[::10] = np.nan
    r.x = x
    r.s = "abcdef"
    return r


# ---------------------------------------------------------- worker tasks


def task_array(arr: Any) -> tuple[float, int, int]:
    """shmstream and pickled: the argument is the array (shared or a copy)."""
    total = float(np.nansum(arr["x"]))
    return total, private_bytes(), os.getpid()


def task_stdlib(args: tuple[str, tuple, str]) -> tuple[float, int, int]:
    name, shape, descr = args
    shm = raw_shm(name)
    try:
        arr = np.ndarray(shape, np.dtype(eval(descr)), buffer=shm.buf)  # eval: our own text
        total = float(np.nansum(arr["x"]))
        held = private_bytes()
        del arr
    finally:
        shm.close()
    return total, held, os.getpid()


def task_warm(_: Any) -> int:
    np.nansum(np.zeros(4))
    return os.getpid()


# ---------------------------------------------------------------- runs


def run_once(
    method: str,
    arr: np.recarray,
    workers: int,
    ctx: Any,
    expect: float,
    results: Results,
    shared: Any,
    stdlib_arg: Any,
) -> dict[str, Any]:
    with ctx.Pool(workers) as pool:
        pool.map(task_warm, range(workers), chunksize=1)
        fn: Any
        if method == "shmstream":
            fn, args = task_array, [shared] * workers
        elif method == "pickled":
            fn, args = task_array, [arr] * workers
        else:
            fn, args = task_stdlib, [stdlib_arg] * workers
        t0 = time.perf_counter()
        out = pool.map(fn, args, chunksize=1)
        wall = time.perf_counter() - t0
    for total, _, _ in out:
        if not np.isclose(total, expect, rtol=1e-9):
            raise BenchError(f"{method}: a worker summed {total}, expected {expect}")
    rec = {
        "method": method,
        "wall_s": wall,
        "private_bytes": [p for _, p, _ in out],
        "pids": sorted({pid for _, _, pid in out}),
    }
    results.add(**rec)
    return rec


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks arrays", description=__doc__.split("\n")[0]
    )
    ap.add_argument("--rows", type=int, default=None, help="default 10,000,000 (--quick: 20,000)")
    ap.add_argument("--workers", type=int, default=None, help="default: the CPU count (--quick: 1)")
    ap.add_argument("--repeats", type=int, default=None, help="default 3 (--quick: 1)")
    ap.add_argument("--quick", action="store_true", help="a smoke run: small, one worker, once")
    ap.add_argument("--start-method", default="spawn", choices=mp.get_all_start_methods())
    ap.add_argument("--json", metavar="PATH", help=JSON_HELP)
    opts = ap.parse_args(argv)
    for name, full, quick in (
        ("rows", 10_000_000, 20_000),
        ("workers", os.cpu_count() or 2, 1),
        ("repeats", 3, 1),
    ):
        if getattr(opts, name) is None:
            setattr(opts, name, quick if opts.quick else full)
    results = Results("arrays", argv)
    results.meta.update(rows=opts.rows, workers=opts.workers, start_method=opts.start_method)
    ctx = mp.get_context(opts.start_method)

    progress(f"building {opts.rows:,} records ({opts.rows * DTYPE.itemsize / 1e6:.0f} MB)")
    arr = make_records(opts.rows)
    expect = float(np.nansum(arr.x))

    t0 = time.perf_counter()
    shared = share(arr)
    share_s = time.perf_counter() - t0
    stdlib_name = f"bench-arrays-stdlib-{os.getpid()}"  # outside the shmstream- namespace
    t0 = time.perf_counter()
    seg = raw_shm(stdlib_name, arr.nbytes, create=True)
    np.ndarray(arr.shape, DTYPE, buffer=seg.buf)[...] = arr
    stdlib_s = time.perf_counter() - t0
    stdlib_arg = (stdlib_name, arr.shape, repr(DTYPE.descr))
    results.meta.update(share_s=share_s, stdlib_copy_s=stdlib_s, array_bytes=arr.nbytes)

    runs: dict[str, list[dict[str, Any]]] = {m: [] for m in METHODS}
    try:
        for rep in range(opts.repeats):
            for method in METHODS:
                progress(f"repeat {rep + 1}/{opts.repeats}: {method}")
                runs[method].append(
                    run_once(method, arr, opts.workers, ctx, expect, results, shared, stdlib_arg)
                )
    finally:
        shared.close()
        seg.close()
        raw_unlink(stdlib_name)

    wall = {m: median([r["wall_s"] for r in runs[m]]) for m in METHODS}
    priv = {m: median([p for r in runs[m] for p in r["private_bytes"]]) for m in METHODS}
    rows = []
    for m in METHODS:
        rows.append(
            [
                m,
                f"{wall[m]:.3f}",
                fmt_ratio(wall["pickled"], wall[m], digits=1),
                f"{priv[m] / 1e6:.0f}",
                fmt_ratio(priv["pickled"], priv[m], digits=1),
            ]
        )
    title = (
        f"{opts.rows:,} records x {DTYPE.itemsize} B ({arr.nbytes / 1e6:.0f} MB), "
        f"np.nansum of the float column in {opts.workers} {opts.start_method} workers, "
        f"median of {opts.repeats}"
    )
    table = render_table(
        [
            "method",
            "pool work (s)",
            "speed-up vs pickled",
            "private MB / worker",
            "less memory vs pickled",
        ],
        rows,
        title,
    )
    emit(results, table)
    print(
        f"one-time copy into shared memory: share() {share_s:.3f} s, "
        f"stdlib SharedMemory + copy {stdlib_s:.3f} s"
    )
    speed = wall["pickled"] / wall["shmstream"]
    mem = priv["pickled"] / priv["shmstream"]
    verdict = "met" if speed >= 10 and mem >= 10 else "NOT met"
    print(
        f"target >= 10x faster and >= 10x less private memory than pickled: "
        f"{fmt_ratio(wall['pickled'], wall['shmstream'], digits=1)} and "
        f"{fmt_ratio(priv['pickled'], priv['shmstream'], digits=1)}: {verdict}"
    )
    results.meta.update(speedup=speed, memory_ratio=mem)
    results.save(opts.json, quick=opts.quick)
    return 0
