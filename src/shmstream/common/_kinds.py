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

    A kind whose objects live outside /dev/shm (milk's streams, in milk's
    directory) is named by ``prefix`` ("milk:wfs"): ``peek(name)`` -> a
    header-like record of that object (FileNotFoundError if none) that its
    ``recognise`` and ``stat`` take and that has what the registry reads of
    a header besides (``segname`` its path, ``creator_pid``, ``created_ns``,
    ...) and ``entry(kind)``, the fields of its ``registry.Entry`` but
    ``creator_alive``; ``survey()`` -> (records of every such object,
    (path, reason) of what it left alone); ``open_reader(name)`` -> a
    handle with the stream API's reads (view, record, bridge); ``purged``
    False: purge never removes them (they are another program's);
    ``remove(name)`` -> removes the object (``shmstream unlink``), True if
    there was one.
    """

    names: tuple[str, ...]
    recognise: Callable[[Any], str | None]
    stat: Callable[[Any, str], dict[str, Any]]
    in_use: Callable[[str, str], bool] | None = None
    always_purged: bool = False
    extra_files: Callable[[str], list[str]] | None = None
    file_prefix: str | None = None
    purge_dead: Callable[[], list[str]] | None = None
    prefix: str | None = None
    peek: Callable[[str], Any] | None = None
    survey: Callable[[], tuple[list[Any], list[tuple[str, str]]]] | None = None
    open_reader: Callable[[str], Any] | None = None
    purged: bool = True
    remove: Callable[[str], bool] | None = None


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


def outside(name: str) -> Kind | None:
    """The kind whose objects outside /dev/shm ``name`` addresses by its
    prefix ("milk:wfs"), or None."""
    return next(
        (k for k in TABLE if k.prefix and name.startswith(k.prefix) and name != k.prefix), None
    )


def open_reader(name: str, open_stream: Callable[[str], Any]) -> Any:
    """``open_stream(name)``; when no shmstream object has that name and a
    kind that lives outside /dev/shm claims its prefix ("milk:NAME"), that
    kind's reader instead (a shmstream object of the exact name comes first)."""
    try:
        return open_stream(name)
    except FileNotFoundError:
        kind = outside(name)
        if kind is None or kind.open_reader is None:
            raise
        return kind.open_reader(name)


def remove_outside(name: str) -> bool:
    """Remove the object outside /dev/shm that ``name`` addresses by its
    kind's prefix ("milk:NAME": milk's stream file; the caller found no
    shmstream object of that name); False if there is none."""
    kind = outside(name)
    return kind is not None and kind.remove is not None and kind.remove(name)


def outside_survey(
    wanted: set[str] | None = None,
) -> tuple[list[tuple[str, Any]], list[tuple[str, str]]]:
    """The objects of the (wanted) kinds that live outside /dev/shm, as
    (kind name, record), and (path, reason) of what their surveys left alone."""
    found: list[tuple[str, Any]] = []
    odd: list[tuple[str, str]] = []
    for kind in TABLE:
        if kind.survey is None or (wanted is not None and not wanted & set(kind.names)):
            continue
        records, skipped = kind.survey()
        found += [(kind.recognise(r) or kind.names[0], r) for r in records]
        odd += skipped
    return found, odd


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
