"""The table of a DataLoader's slot pool: the words in its root segment's
payload, and the one class that reads and changes them under the root's
lock (docs/loader.md, "The pool in shared memory"). The main process's
``Pool`` and a worker's ``PoolClient`` both go through it.

The payload is int64 words: a head line (magic, slots, bound, bytes in
use), then one line per slot (state, sequence, generation, capacity, the
worker's pid for humans, its root handle's lease, whether its file is
complete).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np

from ._slot_files import Mapped, slot_path, unlink_quiet

__all__ = [
    "CAP",
    "EMPTY",
    "FILLING",
    "FREE",
    "GEN",
    "HEAD",
    "HELD",
    "H_MAGIC",
    "H_MAX",
    "H_NSLOTS",
    "H_TOTAL",
    "LEASE",
    "LEASE_MASK",
    "LINE",
    "PID",
    "READY",
    "SEQ",
    "STATE",
    "TABLE_MAGIC",
    "SlotTable",
]

TABLE_MAGIC = 0x324C4F4F50534C53  # "SLSPOOL2", little-endian: lines name leases
HEAD = 8  # words of the head line: magic, nslots, max_bytes, total_bytes
H_MAGIC, H_NSLOTS, H_MAX, H_TOTAL = 0, 1, 2, 3
LINE = 8  # words per slot line
# PID is the worker's pid, for humans only; LEASE its root handle's lease
STATE, SEQ, GEN, CAP, PID, LEASE, READY = range(7)
EMPTY, FREE, FILLING, HELD = 0, 1, 2, 3
LEASE_MASK = (1 << 64) - 1  # a line's lease word as unsigned: a negative one is no lease


class SlotTable:
    """The root segment and its table. Every method that reads or changes
    slot lines runs with the root's lock held (``locked()``)."""

    def __init__(self, seg: Any, token: str) -> None:
        self.seg = seg
        self.token = token
        self.words = seg.payload().view(np.int64)
        self.nslots = int(self.words[H_NSLOTS])

    @contextlib.contextmanager
    def locked(self) -> Iterator[np.ndarray]:
        # SYNC POINT pool-lock: every change of the table, and each hand-over
        # of a slot's bytes (FILLING -> HELD -> FREE -> FILLING), happens under
        # the root's lock (by lease); it orders one side's writes
        # of the bytes before the other side's reads.
        if self.seg.lock():
            self._repair()  # the previous holder died, maybe mid-update
        try:
            yield self.words
        finally:
            self.seg.unlock()

    def line(self, k: int) -> np.ndarray:
        return self.words[HEAD + k * LINE : HEAD + (k + 1) * LINE]

    def _repair(self) -> None:
        self.reclaim_dead()
        self.words[H_TOTAL] = sum(
            int(self.line(k)[CAP]) for k in range(self.nslots) if self.line(k)[STATE] != EMPTY
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
            if e[STATE] != FILLING or self.seg.lease_alive(int(e[LEASE]) & LEASE_MASK) != 0:
                continue
            if e[READY]:
                e[STATE] = FREE
            else:
                self.drop(k)
            n += 1
        return n

    def drop(self, k: int) -> None:
        """Slot k becomes EMPTY and its file goes (mappings stay valid)."""
        e = self.line(k)
        unlink_quiet(slot_path(self.token, k, int(e[GEN])))
        if e[STATE] != EMPTY:
            self.words[H_TOTAL] -= e[CAP]
        e[STATE], e[CAP], e[READY] = EMPTY, 0, 0

    def forget_retired(self, maps: dict[int, Mapped]) -> None:
        """Drop this process's mappings of slot files that were removed or
        replaced, so their pages go back to /dev/shm (held batches keep
        theirs), and those a truncation cut from their file."""
        for k, m in list(maps.items()):
            e = self.line(k)
            if e[STATE] == EMPTY or e[GEN] != m.gen or m.mapping.lost:
                del maps[k]

    def free(self, k: int, seq: int) -> None:
        e = self.line(k)
        if e[SEQ] == seq and e[STATE] in (FILLING, HELD):
            e[STATE] = FREE

    def counts(self) -> tuple[int, int]:
        slots = sum(1 for k in range(self.nslots) if self.line(k)[STATE] != EMPTY)
        return slots, int(self.words[H_TOTAL])
