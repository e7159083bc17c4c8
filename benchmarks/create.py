"""The cost of creating a large segment, per GiB: what a user waits for
before a multi-GiB stream exists (docs/API.md cites it; the CLI's progress
line reports it as it goes).

    python -m benchmarks create [--gib G] [--repeats N] [--quick] [--json PATH]

A shmstream create reserves every page (posix_fallocate: a full /dev/shm is
ENOSPC at create, never a SIGBUS later) and maps the segment with every page
faulted in (MAP_POPULATE: the first writes cost what later ones do). The
peers, in the same run, round-robin ``--repeats`` times:

* ``shmstream create``: ``shmstream.create`` of a stream whose segment is
  ``--gib`` GiB (two slots of half that), until it returns;
* ``stdlib + fallocate``: ``multiprocessing.shared_memory`` create plus
  ``os.posix_fallocate`` of its file: the reservation alone, nothing mapped;
* ``stdlib + first write``: ``multiprocessing.shared_memory`` create (lazy:
  nothing reserved) plus one write of every byte, the cost a stdlib user
  pays on the first frame instead (and a SIGBUS if /dev/shm fills first).

Each segment is removed before the next is made.
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

import numpy as np

import shmstream
from ._common import JSON_HELP, Results, emit, fmt_ratio, median, progress, render_table
from .peers._rawshm import raw_shm, raw_unlink

METHODS = ("shmstream create", "stdlib + fallocate", "stdlib + first write")
GIB = 1 << 30


def _shmstream(tag: str, size: int) -> float:
    name = f"bench-create-{tag}"
    t0 = time.perf_counter()
    h = shmstream.create(name, shape=(size // 2,), dtype=np.uint8)
    wall = time.perf_counter() - t0
    h.unlink()
    return wall


def _stdlib(tag: str, size: int, touch: bool) -> float:
    name = f"bench-create-stdlib-{tag}"  # outside the shmstream- namespace
    t0 = time.perf_counter()
    seg = raw_shm(name, size, create=True)
    try:
        if touch:
            np.frombuffer(seg.buf, np.uint8)[:] = 1
        else:
            fd = os.open(f"/dev/shm/{name}", os.O_RDWR)
            try:
                os.posix_fallocate(fd, 0, size)
            finally:
                os.close(fd)
        wall = time.perf_counter() - t0
    finally:
        seg.close()
        raw_unlink(name)
        try:
            os.unlink(f"/dev/shm/{name}")
        except FileNotFoundError:
            pass
    return wall


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks create", description=__doc__.split("\n")[0]
    )
    ap.add_argument(
        "--gib", type=float, default=None, help="segment size, default 1 (--quick: 1/16)"
    )
    ap.add_argument("--repeats", type=int, default=None, help="default 3 (--quick: 1)")
    ap.add_argument("--quick", action="store_true", help="a smoke run: 64 MiB, once")
    ap.add_argument("--json", metavar="PATH", help=JSON_HELP)
    opts = ap.parse_args(argv)
    gib = opts.gib if opts.gib is not None else (1 / 16 if opts.quick else 1.0)
    repeats = opts.repeats if opts.repeats is not None else (1 if opts.quick else 3)
    size = int(gib * GIB) // (2 << 12) * (2 << 12)  # two whole-page slots
    results = Results("create", argv)
    results.meta.update(bytes=size, repeats=repeats)
    walls: dict[str, list[float]] = {m: [] for m in METHODS}
    tag = str(os.getpid())
    for rep in range(repeats):
        for method in METHODS:
            progress(f"repeat {rep + 1}/{repeats}: {method}")
            if method == "shmstream create":
                wall = _shmstream(tag, size)
            else:
                wall = _stdlib(tag, size, touch=method.endswith("first write"))
            walls[method].append(wall)
            results.add(method=method, wall_s=wall, bytes=size)
    per_gib: dict[str, Any] = {m: median(walls[m]) / (size / GIB) for m in METHODS}
    rows = [
        [
            m,
            f"{median(walls[m]):.3f}",
            f"{per_gib[m]:.2f}",
            fmt_ratio(per_gib["shmstream create"], per_gib[m], digits=2),
        ]
        for m in METHODS
    ]
    table = render_table(
        ["method", "seconds", "s per GiB", "shmstream's time / this"],
        rows,
        f"creating a {size / GIB:.2f} GiB segment in /dev/shm, median of {repeats}",
    )
    emit(results, table)
    results.save(opts.json, quick=opts.quick)
    return 0
