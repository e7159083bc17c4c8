"""The floor of a cross-process GPU ping-pong, with torch alone (no
shmstream, no pyshmem): two processes, each with its own CUDA context, hand
a 64 KiB buffer back and forth, each copying it and synchronizing, with
flags in shared memory. Mode "flag": the echo does no device work.

    python tools/gpu_pingpong_floor.py      # needs torch with CUDA and a GPU

docs/gpu.md ("Runs on a GPU", item 5) reads its numbers: what any library
that copies in both processes pays, against which the ping-pong row of
``python -m benchmarks gpu`` is judged."""

import time

import torch
import torch.multiprocessing as mp

N, WARM = 2000, 200


def echo(ping, pong, flag, back, mode):
    torch.cuda.init()
    x = torch.empty_like(ping)
    back.value = -1
    for i in range(N + WARM):
        while flag.value != i:
            pass
        if mode == "copy":
            x.copy_(ping)
            torch.cuda.synchronize()
            pong.copy_(x)
            torch.cuda.synchronize()
        back.value = i


def run(mode):
    ping = torch.zeros(16384, device="cuda:0")
    pong = torch.zeros(16384, device="cuda:0")
    src = torch.rand(16384, device="cuda:0")
    got = torch.empty_like(src)
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
        torch.cuda.synchronize()
        flag.value = i
        while back.value != i:
            pass
        got.copy_(pong)
        torch.cuda.synchronize()
        if i >= WARM:
            lat.append(time.perf_counter_ns() - t)
    p.join(30)
    lat.sort()
    p50, p99 = lat[len(lat) // 2] / 1e3, lat[int(len(lat) * 0.99)] / 1e3
    print(f"torch-only ping-pong mode={mode}: p50 {p50:.1f} us p99 {p99:.1f} us")


if __name__ == "__main__":
    for m in ("flag", "copy"):
        run(m)
