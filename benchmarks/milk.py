"""milk/CACAO streams: wake-up latency and read rate of ``shmstream.milk``
against shmstream's own streams, in the same run.

    python -m benchmarks milk [--shape 240x240] [--hz 2000] [--seconds 3]
                              [--read-shape 128x128] [--quick] [--json PATH]

1. Wake-up. A writer process publishes a float32 frame of ``--shape`` at
   ``--hz`` (absolute schedule) for ``--seconds``; the frame's first 8
   bytes carry ``time.monotonic_ns()`` at the write, the rest the frame
   number. The reader (this process) calls ``read_new`` in a loop; the
   latency is its clock after the call minus the stamp. Rows: a milk
   stream (``shmstream.milk``: semaphore wait, write flag + cnt0 check) and
   a shmstream stream (futex wait, seqlock). Every frame read is checked
   whole: a torn frame is counted (it must stay 0). milk's own C reader is
   not in this run (it needs milk's library; docs/milk.md).
2. Read rate. ``read(out=buf)`` of a ``--read-shape`` float32 frame in a
   loop for about a second, one process, both kinds.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import shutil
import tempfile
import time
import uuid
from typing import Any

import numpy as np

import shmstream
import shmstream.milk
from ._common import JSON_HELP, Results, emit, fmt_hz, latency_summary, progress

SPAWN = mp.get_context("spawn")


def _open(kind: str, name: str, directory: str) -> Any:
    if kind == "milk":
        return shmstream.milk.open(name, dir=directory)
    return shmstream.open(name)


def _writer(kind: str, name: str, directory: str, hz: float, seconds: float, go: Any) -> int:
    s = _open(kind, name, directory)
    frame = np.zeros(s.shape, np.float32)
    stamp = frame.reshape(-1).view(np.int64)
    go.wait()
    n = int(hz * seconds)
    start = time.monotonic()
    for k in range(1, n + 1):
        due = start + k / hz
        while time.monotonic() < due:
            pass  # absolute schedule: a late writer catches up
        frame.fill(k)
        stamp[0] = time.monotonic_ns()
        s.write(frame)
    s.close()
    return n


def _wakeup(kind: str, shape: tuple[int, ...], hz: float, seconds: float) -> dict[str, Any]:
    name = f"bench-milk-{uuid.uuid4().hex[:8]}"
    directory = tempfile.mkdtemp(prefix="bench-milk-")
    s: Any
    if kind == "milk":
        s = shmstream.milk.create(name, shape, np.float32, dir=directory)
    else:
        s = shmstream.create(name, shape=shape, dtype=np.float32)
    try:
        go = SPAWN.Event()
        total = int(hz * seconds)
        proc = SPAWN.Process(target=_writer, args=(kind, name, directory, hz, seconds, go))
        proc.start()
        lat, torn, seen, count = [], 0, 0, 0
        go.set()
        while count < total:
            got = s.read_new(timeout=10.0)
            now = time.monotonic_ns()
            flat = got.reshape(-1)
            lat.append(now - int(flat.view(np.int64)[0]))
            torn += int(not (flat[2:] == flat[2]).all())
            seen += 1
            count = int(flat[2])
        proc.join(30)
        return {
            "kind": kind,
            "frames": total,
            "seen": seen,
            "missed": total - seen,
            "torn": torn,
            **latency_summary(lat),
        }
    finally:
        s.close()
        if kind == "milk":
            s.unlink()
        else:
            shmstream.unlink(name)
        shutil.rmtree(directory, ignore_errors=True)


def _read_rate(kind: str, shape: tuple[int, ...], seconds: float) -> float:
    name = f"bench-milk-{uuid.uuid4().hex[:8]}"
    directory = tempfile.mkdtemp(prefix="bench-milk-")
    s: Any
    if kind == "milk":
        s = shmstream.milk.create(name, shape, np.float32, dir=directory)
    else:
        s = shmstream.create(name, shape=shape, dtype=np.float32)
    try:
        s.write(np.ones(shape, np.float32))
        buf = np.empty(shape, np.float32)
        n, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            for _ in range(100):
                s.read(out=buf)
            n += 100
        return n / (time.perf_counter() - start)
    finally:
        s.close()
        if kind == "milk":
            s.unlink()
        else:
            shmstream.unlink(name)
        shutil.rmtree(directory, ignore_errors=True)


def _shape(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.lower().split("x"))


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks milk", description=__doc__)
    p.add_argument("--shape", type=_shape, default=(240, 240))
    p.add_argument("--hz", type=float, default=2000.0)
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--read-shape", type=_shape, default=(128, 128))
    p.add_argument("--quick", action="store_true", help="1 s per row")
    p.add_argument("--json", metavar="PATH", help=JSON_HELP)
    a = p.parse_args(argv)
    res = Results("milk", argv)
    seconds = 1.0 if a.quick else a.seconds
    lines = [
        f"writer {a.hz:.0f} Hz, {a.shape} float32, {os.cpu_count()} CPUs",
        "| reader | frames | seen | missed | torn | wake-up p50 | p99 |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for kind in ("milk", "stream"):
        progress(f"wake-up, {kind}")
        r = _wakeup(kind, a.shape, a.hz, seconds)
        res.add(section="wakeup", **r)
        lines.append(
            f"| {kind} | {r['frames']} | {r['seen']} | {r['missed']} | {r['torn']} "
            f"| {r['p50_us']:.1f} us | {r['p99_us']:.1f} us |"
        )
    emit(res, "\n".join(lines))
    lines = [f"| read(out=buf) of {a.read_shape} float32 | rate |", "| --- | --- |"]
    for kind in ("milk", "stream"):
        progress(f"read rate, {kind}")
        hz = _read_rate(kind, a.read_shape, min(seconds, 1.0))
        res.add(section="read", kind=kind, shape=list(a.read_shape), hz=hz)
        lines.append(f"| {kind} | {fmt_hz(hz)} |")
    emit(res, "\n".join(lines))
    res.save(a.json, quick=a.quick)
    return 0
