"""A shared-memory batch transport for multi-worker PyTorch DataLoaders.

``shmstream.torch.DataLoader`` is ``torch.utils.data.DataLoader`` (a
subclass: every argument, attribute and behaviour of torch's is there) whose
workers hand batches to the main process through a pool of reused
shared-memory slots instead of torch's default path (a fresh shared-memory
file per tensor per batch, one file descriptor each, pages faulted in twice).
With ``num_workers=0`` it is exactly torch's loader.

How a batch travels
  worker: pick a free slot of this worker's pool (created lazily, reused for
  every later batch); with the default collate, stack the samples straight
  into the slot (pages were touched once, when the slot was made); with a
  custom ``collate_fn``, run it and copy its tensors into the slot. The
  batch's structure is pickled with tensors replaced by (offset, dtype,
  size, stride) records: only that small descriptor crosses the worker
  queue. main: map the slot (once; the name is unlinked right after, so
  nothing stays in /dev/shm), build tensors that alias it (zero-copy, all on
  one storage over the slot, so aliasing between tensors of the batch is
  kept), and return them. The slot goes back to its worker's pool when the
  last tensor (or view) using it is freed: the storage holds a lease object
  whose finalizer marks the slot free, under the segment's robust lock.

Slots per worker: ``prefetch_factor + 2`` (``shm_slots=`` to change): the
batches in flight plus the one the training loop holds while it asks for
the next. A batch that finds no free slot (the loop keeps many batches
alive) goes through torch's default path, unchanged and safe. A batch
bigger than its slot makes the worker replace a free slot with a bigger one
(grow; capacity = need + 1/8). If /dev/shm is full when a slot is created,
that worker falls back to torch's default path for good and the main
process warns once. ``pin_memory=True`` works: the pin thread builds the
batch from the slot and pins it (a copy into page-locked memory, after which
the slot is free at once).
"""
from __future__ import annotations

import atexit
import glob
import io
import os
import pickle
import secrets
import threading
import warnings
import weakref
from multiprocessing import util as _mp_util
from typing import Any

import numpy as np
import torch
import torch.utils.data
from torch.utils.data import _utils as _torch_utils
from torch.utils.data._utils.collate import collate as _collate
from torch.utils.data._utils.collate import default_collate, default_collate_fn_map

from . import _native

__all__ = ["DataLoader", "ShmTransportWarning"]

#: Bytes at the start of a slot for its control words (state, sequence).
_CTRL_BYTES = 4096
_ALIGN = 64
_FREE, _BUSY = 0, 1
_STATE, _SEQ = 0, 1  # int64 words of the control area
_NAME_PREFIX = "loader-"


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
    """One reusable slot: its own segment, created by the worker."""

    def __init__(self, name: str, capacity: int) -> None:
        self.name = name
        self.seg = _native.Segment.create(name, _native.KIND_ARRAY, [_CTRL_BYTES + capacity], 1,
                                          "|u1", 0, 0o600, 0, 1)
        self.capacity = capacity
        self.payload = self.seg.payload()
        self.ctrl = self.payload[:_CTRL_BYTES].view(np.int64)
        self.u8 = torch.from_numpy(self.payload)  # whole segment, one storage
        self.storage_ptr = self.u8.untyped_storage().data_ptr()
        self.seq = 0

    def try_take(self) -> bool:
        # SYNC POINT: the lock orders the main process's last use of the
        # slot's bytes (before its release store of FREE) before our writes.
        self.seg.lock()
        try:
            if self.ctrl[_STATE] != _FREE:
                return False
            self.seq = int(self.ctrl[_SEQ]) + 1
            self.ctrl[_SEQ] = self.seq
            self.ctrl[_STATE] = _BUSY
            return True
        finally:
            self.seg.unlock()

    def give_back(self) -> None:
        self.seg.lock()
        try:
            if self.ctrl[_SEQ] == self.seq:
                self.ctrl[_STATE] = _FREE
        finally:
            self.seg.unlock()

    def unlink(self) -> None:
        try:
            _native.unlink_segname(self.seg.segname)
        except OSError:
            pass


