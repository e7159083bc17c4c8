"""Reading what a milk stream's circular buffer still holds: ``read_since``
and ``iter_since`` (docs/milk.md, "The circular buffer as history"). A mixin of
:class:`~shmstream.milk.stream.MilkStream` (the handle's state lives there);
each batch is one native call (shmstream._milk).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from ..errors import ShmstreamValueError
from ..streams.publication import FrameBatch

if TYPE_CHECKING:

    class _Handle(Protocol):
        """What this mixin uses of its handle."""

        _busy: float
        _busy_ns: int
        _spin: int

        @property
        def shape(self) -> tuple[int, ...]: ...
        @property
        def dtype(self) -> np.dtype: ...
        @property
        def history(self) -> int: ...
        @property
        def count(self) -> int: ...
        def _live(self) -> Any: ...
        def _wait_newer(self, timeout: float | None, after: int | None = None) -> None: ...

else:
    _Handle = object  # the protocol is for mypy only


class MilkHistory(_Handle):
    """The history reads of a milk stream handle."""

    if TYPE_CHECKING:
        # The handle's read bookkeeping, which this mixin assigns: declared
        # here too, or mypy cannot type it before the assignments.
        _last: int
        _missed: int

    def read_since(
        self,
        count: int,
        max_frames: int | None = None,
        *,
        timeout: float | None = None,
        out: np.ndarray | None = None,
    ) -> FrameBatch:
        """Every frame after ``count`` that milk's circular buffer still
        holds, oldest first (at most ``max_frames``; None: the buffer's
        depth), as a :class:`~shmstream.FrameBatch`. ``missed`` counts the
        frames after ``count`` already overwritten; pass ``last_count`` as
        ``count`` to go on. The slot the next write goes to is never read,
        so a buffer of ``cb_size`` keeps ``cb_size - 1`` frames; a stream
        without one (``cb_size`` < 2) gives its current frame, as a stream
        without history does. ``frame_ids`` and ``write_times_ns`` are 0:
        milk's writers do not record them per frame. When nothing is newer
        than ``count`` it waits, as a stream's read_since does: ``timeout``
        None for ever, a number of seconds that long, then TimeoutError.
        ``out=`` fills an array of shape ``(m, *shape)`` (at most m frames)
        instead of allocating one."""
        if self._live().count() <= int(count):
            self._wait_newer(timeout, int(count))
        return self._read_since(count, max_frames, out)

    def _read_since(self, count: int, max_frames: int | None, out: Any) -> FrameBatch:
        """:meth:`read_since` without the wait: an empty batch if nothing is newer."""
        native = self._live()
        depth = max(1, self.history)
        cap = depth if max_frames is None else max(1, min(int(max_frames), depth))
        if out is not None:
            cap = min(cap, self._batch_out(out))
        frames = np.empty((cap, *self.shape), self.dtype) if out is None else out[:cap]
        counts = np.zeros(cap, np.uint64)
        if self.history:
            n, last = native.read_since_into(frames, counts, int(count), self._busy)
        else:  # one frame: the current one, if newer
            cnt0 = int(native.read_into(frames[0], self._busy)[0])
            n, last = int(cnt0 > int(count)), cnt0
            counts[0] = cnt0
        last = int(counts[n - 1]) if n else max(int(last), int(count))
        missed = max(0, last - int(count) - n)  # overwritten, or left out (docs/milk.md)
        zeros = np.zeros(n, np.uint64)
        return FrameBatch(
            frames=frames[:n],
            counts=counts[:n].copy(),
            frame_ids=zeros,
            write_times_ns=zeros.copy(),
            missed=missed,
            after=int(count),
            last_count=last,
        )

    def _batch_out(self, out: Any) -> int:
        """Frames an ``out=`` array of read_since holds (it is checked)."""
        if (
            not isinstance(out, np.ndarray)
            or out.dtype != self.dtype
            or out.shape[1:] != self.shape
            or not len(out)
            or not out.flags.c_contiguous
        ):
            raise ShmstreamValueError(
                f"out must be a C-contiguous {self.dtype} array of shape (m, *{self.shape})"
            )
        return len(out)

    def iter_since(
        self, count: int | None = None, timeout: float | None = None
    ) -> Iterator[np.ndarray]:
        """Every frame after ``count`` (None: the count now), one at a time,
        waiting up to ``timeout`` seconds for the next one (TimeoutError);
        frames the circular buffer lost before they were read are counted in
        :attr:`missed_writes`."""
        after = self.count if count is None else int(count)
        while True:
            batch = self._read_since(after, None, None)
            self._missed += batch.missed
            yield from batch.frames
            after = batch.last_count
            self._last = max(self._last, after)
            if not len(batch.frames):
                self._live().read_new_into(
                    np.empty(self.shape, self.dtype), after, timeout, self._busy_ns, self._spin
                )
