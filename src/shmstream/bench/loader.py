"""DataLoader transport: shmstream.torch.DataLoader against torch's default
DataLoader, in the same run.

    python -m shmstream.bench loader [--workers N] [--repeats N] [--min-time S]
                                     [--sizes 500x1K/32,...] [--touch]
                                     [--start-method M] [--json PATH]

Datasets (the R torch shared-memory PR's table): float32 samples, N samples
of D elements, batch size B: 500x1K/32 (128 KB batches), 200x50K/64
(12.8 MB), 100x500K/64 (128 MB), 100x1M/32 (128 MB). ``__getitem__`` returns
a row of a tensor built once, so the loaders' transport is what is measured.

Both loaders get the same arguments (``num_workers=2``,
``persistent_workers=True``, the same start method). Worker start-up is
excluded: each measurement first runs one full epoch, then times whole
epochs until ``--min-time`` seconds have passed. Rows alternate torch,
shmstream, torch, ... ``--repeats`` times; the median is reported.
``--touch`` makes the consumer sum every batch (what a trainer's first read
costs); by default it only receives the batches. Every batch's first and
last sample is checked against the dataset.
"""
from __future__ import annotations

import argparse
import gc
import time
import warnings
from typing import Any

from ._common import BenchError, Results, emit, fmt_ratio, median, progress, render_table

DEFAULT_SIZES = "500x1K/32,200x50K/64,100x500K/64,100x1M/32"


def parse_sizes(text: str) -> list[tuple[int, int, int, str]]:
    out = []
    for part in text.split(","):
        shape, bs = part.split("/")
        n, d = shape.lower().split("x")
        mult = {"k": 1000, "m": 1000 * 1000}
        dim = int(d[:-1]) * mult[d[-1]] if d[-1] in mult else int(d)
        out.append((int(n), dim, int(bs), part))
    return out


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="shmstream bench loader", description=__doc__.split("\n")[0])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--min-time", type=float, default=2.0, help="seconds of epochs per measurement")
    ap.add_argument("--sizes", default=DEFAULT_SIZES)
    ap.add_argument("--touch", action="store_true", help="sum every batch in the consumer")
    ap.add_argument("--start-method", default=None, help="default: torch's default")
    ap.add_argument("--json", metavar="PATH")
    opts = ap.parse_args(argv)
    try:
        import torch
    except ImportError:
        print("shmstream bench loader: torch is not installed (pip install shmstream[torch])")
        return 2
    from .. import torch as shm_torch

    results = Results("loader", argv)
    results.meta["versions"]["torch"] = torch.__version__
    results.meta.update(workers=opts.workers, start_method=opts.start_method, touch=opts.touch)
    torch.set_num_threads(1)

    rows = []
    verdicts = []
    for n, dim, bs, label in parse_sizes(opts.sizes):
        data = torch.randn(n, dim, dtype=torch.float32)
        ds = _RowDataset(data)
        batch_bytes = bs * dim * 4
        kwargs: dict[str, Any] = dict(batch_size=bs, num_workers=opts.workers,
                                      persistent_workers=True)
        if opts.start_method:
            kwargs["multiprocessing_context"] = opts.start_method
        loaders = {
            "torch": torch.utils.data.DataLoader(ds, **kwargs),
            "shmstream": shm_torch.DataLoader(ds, **kwargs),
        }
        rates: dict[str, list[float]] = {k: [] for k in loaders}
        try:
            for name, loader in loaders.items():
                progress(f"{label}: starting {name} workers (not timed)")
                _epoch(loader, data, opts.touch)
            for rep in range(opts.repeats):
                order = list(loaders) if rep % 2 == 0 else list(reversed(list(loaders)))
                for name in order:
                    batches, secs = _measure(loaders[name], data, opts.touch, opts.min_time)
                    rates[name].append(batches / secs)
                    results.add(size=label, loader=name, batches=batches, seconds=secs,
                                batch_bytes=batch_bytes, repeat=rep)
                    progress(f"{label}: {name} {batches / secs:.1f} batches/s")
        finally:
            loaders.clear()
            gc.collect()
        t = median(rates["torch"])
        s = median(rates["shmstream"])
        # Bytes actually delivered per batch on average (the last batch is smaller).
        avg_bytes = n * dim * 4 / -(-n // bs)
        big = batch_bytes >= 12e6
        target = 1.3 if big else 0.9
        ratio = s / t
        verdicts.append((label, ratio, target))
        rows.append([
            f"{n}x{_h(dim)} bs {bs}", f"{batch_bytes / 1e6:.2f}",
            f"{t:.1f}", f"{t * avg_bytes / 1e6:.0f}",
            f"{s:.1f}", f"{s * avg_bytes / 1e6:.0f}",
            fmt_ratio(s, t), f">= x{target}", "met" if ratio >= target else "NOT met",
        ])
    title = (f"float32 datasets, num_workers={opts.workers}, persistent workers, start method "
             f"{opts.start_method or 'torch default'}, consumer "
             f"{'sums each batch' if opts.touch else 'receives batches'}; median of "
             f"{opts.repeats}, worker start-up excluded")
    table = render_table(
        ["dataset", "batch MB", "torch batches/s", "torch MB/s", "shmstream batches/s",
         "shmstream MB/s", "ratio", "target", "verdict"], rows, title)
    emit(results, table)
    if opts.json:
        results.dump(opts.json)
    return 0


def _h(d: int) -> str:
    if d % 1_000_000 == 0:
        return f"{d // 1_000_000}M"
    if d % 1000 == 0:
        return f"{d // 1000}K"
    return str(d)


class _RowDataset:
    """Map-style dataset: sample i is row i of a tensor built once."""

    def __init__(self, data: Any) -> None:
        self.data = data

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, i: int) -> Any:
        return self.data[i]


def _epoch(loader: Any, data: Any, touch: bool) -> int:
    n = 0
    seen = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for batch in loader:
            if touch:
                float(batch.sum())
            b = len(batch)
            if not (batch[0][0] == data[seen][0] and batch[-1][-1] == data[seen + b - 1][-1]):
                raise BenchError(f"batch {n} does not match the dataset")
            seen += b
            n += 1
            del batch
    if seen != len(data):
        raise BenchError(f"an epoch delivered {seen} samples, expected {len(data)}")
    return n


def _measure(loader: Any, data: Any, touch: bool, min_time: float) -> tuple[int, float]:
    batches = 0
    t0 = time.perf_counter()
    while True:
        batches += _epoch(loader, data, touch)
        secs = time.perf_counter() - t0
        if secs >= min_time:
            return batches, secs


if __name__ == "__main__":  # pragma: no cover
    import sys

    raise SystemExit(main(sys.argv[1:]))
