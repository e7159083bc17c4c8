"""The slot pool of a ``shmstream.torch.DataLoader``: shared memory that the
loader (the main process) owns and its workers fill, kept across epochs and
worker restarts. No torch here: ``shmstream purge`` imports this module.
This file is the main process's ``Pool`` and the pool's one name for its
callers: ``_slot_table`` holds the table, ``_pool_client`` a worker's
``PoolClient``, ``_slot_files`` the files; their names are re-exported.

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
import os
import secrets
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np

from .. import _native
from ..errors import BatchLostError, CorruptStreamError
from ._pool_client import PoolClient
from ._slot_files import (
    DEFAULT_MAX_BYTES,
    ROOT_PREFIX,
    SLOT_FILE_PREFIX,
    Mapped,
    Taken,
    capacity_for,
    check_whole,
    check_written,
    create_slot_file,
    default_max_bytes,
    list_slot_files,
    map_slot_file,
    purge_dead_loader_pools,
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
    H_NSLOTS,
    H_TOTAL,
    HEAD,
    HELD,
    LEASE,
    LINE,
    PID,
    READY,
    SEQ,
    STATE,
    TABLE_MAGIC,
    SlotTable,
)

# Callers know this module as the pool: the names of its table, its
# worker's side and its files are this module's too.
__all__ = [
    "CAP",
    "DEFAULT_MAX_BYTES",
    "EMPTY",
    "FILLING",
    "FREE",
    "GEN",
    "H_MAGIC",
    "H_MAX",
    "H_NSLOTS",
    "H_TOTAL",
    "HEAD",
    "HELD",
    "LEASE",
    "LINE",
    "PID",
    "READY",
    "ROOT_PREFIX",
    "SEQ",
    "SLOT_FILE_PREFIX",
    "STATE",
    "TABLE_MAGIC",
    "Mapped",
    "Pool",
    "PoolClient",
    "SlotTable",
    "Taken",
    "capacity_for",
    "check_whole",
    "check_written",
    "create_slot_file",
    "default_max_bytes",
    "list_slot_files",
    "map_slot_file",
    "purge_dead_loader_pools",
    "root_name",
    "slot_path",
    "unlink_quiet",
]


class Pool:
    """The main process's side: creates the root, maps slots to build
    batches, frees them, counts, and removes everything when the loader
    goes."""

    def __init__(self, nslots: int, max_bytes: int) -> None:
        self.token = secrets.token_hex(8)
        self.owner_pid = os.getpid()
        self.max_bytes = max_bytes
        self.table: SlotTable | None = None
        self.instance_id: str | None = None
        #: Why the pool could not be made (its batches take torch's path).
        self.broken: str | None = None
        self.maps: dict[int, Mapped] = {}  # k -> its mapping, buf: a uint8 array
        self._tls = threading.local()
        self._count_lock = threading.Lock()
        self.fresh = self.reused = 0
        self.fallbacks: dict[str, int] = {"bound": 0, "busy": 0, "error": 0}
        self.warned = False
        nbytes = (HEAD + nslots * LINE) * 8
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
        words[H_NSLOTS], words[H_MAX] = nslots, max_bytes
        words[H_MAGIC] = TABLE_MAGIC  # before any worker exists: no ordering needed
        self.instance_id = seg.instance_id
        self.table = SlotTable(seg, self.token)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[SlotTable]:
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
            ok = e[SEQ] == seq and e[GEN] == gen and e[STATE] == FILLING
            if ok:
                e[STATE] = HELD
            cap = int(e[CAP])
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
                if t.line(k)[SEQ] == seq:
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
