"""What a read returns: a payload and the metadata of the same write, or
(history reads) a batch of them."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

from .. import _native
from ..errors import ViewEndedError

#: The published frame's state (docs/ABI.md, publish line ``state``).
STATE_NAMES = {
    _native.STATE_VALID: "valid",
    _native.STATE_ABORTED: "aborted",
    _native.STATE_ABANDONED: "abandoned",
}


@dataclasses.dataclass(frozen=True)
class Publication:
    """A payload snapshot and the metadata published with it.

    ``payload``, ``count``, ``frame_id`` and ``write_time`` come from the same
    write. ``missed_publications`` counts the writes skipped since this
    handle's previous read, like :attr:`SharedMemory.missed_writes`.
    ``read_publication(safe=False)`` returns a live view of shared memory as
    ``payload``; it must not outlive the lock scope.
    """

    payload: Any
    count: int
    frame_id: int
    write_time: float
    missed_publications: int
    #: "valid" for every read but :meth:`SharedMemory.read_last_complete`,
    #: where "aborted" or "abandoned" says that a later write failed and this
    #: is the last complete publication before it.
    state: str = "valid"


@dataclasses.dataclass(frozen=True)
class FrameBatch:
    """The publications a history read returns (:meth:`SharedMemory.read_since`):
    every one newer than ``after`` that the stream still held, oldest first.

    ``frames`` is an array of shape ``(len(batch), *stream.shape)`` (for
    :meth:`SharedMemory.read_since_view`: a tuple of read-only views of the
    shared slots, valid inside the block only). ``counts``, ``frame_ids``
    and ``write_times_ns`` are uint64 arrays, one entry per frame.
    ``missed`` counts the publications after ``after`` up to ``last_count``
    that are not in the batch (overwritten before they were read, or a gap
    in the counts). ``last_count`` is where the next read goes on from:
    pass it as ``count`` to :meth:`SharedMemory.read_since`.
    """

    frames: Any
    counts: Any
    frame_ids: Any
    write_times_ns: Any
    missed: int
    after: int
    last_count: int

    def __len__(self) -> int:
        return len(self.counts)

    def __iter__(self) -> Iterator[Publication]:
        """The frames as :class:`Publication` objects, oldest first; each
        one's ``missed_publications`` counts the publications lost just
        before it."""
        previous = self.after
        for i, count in enumerate(self.counts.tolist()):
            yield Publication(
                self.frames[i],
                count,
                int(self.frame_ids[i]),
                int(self.write_times_ns[i]) / 1e9,
                count - previous - 1,
            )
            previous = count


class EndedView:
    """What a zero-copy read view's ``payload`` (a batch's ``frames``)
    becomes when its block ends: the slot it showed may hold a newer frame
    by then, so every use raises :class:`ViewEndedError` instead of showing
    it silently. An array taken from the payload inside the block is
    NumPy's and cannot be revoked: copy what must outlive the block."""

    __slots__ = ("_what",)

    def __init__(self, what: str) -> None:
        self._what = what

    def _ended(self, *args: Any, **kwargs: Any) -> Any:
        raise ViewEndedError(
            f"the zero-copy view of {self._what} ended with its block: its slot may hold "
            "a newer frame now; copy what you keep inside the block "
            "(np.array(pub.payload)) or use read() for a copy"
        )

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("_"):  # a protocol probed with hasattr (_repr_html_, ...)
            raise AttributeError(attr)
        return self._ended()

    def __repr__(self) -> str:
        return f"<ended zero-copy view of {self._what}>"

    __getitem__ = __setitem__ = __len__ = __iter__ = __bool__ = __array__ = _ended
    __array_ufunc__ = __array_function__ = __dlpack__ = __buffer__ = _ended
    __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = _ended  # type: ignore[assignment]
    __add__ = __sub__ = __mul__ = __truediv__ = __floordiv__ = __mod__ = __pow__ = _ended
    __radd__ = __rsub__ = __rmul__ = __rtruediv__ = __neg__ = __abs__ = __float__ = _ended
    __hash__ = None  # type: ignore[assignment]


def end_view(result: Any, field: str, what: str) -> None:
    """Ends a read view's ``result`` (a Publication or FrameBatch): its
    ``field`` becomes an :class:`EndedView`."""
    object.__setattr__(result, field, EndedView(what))
