"""The slot pool of a ``shmstream.torch.DataLoader``: shared memory that the
loader (the main process) owns and its workers fill, kept across epochs and
worker restarts. No torch here: ``shmstream purge`` imports this module.
This file is the pool's bookkeeping (its table, the main process's
``Pool``, a worker's ``PoolClient``); ``_slot_files`` holds the files.

Layout (docs/loader.md, "The pool in shared memory", is the reference)
  root   a KIND_ARRAY segment named ``loader-<token>``, created by the main
         process, layout version 5 (docs/ABI.md, "Loader pool by lease"):
         its header holds the owner's lease (what ``purge`` checks), its
         lock (by lease) serialises every change of the table that is its
         payload (int64 words: a head line, then one line per slot). Each
         line names its worker by the lease of the worker's root handle:
         no pid decides anything, so workers, ``stat`` and ``purge`` may
         run in other PID namespaces.
  slots  /dev/shm/shmstream.loader-<token>.<k>.<gen>: the bytes of slot k,
         generation gen, nothing else. Plain files rather than segments of
         their own: a segment is created populated (the core zeroes every
         page), and a batch written into it then touches every page twice.
         A slot file is reserved with posix_fallocate (a full /dev/shm is
         ENOSPC here, not a SIGBUS later) and mapped unpopulated, so a
         worker writes its first batch straight into fresh pages, the way
         torch's default path does. A worker that attaches to an existing
         slot maps it populated (one call instead of a fault per page).

Slot states: EMPTY (no file), FREE, FILLING (a worker took it; the batch
is being written or is on its way to the main process), HELD (the main
process builds or holds the batch). Workers take FREE or create EMPTY slots;
the main process moves FILLING to HELD when it builds the batch and back to
FREE when the batch's last tensor is freed. The bytes of all slots together
stay under the pool's bound (``max_bytes``).
"""

from __future__ import annotations

import contextlib
import enum
import os
import secrets
import threading
from collections.abc import Iterator
from typing import Any, NamedTuple

import numpy as np

from .. import _native
from ..common._space import SHM_DIR
from ..errors import (
    BatchLostError,
    CorruptStreamError,
    ShmstreamFileNotFoundError,
    ShmstreamOSError,
)

# Its slot files' names are re-exported: callers know this module as the pool.
from ._slot_files import (
    DEFAULT_MAX_BYTES,  # noqa: F401
    ROOT_PREFIX,  # noqa: F401
    SLOT_FILE_PREFIX,  # noqa: F401
    Mapped,
    Taken,
    capacity_for,
    check_whole,
    check_written,  # noqa: F401
    create_slot_file,
    default_max_bytes,  # noqa: F401
    list_slot_files,
    map_slot_file,
    purge_dead_loader_pools,  # noqa: F401
    root_name,
    slot_path,
    unlink_quiet,
)

TABLE_MAGIC = 0x324C4F4F50534C53  # "SLSPOOL2", little-endian: lines name leases
_HEAD = 8  # words of the head line: magic, nslots, max_bytes, total_bytes
_H_MAGIC, _H_NSLOTS, _H_MAX, _H_TOTAL = 0, 1, 2, 3
_LINE = 8  # words per slot line
# _PID is the worker's pid, for humans only; _LEASE its root handle's lease
_STATE, _SEQ, _GEN, _CAP, _PID, _LEASE, _READY = range(7)
EMPTY, FREE, FILLING, HELD = 0, 1, 2, 3
_LEASE_MASK = (1 << 64) - 1  # a line's lease word as unsigned: a negative one is no lease

# ------------------------------------------------------------------ table