class _WorkerPool:
    """The slots of one worker process for one loader token."""

    def __init__(self, token: str, worker_id: int, nslots: int) -> None:
        self.token = token
        self.worker_id = worker_id
        self.nslots = nslots
        self.slots: list[_Slot | None] = [None] * nslots
        self.gens = [0] * nslots
        self.disabled: str | None = None
        self.fallbacks = 0
        _mp_util.Finalize(self, _WorkerPool._unlink_all, args=(self.slots,), exitpriority=10)

    @staticmethod
    def _unlink_all(slots: list[_Slot | None]) -> None:
        for s in slots:
            if s is not None:
                s.unlink()

    def _name(self, k: int) -> str:
        return f"{_NAME_PREFIX}{self.token}-w{self.worker_id}-s{k}-g{self.gens[k]}"

    def acquire(self, need: int) -> _Slot | None:
        """A slot with at least ``need`` data bytes, taken; None if every
        slot is in use. Creates or grows slots; OSError if /dev/shm refuses."""
        empty = None
        small = None
        for k, s in enumerate(self.slots):
            if s is None:
                if empty is None:
                    empty = k
                continue
            if s.try_take():
                if s.capacity >= need:
                    if small is not None:
                        self.slots[small].give_back()  # type: ignore[union-attr]
                    return s
                if small is None:
                    small = k
                else:
                    s.give_back()
        pick = small if small is not None else empty
        if pick is None:
            return None
        k = pick
        old = self.slots[k]
        capacity = max(_align(need + need // 8, 4096), 4096)
        if old is not None:
            # A free slot too small for this batch: replace it. The main
            # process released it, so it has mapped it (and unlinked the
            # name) or never got it; either way no descriptor refers to it.
            old.unlink()
            self.gens[k] += 1
            capacity = max(capacity, old.capacity)
        self.slots[k] = None
        s = _Slot(self._name(k), capacity)
        self.slots[k] = s
        if not s.try_take():  # pragma: no cover - fresh slots are free
            raise RuntimeError("a fresh loader slot was not free")
        return s


_pools: dict[tuple[str, int], _WorkerPool] = {}

# The slot that the default collate is stacking into, in this worker thread.
_alloc = threading.local()


def _slot_tensor_collate(batch: list[torch.Tensor], *, collate_fn_map: Any = None) -> torch.Tensor:
    """torch's tensor collate, but stacking into the current slot."""
    elem = batch[0]
    cur = getattr(_alloc, "cur", None)
    if cur is None or not _eligible(elem) or any(t.requires_grad for t in batch):
        return torch.stack(batch, 0)
    slot, offset = cur
    shape = (len(batch), *elem.shape)
    nbytes = elem.element_size() * elem.numel() * len(batch)
    if nbytes == 0:
        return torch.stack(batch, 0)
    start = _align(offset)
    if start + nbytes > _CTRL_BYTES + slot.capacity:
        raise _Overflow
    _alloc.cur = (slot, start + nbytes)
    out = slot.u8[start:start + nbytes].view(elem.dtype).view(shape)
    return torch.stack(batch, 0, out=out)


_direct_map = dict(default_collate_fn_map)
_direct_map[torch.Tensor] = _slot_tensor_collate


def _direct_collate(samples: Any) -> Any:
    return _collate(samples, collate_fn_map=_direct_map)


class _Packer(pickle.Pickler):
    """Pickles a batch's structure with every eligible tensor replaced by a
    reference to its bytes in the slot (placing them there first)."""

    def __init__(self, file: Any, slot: _Slot, placed: dict[int, tuple[int, int]]) -> None:
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
        param = type(t) is torch.nn.Parameter
        if t.numel() == 0:
            return (-1, t.dtype, tuple(t.shape), tuple(t.stride()), grad, param)
        st = t.untyped_storage()
        ptr = st.data_ptr()
        if ptr == self.slot.storage_ptr:
            pos = t.storage_offset() * es  # stacked straight into the slot
        else:
            base, lo = self.placed[ptr]
            pos = base + t.storage_offset() * es - lo
        return (pos, t.dtype, tuple(t.shape), tuple(t.stride()), grad, param)


def _span(t: torch.Tensor) -> tuple[int, int]:
    es = t.element_size()
    lo = t.storage_offset() * es
    hi = lo + es * (1 + sum((n - 1) * s for n, s in zip(t.shape, t.stride())))
    return lo, hi


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
    one), then the batch is packed into a slot."""

    def __init__(self, collate_fn: Any, nslots: int) -> None:
        self.collate_fn = collate_fn
        self.direct = collate_fn is default_collate
        self.nslots = nslots
        self.token = secrets.token_hex(4)

    def __call__(self, samples: Any) -> Any:
        info = torch.utils.data.get_worker_info()
        if info is None:  # not in a worker (num_workers=0, or called by hand)
            return self.collate_fn(samples)
        key = (self.token, info.id)
        pool = _pools.get(key)
        if pool is None:
            pool = _pools[key] = _WorkerPool(self.token, info.id, self.nslots)
        if pool.disabled:
            return _Fallback(self._plain(samples), None)
        try:
            return self._pack(pool, samples)
        except OSError as exc:
            pool.disabled = f"{type(exc).__name__}: {exc}"
            return _Fallback(self._plain(samples), pool.disabled)

    def _plain(self, samples: Any) -> Any:
        return self.collate_fn(samples)

    def _pack(self, pool: _WorkerPool, samples: Any) -> Any:
        slot: _Slot | None = None
        used = _CTRL_BYTES
        if self.direct and pool.slots[0] is not None:
            slot = pool.acquire(0)
            if slot is None:  # every slot is held by the main process
                pool.fallbacks += 1
                return _Fallback(self._plain(samples), None)
            _alloc.cur = (slot, _CTRL_BYTES)
            try:
                batch = _direct_collate(samples)
                used = _alloc.cur[1]
            except _Overflow:
                slot.give_back()
                slot = None
            except BaseException:
                slot.give_back()
                raise
            finally:
                _alloc.cur = None
        if slot is None:
            # First batch, a batch that did not fit, or a custom collate:
            # collate into private memory, then copy into a big enough slot.
            batch = _direct_collate(samples) if self.direct else self.collate_fn(samples)
        tensors: list[torch.Tensor] = []
        _tensors_in(batch, tensors)
        spans = _spans(tensors, slot)
        old = None
        if slot is not None and _placed_end(spans, used) > _CTRL_BYTES + slot.capacity:
            # Stacked into the slot, but the rest does not fit: move it all
            # to a bigger slot (this one is released once copied out).
            old, slot, used = slot, None, _CTRL_BYTES
            spans = _spans(tensors, None)
        try:
            if slot is None:
                slot = pool.acquire(_placed_end(spans, _CTRL_BYTES) - _CTRL_BYTES)
                if slot is None:
                    pool.fallbacks += 1
                    return _Fallback(self._plain(samples) if old is not None else batch, None)
            try:
                placed = {}
                for ptr, (lo, hi, storage) in spans.items():
                    base = _align(used) + lo % _ALIGN  # same alignment as in the source
                    src = torch.empty(0, dtype=torch.uint8).set_(storage)[lo:hi]
                    slot.u8[base:base + (hi - lo)].copy_(src)
                    placed[ptr] = (base, lo)
                    used = base + (hi - lo)
                buf = io.BytesIO()
                packer = _Packer(buf, slot, placed)
                packer.dump(batch)
                return _Descriptor(slot.name, slot.seg.segname, slot.seg.instance_id, slot.seq,
                                   used, buf.getvalue(), packer.metas, pool.worker_id)
            except BaseException:
                slot.give_back()
                raise
        finally:
            if old is not None:
                old.give_back()


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

class _Fallback:
    """A batch that took torch's default path (pickled by torch's queue)."""

    def __init__(self, batch: Any, reason: str | None) -> None:
        self.batch = batch
        self.reason = reason

    def pin_memory(self, device: Any = None) -> Any:
        return _torch_utils.pin_memory.pin_memory(_unwrap(self), device)


class _Mapped:
    """The main process's mapping of one slot."""

    __slots__ = ("seg", "payload", "ctrl", "lock")

    def __init__(self, seg: Any) -> None:
        self.seg = seg
        self.payload = seg.payload()
        self.ctrl = self.payload[:_CTRL_BYTES].view(np.int64)
        self.lock = threading.Lock()  # one releaser at a time in this process

    def release(self, seq: int) -> None:
        with self.lock:
            # SYNC POINT: our last reads of the slot happened before the
            # tensors were freed; the segment lock publishes FREE after them.
            self.seg.lock()
            try:
                if self.ctrl[_SEQ] == seq:
                    self.ctrl[_STATE] = _FREE
            finally:
                self.seg.unlock()


