"""A shared-memory batch transport for multi-worker PyTorch DataLoaders.

``shmstream.torch.DataLoader`` is ``torch.utils.data.DataLoader`` (a
subclass: every argument, attribute and behaviour of torch's is there) whose
workers hand batches to the main process through a pool of reused
shared-memory slots instead of torch's default path (a fresh shared-memory
file per tensor per batch, one file descriptor each, pages faulted in twice).
With ``num_workers=0`` it is exactly torch's loader.

The pool belongs to the loader
  It is made in the main process at the first ``iter()`` and lives as long
  as the loader: every epoch, every worker (persistent or not, fork, spawn
  or forkserver) and every iterator of the loader use the same slots. Its
  bytes stay under a bound (``shm_max_bytes``, default
  ``min(1 GiB, a quarter of /dev/shm)``); ``loader.stats()`` shows its size
  and what happened to the batches. ``_loader_pool`` holds the shared-memory
  side (layout, states, naming, purge); ``_worker`` packs a batch into its
  slot in a worker, ``_batch`` rebuilds it in the main process; this module
  is the DataLoader and its iterator.

How a batch travels
  worker: take a free slot big enough for the batch (or create one: its
  first batch is written straight into fresh pages; or grow a free one that
  is too small); with the default collate, stack the samples straight into
  the slot (the batch's size is known from the first sample); with a custom
  ``collate_fn``, run it and copy its tensors into the slot. The batch's
  structure is pickled with tensors replaced by (offset, dtype, size,
  stride) records: only that small descriptor crosses the worker queue.
  main: map the slot (once per slot), build tensors that alias it (zero-copy,
  all on one storage over the slot, so aliasing between tensors of the batch
  is kept), and return them. The slot goes back to the pool when the last
  tensor (or view) using it is freed: the storage holds a lease object whose
  finalizer marks the slot free.

The iterator is torch's
  ``iter(loader)`` returns a subclass of torch's
  ``_MultiProcessingDataLoaderIter`` (``_ShmIter``): torch's own code runs
  the workers, prefetching, ordering, errors (a worker's exception is
  re-raised for its batch and the epoch goes on) and shutdown; the subclass
  only wraps the collate the workers run and builds each batch from its
  slot. With ``num_workers=0`` it is torch's ``_SingleProcessDataLoaderIter``.

A batch that finds no slot (every slot in use, or the bound reached) goes
through torch's default path, unchanged and counted. If /dev/shm is full
when a slot is created, that worker stops creating slots (it keeps reusing
existing ones) and the main process warns once. ``pin_memory=True`` works:
the pin thread builds the batch from the slot and pins it (a copy into
page-locked memory, after which the slot is free at once).
"""

from __future__ import annotations

import warnings
import weakref
from typing import Any, TypeVar

import torch
import torch.utils.data
from torch.utils.data.dataloader import _MultiProcessingDataLoaderIter

from ..common import _checks
from . import _loader_pool, _torch_compat
from ._batch import ShmTransportWarning, pools, unwrap
from ._worker import SlotCollate

__all__ = ["DataLoader", "ShmTransportWarning"]

_T_co = TypeVar("_T_co", covariant=True)  # what torch's DataLoader is generic in

#: Whether the installed torch is one the loader supports, and the
#: _process_data override that fits its iterator (_torch_compat).
_TORCH = _torch_compat.check(
    torch.__version__, torch.utils.data.DataLoader, _MultiProcessingDataLoaderIter, unwrap
)


class _PoolLife:
    """Held by a loader and by each of its iterators: when the last of them
    is gone, its finalizer removes the pool's files."""

    __slots__ = ("__weakref__",)


class _ShmIter(_MultiProcessingDataLoaderIter):
    """torch's multi-process iterator (a subclass: its attributes, worker
    handling, errors, prefetching, ordering and shutdown are torch's own code),
    with two changes: the workers run the loader's collate through
    ``SlotCollate``, and each batch is built from its slot before torch hands
    it out. docs/loader.md, "torch internals that work", lists what code
    outside torch may rely on."""

    def __init__(self, loader: DataLoader) -> None:
        # Before torch's __init__: it reads _collate_fn (below) to start the workers.
        self._shm_pool = loader._shm_pool_for_iterator()
        # The pool's files stay while this iterator's workers may use them,
        # even if the loader goes first (torch's iterator holds no reference
        # to its loader, and holding one would make a cycle with
        # loader._iterator that delays the shutdown of persistent workers).
        self._shm_life = loader._shm_life
        super().__init__(loader)

    # torch's _BaseDataLoaderIter.__init__ stores loader.collate_fn here and
    # _MultiProcessingDataLoaderIter.__init__ hands it to every worker: what
    # the workers run is the loader's collate wrapped for the slot pool. The
    # loader's own collate_fn attribute stays the user's.
    @property
    def _collate_fn(self) -> Any:
        return self._shm_collate

    @_collate_fn.setter
    def _collate_fn(self, fn: Any) -> None:
        self._shm_collate = SlotCollate(fn, self._shm_pool)

    # torch's, then the batch built from its slot (``unwrap``). torch's does
    # the bookkeeping, sends the next index out and re-raises a worker's
    # exception (the iterator goes on with the next batch, as torch's does).
    # Its signature differs between torch releases: _torch_compat picks the
    # override that fits the installed one.
    _process_data = _TORCH.process_data

    def _shutdown_workers(self) -> None:
        """torch's, then the slots that the stopped workers held are taken
        back (the pool itself stays for the next epoch)."""
        was_running = not getattr(self, "_shutdown", True)
        try:
            super()._shutdown_workers()
        finally:
            if was_running and self._shutdown:
                try:
                    self._shm_pool.reclaim_dead()
                except Exception:  # noqa: BLE001 - never hide torch's own error
                    pass


