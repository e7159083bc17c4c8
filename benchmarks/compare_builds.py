"""Compare two builds of shmstream on the same machine, in the same run.

    python -m benchmarks.compare_builds --base /path/to/old/venv/bin/python \\
        [--new python3] [--parts stream,channel] [--rounds 3] [--micro 8] [--json out.json]

A change that must not slow the hot paths ("rows within 3% of today's in the
same run") is measured here: each round runs ``python -m benchmarks PART``
once with each interpreter (``--base`` has the old build installed,
``--new`` the new one; both run this checkout's benchmark code), the two
alternating so that drifts of the machine hit both, with shmstream as the
only peer. For every row the median over rounds of each build is printed
with the ratio new / base (> 1: the new build is faster for rates, slower
for latencies), and the geometric mean of the rate ratios. The raw per-run
JSON files are kept under --out (default: a dated folder in
benchmarks/results/).

``--micro N`` adds the floor of a write + read in one process (4 floats
and 100x100 float32) and of a 32 B channel ``send``, N fresh processes per
build: the parts' rows move by
10-20% from run to run on a small VM (where the heap puts the arrays
relative to the slots, other threads' spinning), while the best of many
timings on page-aligned buffers moves by about 1%, so a few-percent cost
shows there first. ``--parts ''`` runs only that.

Rows are keyed by what the part's records name (section, shape or payload,
variant or peer, scenario); values are the records' rates (``hz``,
``rt_per_s``, ``written_per_s``, ``msgs_per_s``, ``frames_per_s``) and
latencies (``p50_ns``, ``p50_us``, ``p99_us``).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from ._common import results_path

ROOT = Path(__file__).resolve().parent.parent
KEYS = ("section", "scenario", "shape", "payload", "variant", "peer")
RATES = ("hz", "rt_per_s", "written_per_s", "msgs_per_s", "frames_per_s")
LATENCIES = ("p50_ns", "p50_us", "p99_us")
PART_ARGS = {"stream": ["--peers", "shmstream", "--sections", "abc"], "channel": ["--rounds", "1"]}


def _rows(path: Path) -> dict[tuple, dict[str, list[float]]]:
    out: dict[tuple, dict[str, list[float]]] = collections.defaultdict(
        lambda: collections.defaultdict(list)
    )
    for r in json.loads(path.read_text()).get("records", []):
        if "error" in r or not str(r.get("impl", r.get("peer", "shmstream"))).startswith(
            "shmstream"
        ):
            continue
        key = tuple(str(r[k]) for k in KEYS if k in r)
        for field in RATES + LATENCIES:
            if isinstance(r.get(field), (int, float)):
                out[key][field].append(float(r[field]))
    return out


def _run(python: str, part: str, path: Path) -> None:
    cmd = [python, "-m", "benchmarks", part, *PART_ARGS.get(part, []), "--json", str(path)]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stderr[-2000:]}")


#: The floor of a write + read in one process, free of heap-layout luck:
#: page-aligned source and destination, the best of 200 timings of 500
#: pairs, in a fresh process per measurement. Prints ns per pair per shape,
#: then ns per 32 B channel send (best of 200 timings of 500 sends).
MICRO = r"""
import mmap, os, sys, time
import numpy as np, shmstream
for shape in [(4,), (100, 100)]:
    name = f"compare-builds-{os.getpid()}"
    s = shmstream.create(name, shape=shape, dtype=np.float32)
    n = int(np.prod(shape))
    src = np.frombuffer(mmap.mmap(-1, 1 << 20), np.float32, n).reshape(shape)
    dst = np.frombuffer(mmap.mmap(-1, 1 << 20), np.float32, n).reshape(shape)
    w, r, best = s.write, s.read, float("inf")
    for _ in range(200):
        t0 = time.perf_counter()
        for _ in range(500):
            w(src); r(out=dst)
        best = min(best, (time.perf_counter() - t0) / 500 * 1e9)
    s.close(); s.unlink()
    print(f"{'x'.join(map(str, shape))} {best:.1f}")
# A 32 B channel send as a user writes it (the method looked up each call),
# drained between timings: the binding's and the end's per-call cost.
name = f"compare-builds-ch-{os.getpid()}"
tx = shmstream.channel(name, 1 << 22)
rx = shmstream.open_channel(name)
msg, best = bytes(32), float("inf")
for _ in range(200):
    t0 = time.perf_counter()
    for _ in range(500):
        tx.send(msg, timeout=10)
    best = min(best, (time.perf_counter() - t0) / 500 * 1e9)
    rx.drain(1000)
