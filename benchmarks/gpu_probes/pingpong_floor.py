"""The floor of a cross-process GPU ping-pong, with torch alone (no
shmstream, no pyshmem): two sides hand a 64 KiB buffer back and forth
through flags in shared memory, and each side's device work is chosen by the
mode, so that the rows tell apart what a hand-over between two CUDA
contexts costs from what the copies and synchronizes cost.

    python benchmarks/gpu_probes/pingpong_floor.py      # needs torch with CUDA and a GPU

Modes (the echo side's work; the timing side always copies in, copies out):

- ``flag``: the echo does no device work (the timing side's own cost).
- ``copy``: the echo copies in and out, synchronizing after each (what a
  library that copies in both processes pays).
- ``copy1``: the echo copies in and out with one synchronize.
- ``kernel``: the echo runs one one-element kernel and synchronizes: device
  work that moves no bytes, so what is left is the context hand-over.
- ``event``: as ``copy``, but each side waits by polling a CUDA event on the
  host (what shmstream's reads do) rather than ``synchronize``.
- ``ce``: the echo moves the bytes through pinned host memory (device to
  host, host to device): copy-engine work only, no kernel.
- ``threads-flag``, ``threads-copy``: the two sides are threads of one
  process (one CUDA context); the difference between them is the device work
  without a context switch. The spinning side yields the GIL each turn.

docs/gpu.md ("Runs on a GPU") reads its numbers: what any library that
copies in both processes pays, against which the ping-pong row of
``python -m benchmarks gpu`` is judged."""

import sys
import threading
import time

import torch
import torch.multiprocessing as mp

N, WARM = 2000, 200


def _wait(ev: torch.cuda.Event) -> None:
    ev.record()
    while not ev.query():
        pass


def _echo_step(mode, ping, pong, x, ev):
    if mode.endswith("flag"):
        return
    if mode.endswith("copy"):
        x.copy_(ping)
        torch.cuda.synchronize()
        pong.copy_(x)
        torch.cuda.synchronize()
    elif mode == "ce":
        x.copy_(ping, non_blocking=True)
        pong.copy_(x, non_blocking=True)
        torch.cuda.synchronize()
    elif mode == "copy1":
        x.copy_(ping)
        pong.copy_(x)
        torch.cuda.synchronize()
    elif mode == "kernel":
        x[:1].add_(1)
        torch.cuda.synchronize()
    elif mode == "event":
        x.copy_(ping)
        _wait(ev)
        pong.copy_(x)
        _wait(ev)


def _spin(cell, i, threads):
    while cell.value != i:
        if threads:
            time.sleep(0)  # lets the other thread hold the GIL


def echo(ping, pong, flag, back, mode):
    torch.cuda.init()
    x = torch.empty(ping.shape, pin_memory=True) if mode == "ce" else torch.empty_like(ping)
    ev = torch.cuda.Event()
    back.value = -1
    for i in range(N + WARM):
        _spin(flag, i, mode.startswith("threads"))
        _echo_step(mode, ping, pong, x, ev)
        back.value = i


class _Cell:
    """A flag shared by two threads (mp.Value's interface, without a lock)."""

    def __init__(self, v: int) -> None:
        self.value = v


def run(mode):
    ping = torch.zeros(16384, device="cuda:0")
    pong = torch.zeros(16384, device="cuda:0")
    src = torch.rand(16384, device="cuda:0")
    got = torch.empty_like(src)
    ev = torch.cuda.Event()
    if mode.startswith("threads"):
        flag, back = _Cell(-1), _Cell(-2)
        p = threading.Thread(target=echo, args=(ping, pong, flag, back, mode))
    else:
        flag = mp.Value("q", -1, lock=False)
        back = mp.Value("q", -2, lock=False)
        p = mp.get_context("spawn").Process(target=echo, args=(ping, pong, flag, back, mode))
    p.start()
    while back.value != -1:
        pass
    lat = []
    for i in range(N + WARM):
        t = time.perf_counter_ns()
        ping.copy_(src)
        if mode == "event":
            _wait(ev)
        else:
            torch.cuda.synchronize()
        flag.value = i
        _spin(back, i, mode.startswith("threads"))
        got.copy_(pong)
        if mode == "event":
            _wait(ev)
        else:
            torch.cuda.synchronize()
        if i >= WARM:
            lat.append(time.perf_counter_ns() - t)
    p.join(30)
    lat.sort()
    p50, p99 = lat[len(lat) // 2] / 1e3, lat[int(len(lat) * 0.99)] / 1e3
    print(f"torch-only ping-pong mode={mode}: p50 {p50:.1f} us p99 {p99:.1f} us", flush=True)


if __name__ == "__main__":
    # Two threads spinning on one GIL hand it over every switch interval;
    # a short one keeps the thread rows about the device, not the GIL.
    sys.setswitchinterval(1e-5)
    modes = sys.argv[1:] or [
        "flag",
        "copy",
        "copy1",
        "kernel",
        "event",
        "ce",
        "threads-flag",
        "threads-copy",
    ]
    for m in modes:
        run(m)
