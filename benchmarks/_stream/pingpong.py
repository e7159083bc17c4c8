"""Scenario (b): cross-process ping-pong. A request of PAYLOAD bytes goes
out on stream A, a worker process (the responder) reads it and writes a
64 B ack on stream B. Every peer has a copy row and a zero-copy row (how
the responder reads the request); at 64 B the wake-up rows follow
(shmstream with ``spin_us=0`` on both ends against an os.pipe ping-pong).
Round trips/s and p50/p95/p99 latency, median of the repeats."""

from __future__ import annotations

import argparse
import math
import os
import time
from array import array
from collections.abc import Callable
from typing import Any

from .._common import (
    BenchError,
    Results,
    emit,
    fmt_bytes,
    fmt_hz,
    fmt_ratio,
    fmt_spread,
    fmt_us,
    median,
    percentiles,
    progress,
    render_table,
)
from .._workers import Worker
from .peer import COPY, STOP, WAIT_S, ZERO_COPY, Names, Peer
from .peers import OURS, Peers, make_peer

PAYLOADS = (64, 64 << 10, 4 << 20)
WAKEUP_PAYLOAD = PAYLOADS[0]


def respond_task(
    ready: Callable[[], None],
    peer: str,
    self_module: str,
    variant: str,
    payload: int,
    **kwargs: Any,
) -> int:
    """Worker task: the responder of one ping-pong row."""
    return make_peer(peer, self_module).respond(ready, variant, payload, **kwargs)


def _rows(peers: Peers, payload: int) -> list[tuple[Peer, str, bool]]:
    """(peer, variant, is a wake-up row) in table order."""
    rows = [(p, v, False) for p in peers.wanted for v in p.pingpong_variants]
    if payload == WAKEUP_PAYLOAD:
        rows += [(p, v, True) for p in [*peers.wanted, peers.pipe] for v in p.wakeup_variants]
    return rows


def _variant_text(peer: Peer, variant: str, wakeup: bool) -> str:
    return (peer.wakeup_variants if wakeup else peer.pingpong_variants)[variant]


def run(
    cfg: argparse.Namespace, peers: Peers, names: Names, res: Results, workers: list[Worker]
) -> None:
    stats: dict[tuple[str, str, int], dict[str, list[float]]] = {}
    for payload in PAYLOADS:
        rows = [r for r in _rows(peers, payload) if peers.ok(r[0])]
        for rep in range(cfg.repeats):
            for peer, variant, _ in rows:
                impl = peer.name
                try:
                    r = _once(peer, variant, payload, cfg, names, workers[0])
                except BenchError as exc:
                    res.error(f"(b) {impl} {variant} {fmt_bytes(payload)}: {exc}")
                    continue
                d = stats.setdefault((impl, variant, payload), {})
                for k, v in r.items():
                    d.setdefault(k, []).append(v)
                res.add(section="b", payload=payload, impl=impl, variant=variant, repeat=rep, **r)
                progress(
                    f"(b) ping-pong {fmt_bytes(payload)} {impl} {variant} "
                    f"rep {rep + 1}/{cfg.repeats}: "
                    f"{fmt_hz(r['rt_per_s'], '/s')} p50 {fmt_us(r['p50_ns'])} us"
                )
    emit(res, _table(cfg, peers, stats))


