"""DataLoader transport: shmstream.torch.DataLoader against torch's default
DataLoader, in the same run, whole epochs.

    python -m benchmarks loader [--workers N] [--epochs N] [--rounds N]
                                     [--sizes 500x1K/32,...] [--regimes default,persistent]
                                     [--first-use 64x50K,...|none] [--touch]
                                     [--start-method M] [--json PATH]

Datasets: N samples of D float32 elements, batch size B. The R torch
shared-memory PR's table (500x1K/32: 128 KB batches, 200x50K/64: 12.8 MB,
100x500K/64: 128 MB, 100x1M/32: 128 MB) plus long epochs (2000x50K/64,
400x500K/64). ``__getitem__`` returns ``torch.full((D,), float(i)), i``.

What is timed: whole epochs, from ``iter(loader)`` to exhaustion, worker
start-up included (it is the same for both loaders), in two regimes:
``default`` (``persistent_workers=False``: new workers every epoch, measured
first) and ``persistent`` (``persistent_workers=True``). Each round builds a
fresh loader of each kind and runs ``--epochs`` epochs of each, interleaved
(order alternating torch, shmstream / shmstream, torch); the ratio is
torch's median epoch time over shmstream's, over every epoch of every round.
The first epoch of a fresh loader (slot pool empty) is also reported on its
own, and the last shmstream loader's pool: batches delivered from fresh and
reused slots and through torch's path, and the pool's size. ``--touch``
makes the consumer sum every batch; by default it only receives them. Every
batch's first and last element and its labels are checked.
"""

from __future__ import annotations

import argparse
import gc
import time
import warnings
from typing import Any, cast

from ._common import (
    JSON_HELP,
    BenchError,
    Results,
    emit,
    fmt_ratio,
    fmt_spread,
    median,
    progress,
    render_table,
)

DEFAULT_SIZES = "500x1K/32,200x50K/64,100x500K/64,100x1M/32,2000x50K/64,400x500K/64"
FIRST_USE = "64x50K,64x500K"
QUICK_SIZES, QUICK_FIRST_USE = "40x1K/8", "8x1K"
REGIMES = {"default": False, "persistent": True}


def parse_sizes(text: str) -> list[tuple[int, int, int, str]]:
    out = []
    for part in text.split(","):
        shape, bs = part.split("/")
        n, d = shape.lower().split("x")
        mult = {"k": 1000, "m": 1000 * 1000}
        dim = int(d[:-1]) * mult[d[-1]] if d[-1] in mult else int(d)
        out.append((int(n), dim, int(bs), part))
    return out