class _Table:
    """The root segment and its table. Every method that reads or changes
    slot lines runs with the root's lock held (``locked()``)."""

    def __init__(self, seg: Any, token: str) -> None:
        self.seg = seg
        self.token = token
        self.words = seg.payload().view(np.int64)
        self.nslots = int(self.words[_H_NSLOTS])

    @contextlib.contextmanager
    def locked(self) -> Iterator[np.ndarray]:
        # SYNC POINT pool-lock: every change of the table, and each hand-over
        # of a slot's bytes (FILLING -> HELD -> FREE -> FILLING), happens under
        # the root's lock (by lease, layout 5); it orders one side's writes
        # of the bytes before the other side's reads.
        if self.seg.lock():
            self._repair()  # the previous holder died, maybe mid-update
        try:
            yield self.words
        finally:
            self.seg.unlock()

    def line(self, k: int) -> np.ndarray:
        return self.words[_HEAD + k * _LINE : _HEAD + (k + 1) * _LINE]

    def _repair(self) -> None:
        self.reclaim_dead()
        self.words[_H_TOTAL] = sum(
            int(self.line(k)[_CAP]) for k in range(self.nslots) if self.line(k)[_STATE] != EMPTY
        )

    def reclaim_dead(self) -> int:
        """Slots taken by workers that died: FREE again if their file was
        complete, EMPTY (file removed) if the worker died creating it. A
        worker is dead when the lease its line names is gone (l2, through
        this process's root handle: right in any PID namespace); "cannot
        tell" keeps its slot."""
        n = 0
        for k in range(self.nslots):
            e = self.line(k)
            if e[_STATE] != FILLING or self.seg.lease_alive(int(e[_LEASE]) & _LEASE_MASK) != 0:
                continue
            if e[_READY]:
                e[_STATE] = FREE
            else:
                self.drop(k)
            n += 1
        return n

    def drop(self, k: int) -> None:
        """Slot k becomes EMPTY and its file goes (mappings stay valid)."""
        e = self.line(k)
        unlink_quiet(slot_path(self.token, k, int(e[_GEN])))
        if e[_STATE] != EMPTY:
            self.words[_H_TOTAL] -= e[_CAP]
        e[_STATE], e[_CAP], e[_READY] = EMPTY, 0, 0

    def forget_retired(self, maps: dict[int, Mapped]) -> None:
        """Drop this process's mappings of slot files that were removed or
        replaced, so their pages go back to /dev/shm (held batches keep
        theirs), and those a truncation cut from their file."""
        for k, m in list(maps.items()):
            e = self.line(k)
            if e[_STATE] == EMPTY or e[_GEN] != m.gen or m.mapping.lost:
                del maps[k]

    def free(self, k: int, seq: int) -> None:
        e = self.line(k)
        if e[_SEQ] == seq and e[_STATE] in (FILLING, HELD):
            e[_STATE] = FREE

    def counts(self) -> tuple[int, int]:
        slots = sum(1 for k in range(self.nslots) if self.line(k)[_STATE] != EMPTY)
        return slots, int(self.words[_H_TOTAL])


# ------------------------------------------------------------ main process


class Pool:
    """The main process's side: creates the root, maps slots to build
    batches, frees them, counts, and removes everything when the loader
    goes."""

    def __init__(self, nslots: int, max_bytes: int) -> None:
        self.token = secrets.token_hex(8)
        self.owner_pid = os.getpid()
        self.max_bytes = max_bytes
        self.table: _Table | None = None
        self.instance_id: str | None = None
        #: Why the pool could not be made (its batches take torch's path).
        self.broken: str | None = None
        self.maps: dict[int, Mapped] = {}  # k -> its mapping, buf: a uint8 array
        self._tls = threading.local()
        self._count_lock = threading.Lock()
        self.fresh = self.reused = 0
        self.fallbacks: dict[str, int] = {"bound": 0, "busy": 0, "error": 0}
        self.warned = False
        nbytes = (_HEAD + nslots * _LINE) * 8
        try:
            seg = _native.Segment.create(
                root_name(self.token),
                _native.KIND_ARRAY,
                [nbytes],
                1,
                "|u1",
                _native.FLAG_LOADER_POOL,
                0o600,
                0,
                1,
            )
        except OSError as exc:
            self.broken = f"{type(exc).__name__}: {exc}"
            return
        words = seg.payload().view(np.int64)
        words[_H_NSLOTS], words[_H_MAX] = nslots, max_bytes
        words[_H_MAGIC] = TABLE_MAGIC  # before any worker exists: no ordering needed
        self.instance_id = seg.instance_id
        self.table = _Table(seg, self.token)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[_Table]:
        assert self.table is not None
        tls = self._tls
        tls.inside = True
        tls.pending = []
        try:
            with self.table.locked():
                try:
                    yield self.table
                finally:
                    # A batch freed while we held the lock (a finalizer run
                    # by the collector in this thread) is handed back now;
                    # taking the lock again in this thread would fail
                    # (error-checking mutex).
                    while tls.pending:
                        self.table.free(*tls.pending.pop())
        finally:
            tls.inside = False

    def claim(self, k: int, gen: int, seq: int, fresh: bool) -> np.ndarray:
        """The bytes of slot k for the batch a worker wrote there (FILLING ->
        HELD). RuntimeError if the slot was reclaimed meanwhile;
        CorruptStreamError if the pool has no slot k."""
        with self._locked() as t:
            if not 0 <= k < t.nslots:  # a descriptor is another process's word
                raise CorruptStreamError(
                    f"shmstream.torch.DataLoader: a batch descriptor names slot {k} of a pool of "
                    f"{t.nslots} slots (corrupt descriptor); restart the epoch"
                )
            e = t.line(k)
            ok = e[_SEQ] == seq and e[_GEN] == gen and e[_STATE] == FILLING
            if ok:
                e[_STATE] = HELD
            cap = int(e[_CAP])
            t.forget_retired(self.maps)
        if not ok:
            raise BatchLostError(
                "shmstream.torch.DataLoader: a batch was lost: the worker that wrote it died "
                "and its slot was reused; restart the epoch"
            )
        path = slot_path(self.token, k, gen)
        cached = self.maps.get(k)
        try:
            if cached is None or cached.gen != gen or cached.mapping.lost:
                # map_slot_file checks the file's size as it maps it
                mm = map_slot_file(path, cap, populate=False, owner_uid=int(t.seg.owner_uid))
                self.maps[k] = cached = Mapped(gen, np.frombuffer(mm.buffer(), np.uint8), mm)
            else:
                check_whole(path, cap, cached.mapping)
        except CorruptStreamError:  # truncated: the batch is lost, the slot goes
            with self._locked() as t:
                if t.line(k)[_SEQ] == seq:
                    t.drop(k)
            raise
        except BaseException:
            self.release(k, seq)
            raise
        with self._count_lock:
            if fresh:
                self.fresh += 1
            else:
                self.reused += 1
        return cached.buf

    def release(self, k: int, seq: int) -> None:
        """The batch in slot k is gone (its last tensor freed, or dropped
        unread): the slot is FREE for the workers again."""
        tls = self._tls
        if getattr(tls, "inside", False):
            tls.pending.append((k, seq))
            return
        with self._locked() as t:
            t.free(k, seq)

    def count_fallback(self, reason: str) -> bool:
        """Count a batch that took torch's path; True the first time the
        reason is an error (the caller warns once)."""
        with self._count_lock:
            self.fallbacks[reason] = self.fallbacks.get(reason, 0) + 1
            first_error = reason == "error" and not self.warned
            if first_error:
                self.warned = True
            return first_error

    def reclaim_dead(self) -> None:
        if self.table is not None:
            with self._locked() as t:
                t.reclaim_dead()

    def stats(self) -> dict[str, Any]:
        slots = nbytes = 0
        if self.table is not None:
            with self._locked() as t:
                slots, nbytes = t.counts()
        with self._count_lock:
            return {
                "slots": slots,
                "bytes": nbytes,
                "max_bytes": self.max_bytes,
                "fresh": self.fresh,
                "reused": self.reused,
                "fallbacks": sum(self.fallbacks.values()),
                "fallback_reasons": dict(self.fallbacks),
            }

    def destroy(self) -> None:
        """Remove the pool's files and root (batches still held keep their
        mappings). Only the process that made the pool does it."""
        if os.getpid() != self.owner_pid:
            return
        self.maps.clear()
        # The root goes first: a worker that creates a slot file after this
        # sees no root and removes its file (PoolClient.take); one that
        # created it before is in the listing below.
        if self.table is not None:
            with contextlib.suppress(OSError):
                _native.unlink_segname(self.table.seg.segname)
        for path in list_slot_files(self.token).get(self.token, []):
            unlink_quiet(path)