class DataLoader(torch.utils.data.DataLoader[_T_co]):
    """torch.utils.data.DataLoader with a shared-memory batch transport.

    Takes exactly torch's arguments, plus ``shm_slots`` (slots per worker in
    the loader's pool, default ``prefetch_factor + 2``) and
    ``shm_max_bytes`` (bound on the pool's bytes, default
    ``min(1 GiB, a quarter of /dev/shm)``; 0 sends every batch through
    torch's path). With ``num_workers=0`` nothing changes. ``stats()``
    reports the pool. Generic like torch's (``DataLoader[torch.Tensor]``);
    ``iter()`` returns a subclass of torch's multi-process iterator. See the
    module documentation for how batches travel and what falls back to
    torch's default path. Needs torch 2.4 to 2.14: with another,
    construction raises ``ExtraVersionError`` (docs/loader.md, "torch
    versions").
    """

    def __init__(
        self,
        dataset: Any,
        *args: Any,
        shm_slots: int | None = None,
        shm_max_bytes: int | None = None,
        **kwargs: Any,
    ) -> None:
        _TORCH.require()  # ExtraVersionError outside the supported torch releases
        super().__init__(dataset, *args, **kwargs)
        self._shm_pool: _loader_pool.Pool | None = None
        self._shm_life: _PoolLife | None = None
        self._shm_nslots = 0
        self._shm_max_bytes = 0
        if self.num_workers > 0:
            per_worker = _checks.check_int(
                "shm_slots",
                shm_slots if shm_slots is not None else (self.prefetch_factor or 2) + 2,
                minimum=1,
                maximum=2**31 - 1,  # far beyond any pool /dev/shm holds; the native create takes it
            )
            max_bytes = _checks.check_int(
                "shm_max_bytes",
                _loader_pool.default_max_bytes() if shm_max_bytes is None else shm_max_bytes,
                minimum=0,
                maximum=2**63 - 1,  # an int64 word of the pool's head
            )
            self._shm_nslots = per_worker * self.num_workers
            self._shm_max_bytes = max_bytes

    def _get_iterator(self) -> Any:
        # torch's __iter__ calls this (every epoch, or once with persistent
        # workers); with workers, our subclass of torch's iterator.
        if self.num_workers == 0:
            return super()._get_iterator()
        self.check_worker_number_rationality()
        return _ShmIter(self)

    def _shm_pool_for_iterator(self) -> _loader_pool.Pool:
        """The loader's slot pool, made at the first iterator."""
        pool = self._shm_pool
        if pool is None:
            pool = self._shm_pool = _loader_pool.Pool(self._shm_nslots, self._shm_max_bytes)
            pools[pool.token] = pool
            self._shm_life = _PoolLife()
            weakref.finalize(self._shm_life, pool.destroy)  # also runs at normal exit
            if pool.broken is not None:
                pool.warned = True  # one warning: its batches' fallbacks say nothing more
                # stacklevel: here, _ShmIter.__init__, _get_iterator, torch's __iter__, the caller
                warnings.warn(
                    f"shmstream.torch.DataLoader: could not create its slot pool ({pool.broken}); "
                    "batches use torch's default path. Free space in /dev/shm (see "
                    "`df -h /dev/shm`, `shmstream purge`).",
                    ShmTransportWarning,
                    stacklevel=5,
                )
        return pool

    def stats(self) -> dict[str, Any]:
        """The slot pool: ``slots`` and ``bytes`` (now), ``max_bytes`` (its
        bound), batches delivered from a ``fresh`` slot (created for them) or
        a ``reused`` one, ``fallbacks`` (batches that took torch's default
        path) and ``fallback_reasons`` ({'bound', 'busy', 'error': count})."""
        if self._shm_pool is None:
            return {
                "slots": 0,
                "bytes": 0,
                "max_bytes": self._shm_max_bytes,
                "fresh": 0,
                "reused": 0,
                "fallbacks": 0,
                "fallback_reasons": {"bound": 0, "busy": 0, "error": 0},
            }
        return self._shm_pool.stats()
