"""`python -m benchmarks direct`: random row reads from a 2.5 GB array file, cold
and cached, DirectArray against np.memmap, np.memmap + MADV_RANDOM and the
direct-mmap package, in the same run.

Workload (direct-mmap's own benchmark, scaled to this machine): an
(8_000_000, 40) uint64 file; 256 tasks `arr[i:i+30000:1000]` (30 rows of
320 B, 320 KB apart) at start rows whose spans never overlap, shuffled; run
with 1 and with 16 threads. Passes:

  cold    the file's pages evicted first (posix_fadvise DONTNEED, checked
          with mincore), a fresh reader
  again   the same pass once more, same reader: the warm case as a user
          sees it. np.memmap finds what its cold pass put in the page cache;
          DirectArray finds its own block cache (default 256 MiB); direct-mmap
          keeps nothing and reads the disk again
  cached  the whole file in the page cache first, a fresh reader

Bytes read from disk come from /proc/self/io. The file is made in a temp dir
(on the disk, not tmpfs) and always removed.
"""

from __future__ import annotations

import argparse
import mmap
import os
import random
import resource
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from shmstream.arrays.direct import DirectArray, io_backend
from . import _pagecache
from ._common import JSON_HELP, Results, fmt_ratio, progress, render_table

COLS = 40
SPAN = 30000
STEP = 1000
READERS = ["np.memmap", "np.memmap+MADV_RANDOM", "direct-mmap", "shmstream.DirectArray"]


def disk_read_bytes() -> int:
    with open("/proc/self/io") as f:
        for line in f:
            if line.startswith("read_bytes:"):
                return int(line.split()[1])
    return 0


def make_file(path: str, rows: int) -> None:
    chunk = 262144
    with open(path, "wb") as f:
        for r in range(0, rows, chunk):
            n = min(chunk, rows - r)
            np.arange(r * COLS, (r + n) * COLS, dtype=np.uint64).tofile(f)
        f.flush()
        os.fsync(f.fileno())


def evict(path: str) -> tuple[int, int]:
    _pagecache.evict(path)
    return _pagecache.resident(path)


def load_into_cache(path: str) -> tuple[int, int]:
    with open(path, "rb", buffering=0) as f:
        buf = bytearray(8 << 20)
        while f.readinto(buf):
            pass
    return _pagecache.resident(path)


# ---- readers: open(path, rows) -> (getitem, close) ----------------------------


def open_memmap(path: str, rows: int, random_advice: bool = False):
    m = np.memmap(path, mode="r", dtype=np.uint64, shape=(rows, COLS))
    if random_advice:
        m._mmap.madvise(mmap.MADV_RANDOM)  # type: ignore[attr-defined]  # np.memmap keeps its mmap here

    def close() -> None:
        nonlocal m
        del m  # the last reference: unmaps now, so eviction can drop the pages

    return (lambda key: np.array(m[key])), close


def open_direct_mmap(path: str, rows: int):
    import direct_mmap  # the peer; built from its sdist (see BENCHMARKS.md, "Direct-I/O array reader")

    a = direct_mmap.direct_mmap(path, (rows, COLS), "uint64")

    def close() -> None:
        a.close()
        a.close = lambda: None  # its __del__ closes again, which crashes

    return a.__getitem__, close


def open_shmstream(path: str, rows: int):
    a = DirectArray(path, (rows, COLS), np.uint64)
    return a.__getitem__, a.close


OPENERS: dict[str, Callable[[str, int], Any]] = {
    "np.memmap": open_memmap,
    "np.memmap+MADV_RANDOM": lambda p, r: open_memmap(p, r, True),
    "direct-mmap": open_direct_mmap,
    "shmstream.DirectArray": open_shmstream,
}


def run_pass(
    getitem: Callable[[Any], np.ndarray], starts: list[int], threads: int
) -> tuple[float, list]:
    results: list = [None] * len(starts)
    next_task = iter(range(len(starts)))
    lock = threading.Lock()
    barrier = threading.Barrier(threads + 1)
    errors: list[BaseException] = []

    def worker() -> None:
        barrier.wait()
        try:
            while True:
                with lock:
                    t = next(next_task, None)
                if t is None:
                    return
                i = starts[t]
                results[t] = getitem(slice(i, i + SPAN, STEP))
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller
            errors.append(e)

    pool = [threading.Thread(target=worker) for _ in range(threads)]
    for th in pool:
        th.start()
    barrier.wait()
    t0 = time.perf_counter()
    for th in pool:
        th.join()
    elapsed = time.perf_counter() - t0
    if errors:
        raise errors[0]
    return elapsed, results


def check(results: list, starts: list[int]) -> None:
    for i, got in zip(starts, results):
        rows = np.arange(i, i + SPAN, STEP, dtype=np.uint64)
        want = rows[:, None] * COLS + np.arange(COLS, dtype=np.uint64)
        if not np.array_equal(got, want):
            raise AssertionError(f"wrong rows for task starting at {i}")


