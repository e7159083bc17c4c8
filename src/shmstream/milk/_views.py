"""Zero-copy reads of a milk stream: ``with s.read_view() as pub:``.

milk keeps one frame, written in place, so a view is the stream's pixels
themselves. The rule is the one of a stream's ``read_view``: the view is
valid inside the block only, and the block's exit raises
FrameOverwrittenError when a writer touched the frame meanwhile (milk's
write flag went up, or cnt0 moved; docs/milk.md, "Zero-copy views").
"""

from __future__ import annotations

from typing import Any

from ..errors import FrameOverwrittenError
from ..streams.publication import Publication, end_view


class MilkReadView:
    """Returned by :meth:`MilkStream.read_view` and :meth:`MilkStream.read_new_view`."""

    __slots__ = ("_handle", "_new", "_timeout", "_cnt0", "_pub")

    def __init__(self, handle: Any, new: bool, timeout: float | None) -> None:
        self._handle = handle
        self._new = new
        self._timeout = timeout
        self._cnt0 = -1
        self._pub: Publication | None = None

    def __enter__(self) -> Publication:
        h = self._handle
        native = h._live()
        if self._new:
            h._wait_newer(self._timeout)
        info = native.view_begin(h._busy)
        self._cnt0 = int(info[0])
        self._pub = h._publication(h._pixels(), info)
        return self._pub

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        h = self._handle
        if self._pub is not None:
            end_view(self._pub, "payload", f"milk stream '{h.name}'")
            self._pub = None
        if exc_type is None and not h._native.closed and not h._native.view_valid(self._cnt0):
            raise FrameOverwrittenError(
                f"the frame of milk stream '{h.name}' was written while its view was in use "
                "(milk keeps one frame, written in place); copy what you need inside the "
                "block, or use read() for a copy"
            )
