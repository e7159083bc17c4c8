"""Scenario (d): a pyRTC-style pipeline. Three processes hand a 64 KiB
frame along at 200 Hz: the source writes it on stream 1 (with its monotonic
time in the frame), a stage copies it from stream 1 to stream 2, the sink
reads stream 2 and records the latency source -> sink. Measured without
and with one CPU-bound hog per core (benchmarks/_hogs.py), and with the hogs
and the three processes under SCHED_FIFO (what a real-time loop does; needs
CAP_SYS_NICE or an RLIMIT_RTPRIO, the regime is skipped with the reason
otherwise), the regimes interleaved run by run: latency p50/p99 and each
process's CPU use (% of one core over the run, waits included). shmstream
only: the targets are about its wait policy (docs/waiting.md, "When no core
is spare")."""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import time
from typing import Any

import numpy as np

from .._common import (
    Results,
    emit,
    fmt_spread,
    median,
    percentiles,
    progress,
    render_table,
)
from .._hogs import hogs
from .peer import Names

HZ = 200
FRAME = (128, 64)  # float64: 64 KiB
STOP = -1.0
FIFO_PRIORITY = 10  # low in the real-time range: above every fair task, below the kernel's own
REGIMES = (
    ("quiet", "no hogs"),
    ("hogs", "one CPU-bound hog per core"),
    ("hogs-fifo", "hogs, the 3 processes SCHED_FIFO"),
)


def _fifo() -> None:
    """Make this process SCHED_FIFO (PermissionError without the right)."""
    os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(FIFO_PRIORITY))


def fifo_refusal() -> str | None:
    """Why this process may not use SCHED_FIFO, or None if it may."""
    try:
        pid = os.fork()
    except OSError as e:
        return f"cannot fork to test SCHED_FIFO: {e}"
    if pid == 0:  # try it in a child, so this process keeps its policy
        try:
            _fifo()
        except OSError:
            os._exit(1)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) == 0:
        return None
    return "SCHED_FIFO not permitted (needs CAP_SYS_NICE or RLIMIT_RTPRIO)"


def _stage(module: str, src: str, dst: str | None, ready: Any, out: Any, fifo: bool) -> None:
    """The middle stage (dst given) or the sink (dst None)."""
    import importlib

    if fifo:
        _fifo()
    ss = importlib.import_module(module)
    r = ss.open(src)
    w = ss.open(dst) if dst else None
    buf = np.empty(FRAME, np.float64)
    lat: list[int] = []
    ready.put(True)
    cpu0, t0 = time.process_time(), time.perf_counter()
    while True:
        r.read_new(out=buf, timeout=10)
        if w is not None:
            w.write(buf)
        else:
            lat.append(time.perf_counter_ns() - int(buf[0, 0]))
        if buf[0, 1] == STOP:
            break
    cpu = (time.process_time() - cpu0) / (time.perf_counter() - t0)
    policy = getattr(r, "spin_policy", None)  # None: a build before the wait policy
    r.close()
    if w is not None:
        w.close()
    out.put({"cpu": cpu, "lat": lat[:-1], "policy": policy})


def _once(module: str, names: Names, seconds: float, fifo: bool = False) -> dict[str, Any]:
    import importlib

    ss = importlib.import_module(module)
    n1, n2 = names.stream(ss, "loop1"), names.stream(ss, "loop2")
    ctx = mp.get_context("spawn")
    with (
        ss.create(n1, shape=FRAME, dtype=np.float64) as w1,
        ss.create(n2, shape=FRAME, dtype=np.float64),
    ):
        ready, out = ctx.Queue(), ctx.Queue()
        procs = [
            ctx.Process(target=_stage, args=(module, n1, n2, ready, out, fifo)),
            ctx.Process(target=_stage, args=(module, n2, None, ready, out, fifo)),
        ]
        for p in procs:
            p.start()
        for _ in procs:
            ready.get(timeout=60)
        frame = np.zeros(FRAME, np.float64)
        if fifo:
            policy = os.sched_getscheduler(0), os.sched_getparam(0)
            _fifo()
        frames = max(20, int(seconds * HZ))
        period = 1 / HZ
        cpu0, t0 = time.process_time(), time.perf_counter()
        nxt = t0
        for i in range(frames + 1):
            nxt += period
            time.sleep(max(0.0, nxt - time.perf_counter()))
            frame[0, 1] = STOP if i == frames else i
            frame[0, 0] = time.perf_counter_ns()
            w1.write(frame)
        cpu_src = (time.process_time() - cpu0) / (time.perf_counter() - t0)
        if fifo:
            os.sched_setscheduler(0, *policy)
        got = [out.get(timeout=60) for _ in procs]
        for p in procs:
            p.join(10)
    sink = next(g for g in got if g["lat"])
    p50, p99 = percentiles(sink["lat"], (50, 99))
    cpus = [cpu_src] + [g["cpu"] for g in got]
    return {
        "p50_us": p50 / 1e3,
        "p99_us": p99 / 1e3,
        "max_cpu_pct": 100 * max(cpus),
        "cpu_pct": [100 * c for c in cpus],
        "frames": len(sink["lat"]),
        "sink_policy": sink["policy"],
    }


