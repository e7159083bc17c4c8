"""Where a 100x100 and a 1000x1000 GPU round trip spend their time: per-call times of
shmstream's and pyshmem's write and read beside torch's own ``copy_``, and a
cProfile of shmstream's (docs/gpu.md, "Runs on a GPU", item 8).

    python benchmarks/gpu_probes/roundtrip_profile.py   # needs torch with CUDA, pyshmem
"""

import cProfile
import pstats
import time
import uuid

import numpy as np
import pyshmem
import torch

import shmstream

N = 5000


def per_call(fn, n=N):
    for _ in range(200):
        fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / n * 1e6


def floor(side):
    src = torch.rand(side, side, device="cuda:0")
    dst = torch.empty_like(src)
    print(f"{side}x{side} torch copy_ only: {per_call(lambda: dst.copy_(src)):.1f} us")
    print(
        f"{side}x{side} torch copy_+sync: {per_call(lambda: (dst.copy_(src), torch.cuda.synchronize())):.1f} us"
    )
    print(
        f"{side}x{side} torch empty: {per_call(lambda: torch.empty(side, side, device='cuda:0')):.1f} us"
    )
    return src


def profile(lib, src, cprofile):
    name = "prof-" + uuid.uuid4().hex[:8]
    h = lib.create(name, shape=tuple(src.shape), dtype=np.float32, gpu_device="cuda:0")
    out = torch.empty_like(src)
    rt = per_call(lambda: (h.write(src), h.read()))
    w = per_call(lambda: h.write(src))
    r = per_call(h.read)
    print(
        f"{tuple(src.shape)} {lib.__name__}: round trip {rt:.1f} us, write {w:.1f} us, read {r:.1f} us"
    )
    if lib is shmstream:
        print(f"  read(out=) {per_call(lambda: h.read(out=out)):.1f} us")
    if lib is shmstream and cprofile:
        pr = cProfile.Profile()
        pr.enable()
        for _ in range(3000):
            h.write(src)
            h.read()
        pr.disable()
        pstats.Stats(pr).sort_stats("tottime").print_stats(22)
    h.close()
    lib.unlink(name)


for side in (100, 1000):
    src = floor(side)
    for lib in (shmstream, pyshmem):
        profile(lib, src, cprofile=side == 100)
