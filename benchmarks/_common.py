"""What every benchmark part shares: measurement scaffolding (calibration,
timed runs, round-trip latencies), statistics, formatting, Markdown tables,
progress lines, and the results document (environment, records, errors,
tables), written where ``results_path`` says: ``--json PATH``, or by default
``benchmarks/results/DATE-MACHINE-PART.json``.

The timed loops themselves belong to each part (a call per iteration would
be measured too); what is here runs around them.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import importlib
import importlib.metadata
import json
import math
import os
import platform
import re
import statistics
import sys
import time
from array import array
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

NA_HINT = "n/a (pip install shmstream[bench])"

#: Where every part's raw results go by default (BENCHMARKS.md cites them).
RESULTS_DIR = Path(__file__).resolve().parent / "results"
#: Every part's ``--json`` help: where its raw results go (``results_path``).
JSON_HELP = (
    "write the raw results here (default: benchmarks/results/DATE-MACHINE-PART.json; "
    "a --quick run writes none without --json)"
)


class BenchError(RuntimeError):
    """A measurement failed its own checks (sequence mismatch, torn frame in
    shmstream, missed-counter mismatch, a worker died or timed out)."""


def call_quietly(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
    """Cleanup that must not hide the error that made it run."""
    with contextlib.suppress(Exception):
        fn(*args, **kwargs)


# ---------------------------------------------------------------- peers


def peer_version(dist: str) -> str | None:
    """The installed version of a distribution, or None if it is missing."""
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def try_import(module: str) -> tuple[Any | None, str | None]:
    """(module, None) or (None, reason) without raising."""
    try:
        return importlib.import_module(module), None
    except Exception as exc:  # noqa: BLE001 - any import failure means "n/a"
        return None, f"{type(exc).__name__}: {exc}"


# ---------------------------------------------------------- measurement


def calibrate(loop: Callable[[int], Any], seconds: float) -> int:
    """Warm ``loop(n)`` up and return an iteration count that takes about
    ``seconds``. ``loop`` runs n iterations of the work and returns when
    they are done (a GPU loop synchronises before it returns)."""
    n = 1
    while True:
        t0 = time.perf_counter()
        loop(n)
        dt = time.perf_counter() - t0
        if dt >= min(0.05, seconds / 2) or n >= 1 << 24:
            return max(1, int(n * seconds / max(dt, 1e-9)))
        n *= 4 if dt < 0.005 else 2


def time_loop(loop: Callable[[int], Any], n: int) -> float:
    """Seconds taken by ``loop(n)``."""
    t0 = time.perf_counter_ns()
    loop(n)
    return (time.perf_counter_ns() - t0) / 1e9


def loop_rate(loop: Callable[[int], Any], seconds: float) -> float:
    """Iterations per second of ``loop`` over about ``seconds``, after a
    warm-up (the calibration)."""
    n = calibrate(loop, seconds)
    return n / time_loop(loop, n)


def ping_latencies(
    send: Callable[[Any], Any], msg: Any, recv: Callable[[], Any], n: int, warm: int = 1000
) -> array:
    """Nanoseconds of each of ``n`` round trips ``send(msg)`` then ``recv()``
    (polled again while it returns None), after ``warm`` untimed ones."""
    clock = time.perf_counter_ns
    for _ in range(warm):
        send(msg)
        while recv() is None:
            pass
    lat = array("q", bytes(8 * n))
    for i in range(n):
        t = clock()
        send(msg)
        got = recv()
        while got is None:
            got = recv()
        lat[i] = clock() - t
    return lat


# ----------------------------------------------------------- statistics


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values)) if values else float("nan")


def fmt_spread(values: Sequence[float], fmt: Callable[[float], str]) -> str:
    """The median of repeated measurements with their range: "1.2 k/s
    [1.1 k/s-1.3 k/s]" (one value: just it; none: "-")."""
    if not values:
        return "-"
    if len(values) == 1:
        return fmt(values[0])
    return f"{fmt(median(values))} [{fmt(min(values))}-{fmt(max(values))}]"


def percentiles(values: Sequence[float], qs: Sequence[float]) -> list[float]:
    """The ``qs`` percentiles of ``values`` (linear interpolation, NumPy's
    default), one float each; NaN for no values."""
    import numpy as np

    if len(values) == 0:
        return [float("nan")] * len(qs)
    return [float(v) for v in np.percentile(np.asarray(values, dtype=np.float64), list(qs))]


