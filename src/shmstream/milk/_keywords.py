"""milk's keywords: the named values a milk stream carries beside its
frames (docs/milk.md, "API": ``s.keywords``). A mixin of
:class:`~shmstream.milk.stream.MilkStream`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from ..errors import ShmstreamValueError
from ._checks import check_keyword

if TYPE_CHECKING:
    from .layout import Layout

    class _Handle(Protocol):
        """What this mixin uses of its handle."""

        name: str
        layout: Layout

        def _live(self) -> Any: ...

else:
    _Handle = object  # the protocol is for mypy only


class MilkKeywords(_Handle):
    """The keyword reads and writes of a milk stream handle."""

    @property
    def keywords(self) -> dict[str, tuple[Any, str]]:
        """milk's keywords as ``{name: (value, comment)}`` (int, float or str)."""
        native = self._live()
        out: dict[str, tuple[Any, str]] = {}
        for i in range(self.layout.nkw):
            name, kind, value, comment, _cnt = native.keyword(i)
            if kind in "LDS" and name:
                out[name] = (value, comment)
        return out

    def set_keyword(self, name: str, value: int | float | str, comment: str = "") -> None:
        """Write keyword ``name`` (up to 15 bytes) in its slot, or the first
        unused one; int -> 'L', float -> 'D', str (up to 15 bytes) -> 'S';
        ``comment`` up to 79 bytes."""
        native = self._live()
        kind = check_keyword(name, value, comment)
        free = None
        for i in range(self.layout.nkw):
            kname, kkind, _v, _c, _n = native.keyword(i)
            if kkind in "LDS" and kname == name:
                native.set_keyword(i, name, kind, value, comment)
                return
            if free is None and kkind not in "LDS":
                free = i
        if free is None:
            raise ShmstreamValueError(
                f"all {self.layout.nkw} keyword slots of milk stream '{self.name}' are used; "
                "create it with more (nkw=)"
            )
        native.set_keyword(free, name, kind, value, comment)
