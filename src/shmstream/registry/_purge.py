"""Purge: remove every stream, and what dead processes left of the other
kinds (their registry entries say whether a live process still uses an
object), and say all it removed (:class:`PurgeResult`)."""

from __future__ import annotations

import os
import time
import warnings
from collections.abc import Iterable

from ..common import _checks, _kinds, _proc
from ..common._space import SHM_DIR
from ..errors import ShmstreamValueError
from ._remove import listdir, unlink_file
from ._survey import KINDS, Entry, Skipped, survey

__all__ = ["PurgeResult", "purge"]

#: An unfinished segment (magic still 0) whose file is older than this has
#: lost its creator mid-create: purge removes it.
UNFINISHED_ORPHAN_S = 60.0


# ---- purge -------------------------------------------------------------------------


def _abandoned(e: Entry) -> bool:
    """Is nobody using this segment any more? Its creator is dead, and its
    kind's entry says no live process uses it (a channel's ends). A creator
    in another PID namespace cannot be judged: such an object is abandoned
    only if its kind judges its users by lease (a layout-3 channel: neither
    end held), else it is kept."""
    if e.creator_alive is None and e.leases and e.created is not None:
        entry = _kinds.entry_of(e.kind)
        in_use = entry.in_use if entry else None
        return in_use is not None and not in_use(e.name or "", e.segname)
    if e.creator_alive is not False:  # alive, or unknown (another PID namespace)
        return False
    entry = _kinds.entry_of(e.kind)
    return not (entry and entry.in_use and entry.in_use(e.name or "", e.segname))


def _remove_orphaned_cuda_ipc_files() -> list[str]:
    """Remove PyTorch's ``cuda.shm.<id>.<hex pid>.<seq>`` files whose
    producer is dead."""
    removed: list[str] = []
    for name in listdir():
        parts = name.split(".")
        if len(parts) < 4 or parts[0] != "cuda" or parts[1] != "shm":
            continue
        try:
            pid = int(parts[-2], 16)
        except ValueError:
            continue
        if _proc.alive(pid):
            continue
        try:
            os.remove(os.path.join(SHM_DIR, name))
        except OSError:
            continue
        removed.append(name)
    return sorted(removed)


def _unfinished_for_long(segname: str) -> bool:
    try:
        age = time.time() - os.lstat(SHM_DIR + segname).st_mtime
    except OSError:
        return False
    return age > UNFINISHED_ORPHAN_S


def _remove(entries: Iterable[Entry], skipped: list[Skipped] | None = None) -> list[Entry]:
    removed = []
    for e in entries:
        try:
            if unlink_file(e.segname):
                removed.append(e)
        except OSError as exc:  # another user's file in sticky /dev/shm, ...
            if skipped is not None:
                skipped.append(Skipped(e.segname, f"cannot remove it: {exc.strerror}"))
    return removed


def _abandonable() -> tuple[str, ...]:
    """The kinds purge removes only when nobody uses them any more."""
    return tuple(n for k in _kinds.TABLE if not k.always_purged and k.purged for n in k.names)


def _remove_abandoned(
    entries: list[Entry], wanted: set[str], skipped: list[Skipped]
) -> list[Entry]:
    """Remove the objects of the ``wanted`` kinds that nobody uses any more
    (creator dead; for a channel, no live end either; a loader pool's slot
    files go with its root, and slot files whose root is gone too), and
    unfinished segments whose creator died mid-create."""
    foreign = [e for e in entries if e.kind in wanted and e.creator_alive is None and not e.leases]
    if foreign:
        warnings.warn(
            f"purge skipped {len(foreign)} object(s) made in another PID namespace "
            f"({', '.join(repr(e.name) for e in foreign)}): their creators' pids cannot be "
            "judged from here; run purge in that namespace, or unlink them by name",
            stacklevel=3,
        )
    gone: list[Entry] = []
    for kind in _kinds.TABLE:  # kinds whose files go together remove them themselves
        if kind.purge_dead is not None and wanted & set(kind.names):
            dead = set(kind.purge_dead())
            gone += [e for e in entries if e.kind in kind.names and e.name in dead]
    # then every other abandoned object (a pool root that had no slot file
    # yet included; a root its kind removed is already gone)
    return gone + _remove(
        (
            e
            for e in entries
            if (e.kind in wanted and e not in gone and _abandoned(e))
            or (e.kind == "unfinished" and _unfinished_for_long(e.segname))
        ),
        skipped,
    )


class PurgeResult(list[str]):
    """What :func:`purge` removed. The list itself is the user names
    removed, sorted (pyshmem's return value); the attributes are the whole
    report: ``removed``, every registry :class:`Entry` removed (corrupt
    segments too, which have no name); ``skipped``, every :class:`Skipped`
    entry left alone, with the reason; ``cuda_orphans``, the names of the
    PyTorch CUDA IPC files removed (``include_cuda_orphans=True``)."""

    def __init__(self, removed: list[Entry], skipped: list[Skipped], cuda_orphans: list[str]):
        super().__init__(sorted(e.name for e in removed if e.name is not None))
        self.removed = removed
        self.skipped = skipped
        self.cuda_orphans = cuda_orphans

    def __repr__(self) -> str:
        return (
            f"PurgeResult({list(self)!r}, removed={len(self.removed)}, "
            f"skipped={len(self.skipped)}, cuda_orphans={self.cuda_orphans!r})"
        )


def purge(*, include_cuda_orphans: bool = False, kinds: Iterable[str] | None = None) -> PurgeResult:
    """Remove EVERY stream in /dev/shm that the caller may remove, in use or
    not, other jobs' too (pyshmem's meaning); ``kinds=("channel", "array",
    "loader-pool")`` is the safe choice, never a stream. Also the channels,
    shared arrays and loader slots that nobody uses any more (their creator
    is dead, and for a channel no live process holds either end); return the user names removed, sorted, as a
    :class:`PurgeResult` that also says what it removed without a name,
    what it skipped and why, and which CUDA IPC files it removed.

    Corrupt segments, and unfinished ones older than a minute, with
    shmstream's prefix are removed too (they have no name to return).
    Entries that are not regular files (FIFOs, links, directories) or that
    it cannot read or remove are skipped, never stop it. With
    ``include_cuda_orphans=True`` it also deletes PyTorch CUDA IPC files
    whose producer process is dead. ``kinds`` (some of ``KINDS``) limits it
    to those kinds: ``kinds=("channel", "array", "loader-pool")`` removes
    only what dead processes left, never a stream. Not reversible:
    processes using a removed object keep their mapping, but nobody can
    open it again.
    """
    include_cuda_orphans = _checks.check_bool("include_cuda_orphans", include_cuda_orphans)
    wanted = set(KINDS) if kinds is None else set(kinds)
    unknown = wanted - set(KINDS)
    if unknown:
        raise ShmstreamValueError(
            f"purge: unknown kind(s) {sorted(unknown)}; the kinds are {', '.join(KINDS)}"
        )
    entries, skipped = survey()
    everything = {"corrupt"} if kinds is None else set()
    always = {n for k in _kinds.TABLE if k.always_purged for n in k.names} & wanted | everything
    removed = _remove((e for e in entries if e.kind in always), skipped)
    removed += _remove_abandoned(entries, wanted & set(_abandonable()), skipped)
    orphans = _remove_orphaned_cuda_ipc_files() if include_cuda_orphans else []
    return PurgeResult(removed, skipped, orphans)
