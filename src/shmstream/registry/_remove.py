"""Removing objects from /dev/shm by any name ``list`` shows: a user name,
a segment name, a skipped entry's name, escaped or not (``remove``), and
the one unlink of a file there (``unlink_file``)."""

from __future__ import annotations

import errno
import os

from .. import _native
from ..common import _checks, _kinds
from ..common._space import SHM_DIR
from ..errors import ShmstreamOSError
from ._survey import FILE_PREFIX, file_prefixes, printable, scan

__all__ = ["listdir", "listed_segnames", "remove", "unlink_file"]


def remove(name: str) -> bool:
    """Destroy the object ``name`` of any kind; True if something was there.

    ``name`` is a user name, or any name ``list`` shows (what
    :func:`printable` makes of a segment name, a stored name, or a skipped
    entry's name): a corrupt segment, listed by its segment name, is removed
    by that name. A user name comes first: ``"a\\\\b"`` removes the object
    of that name if there is one, else the one ``list`` shows so
    (``"a\\b"``). A FIFO or link with shmstream's prefix is unlinked (never
    followed); a directory raises ShmstreamOSError (errno EISDIR) that
    says so. ``milk:NAME`` is milk's stream file (``shmstream.milk.unlink``)."""
    if not isinstance(name, str):
        _checks.check_name(name, "shared-memory object")  # the TypeError
    try:
        segname = _native.segment_name(_checks.check_name(name, "shared-memory object"))
    except ValueError:  # not a user name (a lone surrogate...): maybe a listed one
        if _remove_listed(name):
            return True
        raise
    return unlink_file(segname) or _remove_listed(name) or _kinds.remove_outside(name)


def unlink_file(segname: str) -> bool:
    """Unlink /dev/shm/<segname> (any name bytes; a link is not followed)."""
    try:
        os.unlink(SHM_DIR + segname)
    except FileNotFoundError:
        return False
    except IsADirectoryError:
        shown = printable(segname)
        raise ShmstreamOSError(
            errno.EISDIR,
            f"{shown} is a directory in {SHM_DIR}, not a shared-memory object (shmstream list "
            f"skips it); shmstream removes no directories: if nothing uses it, remove it "
            f"with rmdir or rm -r {SHM_DIR}{shown}",
        ) from None
    return True


def _remove_listed(name: str) -> bool:
    """Unlink what ``list`` shows as ``name`` (see :func:`remove`)."""
    removed = False
    for segname in sorted(listed_segnames(name)):
        removed = unlink_file(segname) or removed
    return removed


def listed_segnames(name: str) -> set[str]:
    """The segment names of what ``list`` shows as ``name``: a corrupt or
    skipped entry's segment name (with or without the slash, escaped or
    not), or a stored name shown escaped."""

    def shows(listed: str) -> bool:
        return name in (listed, printable(listed))

    prefixes = (FILE_PREFIX, *file_prefixes())
    hits = set()
    if name.removeprefix("/").startswith(prefixes):  # a segment or skipped entry's name
        hits = {
            "/" + f for f in listdir() if f.startswith(prefixes) and (shows(f) or shows("/" + f))
        }
    if not hits and printable(name) != name:
        # a stored name shown escaped (not UTF-8, control characters): its file
        hits = {e.segname for e in scan() if e.name is not None and shows(e.name)}
    return hits


def listdir() -> list[str]:
    try:
        return os.listdir(SHM_DIR)
    except OSError:
        return []