rx.close(); tx.close(); shmstream.unlink_channel(name)
print(f"send-32B {best:.1f}")
"""


def _micro(python: str) -> dict[str, float]:
    proc = subprocess.run([python, "-c", MICRO], capture_output=True, text=True, check=True)
    return {k: float(v) for k, v in (line.split() for line in proc.stdout.splitlines())}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", required=True, help="python with the old build installed")
    ap.add_argument("--new", default=sys.executable, help="python with the new build")
    ap.add_argument("--parts", default="stream,channel")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument(
        "--out",
        help="raw results folder (default: benchmarks/results/DATE-MACHINE-compare-builds/)",
    )
    ap.add_argument("--json", help="write the summary here")
    ap.add_argument(
        "--micro",
        type=int,
        default=0,
        metavar="N",
        help="also N processes per build of the write+read floor (MICRO)",
    )
    args = ap.parse_args(argv)
    folder = results_path("compare-builds", args.out, quick=False, suffix="")
    assert folder is not None  # only a --quick run has no results path
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    summary: dict[str, Any] = {
        "base": args.base,
        "new": args.new,
        "rounds": args.rounds,
        "loadavg_start": os.getloadavg(),
        "rows": [],
    }
    ratios = []
    for part in filter(None, args.parts.split(",")):
        runs: dict[str, list[Path]] = {"base": [], "new": []}
        for i in range(args.rounds):
            for build in ("base", "new"):
                path = out / f"{part}-{build}-{i}.json"
                print(f"[compare] {part} round {i + 1}/{args.rounds}: {build}", flush=True)
                _run(getattr(args, build), part, path)
                runs[build].append(path)
        merged = {}
        for build, paths in runs.items():
            acc: dict[tuple, dict[str, list[float]]] = collections.defaultdict(
                lambda: collections.defaultdict(list)
            )
            for p in paths:
                for key, fields in _rows(p).items():
                    for field, values in fields.items():
                        acc[key][field].append(statistics.median(values))
            merged[build] = acc
        print(f"\n{part}: median of {args.rounds} runs per build (ratio new/base)")
        for key in sorted(merged["base"]):
            for field, base_values in sorted(merged["base"][key].items()):
                new_values = merged["new"].get(key, {}).get(field)
                if not new_values:
                    continue
                b, n = statistics.median(base_values), statistics.median(new_values)
                ratio = n / b if b else float("nan")
                if field in RATES:
                    ratios.append(ratio)
                print(
                    f"  {' / '.join(key):58s} {field:14s} base {b:14.6g}  new {n:14.6g}"
                    f"  x{ratio:.3f}"
                )
                summary["rows"].append(
                    {"part": part, "row": key, "field": field, "base": b, "new": n, "ratio": ratio}
                )
    if args.micro:
        floors: dict[str, dict[str, list[float]]] = {"base": {}, "new": {}}
        for _ in range(args.micro):
            for build in ("base", "new"):
                for shape, ns in _micro(getattr(args, build)).items():
                    floors[build].setdefault(shape, []).append(ns)
        print(
            f"\nfloors, ns per write + read pair or per send: median of {args.micro} processes "
            "(each the best of 200 timings)"
        )
        for shape in floors["base"]:
            b, n = (statistics.median(floors[k][shape]) for k in ("base", "new"))
            print(f"  {shape:10s} base {b:8.1f}  new {n:8.1f}  x{n / b:.3f} (time: < 1 is faster)")
            summary["rows"].append(
                {
                    "part": "micro",
                    "row": [shape],
                    "field": "ns_per_send" if shape.startswith("send") else "ns_per_pair",
                    "base": b,
                    "new": n,
                    "ratio": n / b,
                    "runs": {k: floors[k][shape] for k in floors},
                }
            )
    gm = statistics.geometric_mean(ratios) if ratios else float("nan")
    summary.update(
        geomean_rate_ratio=gm,
        loadavg_end=os.getloadavg(),
        finished=time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
    )
    print(f"\ngeometric mean of the rate ratios (new/base): {gm:.3f} over {len(ratios)} rows")
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