def _once(
    peer: Peer, variant: str, payload: int, cfg: argparse.Namespace, names: Names, worker: Worker
) -> dict[str, float]:
    req = peer.requester(variant, payload, names)
    started = False
    try:
        try:
            worker.start(
                respond_task,
                fds=req.fds,
                peer=peer.name,
                self_module=peer.module,
                variant=variant,
                payload=payload,
                **req.kwargs,
            )
            started = True
        finally:
            for fd in req.fds:  # the responder has its own copies now
                os.close(fd)
        worker.expect("ready")
        req.connect()
        # warm up, then size the run to about cfg.seconds
        warm_n = 50 if cfg.quick else 200
        lat = array("q", bytes(8 * warm_n))
        t0 = time.perf_counter()
        seq = req.rt(0, warm_n, lat)
        per = (time.perf_counter() - t0) / warm_n
        n = max(20, min(2_000_000, int(cfg.seconds / per)))
        lat = array("q", bytes(8 * n))
        t0 = time.perf_counter_ns()
        seq = req.rt(seq, n, lat)
        dt = (time.perf_counter_ns() - t0) / 1e9
        req.rt(STOP - 1, 1, array("q", bytes(8)))
        handled = worker.expect("done")
        started = False
        if handled != seq:
            raise BenchError(f"responder handled {handled} requests, requester sent {seq}")
        p50, p95, p99 = percentiles(lat, (50, 95, 99))
        return {
            "rt_per_s": n / dt,
            "p50_ns": p50,
            "p95_ns": p95,
            "p99_ns": p99,
            "round_trips": n,
            "seconds": dt,
        }
    finally:
        # the requester's ends go first: a responder still waiting for a
        # request sees EOF (a pipe) or gives up within WAIT_S, then reports
        # an error that is drained here
        req.close()
        if started:
            try:
                worker.expect("done", timeout=WAIT_S + 5)
            except BenchError:
                pass


def _table(
    cfg: argparse.Namespace, peers: Peers, stats: dict[tuple[str, str, int], dict[str, list[float]]]
) -> str:
    def rate(impl: str, variant: str, payload: int) -> float:
        return median(stats.get((impl, variant, payload), {}).get("rt_per_s", []))

    def best(peer: Peer, payload: int) -> float:
        vals = [rate(peer.name, v, payload) for v in (COPY, ZERO_COPY)]
        vals = [v for v in vals if not math.isnan(v)]
        return max(vals) if vals else float("nan")

    ours = peers.ours
    ours_wakeup = next(iter(ours.wakeup_variants))
    headers = [
        "payload",
        "implementation",
        "responder reads the request",
        "round trips/s",
        "p50 us",
        "p95 us",
        "p99 us",
        "p99/p50",
        "shmstream like-for-like",
        "shmstream best vs best",
    ]
    table = []
    for payload in PAYLOADS:
        for peer, variant, wakeup in _rows(peers, payload):
            head = [fmt_bytes(payload), peer.label(), _variant_text(peer, variant, wakeup)]
            if not peers.ok(peer):
                table.append(head + [peers.na(peer)] + [""] * 6)
                continue
            got = stats.get((peer.name, variant, payload))
            if not got:
                table.append(head + ["error"] + [""] * 6)
                continue
            r_s = median(got["rt_per_s"])
            p50, p99 = median(got["p50_ns"]), median(got["p99_ns"])
            like = bvb = ""
            if peer.name != OURS:
                like = fmt_ratio(rate(OURS, ours_wakeup if wakeup else variant, payload), r_s)
                if peer.pingpong_variants:
                    bvb = fmt_ratio(best(ours, payload), best(peer, payload))
            table.append(
                [
                    *head,
                    fmt_spread(got["rt_per_s"], lambda v: fmt_hz(v, "/s")),
                    fmt_spread(got["p50_ns"], fmt_us),
                    fmt_us(median(got["p95_ns"])),
                    fmt_spread(got["p99_ns"], fmt_us),
                    f"{p99 / p50:.1f}" if p50 > 0 else "-",
                    like,
                    bvb,
                ]
            )
    title = (
        f"(b) cross-process ping-pong: request of PAYLOAD on stream A, 64 B ack on "
        f"stream B; median [min-max] of {cfg.repeats} interleaved runs{cfg.regime}; "
        f"latency = one round trip; the requester "
        f"always copies its request in (write) and its ack out. "
        f'"like-for-like" = shmstream\'s round trips/s with the same kind of read '
        f"(copy vs copy, zero-copy vs zero-copy; on the os.pipe row: shmstream "
        f'spin_us=0 vs the pipe); "best vs best" = the faster of shmstream\'s '
        f"copy/zero-copy rows vs the faster of this peer's"
    )
    return render_table(headers, table, title, left=3)