def choose_starts(rows: int, tasks: int, seed: int) -> list[int]:
    """Start rows whose spans [i, i + SPAN) never overlap, in random order."""
    slots = rows // SPAN
    if slots < 1:
        raise SystemExit(f"--rows must be at least {SPAN}")
    rng = random.Random(seed)
    picked = rng.sample(range(slots), min(tasks, slots))
    starts = [s * SPAN + rng.randrange(SPAN - (SPAN // STEP - 1) * STEP) for s in picked]
    rng.shuffle(starts)
    return starts


def table(res: dict, readers: list[str], thread_counts: list[int]) -> str:
    base, ours = "np.memmap", "shmstream.DirectArray"
    rows = []
    for kind in ("cold", "again", "cached"):
        for t in thread_counts:
            row = ["again (warm)" if kind == "again" else kind, str(t)]
            for r in readers:
                v = res.get((r, kind, t))
                row.append("—" if v is None else f"{v['s']:.4f} s ({v['mb']:.0f} MB)")
            b, o = res.get((base, kind, t)), res.get((ours, kind, t))
            row.append(fmt_ratio(b["s"], o["s"], after="×") if b and o else "—")
            rows.append(row)
    return render_table(["pass", "threads", *readers, "np.memmap / ours"], rows, compact=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks direct",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument(
        "--rows",
        type=int,
        default=None,
        help="rows of 40 uint64 (default 8e6: 2.56 GB; --quick: 60000)",
    )
    ap.add_argument("--tasks", type=int, default=None, help="default 256 (--quick: 2)")
    ap.add_argument(
        "--threads", default=None, help="comma-separated thread counts (default 1,16; --quick: 1,2)"
    )
    ap.add_argument("--quick", action="store_true", help="a smoke run: a 19 MB file, few reads")
    ap.add_argument(
        "--readers",
        default=",".join(READERS),
        help="comma-separated subset of: " + ", ".join(READERS),
    )
    ap.add_argument("--dir", default=None, help="where to make the file (default: the temp dir)")
    ap.add_argument("--json", metavar="PATH", help=JSON_HELP)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    for name, full, quick in (
        ("rows", 8_000_000, 60_000),
        ("tasks", 256, 2),
        ("threads", "1,16", "1,2"),
    ):
        if getattr(args, name) is None:
            setattr(args, name, quick if args.quick else full)
    thread_counts = [int(t) for t in args.threads.split(",")]
    readers = [r for r in args.readers.split(",") if r]
    for r in readers:
        if r not in OPENERS:
            ap.error(f"unknown reader {r!r}")
    if "direct-mmap" in readers:
        try:
            import direct_mmap  # noqa: F401
        except Exception as e:  # noqa: BLE001 - any import failure skips the peer
            progress(f"direct-mmap unavailable ({e!r}); skipping it")
            readers.remove("direct-mmap")
    # direct-mmap opens (and never closes) one descriptor per read.
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))

    nbytes = args.rows * COLS * 8
    tmp = tempfile.mkdtemp(prefix="shmstream-bench-direct-", dir=args.dir)
    res: dict = {}
    report = Results("direct", argv or [])
    report.meta["io_backend"] = io_backend()
    try:
        free = shutil.disk_usage(tmp).free
        if free < nbytes + (1 << 30):
            progress(
                f"not enough free disk in {tmp}: {free / 1e9:.1f} GB free, need {nbytes / 1e9:.1f} GB + 1 GB"
            )
            return 1
        path = os.path.join(tmp, "array.bin")
        progress(f"making {path}: ({args.rows}, {COLS}) uint64, {nbytes / 1e9:.2f} GB")
        make_file(path, args.rows)
        starts = choose_starts(args.rows, args.tasks, args.seed)
        progress(f"{len(starts)} tasks arr[i:i+{SPAN}:{STEP}], io backend {io_backend()}")

        def timed(reader: str, kind: str, threads: int, getitem, extra: str = "") -> None:
            before = disk_read_bytes()
            s, results = run_pass(getitem, starts, threads)
            mb = (disk_read_bytes() - before) / 1e6
            check(results, starts)
            res[(reader, kind, threads)] = {"s": s, "mb": mb}
            report.add(reader=reader, **{"pass": kind}, threads=threads, s=s, mb=mb)
            progress(
                f"  {kind:6s} {threads:2d} threads  {reader:24s} {s:7.3f} s  {mb:8.1f} MB from disk{extra}"
            )

        for threads in thread_counts:
            for reader in readers:
                resident, total = evict(path)
                getitem, close = OPENERS[reader](path, args.rows)
                try:
                    timed(
                        reader,
                        "cold",
                        threads,
                        getitem,
                        f"  (cached before: {resident}/{total} pages)",
                    )
                    timed(reader, "again", threads, getitem)
                finally:
                    close()
        resident, total = load_into_cache(path)
        progress(f"file loaded into the page cache: {resident}/{total} pages")
        for threads in thread_counts:
            for reader in readers:
                getitem, close = OPENERS[reader](path, args.rows)
                try:
                    timed(reader, "cached", threads, getitem)
                finally:
                    close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    cmd = "python -m benchmarks direct" + (" " + " ".join(argv) if argv else "")
    print(
        f"`{cmd}` — {len(starts)} tasks, file {nbytes / 1e9:.2f} GB, io backend {io_backend()}, "
        f"{report.meta['cpu_count']} CPUs\n"
    )
    text = table(res, readers, thread_counts)
    report.tables.append(text)
    print(text)
    print("\nseconds per pass (MB read from disk, /proc/self/io)")
    # "argv", "tasks", "bytes", "results": what this file held before it
    # had the common sections
    report.save(
        args.json,
        quick=args.quick,
        argv=argv,
        tasks=len(starts),
        bytes=nbytes,
        results=report.records,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
