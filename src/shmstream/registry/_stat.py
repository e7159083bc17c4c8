"""``stat``: what the registry says of one object, of any kind, read from
its header without mapping the payload (the keys every kind has, around
the kind's own from its registry entry), and ``readable``, the same for
people."""

from __future__ import annotations

import errno
import os
import time
from typing import Any

from .. import _native
from ..common import _checks, _kinds
from ..common._space import SHM_DIR
from ..errors import CorruptStreamError, LayoutVersionError
from ._remove import listed_segnames
from ._survey import FILE_PREFIX, Entry, Skipped, creator_alive, examine, printable

__all__ = ["readable", "stat"]


def _access(seg: Any) -> dict[str, Any]:
    """Who owns the file and who may change it, and whether its pids can be
    judged here: stat's ``owner_uid``, ``owner``, ``writable_by_others`` and
    ``pid_namespace`` ("same", "other": made in another PID namespace,
    opened only where judged by lease; "unknown": no /proc to tell)."""
    import pwd

    uid = int(seg.owner_uid)
    try:
        user: str | None = pwd.getpwuid(uid).pw_name
    except KeyError:
        user = None
    match = int(seg.pidns_match)
    return {
        "owner_uid": uid,
        "owner": user,
        "owned_by_caller": uid == os.geteuid(),
        "writable_by_others": bool(int(seg.file_mode) & 0o002),
        "pid_namespace": {1: "same", 0: "other"}.get(match, "unknown"),
    }


def _iso(seconds: float) -> str:
    return (
        time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(seconds))
        + f".{int(seconds % 1 * 1e3):03d}"
    )


def _stat_of(seg: Any) -> dict[str, Any]:
    """``stat``'s dict of a peeked header: the keys every kind has, built
    here once, around the kind's own (from its registry entry)."""
    kind, entry = _kinds.recognise(seg)
    own = entry.stat(seg, kind) if entry is not None else {}
    return {
        "name": seg.name,
        "kind": kind,
        **own,
        "instance_id": seg.instance_id,
        "creator_pid": int(seg.creator_pid),
        "creator_alive": creator_alive(seg),
        "created": seg.created_ns / 1e9,
        "mode": int(seg.mode),
        "segment": seg.segname,
        **_access(seg),
    }


def stat(name: str) -> dict[str, Any]:
    """Metadata of the object ``name`` (any kind), read from its header
    without mapping the payload. A stream's dict has pyshmem's keys
    (``name``, ``shape`` as a list, ``dtype`` as a str, ``gpu_enabled``,
    ``notify``, ``creator_pid``, ``creator_alive``) and ``kind``, ``size``,
    ``slots``, ``count``, ``write_sequence``, ``write_time``, ``frame_id``,
    ``state``, ``lock_owner`` (pid holding the lock, or None),
    ``lock_owner_tid``, ``lock_owner_alive``, ``lock_acquisitions``,
    ``waiters``, ``aborted_writes``, ``created``, ``mode``, ``instance_id``,
    ``gpu_device``, ``cpu_mirror`` and ``segment``. A channel's has
    ``capacity``, ``head``, ``tail``, ``queued_bytes`` and its two ends
    (pid, state, alive, attaches, takeovers); a shared array's and a loader
    slot's ``shape``, ``dtype`` and ``size``. Times are UNIX seconds and
    ``mode`` the permission bits (the command prints them readably).

    Every kind also has ``owner_uid`` and ``owner`` (the file's owner and
    its user name, None if unknown), ``owned_by_caller``,
    ``writable_by_others`` (the file's mode lets other users write it) and
    ``pid_namespace``: "same", "other" (made in another PID namespace: the
    liveness of a stream, channel or loader pool is judged by lease, a
    shared array's creator is None, and only a GPU stream's device buffer
    is refused) or "unknown" (no /proc to tell)."""
    _checks.check_name(name, "shared-memory object")
    segname = _native.segment_name(name)
    try:
        seg = _native.Segment.peek(segname)
    except FileNotFoundError:
        outside = _kinds.outside(name)  # no shmstream object: "milk:NAME" is milk's stream
        if outside is not None and outside.peek is not None:
            return _stat_of(outside.peek(name))
        listed = (
            sorted(listed_segnames(name)) if name.removeprefix("/").startswith(FILE_PREFIX) else []
        )
        if not listed:
            raise _checks.missing_name_error(name) from None
        # The name list shows for a corrupt or skipped entry: say what it is.
        what = examine(listed[0])
        why = (
            what.reason
            if isinstance(what, Skipped)
            else (f"its header is {what.kind}" if isinstance(what, Entry) else "it is gone")
        )
        raise CorruptStreamError(
            f"{name!r} is the segment name of an entry list cannot read ({why}); remove it "
            f"with shmstream.unlink({name!r}) or 'shmstream unlink {printable(name)}'"
        ) from None
    except LayoutVersionError as exc:
        # The core's message names both versions, and the segment by its file.
        raise LayoutVersionError(f"{name!r}: {exc}") from None
    except CorruptStreamError:
        raise CorruptStreamError(
            f"{name!r} has a corrupt or foreign header ({SHM_DIR}{segname}: bad magic, "
            f"checksum, size or an unknown layout version); remove it with "
            f"shmstream.unlink({name!r}) or 'shmstream unlink {printable(name)}'"
        ) from None
    except OSError as exc:
        if exc.errno not in (errno.ELOOP, errno.ENODEV):
            raise
        what = examine(segname)
        raise CorruptStreamError(
            f"{name!r} is not a shmstream segment: {SHM_DIR}{segname} is "
            f"{what.reason if isinstance(what, Skipped) else 'not a regular file'}; remove it "
            f"with shmstream.unlink({name!r}) or 'shmstream unlink {printable(name)}'"
        ) from None
    if seg.name != name:  # another name with the same hash: not ours
        raise _checks.missing_name_error(name)
    return _stat_of(seg)


def readable(info: dict[str, Any]) -> dict[str, Any]:
    """``stat``'s dict for people: mode as ``0o600``, times as ISO dates."""
    out = dict(info)
    if "mode" in out:
        out["mode"] = oct(int(out["mode"]))
    for key in ("created", "write_time"):
        if isinstance(out.get(key), float):
            out[key] = _iso(out[key]) if out[key] else "never"
    return out
