"""A DataLoader worker's side of the slot pool: ``PoolClient`` takes a slot
for each batch (reusing a free one, creating one, or growing a free one
that is too small), maps it once per generation, and gives it back if the
batch fails. Every change of the table is under the root's lock
(``SlotTable.locked``; docs/loader.md, "The pool in shared memory").
"""

from __future__ import annotations

import enum
import os
from typing import Any, NamedTuple

import numpy as np

from .. import _native
from ..common._space import SHM_DIR
from ..errors import CorruptStreamError, ShmstreamFileNotFoundError, ShmstreamOSError
from ._slot_files import (
    Mapped,
    Taken,
    capacity_for,
    check_whole,
    create_slot_file,
    map_slot_file,
    root_name,
    slot_path,
    unlink_quiet,
)
from ._slot_table import (
    CAP,
    EMPTY,
    FILLING,
    FREE,
    GEN,
    H_MAGIC,
    H_MAX,
    H_TOTAL,
    HEAD,
    LEASE,
    PID,
    READY,
    SEQ,
    STATE,
    TABLE_MAGIC,
    SlotTable,
)

__all__ = ["PoolClient"]


class _Choice(NamedTuple):
    """The slot ``PoolClient._choose`` picked: a free one that fits
    (``fresh`` False) or a line it set up for a new file (``fresh`` True)."""

    k: int
    fresh: bool


class _NoSlot(enum.Enum):
    """Why ``PoolClient._choose`` found no slot; the value is the reason
    ``PoolClient.take`` returns (and the loader counts)."""

    BUSY = "busy"  # every slot is in use
    BOUND = "bound"  # a new slot would pass the pool's bound
    ERROR = "error"  # creating a slot failed before (create_error)


