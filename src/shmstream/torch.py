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
  side (layout, states, naming, purge); this module is the torch glue.

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

import atexit
import io
import pickle
import threading
import warnings
import weakref
from typing import Any, NamedTuple, TypeVar

import numpy as np
import torch
import torch.utils.data
from torch.utils.data import _utils as _torch_utils
from torch.utils.data._utils.collate import collate as _collate
from torch.utils.data._utils.collate import (
    collate_tensor_fn,
    default_collate,
    default_collate_fn_map,
)
from torch.utils.data.dataloader import _MultiProcessingDataLoaderIter

from . import _checks, _loader_pool
from .errors import BatchLostError, CorruptStreamError

__all__ = ["DataLoader", "ShmTransportWarning"]

_T_co = TypeVar("_T_co", covariant=True)  # what torch's DataLoader is generic in

_ALIGN = 64


class ShmTransportWarning(UserWarning):
    """The shared-memory transport fell back to torch's default path."""


def _align(n: int, a: int = _ALIGN) -> int:
    return (n + a - 1) // a * a


def _eligible(t: torch.Tensor) -> bool:
    """Can this tensor's bytes travel through a slot?"""
    return (
        t.device.type == "cpu"
        and t.layout == torch.strided
        and not t.is_quantized
        and not getattr(t, "is_nested", False)
        and type(t) in (torch.Tensor, torch.nn.Parameter)
    )


# =================================================================== worker


class _Overflow(Exception):
    pass


class _Slot:
    """A slot this worker took for one batch (see _loader_pool.Taken)."""

    __slots__ = ("taken", "u8", "capacity", "storage_ptr")

    def __init__(self, taken: _loader_pool.Taken) -> None:
        self.taken = taken
        self.u8: torch.Tensor = taken.buf
        self.capacity = taken.capacity
        self.storage_ptr = self.u8.untyped_storage().data_ptr()


def _as_bytes(mm: Any) -> torch.Tensor:
    """A slot's mapping as one uint8 tensor (one storage over the slot)."""
    return torch.frombuffer(mm, dtype=torch.uint8)


# This worker's side of each loader's pool, by pool token.
_clients: dict[str, Any] = {}
# Dropped at exit, before the interpreter finalizes: a slot's tensor whose
# storage got a Python object (any untyped_storage() call on a tensor in the
# slot) is not freed by torch once finalization has begun, so the slot's
# FileMapping would outlive the interpreter and nanobind would report it
# leaked in every worker. Freed here, the mappings go normally.
atexit.register(_clients.clear)

# The slot that the default collate is stacking into, in this worker thread.
_alloc = threading.local()


def _slot_tensor_collate(batch: list[torch.Tensor], *, collate_fn_map: Any = None) -> torch.Tensor:
    """torch's tensor collate, but stacking into the current slot. What it
    cannot stack there (no slot, nested, sparse or other non-strided tensors,
    samples that require grad, empty batches) is torch's own
    ``collate_tensor_fn``: the same batch, or the same error, as torch's."""
    elem = batch[0]
    cur = getattr(_alloc, "cur", None)
    if cur is None or not _eligible(elem) or any(t.requires_grad for t in batch):
        return collate_tensor_fn(batch, collate_fn_map=collate_fn_map)
    slot, offset = cur
    shape = (len(batch), *elem.shape)
    nbytes = elem.element_size() * elem.numel() * len(batch)
    if nbytes == 0:
        return collate_tensor_fn(batch, collate_fn_map=collate_fn_map)
    start = _align(offset)
    if start + nbytes > slot.capacity:
        raise _Overflow
    _alloc.cur = (slot, start + nbytes)
    out = slot.u8[start : start + nbytes].view(elem.dtype).view(shape)
    return torch.stack(batch, 0, out=out)


_direct_map = dict(default_collate_fn_map)
_direct_map[torch.Tensor] = _slot_tensor_collate


def _direct_collate(samples: Any) -> Any:
    return _collate(samples, collate_fn_map=_direct_map)


