"""The main-process side of ``shmstream.torch.DataLoader``: what crosses
the worker queue (a slot's ``Descriptor``, or a ``Fallback`` batch that took
torch's default path), and how the main process turns it back into tensors
that alias the slot, which returns to the pool when the last is freed.
"""

from __future__ import annotations

import io
import pickle
import warnings
import weakref
from typing import Any

import numpy as np
import torch
import torch.utils.data
from torch.utils.data import _utils as _torch_utils

from ..errors import BatchLostError, CorruptStreamError
from . import _loader_pool


class ShmTransportWarning(UserWarning):
    """The shared-memory transport fell back to torch's default path."""


# =================================================================== main

# The pools of this process's loaders, by token (weak: the loader owns it).
pools: weakref.WeakValueDictionary[str, _loader_pool.Pool] = weakref.WeakValueDictionary()


class Fallback:
    """A batch that took torch's default path (pickled by torch's queue),
    and why: 'bound', 'busy' or 'error' (with ``detail``)."""

    def __init__(
        self, batch: Any, token: str | None, reason: str, detail: str | None = None
    ) -> None:
        self.batch = batch
        self.token = token
        self.reason = reason
        self.detail = detail

    def unwrap(self) -> Any:
        pool = pools.get(self.token) if self.token is not None else None
        if pool is not None and pool.count_fallback(self.reason):
            warnings.warn(
                "shmstream.torch.DataLoader: a worker could not create a shared-memory slot "
                f"({self.detail}); batches that find no slot use torch's default path instead. "
                "Free space in /dev/shm (see `df -h /dev/shm`, `shmstream purge`).",
                # stacklevel: here, unwrap, _ShmIter._process_data, torch's
                # _next_data and __next__, the caller's loop
                ShmTransportWarning,
                stacklevel=6,
            )
        return self.batch

    def pin_memory(self, device: Any = None) -> Any:
        return _torch_utils.pin_memory.pin_memory(self.unwrap(), device)


class _Lease(np.ndarray):
    """The bytes of one delivered batch; freed last when every tensor built
    on them is gone, which returns the slot."""


class Descriptor:
    """What crosses the worker queue: where the batch is, and its structure."""

    def __init__(
        self,
        token: str,
        k: int,
        gen: int,
        seq: int,
        used: int,
        structure: bytes,
        metas: list,
        fresh: bool,
    ) -> None:
        self.token, self.k, self.gen, self.seq, self.used = token, k, gen, seq, used
        self.structure, self.metas, self.fresh = structure, metas, fresh
        self.armed = False  # True on the receiving side until decoded

    def __reduce__(self) -> Any:
        return (
            Descriptor._received,
            (
                self.token,
                self.k,
                self.gen,
                self.seq,
                self.used,
                self.structure,
                self.metas,
                self.fresh,
            ),
        )

    @classmethod
    def _received(cls, *args: Any) -> Descriptor:
        d = cls(*args)
        d.armed = d.k >= 0
        return d

    def unwrap(self) -> Any:
        self.armed = False
        storage = None
        if self.k >= 0:
            pool = pools.get(self.token)
            if pool is None:
                raise BatchLostError(
                    "shmstream.torch.DataLoader: a batch arrived after its loader "
                    "was garbage-collected"
                )
            slot = pool.claim(self.k, self.gen, self.seq, self.fresh)
            # The slot is HELD now and only the lease's finalizer frees it:
            # an exception before that is registered (torch's SIGCHLD
            # handler raising for a dead worker, a KeyboardInterrupt) would
            # keep it held for the life of the loader, so it is freed here.
            leased = False
            try:
                if self.used > 0:
                    lease = slot[: self.used].view(_Lease)
                    weakref.finalize(lease, pool.release, self.k, self.seq)
                    leased = True
                    # A uint8 tensor, not its untyped_storage(): a storage's
                    # Python object stays attached to it, and torch does not
                    # free one at interpreter exit, so a batch still held then
                    # would keep the slot's mapping past the interpreter's end
                    # (nanobind's "leaked FileMapping"). set_ takes a tensor too.
                    storage = torch.frombuffer(lease, dtype=torch.uint8)
            finally:
                if not leased:
                    pool.release(self.k, self.seq)
        made: dict[int, torch.Tensor] = {}
        metas = self.metas

        def load(pid: int) -> torch.Tensor:
            try:
                return made[pid] if pid in made else build(pid)
            except (IndexError, KeyError, TypeError, ValueError, RuntimeError) as exc:
                # The metas are a worker's word: a tensor they describe
                # outside the slot's bytes, or not at all, is refused here
                # (torch checks the bounds) with the loader's error (a
                # fuzz_py_loader finding).
                raise CorruptStreamError(
                    f"shmstream.torch.DataLoader: a batch descriptor does not describe tensor "
                    f"{pid!r} ({type(exc).__name__}: {exc}); restart the epoch"
                ) from None

        def build(pid: int) -> torch.Tensor:
            pos, dtype, size, stride, grad, param = metas[pid]
            if pos < 0:
                t = torch.empty_strided(size, stride, dtype=dtype)
            elif storage is None:  # a tensor in the slot of a batch that has none
                raise TypeError(f"tensor {pid!r} is placed in a batch without a slot")
            else:
                es = torch.empty(0, dtype=dtype).element_size()
                t = torch.empty(0, dtype=dtype)
                # set_(Tensor, offset, size, stride) is ATen's; torch's stubs omit it
                t = t.set_(storage, pos // es, size, stride)  # type: ignore[call-overload]
            if param:
                t = torch.nn.Parameter(t, requires_grad=grad)
            elif grad:
                t.requires_grad_(True)
            made[pid] = t
            return t

        up = pickle.Unpickler(io.BytesIO(self.structure))
        up.persistent_load = load  # type: ignore[assignment]
        return up.load()

    def pin_memory(self, device: Any = None) -> Any:
        return _torch_utils.pin_memory.pin_memory(self.unwrap(), device)

    def __del__(self) -> None:
        # Dropped unread (an iterator stopped early, persistent workers
        # resetting): hand the slot back so the workers can reuse it.
        if self.armed:
            self.armed = False
            pool = pools.get(self.token)
            if pool is not None:
                try:
                    pool.release(self.k, self.seq)
                except Exception:  # noqa: BLE001 - interpreter shutdown
                    pass


def unwrap(data: Any) -> Any:
    if isinstance(data, (Descriptor, Fallback)):
        return data.unwrap()
    return data
