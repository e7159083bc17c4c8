"""Scenario (c): fan-out. One writer publishes 64 KiB frames as fast as it
can, two reader processes take what they can: frames/s delivered per
reader, missed frames (from sequence numbers, checked against the
library's own counter where it has one), torn frames (every 8-byte word of
a frame carries its sequence number)."""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from .._common import (
    BenchError,
    Results,
    call_quietly,
    emit,
    fmt_bytes,
    fmt_hz,
    fmt_ratio,
    fmt_spread,
    median,
    progress,
    render_table,
)
from .._workers import Worker
from ..peers._rawshm import raw_shm, raw_unlink
from .peer import ABORT, STOP, WAIT_S, Names, Peer
from .peers import OURS, Peers, make_peer

PAYLOAD = 64 << 10


# ------------------------------------------------------------ readers


def reader_task(
    ready: Callable[[], None], peer: str, self_module: str, ctl: str, payload: int, **kwargs: Any
) -> dict[str, Any]:
    """Worker task: one reader of a fan-out row. ``ctl`` is the segment of
    the control word (see ``_read_frames``)."""
    seg = raw_shm(ctl)
    fin = seg.buf[:8].cast("Q")
    reader = None
    try:
        buf = np.empty(payload, np.uint8)
        b64 = buf.view(np.uint64)
        tmp = np.empty(b64.shape, bool)
        reader = make_peer(peer, self_module).fan_reader(payload, buf, **kwargs)
        ready()
        out = _read_frames(reader.get, b64, tmp, fin)
        out["lib_missed"] = reader.missed() if reader.missed else None
        return out
    finally:
        if reader is not None:
            reader.close()
        fin.release()
        seg.close()


def _read_frames(
    get: Callable[[], bool], b64: np.ndarray, tmp: np.ndarray, fin: memoryview
) -> dict[str, Any]:
    """``get()`` fills b64 with a frame newer than the last one and returns
    True, or returns False after ~50 ms without one. ``fin[0]`` is STOP
    while the writer runs, then the last seq written (or ABORT)."""
    mono = time.monotonic
    frames = missed = torn = 0
    last = -1
    first_t = 0.0
    deadline = mono() + WAIT_S
    not_equal = np.not_equal
    while True:
        if not get():
            f = fin[0]
            if f == ABORT:
                raise BenchError("writer aborted")
            if f != STOP:
                break  # writer done and nothing newer arrived
            if mono() > deadline:
                raise BenchError(f"reader saw no new frame for {WAIT_S:.0f} s")
            continue
        s = int(b64[0])
        not_equal(b64, s, out=tmp)
        if tmp.any():
            torn += 1
            continue
        if last >= 0:
            if s <= last:
                raise BenchError(f"frame seq went from {last} to {s}")
            missed += s - last - 1
        else:
            first_t = time.perf_counter()
        last = s
        frames += 1
        if s == fin[0]:
            break
        deadline = mono() + WAIT_S
    seconds = time.perf_counter() - first_t if frames else 0.0
    return {"frames": frames, "missed": missed, "torn": torn, "seconds": seconds}


# ------------------------------------------------------------- writer


def _once(
    peer: Peer, variant: str, cfg: argparse.Namespace, names: Names, workers: list[Worker]
) -> dict[str, Any]:
    ctl = names.raw_name("fin")
    cseg = raw_shm(ctl, 64, create=True)
    fin = cseg.buf[:8].cast("Q")
    fin[0] = STOP
    pc = time.perf_counter
    started = 0
    seq = 0
    writer = None
    try:
        writer = peer.fan_writer(variant, PAYLOAD, names)
        publish = writer.publish
        for w in workers[:2]:
            w.start(
                reader_task,
                peer=peer.name,
                self_module=peer.module,
                ctl=ctl,
                payload=PAYLOAD,
                **writer.kwargs,
            )
            started += 1
        for w in workers[:2]:
            w.expect("ready")
        writer.connect()
        seconds = max(cfg.seconds * 2, 0.1)
        t0 = pc()
        end = t0 + seconds
        while True:
            for _ in range(32):
                seq += 1
                publish(seq)
            if pc() >= end:
                break
        dt = pc() - t0
        fin[0] = seq
        readers = [w.expect("done", timeout=WAIT_S + 5) for w in workers[:2]]
        started = 0
        out: dict[str, Any] = {"written_per_s": seq / dt, "written": seq, "seconds": dt}
        for i, r in enumerate(readers):
            # delivered per second of the writer's run (a reader that got two
            # frames in 3 us must not count as 600k frames/s)
            out[f"r{i}_per_s"] = r["frames"] / dt
            out[f"r{i}_seconds"] = r["seconds"]
            out[f"r{i}_frames"] = r["frames"]
            out[f"r{i}_missed"] = r["missed"]
            out[f"r{i}_lib_missed"] = r["lib_missed"]
            out[f"r{i}_torn"] = r["torn"]
        return out
    finally:
        if started:
            fin[0] = ABORT  # readers stop within ~50 ms and report an error
            for w in workers[:started]:
                try:
                    w.expect("done", timeout=WAIT_S + 5)
                except BenchError:
                    pass
        fin.release()
        cseg.close()
        call_quietly(raw_unlink, ctl)
        if writer is not None:
            writer.close()