#: The kind that measures an epoch with nothing to carry (see main).
FLOOR = "floor"


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks loader", description=__doc__.split("\n")[0]
    )
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument(
        "--epochs", type=int, default=None, help="epochs per fresh loader (default 3; --quick: 2)"
    )
    ap.add_argument(
        "--rounds",
        type=int,
        default=None,
        help="fresh loaders of each kind per row (default 5; --quick: 1)",
    )
    ap.add_argument(
        "--sizes", default=None, help=f"default {DEFAULT_SIZES} (--quick: {QUICK_SIZES})"
    )
    ap.add_argument(
        "--regimes",
        default="default,persistent",
        help="default (persistent_workers=False), persistent, or both",
    )
    ap.add_argument(
        "--first-use",
        default=None,
        help=f"batches (BxD) of the first-use table, 'none' to skip (default {FIRST_USE}; "
        f"--quick: {QUICK_FIRST_USE})",
    )
    ap.add_argument("--quick", action="store_true", help="a smoke run: one small dataset")
    ap.add_argument("--touch", action="store_true", help="sum every batch in the consumer")
    ap.add_argument("--start-method", default=None, help="default: torch's default")
    ap.add_argument("--json", metavar="PATH", help=JSON_HELP)
    opts = ap.parse_args(argv)
    for name, full, quick in (
        ("epochs", 3, 2),
        ("rounds", 5, 1),
        ("sizes", DEFAULT_SIZES, QUICK_SIZES),
        ("first_use", FIRST_USE, QUICK_FIRST_USE),
    ):
        if getattr(opts, name) is None:
            setattr(opts, name, quick if opts.quick else full)
    regimes = [r.strip() for r in opts.regimes.split(",") if r.strip()]
    for r in regimes:
        if r not in REGIMES:
            ap.error(f"unknown regime {r!r}; known: {', '.join(REGIMES)}")
    try:
        import torch
    except ImportError:
        print("python -m benchmarks loader: torch is not installed (pip install shmstream[torch])")
        return 2
    from shmstream import torch as shm_torch

    results = Results("loader", argv)
    print(f"# python -m benchmarks loader on {results.meta['cpu']}")
    results.meta["versions"]["torch"] = torch.__version__
    results.meta.update(
        workers=opts.workers,
        start_method=opts.start_method,
        touch=opts.touch,
        epochs=opts.epochs,
        rounds=opts.rounds,
    )
    torch.set_num_threads(1)
    kinds: dict[str, Any] = {
        "torch": torch.utils.data.DataLoader,
        "shmstream": shm_torch.DataLoader,
        # The same epochs with one float per sample, through torch's loader:
        # what an epoch costs with (almost) nothing to carry, which both
        # loaders pay alike (worker start and stop in the default regime).
        # For batches of MBs, torch's epoch over it bounds any transport's gain.
        FLOOR: lambda ds, **kw: torch.utils.data.DataLoader(
            cast(Any, FullDataset(len(ds), 1)), **kw
        ),
    }

    for regime in regimes:
        rows = []
        for n, dim, bs, label in parse_sizes(opts.sizes):
            ds = FullDataset(n, dim)
            kwargs: dict[str, Any] = dict(
                batch_size=bs, num_workers=opts.workers, persistent_workers=REGIMES[regime]
            )
            if opts.start_method:
                kwargs["multiprocessing_context"] = opts.start_method
            times: dict[str, list[float]] = {k: [] for k in kinds}
            firsts: dict[str, list[float]] = {k: [] for k in kinds}
            stats: dict[str, Any] = {}
            for rnd in range(opts.rounds):
                # A fresh loader of each kind; their epochs interleave (order
                # alternating) so both see the same moments of a noisy machine.
                loaders: dict[str, Any] = {name: make(ds, **kwargs) for name, make in kinds.items()}
                for ep in range(opts.epochs):
                    order = list(kinds) if (rnd + ep) % 2 == 0 else list(reversed(list(kinds)))
                    for name in order:
                        secs = _epoch(loaders[name], n, opts.touch)
                        times[name].append(secs)
                        if ep == 0:
                            firsts[name].append(secs)
                        results.add(
                            regime=regime,
                            size=label,
                            loader=name,
                            round=rnd,
                            epoch=ep,
                            seconds=secs,
                            batch_bytes=bs * dim * 4,
                        )
                        progress(f"{regime} {label}: {name} epoch {ep + 1} {secs * 1e3:.0f} ms")
                stats = loaders["shmstream"].stats()
                loaders.clear()
                gc.collect()
            if stats:
                results.add(regime=regime, size=label, loader="shmstream", pool_stats=stats)
            rows.append(_row(n, dim, bs, times, firsts, stats, opts.epochs))
        title = (
            f"regime {regime} (persistent_workers={REGIMES[regime]}), float32 samples, "
            f"num_workers={opts.workers}, start method {opts.start_method or 'torch default'}, "
            f"consumer {'sums each batch' if opts.touch else 'receives batches'}; "
            f"whole epochs (iter() to exhaustion, worker start-up included), median "
            f"[min-max] of {opts.rounds} fresh loaders x {opts.epochs} epochs; ratio = "
            f"torch's median epoch / shmstream's, over all epochs and [min-max] over the "
            f"rounds (each round's own medians); the target holds in every round; floor = "
            f"the same epochs with 4-byte samples through torch's loader: worker start and "
            f"stop and torch's per-batch costs without the bytes; for batches of MBs, "
            f"torch / floor bounds the ratio any transport can reach"
        )
        table = render_table(
            [
                "dataset",
                "batch MB",
                "batches/epoch",
                "torch ms/epoch",
                "shmstream ms/epoch",
                "ratio",
                "floor ms/epoch",
                "torch / floor",
                "1st epoch ratio",
                "target",
                "verdict",
                "batches fresh/reused/torch",
                "pool MB",
            ],
            rows,
            title,
        )
        emit(results, table)
    if opts.first_use != "none":
        emit(results, _first_use(torch, results, opts.first_use, opts.rounds))
    results.save(opts.json, quick=opts.quick)
    return 0


