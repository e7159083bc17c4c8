"""Where a 100x100 GPU round trip spends its time: per-call times of
shmstream's and pyshmem's write and read beside torch's own ``copy_``, and a
cProfile of shmstream's (docs/gpu.md, "Runs on a GPU", item 8).

    python tools/gpu_profile_roundtrip.py   # needs torch with CUDA, pyshmem
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


src = torch.rand(100, 100, device="cuda:0")
dst = torch.empty_like(src)
print(f"torch copy_ only: {per_call(lambda: dst.copy_(src)):.1f} us")
print(f"torch copy_+sync: {per_call(lambda: (dst.copy_(src), torch.cuda.synchronize())):.1f} us")
print(f"torch empty: {per_call(lambda: torch.empty(100, 100, device='cuda:0')):.1f} us")


def profile(lib, src):
    name = "prof-" + uuid.uuid4().hex[:8]
    h = lib.create(name, shape=(100, 100), dtype=np.float32, gpu_device="cuda:0")
    out = torch.empty_like(src)
    rt = per_call(lambda: (h.write(src), h.read()))
    w = per_call(lambda: h.write(src))
    r = per_call(h.read)
    print(f"{lib.__name__}: round trip {rt:.1f} us, write {w:.1f} us, read {r:.1f} us")
    if lib is shmstream:
        print(f"  read(out=) {per_call(lambda: h.read(out=out)):.1f} us")
        pr = cProfile.Profile()
        pr.enable()
        for _ in range(3000):
            h.write(src)
            h.read()
        pr.disable()
        pstats.Stats(pr).sort_stats("tottime").print_stats(22)
    h.close()
    lib.unlink(name)


for lib in (shmstream, pyshmem):
    profile(lib, src)
