"""Datasets and probes shared by the DataLoader tests
(tests/loader/test_loader_batches.py, tests/loader/test_loader_pool.py,
tests/loader/test_loader_failures.py).

A module of its own because spawn and forkserver workers unpickle a dataset
by importing its module: this folder is on their ``sys.path`` (pytest puts
it on the parent's, and children inherit it). Unlike tests/loader_cases.py,
which stays free of shmstream so that the same objects go to torch's loader
and to ours, the probes here read our pool (its slot files and table).
"""

from __future__ import annotations

import torch

from shmstream.loader import _loader_pool as lp


class Rows(torch.utils.data.Dataset):
    """Sample i: a dict with row i of a float tensor, its index, a label."""

    def __init__(self, n: int = 64, dim: int = 256) -> None:
        self.data = torch.arange(n * dim, dtype=torch.float32).reshape(n, dim)

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, i: int):
        return {"x": self.data[i], "i": i, "name": f"s{i}"}


def first(loader):
    return next(iter(loader))


def slot_backed(t: torch.Tensor) -> bool:
    """Does ``t`` alias a loader slot mapped into this process (zero-copy)?
    Read from /proc/self/maps, independent of the loader's bookkeeping."""
    ptr = t.data_ptr()
    with open("/proc/self/maps") as f:
        for line in f:
            if lp.SLOT_FILE_PREFIX in line:
                lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
                if lo <= ptr < hi:
                    return True
    return False


def states(loader) -> list[int]:
    table = loader._shm_pool.table
    with table.locked():
        return [int(table.line(k)[lp.STATE]) for k in range(table.nslots)]


def list_of_samples(samples):
    return list(samples)


class GrowingRows(torch.utils.data.Dataset):
    """Samples get bigger along the epoch (variable-length data)."""

    def __len__(self) -> int:
        return 24

    def __getitem__(self, i: int):
        return torch.full((1 + (i // 8) * 5000,), float(i))


def grow_collate(samples):
    return torch.cat(samples)