def latency_summary(
    ns: Sequence[float], qs: Sequence[int] = (50, 99), unit: str = "us"
) -> dict[str, float]:
    """``{"p50_us": ..., "p99_us": ...}`` from latencies in ns (``unit`` "ns"
    or "us" names the unit of the values and of the keys)."""
    scale = {"ns": 1.0, "us": 1e3}[unit]
    return {f"p{q}_{unit}": v / scale for q, v in zip(qs, percentiles(ns, qs))}


# ----------------------------------------------------------- formatting


def fmt_hz(hz: float, unit: str = "Hz") -> str:
    """152.3 kHz, 947.0 Hz, 55.7 k/s (unit="/s")."""
    if math.isnan(hz):
        return "-"
    sep = "" if unit.startswith("/") else " "
    if hz >= 1e6:
        return f"{hz / 1e6:.2f} M{unit}"
    if hz >= 1e3:
        return f"{hz / 1e3:.1f} k{unit}"
    return f"{hz:.1f}{sep}{unit}"


def fmt_ratio(ours: float | None, theirs: float | None, digits: int = 2, after: str = "") -> str:
    """How many times ``theirs`` ``ours`` is: "x2.57" (or "2.57×" with
    ``after="×"``); "-" when either is missing."""
    if ours is None or theirs is None or math.isnan(ours) or math.isnan(theirs) or theirs <= 0:
        return "-"
    r = ours / theirs
    return f"{r:.{digits}f}{after}" if after else f"x{r:.{digits}f}"


def fmt_us(ns: float) -> str:
    """A latency given in ns, written in us: 3.8, 138."""
    if math.isnan(ns):
        return "-"
    us = ns / 1e3
    return f"{us:.1f}" if us < 100 else f"{us:.0f}"


def fmt_bytes(n: int) -> str:
    """64 B, 64 KiB, 4 MiB for binary sizes, 40 kB, 2.56 GB for others."""
    if n >= 1 << 20 and n % (1 << 20) == 0:
        return f"{n >> 20} MiB"
    if (1 << 10) <= n < (1 << 20) and n % (1 << 10) == 0:
        return f"{n >> 10} KiB"
    if n >= 10**9:
        return f"{n / 1e9:g} GB"
    if n >= 10**6:
        return f"{n / 1e6:g} MB"
    if n >= 10**3:
        return f"{n / 1e3:g} kB"
    return f"{n} B"


def fmt_fields(values: dict[str, Any]) -> str:
    """``key=value`` pairs of one measurement: large numbers with thousands
    separators, small ones with two decimals; an ``error`` entry alone."""
    if "error" in values:
        return str(values["error"])
    return "  ".join(f"{k}={v:,.0f}" if v >= 1000 else f"{k}={v:.2f}" for k, v in values.items())


# ---------------------------------------------------------------- tables


def render_table(
    headers: list[str], rows: list[list[str]], title: str = "", left: int = 1, compact: bool = False
) -> str:
    """A Markdown pipe table. By default columns are padded so it also reads
    as plain text, the first ``left`` columns left-aligned and the rest
    right-aligned; ``compact`` writes the cells as they are."""
    parts = []
    if title:
        parts.append(title)
        parts.append("")
    if compact:
        parts.append("| " + " | ".join(headers) + " |")
        parts.append("|" + "---|" * len(headers))
        parts.extend("| " + " | ".join(r) + " |" for r in rows)
        return "\n".join(parts)
    widths = [len(h) for h in headers]
    for row in rows:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))

    def line(cells: list[str]) -> str:
        out = []
        for i, cell in enumerate(cells):
            out.append(cell.ljust(widths[i]) if i < left else cell.rjust(widths[i]))
        return "| " + " | ".join(out) + " |"

    parts.append(line(headers))
    parts.append(
        "|"
        + "|".join(
            ("-" * (w + 2)) if i < left else ("-" * (w + 1) + ":") for i, w in enumerate(widths)
        )
        + "|"
    )
    parts.extend(line(r) for r in rows)
    return "\n".join(parts)


