"""Reading every frame: ``read_since`` (a batch, copied), ``iter_since``
(one frame at a time) and ``read_since_view`` (zero-copy). A mixin of
:class:`shmstream.SharedMemory`.

On a stream made with ``history=N`` these return every publication after
a given count that the stream still holds (its last N, N + 1 while no
write is in flight), oldest first, and count exactly what is gone. On any
other stream they return the newest complete publication (a batch of one)
and count everything else as missed: a recorder works on both. The walk
and the copies are the core's (docs/ABI.md, "History"): one native call per
batch, no Python loop over frames, no lock, so a slow reader never holds
the writer up.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from ..common import _checks
from ..common._checks import spin_ns
from ..errors import (
    FrameOverwrittenError,
    NoCpuMirrorError,
    ShmstreamTypeError,
    ShmstreamValueError,
)
from .publication import FrameBatch, Publication, end_view

if TYPE_CHECKING:
    from .. import _native
    from ._handle import HandleState as _Handle
else:
    _Handle = object  # the protocol is for mypy only


class History(_Handle):
    """History read methods of a stream handle."""

    __slots__ = ()

    if TYPE_CHECKING:
        # The handle's read bookkeeping, which this mixin assigns: declared
        # here too, or mypy cannot type the reads before the assignments.
        _last_read: int
        _missed: int
        _total_missed: int

    @property
    def history(self) -> int:
        """Publications the stream keeps for :meth:`read_since` (the
        ``history`` of :func:`create`); 0 for a latest-value stream."""
        return int(self._check_open("read history of").history)

    def _history_segment(self, operation: str) -> _native.Segment:
        seg = self._check_open(operation)
        if self.gpu_enabled and not self.cpu_mirror:
            raise NoCpuMirrorError(
                f"cannot {operation} GPU stream {self.name!r}: it has no CPU mirror, and "
                "history reads (and recording) read frames on the CPU; create it with "
                "cpu_mirror=True"
            )
        return seg

    def _since(self, count: Any) -> int:
        """The count a history read goes on from: the handle's position
        (what it last read or wrote, as read_new) when count is None."""
        return self._seen if count is None else _checks.check_u64("count", count)

    def _book_batch(self, batch: FrameBatch) -> FrameBatch:
        self._last_read = batch.last_count
        self._missed = batch.missed
        self._total_missed += batch.missed
        return batch

    def _check_batch_out(self, out: Any) -> np.ndarray:
        dims = "".join(f", {d}" for d in self.shape)
        want = f"an array of shape (n{dims}) and dtype {self.dtype}, n >= 1"
        if not isinstance(out, np.ndarray):
            raise ShmstreamTypeError(f"out must be {want}, not {type(out).__name__}")
        if (
            out.ndim != len(self.shape) + 1
            or out.shape[1:] != self.shape
            or out.shape[0] < 1
            or out.dtype != self.dtype
        ):
            raise ShmstreamValueError(
                f"out has shape {out.shape} and dtype {out.dtype}; stream "
                f"{self.name!r} needs {want}"
            )
        if not out.flags.c_contiguous or not out.flags.writeable:
            raise ShmstreamValueError("out must be a C-contiguous, writable array")
        return out

    def read_since(
        self,
        count: int | None = None,
        *,
        max_frames: int | None = None,
        timeout: float | None = None,
        out: np.ndarray | None = None,
        spin_us: float | None = None,
    ) -> FrameBatch:
        """Every publication after ``count`` that the stream still holds,
        oldest first, as a :class:`FrameBatch` (stacked frames, their
        counts, frame ids and write times, and the exact number missed).

        ``count`` None goes on from this handle's position (what it last
        read or wrote, as :meth:`read_new`); pass ``batch.last_count`` to
        go on from a batch. Waits up to ``timeout`` seconds for at least one
        publication newer than ``count`` (TimeoutError otherwise); an
        aborted or abandoned write is no publication and does not end the
        wait. ``max_frames`` returns at most that many (the oldest; the next
        call goes on from there). ``out=`` fills a preallocated array of
        shape ``(m, *shape)`` (at most m frames are read) instead of
        allocating one. When writers overwrite every newer publication
        before it can be copied, a few rounds in a row, the batch is the
        newest one alone (copied under the lock if need be) and ``missed``
        counts the rest.
        On a stream without history the batch is the newest complete
        publication."""
        seg = self._history_segment("read history from")
        after = self._since(count)
        limit = 0 if max_frames is None else _checks.check_int("max_frames", max_frames, minimum=1)
        if out is not None:
            out = self._check_batch_out(out)
            limit = out.shape[0] if not limit else min(limit, out.shape[0])
        spin = self._spin if spin_us is None else spin_ns(spin_us)
        raw, meta, last = seg.read_since(after, limit, timeout, spin, out)
        n = len(meta)
        if out is not None:
            frames = out[:n]
        elif self.size:
            frames = raw[:n].view(self.dtype).reshape((n, *self.shape))
        else:
            frames = np.empty((n, *self.shape), self.dtype)
        return self._book_batch(
            FrameBatch(frames, meta[:, 0], meta[:, 1], meta[:, 2], last - after - n, after, last)
        )

    def iter_since(
        self,
        count: int | None = None,
        *,
        timeout: float | None = None,
        max_frames: int | None = None,
        spin_us: float | None = None,
    ) -> Iterator[Publication]:
        """Every publication after ``count`` (None: this handle's position),
        one :class:`Publication` at a time, read in batches with
        :meth:`read_since`. Each one's ``missed_publications`` counts the
        publications lost just before it. The iteration ends when no new
        publication arrives for ``timeout`` seconds (None: never)."""
        after = self._since(count)
        previous = after
        while True:
            try:
                batch = self.read_since(
                    after, max_frames=max_frames, timeout=timeout, spin_us=spin_us
                )
            except TimeoutError:
                return
            for pub in batch:
                # gaps counted from the last frame yielded: a batch whose
                # newest frames were lapped hands their loss to the next one
                yield Publication(
                    pub.payload, pub.count, pub.frame_id, pub.write_time, pub.count - previous - 1
                )
                previous = pub.count
            after = batch.last_count

    def read_since_view(
        self,
        count: int | None = None,
        *,
        max_frames: int | None = None,
        timeout: float | None = None,
        spin_us: float | None = None,
    ) -> HistoryView:
        """``with shm.read_since_view() as batch:`` :meth:`read_since`
        without copying: ``batch.frames`` is a tuple of read-only views of
        the shared slots, valid inside the block only. No lock is held; on
        exit, FrameOverwrittenError if the writer overwrote any of them
        during the block (the oldest go first): copy what you keep."""
        return HistoryView(self, count, max_frames, timeout, spin_us)


class HistoryView:
    """Returned by :meth:`SharedMemory.read_since_view`."""

    __slots__ = ("_handle", "_count", "_max", "_timeout", "_spin_us", "_meta", "_batch")

    def __init__(
        self, handle: Any, count: Any, max_frames: Any, timeout: Any, spin_us: Any
    ) -> None:
        self._handle = handle
        self._count = count
        self._max = max_frames
        self._timeout = timeout
        self._spin_us = spin_us
        self._meta: Any = None
        self._batch: FrameBatch | None = None

    def __enter__(self) -> FrameBatch:
        h = self._handle
        seg = h._history_segment("read history from")
        after = h._since(self._count)
        limit = 0 if self._max is None else _checks.check_int("max_frames", self._max, minimum=1)
        spin = h._spin if self._spin_us is None else spin_ns(self._spin_us)
        meta, last = seg.locate(after, limit, self._timeout, spin)
        self._meta = meta
        views = []
        for slot in meta[:, 3].tolist():
            view = (
                seg.payload(slot).view(h.dtype).reshape(h.shape)
                if h.size
                else (np.empty(h.shape, h.dtype))
            )
            view.flags.writeable = False
            views.append(view)
        self._batch = h._book_batch(
            FrameBatch(
                tuple(views),
                meta[:, 0],
                meta[:, 1],
                meta[:, 2],
                last - after - len(meta),
                after,
                last,
            )
        )
        return self._batch

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if self._batch is not None:
            end_view(self._batch, "frames", repr(self._handle.name))
            self._batch = None
        seg = self._handle._seg
        if exc_type is not None or seg is None or self._meta is None:
            return
        valid = seg.frames_valid(self._meta)
        lost = [int(c) for c, ok in zip(self._meta[:, 0].tolist(), valid) if not ok]
        if lost:
            raise FrameOverwrittenError(
                f"{len(lost)} of the {len(valid)} frames of {self._handle.name!r} viewed in this "
                f"block (counts {lost[0]}..{lost[-1]}) were overwritten while their views were "
                "in use (the writer lapped the reader); copy what you need inside the block, "
                "create the stream with a longer history, or use read_since() for copies"
            )