_clock = time.process_time


def _new_slot_file(path: str, nbytes: int) -> Any:
    """A new slot file as the loader makes one (docs/loader.md): created,
    sized to whole pages, reserved with posix_fallocate and mapped shared,
    unpopulated, so the first batch goes into fresh pages. The same system
    calls, written here so that the benchmark needs nothing private."""
    import mmap
    import os

    capacity = max(-(-nbytes // mmap.PAGESIZE) * mmap.PAGESIZE, mmap.PAGESIZE)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        os.ftruncate(fd, capacity)
        os.posix_fallocate(fd, 0, capacity)
        return mmap.mmap(fd, capacity, flags=mmap.MAP_SHARED)
    except BaseException:
        os.unlink(path)
        raise
    finally:
        os.close(fd)


def _first_use(torch: Any, results: Results, spec: str, rounds: int) -> str:
    """A batch stacked into a fresh slot against torch's default collate in a
    worker (a fresh shared-memory file), same process, same samples, alternating;
    and into a reused slot. The worker's side only: what the first use of a
    slot costs: the same work as torch's (the kernel zeroes each page at its
    first write, the batch fills it), so the target is parity within the
    run-to-run spread (x0.95). CPU time of this process (the kernel's page
    zeroing and faults included): steadier than wall time on a shared
    machine."""
    import os

    rows = []
    reps = max(9, 2 * rounds + 1)
    for bs, dim, _, _ in parse_sizes(spec.replace(",", "/0,") + "/0"):
        samples = [torch.full((dim,), float(i)) for i in range(bs)]
        nbytes = bs * dim * 4
        path = f"/dev/shm/shmsbench-loader-{os.getpid()}"
        kept = _new_slot_file(path + ".reused", nbytes)
        os.unlink(path + ".reused")
        kept_u8 = torch.frombuffer(kept, dtype=torch.uint8)

        def torch_fresh() -> float:
            # torch's collate_tensor_fn in a worker: a new shared storage.
            t0 = _clock()
            storage = samples[0]._typed_storage()._new_shared(bs * dim, device="cpu")
            out = samples[0].new(storage).resize_(bs, dim)
            torch.stack(samples, 0, out=out)
            secs = _clock() - t0
            del out, storage
            return secs

        def slot_fresh() -> float:
            t0 = _clock()
            mm = _new_slot_file(path, nbytes)
            u8 = torch.frombuffer(mm, dtype=torch.uint8)
            torch.stack(samples, 0, out=u8[:nbytes].view(torch.float32).view(bs, dim))
            secs = _clock() - t0
            os.unlink(path)
            del u8
            mm.close()
            return secs

        def slot_reused() -> float:
            t0 = _clock()
            # kept_u8 is bound until the `del` below, which runs after the last call.
            torch.stack(samples, 0, out=kept_u8[:nbytes].view(torch.float32).view(bs, dim))  # noqa: F821
            return _clock() - t0

        times: dict[str, list[float]] = {"torch": [], "fresh": [], "reused": []}
        fns = {"torch": torch_fresh, "fresh": slot_fresh, "reused": slot_reused}
        slot_reused()
        for rep in range(reps):
            for name in list(fns) if rep % 2 == 0 else list(reversed(list(fns))):
                times[name].append(fns[name]())
        for name, secs in times.items():
            results.add(first_use=name, batch_bytes=nbytes, seconds=secs)
        t, f, r = (median(times[k]) for k in ("torch", "fresh", "reused"))
        rows.append(
            [
                f"{bs}x{_h(dim)}",
                f"{nbytes / 1e6:.1f}",
                f"{t * 1e3:.1f}",
                f"{f * 1e3:.1f}",
                f"x{t / f:.2f}",
                ">= x0.95",
                "met" if t / f >= 0.95 else "NOT met",
                f"{r * 1e3:.1f}",
                f"x{t / r:.2f}",
            ]
        )
        del kept_u8
        kept.close()
    title = (
        f"first use of a slot, worker side: a batch stacked into torch's fresh shared memory "
        f"(its default collate in a worker) or into a fresh slot (reserved, mapped "
        f"unpopulated), or a reused one; one process, CPU ms, median of {reps}"
    )
    return render_table(
        [
            "batch",
            "MB",
            "torch fresh ms",
            "fresh slot ms",
            "ratio",
            "target",
            "verdict",
            "reused slot ms",
            "ratio",
        ],
        rows,
        title,
    )


def _row(
    n: int,
    dim: int,
    bs: int,
    times: dict[str, list[float]],
    firsts: dict[str, list[float]],
    stats: dict[str, Any],
    epochs: int,
) -> list[str]:
    batch_bytes = bs * dim * 4
    t, s = median(times["torch"]), median(times["shmstream"])
    t1, s1 = median(firsts["torch"]), median(firsts["shmstream"])
    target = 1.3 if batch_bytes >= 1e6 else 0.9
    rounds = [
        (times["torch"][i : i + epochs], times["shmstream"][i : i + epochs])
        for i in range(0, len(times["torch"]), epochs)
    ]
    per_round = [median(a) / median(b) for a, b in rounds if a and b]

    def ms(v: float) -> str:
        return f"{v * 1e3:.0f}"

    def x(v: float) -> str:
        return f"x{v:.2f}"

    pool = (
        f"{stats.get('fresh', 0)}/{stats.get('reused', 0)}/{stats.get('fallbacks', 0)}"
        if stats
        else "-"
    )
    return [
        f"{n}x{_h(dim)} bs {bs}",
        f"{batch_bytes / 1e6:.2f}",
        str(-(-n // bs)),
        fmt_spread(times["torch"], ms),
        fmt_spread(times["shmstream"], ms),
        f"{fmt_ratio(t, s)} [{x(min(per_round))}-{x(max(per_round))}]" if per_round else "-",
        fmt_spread(times[FLOOR], ms),
        fmt_ratio(t, median(times[FLOOR])),
        fmt_ratio(t1, s1),
        f">= x{target}",
        "met" if per_round and min(per_round) >= target else "NOT met",
        pool,
        f"{stats.get('bytes', 0) / 1e6:.0f}" if stats else "-",
    ]


def _h(d: int) -> str:
    if d % 1_000_000 == 0:
        return f"{d // 1_000_000}M"
    if d % 1000 == 0:
        return f"{d // 1000}K"
    return str(d)


class FullDataset:
    """Map-style dataset: sample i is ``torch.full((dim,), float(i)), i``."""

    def __init__(self, n: int, dim: int) -> None:
        self.n, self.dim = n, dim

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> Any:
        import torch

        return torch.full((self.dim,), float(i)), i


def _epoch(loader: Any, n: int, touch: bool) -> float:
    """One whole epoch, iter() to exhaustion; returns its wall time after
    checking that every sample arrived, in order, with its own values."""
    seen = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t0 = time.perf_counter()
        for x, idx in loader:
            if touch:
                float(x.sum())
            b = len(idx)
            if not (
                int(idx[0]) == seen
                and int(idx[-1]) == seen + b - 1
                and float(x[0, 0]) == seen
                and float(x[-1, -1]) == seen + b - 1
            ):
                raise BenchError(f"the batch at sample {seen} does not match the dataset")
            seen += b
            del x, idx
        secs = time.perf_counter() - t0
    if seen != n:
        raise BenchError(f"an epoch delivered {seen} samples, expected {n}")
    return secs


if __name__ == "__main__":  # pragma: no cover
    import sys

    raise SystemExit(main(sys.argv[1:]))