def progress(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def emit(res: Results, table: str) -> None:
    """Print a result table (and a blank line) and keep it for the JSON."""
    res.tables.append(table)
    print(table)
    print(flush=True)


# --------------------------------------------------------------- results


def environment(part: str, argv: Sequence[str]) -> dict[str, Any]:
    """Where and when a part ran: command, date, Python, platform, CPUs,
    load average, versions of shmstream and the usual peers."""
    return {
        "part": part,
        "command": "python -m benchmarks " + " ".join([part, *argv]),
        "date_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "cpu": machine_description(),
        "loadavg_start": _loadavg(),
        "versions": {d: peer_version(d) for d in ("shmstream", "pyshmem", "iceoryx2", "numpy")},
    }


class Results:
    """Raw measurements plus metadata; written as JSON with ``--json``:
    ``{"meta", "records", "errors", "tables"}`` and whatever part-specific
    sections ``dump`` is given."""

    def __init__(self, part: str, argv: Sequence[str]) -> None:
        self.meta: dict[str, Any] = environment(part, argv)
        self.records: list[dict[str, Any]] = []
        self.errors: list[str] = []
        self.tables: list[str] = []

    def add(self, **record: Any) -> None:
        self.records.append(record)

    def error(self, message: str) -> None:
        self.errors.append(message)
        print(f"[bench] ERROR: {message}", file=sys.stderr, flush=True)

    def save(self, path: str | None, *, quick: bool, **sections: Any) -> str | None:
        """Write the results where ``results_path`` says (``--json PATH``,
        else the dated file in benchmarks/results/; a ``--quick`` smoke run
        only where ``--json`` names a file) and return that path."""
        target = results_path(self.meta["part"], path, quick=quick)
        if target is not None:
            self.dump(target, **sections)
            progress(f"raw results written to {target}")
        return target

    def dump(self, path: str, **sections: Any) -> None:
        self.meta["loadavg_end"] = _loadavg()
        doc = {
            "meta": self.meta,
            "records": self.records,
            "errors": self.errors,
            "tables": self.tables,
            **sections,
        }
        with open(path, "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=1, default=str)
            f.write("\n")


def machine_description() -> str:
    """CPU model, online CPUs and kernel, as BENCHMARKS.md names a table's
    machine: "AMD EPYC (2 CPUs), Linux 6.8.0 x86_64"."""
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    u = platform.uname()
    return f"{model} ({os.cpu_count()} CPUs), {u.system} {u.release} {u.machine}"


def machine_tag(description: str | None = None) -> str:
    """The machine in a results file's name: the CPU family and the online
    CPUs, "epyc2c" for "AMD EPYC (2 CPUs), ...", "xeon2c" for "Intel(R)
    Xeon(R) Processor (2 CPUs), ..."; "vm" + CPUs where no model is known."""
    description = description or machine_description()
    model, _, rest = description.partition(" (")
    cpus = re.match(r"(\d+) CPUs", rest)
    words = [
        w
        for w in re.sub(r"\((R|TM)\)|@.*", " ", model).lower().split()
        if w not in ("intel", "amd", "cpu", "processor", "genuine", "authentic", "x86_64")
    ]
    family = re.sub(r"[^a-z0-9]", "", words[0]) if words else ""
    return f"{family or 'vm'}{cpus.group(1) if cpus else os.cpu_count()}c"


def results_path(part: str, path: str | None, *, quick: bool, suffix: str = ".json") -> str | None:
    """Where a run of ``part`` writes its raw results: ``path`` (``--json``)
    when given; else ``benchmarks/results/DATE-MACHINE-PART.json`` (today, UTC;
    ``-2``, ``-3``... after the part's name when that day's file exists, so
    no earlier run is overwritten); None for a ``--quick`` smoke run without
    ``--json``, whose numbers are not results. ``suffix=""`` names a folder
    (``benchmarks.compare_builds``)."""
    if path:
        return path
    if quick:
        return None
    stem = f"{_dt.datetime.now(_dt.timezone.utc):%Y-%m-%d}-{machine_tag()}-{part}"
    n = 1
    while (RESULTS_DIR / f"{stem}{'' if n == 1 else f'-{n}'}{suffix}").exists():
        n += 1
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    return str(RESULTS_DIR / f"{stem}{'' if n == 1 else f'-{n}'}{suffix}")


def _loadavg() -> list[float] | None:
    try:
        return list(os.getloadavg())
    except OSError:
        return None
