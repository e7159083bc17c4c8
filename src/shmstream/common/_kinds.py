"""The registry's table of kinds: what each kind tells ``shmstream.registry``
about its segments, so that the registry imports none of the kinds' modules.

Each kind's folder registers its entry when it is imported
(``streams/_registry.py``, ``channels/_registry.py``, ...; ``import
shmstream`` imports every folder). The registry iterates over the table:
it recognises a segment by asking each kind, builds the keys every kind
shares once (name, kind, creator, times, owner) and adds the kind's own.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from . import _dtypes


@dataclasses.dataclass(frozen=True)
class Kind:
    """One kind's registry entry.

    ``recognise(header)`` -> the registry kind name of a peeked segment
    header (``Segment.peek``), or None if the segment is not of this kind.
    ``stat(header, kind)`` -> this kind's own ``stat`` keys (the registry
    adds the shared ones). ``in_use(name, segname)`` -> whether a live
    process still uses an object whose creator is dead (None: never; the
    object is abandoned when its creator is). ``always_purged``: purge
    removes it in use or not (streams, pyshmem's meaning). ``extra_files(name)``
    -> paths of its files beside the segment (a loader pool's slot files),
    counted in its size and listed by ``stat``. ``file_prefix``: the
    prefix of those files in /dev/shm. ``purge_dead()`` removes the dead
    objects whose files go together, returning their user names.
    """

    names: tuple[str, ...]
    recognise: Callable[[Any], str | None]
    stat: Callable[[Any, str], dict[str, Any]]
    in_use: Callable[[str, str], bool] | None = None
    always_purged: bool = False
    extra_files: Callable[[str], list[str]] | None = None
    file_prefix: str | None = None
    purge_dead: Callable[[], list[str]] | None = None


#: Every registered kind, in registration order.
TABLE: list[Kind] = []


def register(kind: Kind) -> None:
    """Add ``kind`` to the table (once; a second import changes nothing)."""
    if not any(k.names == kind.names for k in TABLE):
        TABLE.append(kind)


def recognise(header: Any) -> tuple[str, Kind | None]:
    """The registry kind name of a peeked header and its entry
    (``"kind N"`` and None for a kind no folder registered)."""
    for kind in TABLE:
        name = kind.recognise(header)
        if name is not None:
            return name, kind
    return f"kind {int(header.kind)}", None


def entry_of(name: str) -> Kind | None:
    """The entry that answers the registry kind ``name``."""
    return next((k for k in TABLE if name in k.names), None)


def names() -> tuple[str, ...]:
    """Every registry kind name, in the table's order."""
    return tuple(n for k in TABLE for n in k.names)


def stored_dtype(header: Any) -> str:
    """A header's dtype as ``stat`` shows it (the text a config file takes),
    or as stored when it is a foreign description."""
    try:
        return _dtypes.config_text(_dtypes.decode(header.dtype))
    except Exception:  # noqa: BLE001 - a foreign description: show it as stored
        return str(header.dtype)


def array_keys(header: Any) -> dict[str, Any]:
    """``shape``, ``dtype`` and ``size``: the keys of every kind whose
    segment holds one array."""
    return {
        "shape": [int(d) for d in header.shape],
        "dtype": stored_dtype(header),
        "size": int(header.payload_bytes),
    }
