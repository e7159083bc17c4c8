"""The context managers a stream handle returns: the lock scope and the
zero-copy read and write views. Classes rather than generators: they are
entered on every frame of a pipeline."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import FrameOverwrittenError
from .publication import Publication, end_view


class LockScope:
    """Returned by :meth:`SharedMemory.locked` (a class, not a generator:
    it is entered on every frame of a pipeline)."""

    __slots__ = ("_handle", "_timeout")

    def __init__(self, handle: Any, timeout: float | None) -> None:
        self._handle = handle
        self._timeout = timeout

    def __enter__(self) -> Any:
        self._handle.acquire(timeout=self._timeout)
        return self._handle

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self._handle.release()


class ReadView:
    """Returned by :meth:`SharedMemory.read_view` and
    :meth:`SharedMemory.read_new_view`."""

    __slots__ = ("_handle", "_new", "_timeout", "_spin", "_slot", "_slot_seq", "_pub")

    def __init__(self, handle: Any, new: bool, timeout: float | None, spin: int) -> None:
        self._handle = handle
        self._new = new
        self._timeout = timeout
        self._spin = spin
        self._slot = -1
        self._slot_seq = 0
        self._pub: Publication | None = None

    def __enter__(self) -> Publication:
        handle = self._handle
        seg = handle._check_open("read a view of")
        after = handle._seen if self._new else 0
        self._slot, self._slot_seq, count, frame_id, wt = seg.view(
            after, self._new, self._timeout, self._spin, handle._holds_lock()
        )
        missed = handle._record(count)
        self._pub = Publication(
            handle._readonly_view(seg, self._slot), count, frame_id, wt / 1e9, missed
        )
        return self._pub

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if self._pub is not None:
            end_view(self._pub, "payload", repr(self._handle.name))
            self._pub = None
        seg = self._handle._seg
        if exc_type is None and seg is not None and not seg.view_valid(self._slot, self._slot_seq):
            raise FrameOverwrittenError(
                f"the frame of {self._handle.name!r} was overwritten while its view was in "
                "use (a writer lapped the reader); copy what you need inside the block, "
                "create the stream with more slots, or use read() for a copy"
            )


class WriteView:
    """Returned by :meth:`SharedMemory.write_view_locked` and, with
    ``take_lock``, by :meth:`SharedMemory.write_view`."""

    __slots__ = ("_handle", "_frame_id", "_timeout", "_take_lock", "_array")

    def __init__(
        self,
        handle: Any,
        frame_id: int | None,
        timeout: float | None,
        take_lock: bool,
    ) -> None:
        self._handle = handle
        self._frame_id = frame_id
        self._timeout = timeout
        self._take_lock = take_lock
        self._array: Any = None

    def __enter__(self) -> Any:
        handle = self._handle
        if not self._take_lock:
            self._array = handle._begin_write_view(self._frame_id, "write_view_locked()")
            return self._array
        handle._check_writable("write to")
        handle.acquire(timeout=self._timeout)
        try:
            self._array = handle._begin_write_view(self._frame_id, "write_view()")
        except BaseException:
            handle.release()
            raise
        return self._array

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        handle = self._handle
        if isinstance(self._array, np.ndarray):
            # The block's own array (a view made for it) is read-only from
            # here on: kept, it must not write into a published frame.
            self._array.flags.writeable = False
        self._array = None
        try:
            if exc_type is None:
                handle._commit_write_view(self._frame_id)
            else:
                handle._abort_write_view()
        finally:
            if self._take_lock:
                handle.release()