def run(cfg: argparse.Namespace, names: Names, res: Results) -> None:
    seconds = 0.5 if cfg.quick else 2.0
    refused = fifo_refusal()
    stats: dict[str, dict[str, list[float]]] = {}
    for rep in range(cfg.repeats):
        for regime, _ in REGIMES:
            if regime == "hogs-fifo" and refused:
                continue
            if regime == "quiet":
                r = _once(cfg.self_module, names, seconds)
            else:
                with hogs() as n:
                    r = _once(cfg.self_module, names, seconds, fifo=regime == "hogs-fifo")
                r["hogs"] = n
            d = stats.setdefault(regime, {})
            for k in ("p50_us", "p99_us", "max_cpu_pct"):
                d.setdefault(k, []).append(r[k])
            res.add(section="d", regime=regime, repeat=rep, **r)
            progress(
                f"(d) 200 Hz loop {regime} rep {rep + 1}/{cfg.repeats}: p50 "
                f"{r['p50_us']:.0f} us, p99 {r['p99_us']:.0f} us, CPU max "
                f"{r['max_cpu_pct']:.1f}% of a core"
            )
    if refused:
        res.add(section="d", regime="hogs-fifo", skipped=refused)
    emit(res, _table(cfg, stats, refused))


P99_TARGET_US = 1000.0
CPU_TARGET_PCT = 10.0


def target_met(p99_us: list[float], cpu_pct: list[float]) -> bool:
    """The issue's rule: the median run meets the target and the worst run
    is within 10% of it (p99 and CPU alike)."""
    return (
        median(p99_us) <= P99_TARGET_US
        and max(p99_us) <= 1.1 * P99_TARGET_US
        and median(cpu_pct) <= CPU_TARGET_PCT
        and max(cpu_pct) <= 1.1 * CPU_TARGET_PCT
    )


def _table(
    cfg: argparse.Namespace, stats: dict[str, dict[str, list[float]]], refused: str | None
) -> str:
    def us(v: float) -> str:
        return f"{v:.0f}"

    def pct(v: float) -> str:
        return f"{v:.1f}"

    rows = []
    for regime, label in REGIMES:
        d = stats.get(regime)
        if regime == "hogs-fifo" and refused:
            rows.append([label, "skipped:", refused, "", ""])
            continue
        if not d:
            rows.append([label, "error", "", "", ""])
            continue
        rows.append(
            [
                label,
                fmt_spread(d["p50_us"], us),
                fmt_spread(d["p99_us"], us),
                fmt_spread(d["max_cpu_pct"], pct),
                "yes" if target_met(d["p99_us"], d["max_cpu_pct"]) else "no",
            ]
        )
    title = (
        f"(d) pyRTC-style loop: 3 shmstream processes hand a {FRAME[0]}x{FRAME[1]} "
        f"float64 frame (64 KiB) along at {HZ} Hz; latency source -> sink; CPU = the "
        f"busiest of the three processes, % of one core over the run; median "
        f"[min-max] of {cfg.repeats} runs, regimes interleaved; target: p99 <= 1 ms "
        f"and CPU <= 10% on the median run, the worst run within 10% of both"
    )
    return render_table(
        ["regime", "p50 us", "p99 us", "busiest process CPU %", "target met"], rows, title
    )