def _collated_bytes(samples: list) -> int:
    """Slot bytes the default collate needs for this batch, from its first
    sample: each tensor or array leaf times the batch size, numbers as 8
    bytes each, every leaf 64-byte aligned. An estimate (a batch that does
    not fit after all is collated privately and copied)."""
    n = len(samples)

    def leaf(obj: Any) -> int:
        if isinstance(obj, torch.Tensor):
            return _align(obj.element_size() * obj.numel() * n + _ALIGN) if _eligible(obj) else 0
        if isinstance(obj, np.ndarray):
            return _align(obj.nbytes * n + _ALIGN) if obj.dtype.kind not in "OSUV" else 0
        if isinstance(obj, (int, float, np.number, np.bool_)):
            return _align(8 * n + _ALIGN)
        if isinstance(obj, (str, bytes)):
            return 0
        if isinstance(obj, dict):
            return sum(leaf(v) for v in obj.values())
        if isinstance(obj, (list, tuple)):
            return sum(leaf(v) for v in obj)
        return 0

    return leaf(samples[0]) if n else 0


class _Packer(pickle.Pickler):
    """Pickles a batch's structure with every eligible tensor replaced by a
    reference to its bytes in the slot (placing them there first)."""

    def __init__(self, file: Any, slot: _Slot | None, placed: dict[int, tuple[int, int]]) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.slot = slot
        self.metas: list[tuple] = []
        self.memo_t: dict[int, int] = {}
        self.keep: list[torch.Tensor] = []
        # storage data_ptr -> (position in the slot of the storage's byte lo, lo)
        self.placed = placed

    def persistent_id(self, obj: Any) -> Any:
        if not isinstance(obj, torch.Tensor) or not _eligible(obj):
            return None
        i = self.memo_t.get(id(obj))
        if i is None:
            try:
                meta = self._meta(obj)
            except KeyError:  # held somewhere the sizing walk did not look
                return None  # pickled by value, like any other object
            i = len(self.metas)
            self.memo_t[id(obj)] = i
            self.keep.append(obj)
            self.metas.append(meta)
        return i

    def _meta(self, t: torch.Tensor) -> tuple:
        es = t.element_size()
        grad = t.requires_grad
        if grad and not t.is_leaf:
            # torch's queue refuses it with this error (torch/multiprocessing/
            # reductions.py); there it is lost in the worker's queue thread and
            # the batch never comes, here it is raised for the batch.
            raise RuntimeError(
                "Cowardly refusing to serialize non-leaf tensor which requires_grad, since "
                "autograd does not support crossing process boundaries.  If you just want to "
                "transfer the data, call detach() on the tensor before serializing (e.g., "
                "putting it on the queue)."
            )
        param = type(t) is torch.nn.Parameter
        if t.numel() == 0:
            return (-1, t.dtype, tuple(t.shape), tuple(t.stride()), grad, param)
        st = t.untyped_storage()
        ptr = st.data_ptr()
        if self.slot is not None and ptr == self.slot.storage_ptr:
            pos = t.storage_offset() * es  # stacked straight into the slot
        else:
            base, lo = self.placed[ptr]
            pos = base + t.storage_offset() * es - lo
        return (pos, t.dtype, tuple(t.shape), tuple(t.stride()), grad, param)


def _span(t: torch.Tensor) -> tuple[int, int]:
    es = t.element_size()
    lo = t.storage_offset() * es
    hi = lo + es * (1 + sum((n - 1) * s for n, s in zip(t.shape, t.stride())))
    return int(lo), int(hi)


def _tensors_in(obj: Any, out: list[torch.Tensor]) -> None:
    """Eligible tensors reachable through common containers (for sizing)."""
    if isinstance(obj, torch.Tensor):
        if _eligible(obj):
            out.append(obj)
    elif isinstance(obj, dict):
        for v in obj.values():
            _tensors_in(v, out)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            _tensors_in(v, out)
    elif hasattr(obj, "__dict__") and not isinstance(obj, type):
        for v in vars(obj).values():
            _tensors_in(v, out)


