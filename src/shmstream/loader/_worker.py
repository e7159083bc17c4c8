"""The worker side of ``shmstream.torch.DataLoader``: a worker takes a
slot of the loader's pool, stacks the default collate's samples straight
into it (or copies a custom collate's tensors into it) and pickles the
batch's structure with its tensors as references into the slot, so only a
small ``Descriptor`` crosses torch's worker queue (``SlotCollate``).
"""

from __future__ import annotations

import atexit
import io
import pickle
import threading
from typing import Any, NamedTuple

import numpy as np
import torch
import torch.utils.data
from torch.utils.data._utils.collate import collate as _collate
from torch.utils.data._utils.collate import (
    collate_tensor_fn,
    default_collate,
    default_collate_fn_map,
)

from . import _loader_pool, _torch_compat
from ._batch import Descriptor, Fallback

_ALIGN = 64
_STORAGES = (torch.UntypedStorage, torch.TypedStorage)


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

    def reducer_override(self, obj: Any) -> Any:
        # a storage pickled by value (a tensor the slot does not carry):
        # torch's reduction, loaded back as torch 2.6 and later load it
        if isinstance(obj, _STORAGES):
            return _torch_compat.reduce_storage(obj)
        return NotImplemented

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


class SlotCollate:
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
            return Fallback(self.collate_fn(samples), self.token, "error", client)
        try:
            return self._pack(client, samples)
        except OSError as exc:
            return Fallback(
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
        if isinstance(collated, Fallback):
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

    def _collate(self, client: Any, samples: Any) -> _Collated | Fallback:
        """The batch, stacked straight into a slot where the direct collate
        can; else collated into private memory (slot None)."""
        if self.direct:
            need = _collated_bytes(samples)
            if need > 0:
                got = self._take(client, need)
                if isinstance(got, str):  # no slot: torch's path, as torch would
                    return Fallback(self.collate_fn(samples), self.token, got, client.create_error)
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
                return Fallback(plain, token, got, client.create_error)
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
) -> Descriptor:
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
        return Descriptor(token, -1, 0, 0, 0, buf.getvalue(), packer.metas, False)
    t = slot.taken
    # Every byte is written: a file another process truncated meanwhile took
    # them (zero pages under the guard, not a SIGBUS); the batch is lost.
    _loader_pool.check_written(token, t)
    return Descriptor(token, t.k, t.gen, t.seq, used, buf.getvalue(), packer.metas, t.fresh)


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
