"""Scenario (a): write an array and read it back in one process, every peer's
round-trip rows for each shape, round-robin, median of the repeats."""

from __future__ import annotations

import argparse

import numpy as np

from .._common import (
    Results,
    calibrate,
    call_quietly,
    emit,
    fmt_bytes,
    fmt_hz,
    fmt_ratio,
    fmt_spread,
    median,
    progress,
    render_table,
    time_loop,
)
from .peer import Names, Peer, RoundTrip
from .peers import OURS, Peers

SHAPES = ((100, 100), (128, 128), (1000, 1000))
HUGE_SHAPE = (10000, 10000)


def _nbytes(shape: tuple[int, ...]) -> int:
    return int(np.prod(shape)) * 4  # float32


def run(cfg: argparse.Namespace, peers: Peers, names: Names, res: Results) -> None:
    shapes: list[tuple[int, ...]] = [*SHAPES, *([HUGE_SHAPE] if cfg.huge else [])]
    rows = [(p, v) for p in peers.wanted for v in p.roundtrip_variants]
    hz: dict[tuple[str, str, tuple[int, ...]], list[float]] = {}
    for shape in shapes:
        setups: dict[tuple[str, str], RoundTrip] = {}
        try:
            for peer, variant in rows:
                if not peers.ok(peer):
                    continue
                try:
                    setups[(peer.name, variant)] = peer.roundtrip(variant, shape, names)
                except Exception as exc:  # noqa: BLE001
                    res.error(f"(a) {peer.name} {variant} {shape}: setup failed: {exc}")
            counts: dict[tuple[str, str], int] = {}
            for rep in range(cfg.repeats):
                for key, row in setups.items():
                    impl, variant = key
                    try:
                        if key not in counts:
                            counts[key] = calibrate(row.loop, cfg.seconds)
                        else:
                            row.loop(max(1, counts[key] // 20))  # re-warm after the others ran
                        n = counts[key]
                        dt = time_loop(row.loop, n)
                        row.check()
                    except Exception as exc:  # noqa: BLE001
                        res.error(f"(a) {impl} {variant} {shape}: {exc}")
                        continue
                    rate = n / dt
                    hz.setdefault((impl, variant, shape), []).append(rate)
                    res.add(
                        section="a",
                        shape=list(shape),
                        impl=impl,
                        variant=variant,
                        repeat=rep,
                        iterations=n,
                        seconds=dt,
                        hz=rate,
                        gbps=rate * _nbytes(shape) / 1e9,
                    )
                    progress(
                        f"(a) {'x'.join(map(str, shape))} {impl} {variant} "
                        f"rep {rep + 1}/{cfg.repeats}: {fmt_hz(rate)}"
                    )
        finally:
            for row in setups.values():
                call_quietly(row.close)
    emit(res, _table(cfg, peers, shapes, rows, hz))


def _table(
    cfg: argparse.Namespace,
    peers: Peers,
    shapes: list[tuple[int, ...]],
    rows: list[tuple[Peer, str]],
    hz: dict[tuple[str, str, tuple[int, ...]], list[float]],
) -> str:
    headers = ["implementation"] + [
        f"{'x'.join(map(str, s))} ({fmt_bytes(_nbytes(s))})" for s in shapes
    ]
    table_rows = []
    for peer, variant in rows:
        cells = [f"{peer.label()} {variant}"]
        for shape in shapes:
            if not peers.ok(peer):
                cells.append(peers.na(peer))
                continue
            vals = hz.get((peer.name, variant, shape))
            if not vals:
                cells.append("error")
                continue
            m = median(vals)
            cells.append(f"{fmt_spread(vals, fmt_hz)}, {m * _nbytes(shape) / 1e9:.2f} GB/s")
        table_rows.append(cells)

    def best(impl: str, shape: tuple[int, ...]) -> float:
        vals = [median(v) for (i, _, s), v in hz.items() if i == impl and s == shape and v]
        return max(vals) if vals else float("nan")

    if peers.ok(peers.ours):
        for peer in peers.wanted:
            if peer.name == OURS:
                continue
            cells = [f"shmstream best vs {peer.label()} best"]
            for shape in shapes:
                cells.append(
                    fmt_ratio(best(OURS, shape), best(peer.name, shape))
                    if peers.ok(peer)
                    else peers.na(peer)
                )
            table_rows.append(cells)
    title = (
        f"(a) write + read round trip in one process, float32{cfg.regime}, "
        f"median [min-max] of {cfg.repeats} interleaved runs; rate in round trips/s, "
        f"GB/s = payload bytes x median rate; ratios of medians"
    )
    return render_table(headers, table_rows, title)