_mapped: dict[str, _Mapped] = {}
_mapped_lock = threading.Lock()
# Drop our mappings before interpreter teardown (batches still referenced
# keep theirs through their storage).
atexit.register(_mapped.clear)


def _map(name: str, segname: str, instance_id: str) -> _Mapped:
    with _mapped_lock:
        m = _mapped.get(segname)
        if m is not None and m.seg.instance_id == instance_id:
            return m
        seg = _native.Segment.open(name, _native.KIND_ARRAY, False)
        if seg.instance_id != instance_id:
            raise RuntimeError(f"loader slot {name!r} was replaced before it was read")
        # Mapped here and in the worker: the name is no longer needed.
        _native.unlink_segname(segname)
        m = _mapped[segname] = _Mapped(seg)
        # An older generation of the same slot is retired.
        stem = name.rsplit("-g", 1)[0]
        for k in [k for k, v in _mapped.items() if k != segname and v.seg.name.rsplit("-g", 1)[0] == stem]:
            del _mapped[k]
        return m


def _forget(token: str) -> None:
    with _mapped_lock:
        for k in [k for k, v in _mapped.items() if v.seg.name.startswith(_NAME_PREFIX + token)]:
            del _mapped[k]


class _Lease(np.ndarray):
    """The bytes of one delivered batch; freed last when every tensor built
    on them is gone, which returns the slot."""