class _SlotCollate:
    """The collate_fn the workers run: the user's collate (or the direct
    one), then the batch is packed into a slot of the loader's pool."""

    def __init__(self, collate_fn: Any, pool: _loader_pool.Pool) -> None:
        self.collate_fn = collate_fn
        self.direct = collate_fn is default_collate
        self.token: str | None = pool.token
        self.instance_id: str | None = pool.instance_id  # None: no pool (its root failed)

    def __call__(self, samples: Any) -> Any:
        if torch.utils.data.get_worker_info() is None or self.token is None:
            return self.collate_fn(samples)  # not in a worker (called by hand)
        client = _clients.get(self.token)
        if client is None:
            client = _clients[self.token] = self._attach()
        if isinstance(client, str):  # the pool could not be opened
            return _Fallback(self.collate_fn(samples), self.token, "error", client)
        try:
            return self._pack(client, samples)
        except OSError as exc:
            return _Fallback(
                self.collate_fn(samples), self.token, "error", f"{type(exc).__name__}: {exc}"
            )

    def _attach(self) -> Any:
        if self.token is None or self.instance_id is None:
            return "the loader could not create its slot pool"
        try:
            return _loader_pool.PoolClient(self.token, self.instance_id, wrap=_as_bytes)
        except OSError as exc:
            return f"{type(exc).__name__}: {exc}"

    def _take(self, client: Any, need: int) -> _Slot | str:
        got = client.take(need)
        return got if isinstance(got, str) else _Slot(got)

    def _pack(self, client: Any, samples: Any) -> Any:
        collated = self._collate(client, samples)
        if isinstance(collated, _Fallback):
            return collated
        batch, slot, used = collated
        tensors: list[torch.Tensor] = []
        _tensors_in(batch, tensors)
        spans = _spans(tensors, slot)
        if slot is None or _placed_end(spans, used) <= slot.capacity:
            return self._place(client, samples, batch, slot, used, spans, moved=False)
        # Stacked into the slot, but the rest does not fit: move it all to a
        # bigger slot; this one is given back once copied out.
        try:
            return self._place(client, samples, batch, None, 0, _spans(tensors, None), moved=True)
        finally:
            client.give_back(slot.taken)

    def _collate(self, client: Any, samples: Any) -> _Collated | _Fallback:
        """The batch, stacked straight into a slot where the direct collate
        can; else collated into private memory (slot None)."""
        if self.direct:
            need = _collated_bytes(samples)
            if need > 0:
                got = self._take(client, need)
                if isinstance(got, str):  # no slot: torch's path, as torch would
                    return _Fallback(self.collate_fn(samples), self.token, got, client.create_error)
                stacked = self._stack_into(client, got, samples)
                if stacked is not None:
                    return stacked
        # A custom collate, a batch without tensors to stack, or one that did
        # not fit: collate into private memory, then copy into a slot.
        batch = _direct_collate(samples) if self.direct else self.collate_fn(samples)
        return _Collated(batch, None, 0)

    def _stack_into(self, client: Any, slot: _Slot, samples: Any) -> _Collated | None:
        """The direct collate with its tensors allocated in ``slot``; None
        (the slot given back) if the estimate was short."""
        _alloc.cur = (slot, 0)
        try:
            batch = _direct_collate(samples)
            return _Collated(batch, slot, _alloc.cur[1])
        except _Overflow:  # collate privately instead
            client.give_back(slot.taken)
            return None
        except BaseException:
            client.give_back(slot.taken)
            raise
        finally:
            _alloc.cur = None

    def _place(
        self,
        client: Any,
        samples: Any,
        batch: Any,
        slot: _Slot | None,
        used: int,
        spans: dict[int, list],
        moved: bool,
    ) -> Any:
        """Copy ``spans`` into ``slot`` (a new one if None and there are
        bytes to carry) after its first ``used`` bytes, and describe the
        batch; the slot is given back if that fails. ``moved``: the batch's
        tensors are in a slot about to be given back, so torch's path must
        collate the samples again."""
        token = self.token
        assert token is not None
        if slot is None and spans:
            got = self._take(client, _placed_end(spans, 0))
            if isinstance(got, str):
                plain = self.collate_fn(samples) if moved else batch
                return _Fallback(plain, token, got, client.create_error)
            slot = got
        try:
            return _describe(token, batch, slot, used, spans)
        except BaseException:
            if slot is not None:
                client.give_back(slot.taken)
            raise


class _Collated(NamedTuple):
    """A collated batch, and the slot its tensors were stacked into (None:
    private memory) with the bytes they use there."""

    batch: Any
    slot: _Slot | None
    used: int


