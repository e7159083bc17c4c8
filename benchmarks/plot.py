"""Plots of the recorded benchmark results, beside their JSON:

    python -m benchmarks.plot [RESULTS.json ...] [--dir benchmarks/results]

reads the given results files (what ``python -m benchmarks PART`` wrote),
or by default the newest ``DATE-MACHINE-stream.json``,
``DATE-MACHINE-channel.json`` and ``DATE-MACHINE-loader.json`` in
benchmarks/results/, and writes, next to each, its name with:

* ``-latency.png`` (stream and channel): every ping-pong row
  (peer, variant, payload) with its p50 and p99 marked. The parts record
  percentiles per repeat, not every round trip, so each row shows the p50,
  p95 and p99 of every repeat (a dot each) and the median over repeats
  (the bar): the spread between repeats is the machine's noise;
* ``-throughput.png`` (stream): GB/s against payload size for each peer,
  for write + read in one process and for request/response (payload bytes
  moved one way a second), the median of the repeats with their range;
  (channel): each channel scenario's rate per peer, the median of the
  rounds and each round;
* ``-epochs.png`` (loader): every epoch's time for each dataset size, per
  regime (default: workers started each epoch; persistent), torch's
  transport beside shmstream's.

matplotlib (the ``bench`` extra) makes them; a missing JSON skips its plots.
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import re
import statistics
import sys
from pathlib import Path
from typing import Any

from ._common import RESULTS_DIR

#: Bytes an element of the stream part's frames takes (float32).
STREAM_ITEMSIZE = 4


def _load(path: Path) -> dict[str, Any] | None:
    if not path.is_file():
        print(f"[plot] {path.name}: not found, its plots skipped", file=sys.stderr)
        return None
    return json.loads(path.read_text(encoding="utf-8"))


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, out: Path, title: str | None = None) -> Path:
    """Title (if any), lay out, write ``out`` and free the figure."""
    if title is not None:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    _pyplot().close(fig)
    return out


def _fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024:
            return f"{n:g} {unit}"
        n /= 1024
    return f"{n:g} TiB"


def _latency_rows(ax: Any, rows: dict[str, dict[str, list[float]]], title: str) -> None:
    """One horizontal row per label: each repeat's percentiles as dots, the
    median p50 and p99 as bars."""
    colours = {"p50": "tab:blue", "p95": "tab:gray", "p99": "tab:red"}
    labels = list(rows)
    for y, label in enumerate(labels):
        for q, values in rows[label].items():
            if not values:
                continue
            ax.scatter(
                values,
                [y] * len(values),
                s=12,
                color=colours[q],
                alpha=0.6,
                label=q if y == 0 else None,
                zorder=3,
            )
            if q in ("p50", "p99"):
                m = statistics.median(values)
                ax.plot([m, m], [y - 0.35, y + 0.35], color=colours[q], lw=2)
                ax.annotate(f"{m:.3g}", (m, y + 0.38), fontsize=6, ha="center", color=colours[q])
    ax.set_yticks(range(len(labels)), labels, fontsize=7)
    ax.set_xscale("log")
    ax.set_xlabel("round-trip time (µs, log)")
    ax.set_title(title, fontsize=9)
    ax.grid(axis="x", which="both", alpha=0.3)
    ax.invert_yaxis()


def stream_latency(doc: dict[str, Any], out: Path) -> Path | None:
    rows: dict[int, dict[str, dict[str, list[float]]]] = collections.defaultdict(
        lambda: collections.defaultdict(lambda: {"p50": [], "p95": [], "p99": []})
    )
    for r in doc["records"]:
        if "p50_ns" in r:
            row = rows[r["payload"]][f"{r['impl']} {r['variant']}"]
            for q in ("p50", "p95", "p99"):
                if r.get(f"{q}_ns") is not None:
                    row[q].append(r[f"{q}_ns"] / 1e3)
    if not rows:
        return None
    plt = _pyplot()
    payloads = sorted(rows)
    fig, axes = plt.subplots(len(payloads), 1, figsize=(8, 2.2 + 2.2 * len(payloads)))
    for ax, payload in zip(list(axes) if len(payloads) > 1 else [axes], payloads):
        _latency_rows(ax, rows[payload], f"stream request/response, {_fmt_bytes(payload)}")
    axes_list = list(axes) if len(payloads) > 1 else [axes]
    axes_list[0].legend(fontsize=7, loc="lower right")
    return _save(
        fig,
        out,
        f"python -m benchmarks stream ({doc['meta'].get('date_utc', '')}): "
        "each repeat's percentiles, bars at the medians",
    )


def channel_latency(doc: dict[str, Any], out: Path) -> Path | None:
    rows: dict[str, dict[str, list[float]]] = collections.defaultdict(
        lambda: {"p50": [], "p95": [], "p99": []}
    )
    for r in doc["records"]:
        if "p50_us" in r:
            rows[f"{r['scenario']}: {r['peer']}"]["p50"].append(r["p50_us"])
            rows[f"{r['scenario']}: {r['peer']}"]["p99"].append(r["p99_us"])
    if not rows:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 1.4 + 0.45 * len(rows)))
    _latency_rows(
        ax,
        rows,
        "channel ping-pong (one message each way): each round's p50 and p99, bars at the medians",
    )
    ax.legend(fontsize=7, loc="lower right")
    return _save(fig, out)


def _median_range(values: list[float]) -> tuple[float, float, float]:
    return statistics.median(values), min(values), max(values)


def stream_throughput(doc: dict[str, Any], out: Path) -> Path | None:
    write_read: dict[str, dict[int, list[float]]] = collections.defaultdict(
        lambda: collections.defaultdict(list)
    )
    pingpong: dict[str, dict[int, list[float]]] = collections.defaultdict(
        lambda: collections.defaultdict(list)
    )
    for r in doc["records"]:
        if "gbps" in r:
            size = math.prod(r["shape"]) * STREAM_ITEMSIZE
            write_read[f"{r['impl']} {r['variant']}"][size].append(r["gbps"])
        elif "rt_per_s" in r:
            pingpong[f"{r['impl']} {r['variant']}"][r["payload"]].append(
                r["rt_per_s"] * r["payload"] / 1e9
            )
    if not write_read and not pingpong:
        return None
    plt = _pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.8))
    for ax, data, title in (
        (axes[0], write_read, "write + read, one process"),
        (axes[1], pingpong, "request/response: payload one way"),
    ):
        for label, by_size in sorted(data.items()):
            sizes = sorted(by_size)
            stats = [_median_range(by_size[s]) for s in sizes]
            med = [m for m, _, _ in stats]
            err = [[m - lo for m, lo, _ in stats], [hi - m for m, _, hi in stats]]
            ax.errorbar(sizes, med, yerr=err, marker="o", ms=4, capsize=2, label=label)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("payload (bytes, log)")
        ax.set_ylabel("GB/s (log)")
        ax.set_title(title, fontsize=9)
        ax.grid(which="both", alpha=0.3)
        ax.legend(fontsize=6)
    return _save(
        fig,
        out,
        "python -m benchmarks stream: throughput against payload size, median of "
        "repeats with their range",
    )


def channel_throughput(doc: dict[str, Any], out: Path) -> Path | None:
    by_scenario: dict[str, dict[str, list[float]]] = collections.defaultdict(
        lambda: collections.defaultdict(list)
    )
    for r in doc["records"]:
        for key in ("msgs_per_s", "frames_per_s"):
            if key in r:
                by_scenario[f"{r['scenario']} ({key.replace('_per_s', '')}/s)"][r["peer"]].append(
                    r[key]
                )
    if not by_scenario:
        return None
    plt = _pyplot()
    fig, axes = plt.subplots(
        len(by_scenario), 1, figsize=(8, sum(1 + 0.35 * len(p) for p in by_scenario.values()))
    )
    for ax, (scenario, peers) in zip(axes if len(by_scenario) > 1 else [axes], by_scenario.items()):
        labels = list(peers)
        med = [statistics.median(peers[p]) for p in labels]
        ax.barh(range(len(labels)), med, color="tab:blue", alpha=0.5)
        for y, p in enumerate(labels):
            ax.scatter(peers[p], [y] * len(peers[p]), s=10, color="black", zorder=3)
        ax.set_yticks(range(len(labels)), labels, fontsize=7)
        ax.set_xscale("log")
        ax.set_title(scenario, fontsize=9)
        ax.invert_yaxis()
        ax.grid(axis="x", which="both", alpha=0.3)
    return _save(fig, out, "python -m benchmarks channel: median of rounds (bar), each round (dot)")


def loader_epochs(doc: dict[str, Any], out: Path) -> Path | None:
    data: dict[str, dict[str, dict[str, list[float]]]] = collections.defaultdict(
        lambda: collections.defaultdict(lambda: collections.defaultdict(list))
    )
    for r in doc["records"]:
        if "epoch" in r and "regime" in r:
            data[r["regime"]][r["size"]][r["loader"]].append(r["seconds"])
    if not data:
        return None
    plt = _pyplot()
    regimes = list(data)
    fig, axes = plt.subplots(1, len(regimes), figsize=(6 * len(regimes), 4.5), squeeze=False)
    for ax, regime in zip(axes[0], regimes):
        sizes = list(data[regime])
        loaders = sorted({lo for s in sizes for lo in data[regime][s]})
        width = 0.8 / len(loaders)
        for k, loader in enumerate(loaders):
            xs = [i + (k - (len(loaders) - 1) / 2) * width for i in range(len(sizes))]
            values = [data[regime][s].get(loader, []) for s in sizes]
            ax.boxplot(
                values,
                positions=xs,
                widths=width * 0.9,
                patch_artist=True,
                boxprops={"facecolor": f"C{k}", "alpha": 0.5},
                showfliers=True,
                flierprops={"markersize": 3},
            )
            ax.plot([], [], color=f"C{k}", lw=6, alpha=0.5, label=loader)
        ax.set_xticks(range(len(sizes)), sizes, fontsize=7, rotation=20)
        ax.set_yscale("log")
        ax.set_ylabel("epoch time (s, log)")
        ax.set_title(f"regime: {regime}", fontsize=9)
        ax.grid(axis="y", which="both", alpha=0.3)
        ax.legend(fontsize=7)
    return _save(
        fig,
        out,
        "python -m benchmarks loader: every epoch's time per dataset (samples x bytes / batch)",
    )


#: What each part's results are plotted as: (part, suffix of the PNG, plot).
PLOTS = [
    ("stream", "latency", stream_latency),
    ("stream", "throughput", stream_throughput),
    ("channel", "latency", channel_latency),
    ("channel", "throughput", channel_throughput),
    ("loader", "epochs", loader_epochs),
]


def newest(where: Path, part: str) -> Path | None:
    """The newest default-named results file of ``part`` in ``where``
    (``DATE-MACHINE-PART.json`` or ``...-PART-N.json``; a variant such as
    ``-stream-hogs.json`` is not the part's plain run)."""
    pattern = re.compile(rf"(\d{{4}}-\d{{2}}-\d{{2}})-[a-z0-9]+-{re.escape(part)}(?:-(\d+))?\.json")
    found = []
    for path in where.glob(f"*-{part}*.json"):
        m = pattern.fullmatch(path.name)
        if m:
            found.append((m.group(1), int(m.group(2) or 1), path))
    return max(found)[2] if found else None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks.plot", description=__doc__.split("\n")[0]
    )
    ap.add_argument("files", nargs="*", metavar="RESULTS.json", help="results files to plot")
    ap.add_argument(
        "--dir",
        default=str(RESULTS_DIR),
        help="where to find the newest results without files (default: benchmarks/results/)",
    )
    opts = ap.parse_args(argv)
    if opts.files:
        sources = [Path(f) for f in opts.files]
    else:
        parts = dict.fromkeys(part for part, _, _ in PLOTS)
        sources = []
        for part in parts:
            path = newest(Path(opts.dir), part)
            if path is None:
                print(f"[plot] no {part} results in {opts.dir}, its plots skipped", file=sys.stderr)
            else:
                sources.append(path)
    for source in sources:
        doc = _load(source)
        if doc is None:
            continue
        part = doc.get("meta", {}).get("part")
        for name, suffix, plot in PLOTS:
            if name != part:
                continue
            target = source.with_name(f"{source.stem}-{suffix}.png")
            made = plot(doc, target)
            print(f"[plot] {target}" + ("" if made else ": nothing to plot"), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
