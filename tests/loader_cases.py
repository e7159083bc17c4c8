"""Datasets, collate functions and worker hooks of the loader conformance
scenarios (tests/loader/test_loader_conformance.py), plus what turns a scenario's
result into a plain comparable value.

A module of its own because spawn and forkserver workers unpickle the
dataset by importing its module: this folder is on their ``sys.path``
(pytest puts it on the parent's, and children inherit it). Nothing here
imports shmstream: the same objects go to torch's loader and to ours.
"""

from __future__ import annotations

import ctypes
import inspect
import os
import re
import signal
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset, IterableDataset, get_worker_info

# ---------------------------------- what differs between the torch releases
# The loader supports torch 2.4 to 2.14 (tools/torch_matrix.sh runs these
# tests on other releases than the suite's): two public features the tests
# use came in 2.6.

#: ``DataLoader(in_order=...)``: torch 2.6 and later.
HAS_IN_ORDER = "in_order" in inspect.signature(torch.utils.data.DataLoader.__init__).parameters
NO_IN_ORDER = f"torch {torch.__version__}'s DataLoader has no in_order (torch 2.6 and later)"


def accelerator_available() -> bool:
    """What torch pins batches for: ``torch.accelerator`` (torch 2.6 and
    later), CUDA before it (torch's loader checks the same)."""
    acc = getattr(torch, "accelerator", None)
    return bool(acc.is_available() if acc is not None else torch.cuda.is_available())


# ------------------------------------------------------------------ datasets


class Rows(Dataset):
    """Sample i: a dict with a float tensor, its index and a name (dicts,
    strings and numbers through the default collate)."""

    def __init__(self, n: int = 12, dim: int = 3) -> None:
        self.n, self.dim = n, dim

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {"x": torch.arange(self.dim, dtype=torch.float32) + 10 * i, "i": i, "name": f"s{i}"}


class Sharded(IterableDataset):
    """Iterable-style: worker k of n yields samples k, k + n, ... (the
    sharding torch's documentation shows), each with the worker's id and
    its seed."""

    def __init__(self, n: int = 10) -> None:
        self.n = n

    def __iter__(self) -> Any:
        info = get_worker_info()
        wid, nw = (0, 1) if info is None else (info.id, info.num_workers)
        for i in range(wid, self.n, nw):
            yield {"i": i, "worker": wid, "seed": info.seed if info else -1}


#: Set by ``tag_worker`` in each worker (worker_init_fn), read by Tagged.
WORKER_TAG = -1


def tag_worker(worker_id: int) -> None:
    global WORKER_TAG
    WORKER_TAG = 100 + worker_id


class Tagged(Rows):
    """Rows with what the worker_init_fn set and the worker's torch seed."""

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {**super().__getitem__(i), "tag": WORKER_TAG, "seed": torch.initial_seed()}


class Failing(Rows):
    """Rows whose samples in ``bad`` fail in the worker: ``how`` is
    'raise' (ValueError), 'segfault' (a real one) or 'sigkill'."""

    def __init__(self, n: int, bad: tuple[int, ...], how: str = "raise") -> None:
        super().__init__(n)
        self.bad, self.how = bad, how

    def __getitem__(self, i: int) -> dict[str, Any]:
        if i in self.bad and get_worker_info() is not None:
            if self.how == "raise":
                raise ValueError(f"bad sample {i}")
            if self.how == "segfault":
                ctypes.string_at(0)  # reads address 0: SIGSEGV
            if self.how == "sigkill":
                os.kill(os.getpid(), signal.SIGKILL)
        return super().__getitem__(i)


class Blocking(Rows):
    """Rows whose sample 0 waits for ``release`` (a fork context's Event,
    inherited by the worker): the timeout scenario."""

    def __init__(self, release: Any) -> None:
        super().__init__(4)
        self.release = release

    def __getitem__(self, i: int) -> dict[str, Any]:
        if i == 0:
            self.release.wait()
        return super().__getitem__(i)