def _describe(
    token: str, batch: Any, slot: _Slot | None, used: int, spans: dict[int, list]
) -> _Descriptor:
    """Copy each span into ``slot`` after its first ``used`` bytes, then
    pickle ``batch`` with its tensors as references into the slot."""
    placed = {}
    for ptr, (lo, hi, storage) in spans.items():
        assert slot is not None
        base = _align(used) + lo % _ALIGN  # same alignment as in the source
        src = torch.empty(0, dtype=torch.uint8).set_(storage)[lo:hi]
        slot.u8[base : base + (hi - lo)].copy_(src)
        placed[ptr] = (base, lo)
        used = base + (hi - lo)
    buf = io.BytesIO()
    packer = _Packer(buf, slot, placed)
    packer.dump(batch)
    if slot is None:  # nothing with bytes to carry
        return _Descriptor(token, -1, 0, 0, 0, buf.getvalue(), packer.metas, False)
    t = slot.taken
    # Every byte is written: a file another process truncated meanwhile took
    # them (zero pages under the guard, not a SIGBUS); the batch is lost.
    _loader_pool.check_written(token, t)
    return _Descriptor(token, t.k, t.gen, t.seq, used, buf.getvalue(), packer.metas, t.fresh)


def _spans(tensors: list[torch.Tensor], slot: _Slot | None) -> dict[int, list]:
    """Storages to copy (those not already in ``slot``) -> [lo, hi, storage],
    the byte range of the storage that the batch's tensors use."""
    spans: dict[int, list] = {}
    for t in tensors:
        if t.numel() == 0:
            continue
        storage = t.untyped_storage()
        ptr = storage.data_ptr()
        if slot is not None and ptr == slot.storage_ptr:
            continue
        lo, hi = _span(t)
        cur = spans.get(ptr)
        if cur is None:
            spans[ptr] = [lo, hi, storage]
        else:
            cur[0], cur[1] = min(cur[0], lo), max(cur[1], hi)
    return spans


def _placed_end(spans: dict[int, list], used: int) -> int:
    for lo, hi, _ in spans.values():
        used = _align(used) + lo % _ALIGN + (hi - lo)
    return used


# =================================================================== main

# The pools of this process's loaders, by token (weak: the loader owns it).
_pools: weakref.WeakValueDictionary[str, _loader_pool.Pool] = weakref.WeakValueDictionary()


class _Fallback:
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
        pool = _pools.get(self.token) if self.token is not None else None
        if pool is not None and pool.count_fallback(self.reason):
            warnings.warn(
                "shmstream.torch.DataLoader: a worker could not create a shared-memory slot "
                f"({self.detail}); batches that find no slot use torch's default path instead. "
                "Free space in /dev/shm (see `df -h /dev/shm`, `shmstream purge`).",
                # stacklevel: here, _unwrap, _ShmIter._process_data, torch's
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


class _Descriptor:
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
            _Descriptor._received,
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
    def _received(cls, *args: Any) -> _Descriptor:
        d = cls(*args)
        d.armed = d.k >= 0
        return d

    def unwrap(self) -> Any:
        self.armed = False
        storage = None
        if self.k >= 0:
            pool = _pools.get(self.token)
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
            pool = _pools.get(self.token)
            if pool is not None:
                try:
                    pool.release(self.k, self.seq)
                except Exception:  # noqa: BLE001 - interpreter shutdown
                    pass


def _unwrap(data: Any) -> Any:
    if isinstance(data, (_Descriptor, _Fallback)):
        return data.unwrap()
    return data


class _PoolLife:
    """Held by a loader and by each of its iterators: when the last of them
    is gone, its finalizer removes the pool's files."""

    __slots__ = ("__weakref__",)


class _ShmIter(_MultiProcessingDataLoaderIter):
    """torch's multi-process iterator (a subclass: its attributes, worker
    handling, errors, prefetching, ordering and shutdown are torch's own code),
    with two changes: the workers run the loader's collate through
    ``_SlotCollate``, and each batch is built from its slot before torch hands
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
        self._shm_collate = _SlotCollate(fn, self._shm_pool)

    def _process_data(self, data: Any, worker_idx: int) -> Any:
        # torch's: bookkeeping, the next index out, a worker's exception
        # re-raised (the iterator goes on with the next batch, as torch's does).
        return _unwrap(super()._process_data(data, worker_idx))

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
    torch's default path.
    """

    def __init__(
        self,
        dataset: Any,
        *args: Any,
        shm_slots: int | None = None,
        shm_max_bytes: int | None = None,
        **kwargs: Any,
    ) -> None:
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
            _pools[pool.token] = pool
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
