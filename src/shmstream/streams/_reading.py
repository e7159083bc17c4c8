"""Reading a stream: consistent copies, publications with their metadata,
zero-copy views, the last complete frame, DLPack. A mixin of
:class:`shmstream.SharedMemory` (the handle's state lives there); each read
is one native call into the snapshot protocol of the core (docs/ABI.md,
"Snapshot read").
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ..common import _checks
from ..errors import NotLockOwnerError, ShmstreamTypeError, ShmstreamValueError
from ._scopes import ReadView
from .publication import STATE_NAMES, Publication

# Hot-path globals bound once.
_ndarray = np.ndarray
_empty = np.empty


if TYPE_CHECKING:
    from .. import _native
    from ._handle import HandleState as _Handle
else:
    _Handle = object  # the protocol is for mypy only


class Reading(_Handle):
    """Read methods of a stream handle."""

    __slots__ = ()

    if TYPE_CHECKING:
        # The handle's read bookkeeping, which this mixin assigns: declared
        # here too, or mypy cannot type the reads before the assignments.
        _last_read: int
        _missed: int
        _total_missed: int

    def _payload_view(self, seg: _native.Segment, slot: int | None = None) -> np.ndarray:
        """A view of one payload slot (the published one by default)."""
        if slot is None:
            slot = seg.published_slot
        view = self._views.get(slot)
        if view is None:
            raw = seg.payload(slot)
            view = (
                raw.view(self.dtype).reshape(self.shape)
                if self.size
                else (np.empty(self.shape, self.dtype))
            )
            self._views[slot] = view
        return view

    def _readonly_view(self, seg: _native.Segment, slot: int) -> np.ndarray:
        view = self._ro_views.get(slot)
        if view is None:
            view = self._payload_view(seg, slot).view()
            view.flags.writeable = False
            self._ro_views[slot] = view
        return view

    def read_view(self, *, timeout: float | None = None) -> ReadView:
        """``with shm.read_view() as pub:`` a zero-copy :class:`Publication`
        of the latest frame: ``pub.payload`` is a read-only view of the shared
        slot, valid inside the block only. No lock is held; the writer fills
        the other slot meanwhile. On exit, FrameOverwrittenError if the
        writer lapped the view (``slots - 1`` newer writes during the block,
        or any write with ``slots=1``)."""
        return ReadView(self, False, timeout, self._spin)

    def read_new_view(self, *, timeout: float | None = None) -> ReadView:
        """:meth:`read_view` of the first publication newer than what this
        handle last saw (the rule of :meth:`read_new`); TimeoutError if none
        arrives within ``timeout`` seconds."""
        return ReadView(self, True, timeout, self._spin)

    # -- reading --

    def _record(self, count: int) -> int:
        """Book a read of publication ``count``; returns the writes missed."""
        missed = count - self._last_read - 1
        self._last_read = count
        if missed > 0:
            self._missed = missed
            self._total_missed += missed
            return missed
        self._missed = 0
        return 0

    @property
    def _seen(self) -> int:
        # The count read_new waits to pass.
        last, wrote = self._last_read, self._wrote
        return last if last > wrote else wrote

    def _check_out(self, out: Any) -> np.ndarray:
        if not isinstance(out, _ndarray):
            raise ShmstreamTypeError(
                f"out must be a numpy.ndarray of shape {self.shape} and dtype "
                f"{self.dtype}, not {type(out).__name__}"
            )
        if out.shape != self.shape or out.dtype != self.dtype:
            raise ShmstreamValueError(
                f"out has shape {out.shape} and dtype {out.dtype}; stream "
                f"{self.name!r} needs shape {self.shape} and dtype {self.dtype}"
            )
        if not out.flags.c_contiguous or not out.flags.writeable:
            raise ShmstreamValueError("out must be a C-contiguous, writable array")
        return out

    def read(
        self,
        *,
        safe: bool = True,
        poll_interval: float = 1e-6,
        out: np.ndarray | None = None,
        timeout: float | None = None,
    ) -> Any:
        """A consistent copy of the latest payload (never torn).

        ``out=`` fills a C-contiguous array of the stream's shape and dtype
        and returns it (nothing is allocated). ``timeout`` bounds the wait
        for a write in progress (TimeoutError). ``safe=False`` returns the
        live shared array; it needs the lock (``with shm.locked():``).
        """
        seg = self._seg
        if seg is None or safe is not True:
            return self._read_unsafe(safe, out, timeout)
        if out is None:
            out = _empty(self.shape, self.dtype)
        if self._lk.owner is None:
            # Fast case: one native call checks out (None back: not a
            # C-contiguous writable ndarray of our dtype and shape) and copies.
            count = seg.get(out, timeout)
            if count is not None:
                self._record(count)
                return out
        out = self._check_out(out)
        self._record(seg.read(out, timeout, self._holds_lock())[0])
        return out

    def _read_unsafe(self, safe: Any, out: Any, timeout: float | None = None) -> Any:
        seg = self._check_open("read from")
        if _checks.check_bool("safe", safe):  # numpy.True_
            return self.read(out=out, timeout=timeout)
        self._check_writable("take an unsafe shared view from")
        if out is not None:
            raise ShmstreamValueError(
                "out is supported only for safe reads; pass safe=True with out="
            )
        if not self._holds_lock():
            raise NotLockOwnerError("safe=False requires an active 'with shm.locked()' block")
        self._record(seg.count)
        return self._payload_view(seg)

    def read_publication(
        self,
        *,
        safe: bool = True,
        poll_interval: float = 1e-6,
        out: np.ndarray | None = None,
        timeout: float | None = None,
    ) -> Publication:
        """Like :meth:`read`, with the count, frame id and write time of the
        same write, as a :class:`Publication`."""
        seg = self._check_open("read a publication from")
        if not _checks.check_bool("safe", safe):
            self._check_writable("take an unsafe publication view from")
            if out is not None:
                raise ShmstreamValueError(
                    "out is supported only for safe reads; pass safe=True with out="
                )
            if not self._holds_lock():
                raise NotLockOwnerError("safe=False requires an active 'with shm.locked()' block")
            count, frame_id, wt = seg.publication()
            missed = self._record(count)
            return Publication(self._payload_view(seg), count, frame_id, wt / 1e9, missed)
        out = _empty(self.shape, self.dtype) if out is None else self._check_out(out)
        count, frame_id, wt = seg.read(out, timeout, self._holds_lock())
        missed = self._record(count)
        return Publication(out, count, frame_id, wt / 1e9, missed)

    def read_last_complete(
        self, *, out: np.ndarray | None = None, timeout: float | None = None
    ) -> Publication:
        """The last complete publication, even while the stream reports a
        failed write (an exception inside ``write_view``, or a writer that
        died mid-write): for monitors that must show the last good frame.
        ``pub.state`` is "valid" if no write failed since, else "aborted" or
        "abandoned" (this frame is the one before the failed write). It
        takes the stream lock when a write failed. A stream with
        ``slots=1`` has no such frame after a failure: InconsistentStreamError."""
        seg = self._check_open("read from")
        out = _empty(self.shape, self.dtype) if out is None else self._check_out(out)
        count, frame_id, wt, state = seg.read_last_complete(out, timeout, self._holds_lock())
        missed = self._record(count)
        return Publication(out, count, frame_id, wt / 1e9, missed, STATE_NAMES.get(state, "?"))

    # -- DLPack --

    def __dlpack_device__(self) -> tuple[int, int]:
        self._check_open("read the DLPack device of")
        return (1, 0)  # kDLCPU

    def __dlpack__(self, *, stream: Any = None, **kwargs: Any) -> Any:
        """A DLPack capsule of a consistent snapshot (like :meth:`read`), not
        a live view: later writes do not change it."""
        self._check_open("export DLPack from")
        snapshot = self.read()
        try:
            return snapshot.__dlpack__(**kwargs)
        except TypeError:
            return snapshot.__dlpack__()