class Nested(Dataset):
    """Sample i: a nested tensor of two rows of lengths i + 1 and 2."""

    def __len__(self) -> int:
        return 4

    def __getitem__(self, i: int) -> Any:
        return torch.nested.nested_tensor([torch.arange(i + 1.0), torch.ones(2)])


class Odd(Dataset):
    """Empty tensors, 0-d tensors, tensors that require grad, NumPy arrays."""

    def __len__(self) -> int:
        return 6

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {
            "empty": torch.empty(0, 3),
            "scalar": torch.tensor(float(i)),
            "np": np.full(2, i, dtype=np.int16),
            "flag": i % 2 == 0,
        }


class Grad(Dataset):
    """Samples that require grad (leaves)."""

    def __len__(self) -> int:
        return 4

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.full((2,), float(i), requires_grad=True)


# ----------------------------------------------------------- collate functions


def to_text(samples: list) -> dict[str, Any]:
    """A collate_fn that returns no tensors at all."""
    return {
        "names": [s["name"] for s in samples],
        "sum": sum(s["i"] for s in samples),
        "pair": (len(samples), None),
    }


def aliasing(samples: list) -> dict[str, Any]:
    """A collate_fn whose tensors alias each other: one tensor twice, a
    slice and a transpose of it."""
    x = torch.stack([s["x"] for s in samples])
    return {"x": x, "same": x, "rows": x[1:], "t": x.t()}


def with_grad(samples: list) -> dict[str, Any]:
    """A collate_fn returning leaf tensors that require grad, a Parameter,
    and empty tensors."""
    x = torch.stack([s["x"] for s in samples])
    return {
        "w": x.clone().requires_grad_(True),
        "p": torch.nn.Parameter(torch.zeros(2)),
        "empty": torch.empty(0, 2),
        "x": x,
    }


def as_list(samples: list) -> list:
    return list(samples)


# ------------------------------------------------- results as comparable values


def describe(obj: Any) -> Any:
    """A plain value that is equal for two results exactly when they look
    the same to a user: types, dtypes, shapes, strides, grad flags, values."""
    if isinstance(obj, torch.Tensor):
        if obj.is_nested:
            return ("nested", [describe(t) for t in obj.unbind()])
        return (
            type(obj).__name__,
            str(obj.dtype),
            tuple(obj.shape),
            tuple(obj.stride()),
            obj.requires_grad,
            obj.is_leaf,
            obj.detach().tolist(),
        )
    if isinstance(obj, np.ndarray):
        return ("ndarray", obj.dtype.str, obj.shape, obj.tolist())
    if isinstance(obj, dict):
        return (type(obj).__name__, [(k, describe(v)) for k, v in obj.items()])
    if isinstance(obj, (list, tuple)):
        return (type(obj).__name__, [describe(v) for v in obj])
    return (type(obj).__name__, obj)


_PIDS = re.compile(r"pid(\(s\))? [\d, ]+")


def error(exc: BaseException) -> tuple[str, str, str]:
    """An exception as a user sees it: its type, its message's first line
    and its last line (a worker's exception arrives as torch's "Caught X in
    DataLoader worker process N" with the worker's traceback in between,
    whose frames name files, so only the first and last lines are compared).
    Worker pids are replaced by "pid N"."""
    lines = [line for line in str(exc).splitlines() if line.strip()] or [""]
    return (type(exc).__name__, _PIDS.sub("pid N ", lines[0]), _PIDS.sub("pid N ", lines[-1]))


def killed_by(exc: BaseException) -> str | None:
    """The signal torch says killed a worker, from the error or its cause:
    torch reports a dead worker either from its SIGCHLD handler ("is killed
    by signal: Segmentation fault") or, when that handler interrupted its
    wait on the queue, as "exited unexpectedly" caused by it: which of the
    two depends on where the main thread was when the signal came."""
    for e in (exc, exc.__cause__):
        m = re.search(r"killed by signal: ([A-Za-z ]+)", str(e)) if e is not None else None
        if m:
            return m.group(1).strip()
    return None