class _Descriptor:
    """What crosses the worker queue: where the batch is, and its structure."""

    def __init__(self, name: str, segname: str, instance_id: str, seq: int, used: int,
                 structure: bytes, metas: list, worker_id: int) -> None:
        self.name, self.segname, self.instance_id = name, segname, instance_id
        self.seq, self.used, self.structure, self.metas = seq, used, structure, metas
        self.worker_id = worker_id
        self.armed = False  # True on the receiving side until decoded

    def __reduce__(self) -> Any:
        return (_Descriptor._received, (self.name, self.segname, self.instance_id, self.seq,
                                        self.used, self.structure, self.metas, self.worker_id))

    @classmethod
    def _received(cls, *args: Any) -> "_Descriptor":
        d = cls(*args)
        d.armed = True
        return d

    def decode(self) -> Any:
        self.armed = False
        m = _map(self.name, self.segname, self.instance_id)
        storage = None
        if self.used > _CTRL_BYTES:
            lease = m.payload[_CTRL_BYTES:self.used].view(_Lease)
            weakref.finalize(lease, m.release, self.seq)
            storage = torch.frombuffer(lease, dtype=torch.uint8).untyped_storage()
        else:
            m.release(self.seq)
        made: dict[int, torch.Tensor] = {}
        metas = self.metas

        def load(pid: int) -> torch.Tensor:
            t = made.get(pid)
            if t is None:
                pos, dtype, size, stride, grad, param = metas[pid]
                if pos < 0:
                    t = torch.empty_strided(size, stride, dtype=dtype)
                else:
                    es = torch.empty(0, dtype=dtype).element_size()
                    t = torch.empty(0, dtype=dtype).set_(storage, (pos - _CTRL_BYTES) // es, size, stride)
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
        return _torch_utils.pin_memory.pin_memory(self.decode(), device)

    def __del__(self) -> None:
        # Dropped unread (an iterator stopped early, persistent workers
        # resetting): hand the slot back so the worker can reuse it.
        if self.armed:
            self.armed = False
            try:
                _map(self.name, self.segname, self.instance_id).release(self.seq)
            except Exception:  # noqa: BLE001 - the worker may be gone
                pass


_warned = threading.local()


def _unwrap(data: Any, loader: Any = None) -> Any:
    if isinstance(data, _Descriptor):
        return data.decode()
    if isinstance(data, _Fallback):
        if data.reason is not None and loader is not None and not loader._shm_warned:
            loader._shm_warned = True
            warnings.warn(
                "shmstream.torch.DataLoader: a worker could not create its shared-memory "
                f"slots ({data.reason}); its batches use torch's default path instead. "
                "Free space in /dev/shm (see `df -h /dev/shm`, `shmstream purge`).",
                ShmTransportWarning, stacklevel=3)
        return data.batch
    return data


def _cleanup_token(token: str) -> None:
    """Remove what workers of ``token`` left in /dev/shm (a worker that
    crashed or was killed cannot unlink its slots), and our mappings."""
    prefix = "/dev/shm/shmstream-" + _NAME_PREFIX + token + "-"
    for path in glob.glob(glob.escape(prefix) + "*"):
        try:
            os.unlink(path)
        except OSError:
            pass
    _forget(token)


class _ShmIter:
    """Wraps torch's multi-process iterator: builds batches from slots."""

    def __init__(self, loader: "DataLoader", it: Any, token: str, persistent: bool) -> None:
        self._loader = loader
        self._it = it
        self._token = token
        self._persistent = persistent
        self._closed = False

    def __iter__(self) -> "_ShmIter":
        return self

    def __len__(self) -> int:
        return len(self._it)

    def __next__(self) -> Any:
        try:
            data = next(self._it)
        except StopIteration:
            if not self._persistent:
                self.close()
            raise
        except BaseException:
            # A worker died or raised: torch has shut the workers down (or
            # will); remove what they could not.
            if not self._persistent or getattr(self._it, "_shutdown", False):
                self.close()
            raise
        return _unwrap(data, self._loader)

    def close(self) -> None:
        """Stop the workers (unless persistent) and remove their slots."""
        if self._closed:
            return
        self._closed = True
        if self._persistent:
            return
        shutdown = getattr(self._it, "_shutdown_workers", None)
        if shutdown is not None:
            shutdown()
        self._it = None
        _cleanup_token(self._token)

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


class DataLoader(torch.utils.data.DataLoader):
    """torch.utils.data.DataLoader with a shared-memory batch transport.

    Takes exactly torch's arguments, plus ``shm_slots`` (slots per worker,
    default ``prefetch_factor + 2``). With ``num_workers=0`` nothing changes.
    See the module documentation for how batches travel and what falls back
    to torch's default path.
    """

    def __init__(self, dataset: Any, *args: Any, shm_slots: int | None = None, **kwargs: Any) -> None:
        super().__init__(dataset, *args, **kwargs)
        self._shm_warned = False
        self._shm_tokens: list[str] = []
        if self.num_workers > 0:
            nslots = shm_slots if shm_slots is not None else (self.prefetch_factor or 2) + 2
            if nslots < 1:
                raise ValueError("shm_slots must be >= 1")
            self.collate_fn = _SlotCollate(self.collate_fn, nslots)  # type: ignore[has-type]
            weakref.finalize(self, _cleanup_tokens, self._shm_tokens)

    def __iter__(self) -> Any:
        if self.num_workers == 0 or not isinstance(self.collate_fn, _SlotCollate):
            return super().__iter__()
        persistent = self.persistent_workers
        if not persistent or self._iterator is None:
            # New workers: a new token for their slots.
            self.collate_fn.token = secrets.token_hex(4)
            self._shm_tokens.append(self.collate_fn.token)
        return _ShmIter(self, super().__iter__(), self.collate_fn.token, persistent)


def _cleanup_tokens(tokens: list[str]) -> None:
    for token in tokens:
        _cleanup_token(token)
