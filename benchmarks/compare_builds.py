"""Compare two builds of shmstream on the same machine, in the same run.

    python -m benchmarks.compare_builds --base /path/to/old/venv/bin/python \\
        [--new python3] [--parts stream,channel] [--rounds 3] [--json out.json]

A change that must not slow the hot paths ("rows within 3% of today's in the
same run") is measured here: each round runs ``python -m benchmarks PART``
once with each interpreter (``--base`` has the old build installed,
``--new`` the new one; both run this checkout's benchmark code), the two
alternating so that drifts of the machine hit both, with shmstream as the
only peer. For every row the median over rounds of each build is printed
with the ratio new / base (> 1: the new build is faster for rates, slower
for latencies), and the geometric mean of the rate ratios. The raw per-run
JSON files are kept under --out.

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

ROOT = Path(__file__).resolve().parent.parent
KEYS = ("section", "scenario", "shape", "payload", "variant", "peer")
RATES = ("hz", "rt_per_s", "written_per_s", "msgs_per_s", "frames_per_s")
LATENCIES = ("p50_ns", "p50_us", "p99_us")
PART_ARGS = {"stream": ["--peers", "shmstream"], "channel": ["--rounds", "1"]}


def _rows(path: Path) -> dict[tuple, dict[str, list[float]]]:
    out: dict[tuple, dict[str, list[float]]] = collections.defaultdict(
        lambda: collections.defaultdict(list))
    for r in json.loads(path.read_text()).get("records", []):
        if "error" in r or not str(r.get("impl", r.get("peer", "shmstream"))).startswith(
                "shmstream"):
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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", required=True, help="python with the old build installed")
    ap.add_argument("--new", default=sys.executable, help="python with the new build")
    ap.add_argument("--parts", default="stream,channel")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default="benchmarks/compare_builds", help="raw results folder")
    ap.add_argument("--json", help="write the summary here")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    summary: dict[str, Any] = {"base": args.base, "new": args.new, "rounds": args.rounds,
                               "loadavg_start": os.getloadavg(), "rows": []}
    ratios = []
    for part in args.parts.split(","):
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
                lambda: collections.defaultdict(list))
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
                print(f"  {' / '.join(key):58s} {field:14s} base {b:14.6g}  new {n:14.6g}"
                      f"  x{ratio:.3f}")
                summary["rows"].append({"part": part, "row": key, "field": field,
                                        "base": b, "new": n, "ratio": ratio})
    gm = statistics.geometric_mean(ratios) if ratios else float("nan")
    summary.update(geomean_rate_ratio=gm, loadavg_end=os.getloadavg(),
                   finished=time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()))
    print(f"\ngeometric mean of the rate ratios (new/base): {gm:.3f} over {len(ratios)} rows")
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
