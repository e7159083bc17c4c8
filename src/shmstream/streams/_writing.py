"""Locking and writing of :class:`shmstream.SharedMemory`: the cross-process
write lock (acquire, release, locked), write and its variants, write views
and the casting rule. A mixin, like :mod:`._reading`; every protocol step is
one native call."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

import numpy as np

from ..common import _checks
from ..errors import (
    GpuRequiredError,
    LoanStateError,
    NotLockOwnerError,
)
from ._checks import check_casting, check_count, coerce_write
from ._scopes import LockScope, WriteView

if TYPE_CHECKING:
    from ._handle import HandleState as _Handle
else:
    _Handle = object  # the protocol is for mypy only

# Hot-path globals bound once.
_get_ident = threading.get_ident


class Writing(_Handle):
    """The lock and the writes of a stream handle."""

    # -- locking --

    def acquire(self, *, timeout: float | None = None, poll_interval: float = 1e-3) -> None:
        """Take the cross-process write lock; re-entrant per thread (each
        acquire needs a release). A lock whose owner died is handed over at
        once. Raises TimeoutError if ``timeout`` seconds pass first.
        ``poll_interval`` is accepted for pyshmem compatibility; the wait
        sleeps in the kernel instead of polling."""
        seg = self._check_writable("acquire the write lock for")
        state = self._lk
        me = _get_ident()
        if state.owner == me:
            state.depth += 1
            self._held += 1
            return
        seg.lock(timeout)  # True when taken over from a dead owner
        state.owner = me
        state.depth = 1
        self._held += 1

    def release(self) -> None:
        """Release one level of this thread's hold on the lock."""
        seg = self._check_open("release")
        state = self._lk
        if state.owner is None:
            raise NotLockOwnerError(
                f"cannot release an unlocked shared memory lock ({self.name!r})"
            )
        if state.owner != _get_ident():
            raise NotLockOwnerError(
                f"cannot release a lock owned by another thread ({self.name!r})"
            )
        state.depth -= 1
        if self._held:
            self._held -= 1
        if state.depth == 0:
            state.owner = None
            seg.unlock()

    def locked(self, *, timeout: float | None = None, poll_interval: float = 1e-3) -> LockScope:
        """``with shm.locked():`` holds the write lock for the block."""
        return LockScope(self, timeout)

    # -- writing --

    _casting: str = "unsafe"

    @property
    def casting(self) -> str:
        """How write() converts what is not of the stream's dtype: "unsafe"
        (the default: pyshmem's np.asarray(value, dtype)), or a strict NumPy
        rule, "same_kind" or "safe", under which a lossy conversion is a
        TypeError. Checked when set: another value is a ValueError."""
        return self._casting

    @casting.setter
    def casting(self, value: str) -> None:
        self._casting = check_casting(value)

    def _coerce(self, value: Any) -> np.ndarray:
        # The slow path of write() (docs/API.md, "Writing").
        return coerce_write(value, self.dtype, self.shape, self.name, self.casting)

    def write(
        self,
        value: Any,
        *,
        frame_id: int | None = None,
        count: int | None = None,
        write_time_ns: int | None = None,
        timeout: float | None = None,
    ) -> None:
        """Publish a copy of ``value`` (converted like ``np.asarray(value,
        dtype)``; its shape must match). ``frame_id`` (any uint64) is stored
        with the write; omitted, the previous one is kept. Waits up to
        ``timeout`` seconds (None: for ever) for the write lock, then raises
        TimeoutError.

        For a mirror of another stream or a replay: ``count`` publishes the
        write as that count (it must exceed the current one and be below
        2**63, so that the count still grows after it; readers count the
        gap as missed writes) and ``write_time_ns`` (ns since the epoch)
        replaces the clock's time."""
        seg = self._wseg
        if seg is not None and count is None and write_time_ns is None and self._lk.owner is None:
            # Fast case: a C-contiguous ndarray of the stream's dtype and
            # shape, checked and published in one native call; anything
            # else (None back) takes the checked path below.
            try:
                wrote = seg.put(value, frame_id, timeout)
            except TypeError:  # None, or a frame_id of a wrong type: the checked path says
                wrote = None
            if wrote is not None:
                self._wrote = wrote
                return
        if count is not None or write_time_ns is not None:
            self._write_with_metadata(value, frame_id, count, write_time_ns, timeout)
            return
        seg = self._check_writable("write to")  # raises: closed or read-only
        value, frame_id = self._write_args(value, frame_id)
        timeout = _checks.check_timeout(timeout)
        self._wrote = seg.write(value, frame_id, self._holds_lock(), timeout)

    def _write_args(self, value: Any, frame_id: int | None) -> tuple[np.ndarray, int | None]:
        """The checked (payload, frame_id) of every slow-path write."""
        value = self._coerce(value)
        if frame_id is not None:
            frame_id = _checks.check_u64("frame_id", frame_id)
        return value, frame_id

    def _write_with_metadata(
        self,
        value: Any,
        frame_id: int | None,
        count: int | None,
        write_time_ns: int | None,
        timeout: float | None,
    ) -> None:
        seg = self._check_writable("write to")
        value, frame_id = self._write_args(value, frame_id)
        count = 0 if count is None else check_count(count)
        write_time_ns = (
            0
            if write_time_ns is None
            else _checks.check_u64("write_time_ns", write_time_ns, minimum=1)
        )
        timeout = _checks.check_timeout(timeout)
        self._wrote = seg.write(value, frame_id, self._holds_lock(), timeout, count, write_time_ns)

    def write_locked(self, value: Any, *, frame_id: int | None = None) -> None:
        """:meth:`write` for a caller that already holds the lock."""
        seg = self._check_writable("write to")
        if not self._holds_lock():
            raise NotLockOwnerError("write_locked() requires an active 'with shm.locked()' block")
        value, frame_id = self._write_args(value, frame_id)
        self._wrote = seg.write(value, frame_id, True)

    def write_view(self, *, timeout: float | None = None, frame_id: int | None = None) -> WriteView:
        """``with shm.write_view() as a:`` fills the shared payload in place
        and publishes it on exit, holding the lock for the block. If the
        block raises, the stream is left invalid (readers get
        InconsistentStreamError until the next good write)."""
        self._check_writable("write to")
        if frame_id is not None:
            frame_id = _checks.check_u64("frame_id", frame_id)
        return WriteView(self, frame_id, timeout, True)

    def write_view_locked(self, *, frame_id: int | None = None) -> WriteView:
        """:meth:`write_view` for a caller that already holds the lock."""
        if frame_id is not None:
            frame_id = _checks.check_u64("frame_id", frame_id)
        return WriteView(self, frame_id, None, False)

    def _begin_write_view(self, frame_id: int | None, what: str) -> np.ndarray:
        seg = self._check_writable("write to")
        if not self._holds_lock():
            raise NotLockOwnerError(f"{what} requires an active 'with shm.locked()' block")
        if self._writing:
            raise LoanStateError(f"a write_view of {self.name!r} is already open on this handle")
        published = self._payload_view(seg)
        view = self._payload_view(seg, seg.write_begin())
        if view is not published:
            # The writer fills the slot after the published one (readers copy
            # the published one meanwhile); start it from the current frame
            # so in-place updates see what readers see, as with one slot.
            np.copyto(view, published)
        self._writing = True
        return view.view()  # the block's own array: WriteView makes it read-only after it

    def _commit_write_view(self, frame_id: int | None) -> None:
        seg = self._seg
        if seg is None or not self._writing:
            return
        self._writing = False
        self._wrote = seg.write_end(frame_id)

    def _abort_write_view(self) -> None:
        seg = self._seg
        if seg is None or not self._writing:
            return
        self._writing = False
        seg.write_abort()

    def clear(self, *, timeout: float | None = None) -> None:
        """Zero the payload; counts as a write. Waits up to ``timeout``
        seconds (None: for ever) for the write lock, as :meth:`write`."""
        seg = self._check_writable("clear")
        self._wrote = seg.clear(self._holds_lock(), _checks.check_timeout(timeout))

    def pinned_buffer(self) -> Any:
        """GPU streams only: a stream without ``gpu_device`` has no pinned
        buffer, so this raises :class:`GpuRequiredError`."""
        self._check_writable("allocate a pinned write buffer for")
        raise GpuRequiredError("pinned_buffer() requires a GPU-attached stream handle")