# ------------------------------------------------------------ section


def run(
    cfg: argparse.Namespace, peers: Peers, names: Names, res: Results, workers: list[Worker]
) -> None:
    stats: dict[tuple[str, str], dict[str, list[Any]]] = {}
    rows = [(p, v) for p in peers.wanted for v in p.fanout_variants]
    for rep in range(cfg.repeats):
        for peer, variant in rows:
            if not peers.ok(peer):
                continue
            impl = peer.name
            what = f"{impl} {variant}".strip()
            try:
                r = _once(peer, variant, cfg, names, workers)
            except BenchError as exc:
                res.error(f"(c) {what}: {exc}")
                continue
            res.add(section="c", payload=PAYLOAD, impl=impl, variant=variant, repeat=rep, **r)
            if impl == OURS:  # the subject's own counters must be right
                for i in (0, 1):
                    if r[f"r{i}_missed"] != r[f"r{i}_lib_missed"]:
                        res.error(
                            f"(c) {what} reader {i}: missed from sequence numbers "
                            f"{r[f'r{i}_missed']} != total_missed_writes "
                            f"{r[f'r{i}_lib_missed']}"
                        )
                    if r[f"r{i}_torn"]:
                        res.error(f"(c) {what} reader {i}: {r[f'r{i}_torn']} torn frames")
            d = stats.setdefault((impl, variant), {})
            for k, v in r.items():
                d.setdefault(k, []).append(v)
            progress(
                f"(c) fan-out {what} rep {rep + 1}/{cfg.repeats}: written "
                f"{fmt_hz(r['written_per_s'], '/s')}, readers {fmt_hz(r['r0_per_s'], '/s')} "
                f"{fmt_hz(r['r1_per_s'], '/s')}, missed {r['r0_missed']}/{r['r1_missed']}, "
                f"torn {r['r0_torn'] + r['r1_torn']}"
            )
    emit(res, _table(cfg, peers, rows, stats))


def _table(
    cfg: argparse.Namespace,
    peers: Peers,
    rows: list[tuple[Peer, str]],
    stats: dict[tuple[str, str], dict[str, list[Any]]],
) -> str:
    def per_reader(key: tuple[str, str]) -> float:
        d = stats.get(key)
        if not d:
            return float("nan")
        return median([(a + b) / 2 for a, b in zip(d["r0_per_s"], d["r1_per_s"])])

    def slower_reader(key: tuple[str, str]) -> float:
        d = stats.get(key)
        if not d:
            return float("nan")
        return median([min(a, b) for a, b in zip(d["r0_per_s"], d["r1_per_s"])])

    def rate(v: float) -> str:
        return fmt_hz(v, "/s")

    headers = [
        "implementation",
        "written/s",
        "reader 1 frames/s",
        "reader 2 frames/s",
        "missed % (r1/r2)",
        "missed = library counter",
        "torn (all runs)",
        "shmstream vs this (mean reader)",
        "shmstream vs this (slower reader)",
    ]
    table = []
    ours_variant = peers.ours.fanout_variants[0]
    ours_key = (OURS, ours_variant)
    for peer, variant in rows:
        label = f"{peer.label()} {variant}".strip()
        if not peers.ok(peer):
            table.append([label, peers.na(peer)] + [""] * 7)
            continue
        d = stats.get((peer.name, variant))
        if not d:
            table.append([label, "error"] + [""] * 7)
            continue

        def pct(i: int, d: dict[str, list[Any]] = d) -> float:
            return median(
                [
                    m / (m + f) * 100 if m + f else 0.0
                    for m, f in zip(d[f"r{i}_missed"], d[f"r{i}_frames"])
                ]
            )

        if peer.counts_missed:
            agree = all(
                d[f"r{i}_missed"][k] == d[f"r{i}_lib_missed"][k]
                for i in (0, 1)
                for k in range(len(d["r0_missed"]))
            )
            agree_s = "yes" if agree else "NO"
        else:
            agree_s = "n/a"
        mine = (peer.name, variant) == ours_key
        key = (peer.name, variant)
        table.append(
            [
                label,
                fmt_spread(d["written_per_s"], rate),
                fmt_spread(d["r0_per_s"], rate),
                fmt_spread(d["r1_per_s"], rate),
                f"{pct(0):.1f} / {pct(1):.1f}",
                agree_s,
                str(sum(d["r0_torn"]) + sum(d["r1_torn"])),
                "" if mine else fmt_ratio(per_reader(ours_key), per_reader(key)),
                "" if mine else fmt_ratio(slower_reader(ours_key), slower_reader(key)),
            ]
        )
    title = (
        f"(c) fan-out: one writer, two reader processes, {fmt_bytes(PAYLOAD)} "
        f"frames, writer as fast as it can; median [min-max] of {cfg.repeats} interleaved "
        f"runs{cfg.regime}; ratios = frames/s "
        f"delivered per reader by shmstream {ours_variant} vs this row (mean of the two "
        f"readers; the slower reader of each run)"
    )
    return render_table(headers, table, title)