class PoolClient:
    """A worker's side: takes a slot for each batch (reusing a free one,
    creating one, or growing a free one that is too small), maps it once per
    generation, gives it back if the batch fails."""

    def __init__(self, token: str, instance_id: str, wrap: Any = None) -> None:
        seg = _native.Segment.open(root_name(token), _native.KIND_ARRAY, False)
        if seg.instance_id != instance_id:
            raise ShmstreamFileNotFoundError(f"loader pool {root_name(token)!r} was replaced")
        words = seg.payload().view(np.int64)
        if words.size < HEAD or int(words[H_MAGIC]) != TABLE_MAGIC:
            raise ShmstreamOSError(f"loader pool {root_name(token)!r} has no slot table")
        self.token = token
        self.table = SlotTable(seg, token)
        self.pid = os.getpid()  # for humans (stat, a debugger)
        self.lease = int(seg.lease)  # what this worker's slot lines name
        if not self.lease:
            raise ShmstreamOSError(
                f"loader pool {root_name(token)!r} gave this worker no lease (its file "
                "could not be locked); its batches take torch's path"
            )
        self.maps: dict[int, Mapped] = {}  # k -> its mapping, buf: wrap(the bytes)
        #: What the caller writes through (the mmap itself by default).
        self.wrap = wrap or (lambda mm: mm)
        #: Why this worker creates no more slots (None: it may).
        self.create_error: str | None = None

    def take(self, need: int, _retry: bool = True) -> Taken | str:
        """A slot of at least ``need`` bytes, FILLING for this worker; or the
        reason there is none ('bound': the pool's bytes would pass its bound;
        'busy': every slot is in use; 'error': creating a slot failed before,
        see ``create_error``).
        OSError if creating its file fails (the slot is EMPTY again). A slot
        whose file another process truncated is dropped and another taken."""
        with self.table.locked() as w:
            got = self._choose(w, need)
            if got in (_NoSlot.BUSY, _NoSlot.BOUND) and self.table.reclaim_dead():
                got = self._choose(w, need)
            if isinstance(got, _NoSlot):
                return got.value
            k, fresh = got
            e = self.table.line(k)
            if not fresh:
                # Owner first: a holder that dies between these stores
                # leaves a FREE slot, or a FILLING one that names it.
                e[PID], e[LEASE] = self.pid, self.lease
                e[SEQ] += 1
                e[STATE] = FILLING
            gen, seq, cap = int(e[GEN]), int(e[SEQ]), int(e[CAP])
            self.table.forget_retired(self.maps)
        path = slot_path(self.token, k, gen)
        try:
            if fresh:
                self.maps.pop(k, None)
                mm = create_slot_file(path, cap)
                buf = self.wrap(mm.buffer())
                if not os.path.exists(SHM_DIR + self.table.seg.segname):
                    unlink_quiet(path)  # the loader is gone: no orphan file
                    raise ShmstreamFileNotFoundError(
                        f"loader pool {root_name(self.token)!r} was removed"
                    )
                with self.table.locked():
                    self.table.line(k)[READY] = 1
            else:
                cached = self.maps.get(k)
                if cached is not None and cached.gen == gen and not cached.mapping.lost:
                    buf, mm = cached.buf, cached.mapping
                    check_whole(path, cap, mm)
                else:  # map_slot_file checks the file's size as it maps it
                    owner = int(self.table.seg.owner_uid)
                    mm = map_slot_file(path, cap, populate=True, owner_uid=owner)
                    buf = self.wrap(mm.buffer())
        except BaseException as exc:
            with self.table.locked():
                if self.table.line(k)[SEQ] == seq:
                    self.table.drop(k)
            if fresh:  # /dev/shm is full: reuse what exists, create nothing
                self.create_error = f"{type(exc).__name__}: {exc}"
            elif _retry and isinstance(exc, CorruptStreamError):
                # Truncated before this batch was written into it: nothing is
                # lost yet, and the dropped slot is EMPTY for a fresh file.
                return self.take(need, _retry=False)
            raise
        self.maps[k] = Mapped(gen, buf, mm)
        return Taken(k, gen, seq, cap, buf, fresh, mm)

    def _choose(self, w: np.ndarray, need: int) -> _Choice | _NoSlot:
        """The slot for a batch of ``need`` bytes, or why there is none.
        A fresh slot's line is taken and set up here (FILLING, generation,
        capacity, total); slots evicted to make room are removed."""
        t = self.table
        fit: int | None = None
        fit_key = (True, 1 << 62)
        empty: int | None = None
        small: list[int] = []
        for k in range(t.nslots):
            e = t.line(k)
            st = e[STATE]
            if st == FREE:
                if e[CAP] >= need:
                    # Best fit, among the slots this worker has mapped first
                    # (a new mapping maps every page of the slot).
                    m = self.maps.get(k)
                    mapped = m is not None and m.gen == e[GEN]
                    key = (not mapped, int(e[CAP]))
                    if key < fit_key:
                        fit, fit_key = k, key
                else:
                    small.append(k)
            elif st == EMPTY and empty is None:
                empty = k
        if fit is not None:
            return _Choice(fit, fresh=False)
        if empty is None and not small:
            return _NoSlot.BUSY
        if self.create_error is not None:
            return _NoSlot.ERROR
        # Room: a free slot too small for this batch is replaced (grow);
        # more of them go, biggest first, if the bound needs their bytes.
        small.sort(key=lambda j: int(t.line(j)[CAP]), reverse=True)
        target = empty if empty is not None else small.pop(0)
        cap = capacity_for(need, grow=target != empty)
        total = int(w[H_TOTAL]) - (int(t.line(target)[CAP]) if target != empty else 0)
        evict = []
        while total + cap > w[H_MAX] and small:
            j = small.pop(0)
            evict.append(j)
            total -= int(t.line(j)[CAP])
        if total + cap > w[H_MAX]:
            return _NoSlot.BOUND
        for j in evict:
            t.drop(j)
        if target != empty:
            t.drop(target)
        # FILLING, not ready, owned by this worker before anything else
        # changes: a holder that dies in between leaves a line that repair
        # drops (its file, if any, removed; total recomputed).
        e = t.line(target)
        e[PID], e[LEASE], e[READY] = self.pid, self.lease, 0
        e[STATE] = FILLING
        e[SEQ] += 1
        e[GEN] += 1
        e[CAP] = cap
        w[H_TOTAL] = total + cap
        return _Choice(target, fresh=True)

    def give_back(self, taken: Taken) -> None:
        """The batch failed before it was sent: the slot is FREE again."""
        with self.table.locked():
            self.table.free(taken.k, taken.seq)