# ----------------------------------------------------------------- worker


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
        if words.size < _HEAD or int(words[_H_MAGIC]) != TABLE_MAGIC:
            raise ShmstreamOSError(f"loader pool {root_name(token)!r} has no slot table")
        self.token = token
        self.table = _Table(seg, token)
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
                e[_PID], e[_LEASE] = self.pid, self.lease
                e[_SEQ] += 1
                e[_STATE] = FILLING
            gen, seq, cap = int(e[_GEN]), int(e[_SEQ]), int(e[_CAP])
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
                    self.table.line(k)[_READY] = 1
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
                if self.table.line(k)[_SEQ] == seq:
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
            st = e[_STATE]
            if st == FREE:
                if e[_CAP] >= need:
                    # Best fit, among the slots this worker has mapped first
                    # (a new mapping maps every page of the slot).
                    m = self.maps.get(k)
                    mapped = m is not None and m.gen == e[_GEN]
                    key = (not mapped, int(e[_CAP]))
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
        small.sort(key=lambda j: int(t.line(j)[_CAP]), reverse=True)
        target = empty if empty is not None else small.pop(0)
        cap = capacity_for(need, grow=target != empty)
        total = int(w[_H_TOTAL]) - (int(t.line(target)[_CAP]) if target != empty else 0)
        evict = []
        while total + cap > w[_H_MAX] and small:
            j = small.pop(0)
            evict.append(j)
            total -= int(t.line(j)[_CAP])
        if total + cap > w[_H_MAX]:
            return _NoSlot.BOUND
        for j in evict:
            t.drop(j)
        if target != empty:
            t.drop(target)
        # FILLING, not ready, owned by this worker before anything else
        # changes: a holder that dies in between leaves a line that repair
        # drops (its file, if any, removed; total recomputed).
        e = t.line(target)
        e[_PID], e[_LEASE], e[_READY] = self.pid, self.lease, 0
        e[_STATE] = FILLING
        e[_SEQ] += 1
        e[_GEN] += 1
        e[_CAP] = cap
        w[_H_TOTAL] = total + cap
        return _Choice(target, fresh=True)

    def give_back(self, taken: Taken) -> None:
        """The batch failed before it was sent: the slot is FREE again."""
        with self.table.locked():
            self.table.free(taken.k, taken.seq)
