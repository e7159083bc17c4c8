"""One registry of what shmstream keeps in /dev/shm.

Every segment of every kind (stream, GPU stream, channel, shared array,
loader slot) is found here, one way: a ``shmstream-*`` file whose header
(read without mapping the payload) says its kind, user name, creator and
size. ``list``, ``stat`` and ``purge`` (module functions and the
``shmstream`` command) are built on :func:`scan` and :func:`stat`.

Kinds:

* ``stream`` and ``gpu-stream``: latest-value streams (``shmstream.create``);
* ``channel``: SPSC message rings (``shmstream.channel``);
* ``array``: shared arrays (``shmstream.share``);
* ``loader-pool``: a DataLoader's slot pool (``shmstream.torch``): its root,
  an array segment whose user name starts with ``loader-``, and its slot
  files (``shmstream.loader-<token>.*``, plain files without a header,
  counted in the pool's size; docs/loader.md);
* ``corrupt`` and ``unfinished``: a ``shmstream-*`` file whose header does
  not validate, or whose creator has not finished it (no user name).
"""
from __future__ import annotations

import dataclasses
import os
import time
import warnings
from typing import Any, Iterable

from . import _checks, _dtypes, _loader_pool, _native, _proc
from ._space import SHM_DIR
from . import channel as _channel_mod
from .errors import CorruptStreamError
from .gpu import device as _gpu_device
from .publication import STATE_NAMES

__all__ = ["Entry", "KINDS", "list_channels", "list_streams", "purge", "purge_abandoned", "remove", "scan",
           "stat"]

FILE_PREFIX = _native.SEGMENT_PREFIX.lstrip("/")
KINDS = ("stream", "gpu-stream", "channel", "array", "loader-pool")

#: An unfinished segment (magic still 0) whose file is older than this has
#: lost its creator mid-create: purge removes it.
UNFINISHED_ORPHAN_S = 60.0


@dataclasses.dataclass(frozen=True)
class Entry:
    """One shmstream segment in /dev/shm."""

    segname: str  # the POSIX name, "/shmstream-<readable>-<hash>"
    name: str | None  # the user name; None if the header is unreadable
    kind: str  # one of KINDS, "corrupt" or "unfinished"
    bytes: int  # size of the file
    creator_pid: int | None
    creator_alive: bool | None  # None: unknown (unreadable, or another PID namespace)
    created: float | None  # UNIX time of the create


def _kind_of(seg: Any) -> str:
    kind = int(seg.kind)
    if kind == _native.KIND_STREAM:
        return "gpu-stream" if int(seg.flags) & _native.FLAG_GPU else "stream"
    if kind == _native.KIND_CHANNEL:
        return "channel"
    if kind == _native.KIND_ARRAY:
        return "loader-pool" if seg.name.startswith(_loader_pool.ROOT_PREFIX) else "array"
    return f"kind {kind}"


def segment_files() -> list[str]:
    """POSIX names ("/shmstream-...") of every shmstream file in /dev/shm."""
    try:
        entries = os.listdir(SHM_DIR)
    except OSError:
        return []
    return sorted("/" + e for e in entries if e.startswith(FILE_PREFIX))


def _file_bytes(segname: str) -> int:
    try:
        return os.stat(SHM_DIR + segname).st_size
    except OSError:
        return 0


def entry(segname: str) -> Entry | None:
    """The registry entry of one segment (None if it vanished)."""
    try:
        seg = _native.Segment.peek(segname)
    except FileNotFoundError:
        return None
    except BlockingIOError:  # magic still 0: the creator is filling it (or died doing so)
        return Entry(segname, None, "unfinished", _file_bytes(segname), None, None, None)
    except (CorruptStreamError, ValueError):
        return Entry(segname, None, "corrupt", _file_bytes(segname), None, None, None)
    except OSError:
        return None  # not ours to read (permissions)
    pid = int(seg.creator_pid)
    kind = _kind_of(seg)
    size = _file_bytes(segname)
    if kind == "loader-pool":  # the root and its slot files
        size += sum(_file_bytes(p[len(SHM_DIR):]) for p in _pool_files(seg.name))
    return Entry(segname, seg.name, kind, size, pid, _creator_alive(seg), seg.created_ns / 1e9)


def _creator_alive(seg: Any) -> bool | None:
    """Is the creator alive? None when it was made in another PID namespace:
    its pid means nothing here (docs/ABI.md, "Owner and PID namespace")."""
    if int(seg.pidns_match) == 0:
        return None
    return _proc.alive(int(seg.creator_pid), int(seg.creator_start_ticks))


def _access(seg: Any) -> dict[str, Any]:
    """Who owns the file and who may change it, and whether its pids can be
    judged here: stat's ``owner_uid``, ``owner``, ``writable_by_others`` and
    ``pid_namespace`` ("same", "other": made in another PID namespace,
    this process cannot open it; "unknown": made by an older version)."""
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


def _pool_files(root: str) -> list[str]:
    token = root[len(_loader_pool.ROOT_PREFIX):]
    return _loader_pool.list_slot_files(token).get(token, [])


def scan(kinds: Iterable[str] | None = None) -> list[Entry]:
    """Every shmstream segment in /dev/shm (of the given kinds), sorted by
    kind and name."""
    wanted = None if kinds is None else set(kinds)
    found = [e for e in map(entry, segment_files()) if e is not None]
    if wanted is not None:
        found = [e for e in found if e.kind in wanted]
    return sorted(found, key=lambda e: (e.kind, e.name or "", e.segname))


def list_streams() -> list[str]:
    """Sorted names of the streams in /dev/shm, GPU streams included (other
    kinds, and unreadable or corrupt segments, are left out)."""
    return sorted(e.name for e in scan(("stream", "gpu-stream")) if e.name is not None)


def list_channels() -> list[str]:
    """Sorted names of the channels in /dev/shm."""
    return sorted(e.name for e in scan(("channel",)) if e.name is not None)


# ---- stat ------------------------------------------------------------------------


def _iso(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(seconds)) + f".{int(seconds % 1 * 1e3):03d}"


def _stream_stat(seg: Any) -> dict[str, Any]:
    flags = int(seg.flags)
    gpu = bool(flags & _native.FLAG_GPU)
    try:
        dtype = _dtypes.config_text(_dtypes.decode(seg.dtype))
    except Exception:  # noqa: BLE001 - a foreign description: show it as stored
        dtype = seg.dtype
    lock_owner = int(seg.owner_pid)
    return {
        "name": seg.name,
        "kind": "gpu-stream" if gpu else "stream",
        "shape": [int(d) for d in seg.shape],
        "dtype": dtype,
        "size": int(seg.payload_bytes),
        "slots": int(seg.slot_count),
        "history": int(seg.history),
        "gpu_enabled": gpu,
        "gpu_device": _gpu_device.stat_device(seg) if gpu else None,
        "cpu_mirror": not gpu or bool(flags & _native.FLAG_CPU_MIRROR),
        "notify": bool(flags & _native.FLAG_NOTIFY),
        "instance_id": seg.instance_id,
        "creator_pid": int(seg.creator_pid),
        "creator_alive": _creator_alive(seg),
        "count": int(seg.count),
        "write_sequence": int(seg.seq),
        "write_time": seg.write_time_ns / 1e9,
        "frame_id": int(seg.frame_id),
        "state": STATE_NAMES.get(int(seg.state), int(seg.state)),
        "lock_owner": lock_owner or None,
        "lock_owner_tid": int(seg.owner_tid) or None,
        "lock_owner_alive": (_proc.alive(lock_owner) if lock_owner and int(seg.pidns_match) != 0
                             else None),
        "lock_acquisitions": int(seg.acquisitions),
        "waiters": int(seg.waiters),
        "aborted_writes": int(seg.aborted),
        "created": seg.created_ns / 1e9,
        "mode": int(seg.mode),
        "segment": seg.segname,
    }


def _array_stat(seg: Any, kind: str) -> dict[str, Any]:
    try:
        dtype = _dtypes.config_text(_dtypes.decode(seg.dtype))
    except Exception:  # noqa: BLE001
        dtype = seg.dtype
    pid = int(seg.creator_pid)
    return {
        "name": seg.name,
        "kind": kind,
        "shape": [int(d) for d in seg.shape],
        "dtype": dtype,
        "size": int(seg.payload_bytes),
        "instance_id": seg.instance_id,
        "creator_pid": pid,
        "creator_alive": _creator_alive(seg),
        "created": seg.created_ns / 1e9,
        "mode": int(seg.mode),
        "segment": seg.segname,
    }


def _channel_stat(seg: Any) -> dict[str, Any]:
    pid = int(seg.creator_pid)
    d = {"name": seg.name, "kind": "channel"}
    d.update(_channel_mod.stat_of_segment(seg.name, seg.segname))
    d.update(
        instance_id=seg.instance_id,
        creator_pid=pid,
        creator_alive=_creator_alive(seg),
        created=seg.created_ns / 1e9,
        mode=int(seg.mode),
        segment=seg.segname,
    )
    return d


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
    ``pid_namespace``: "same", "other" (made in another PID namespace:
    ``creator_alive`` and ``lock_owner_alive`` are then None, and ``open``
    refuses it) or "unknown" (made by an older version)."""
    _checks.check_name(name, "shared-memory object")
    segname = _native.segment_name(name)
    try:
        seg = _native.Segment.peek(segname)
    except FileNotFoundError:
        raise _checks.missing_name_error(name) from None
    except CorruptStreamError as exc:
        raise CorruptStreamError(
            f"{name!r} has a corrupt or foreign header ({exc}); remove it with "
            f"shmstream.unlink({name!r})"
        ) from None
    if seg.name != name:  # another name with the same hash: not ours
        raise _checks.missing_name_error(name)
    kind = _kind_of(seg)
    if kind in ("stream", "gpu-stream"):
        return {**_stream_stat(seg), **_access(seg)}
    if kind == "channel":
        return {**_channel_stat(seg), **_access(seg)}
    info = {**_array_stat(seg, kind), **_access(seg)}
    if kind == "loader-pool":
        files = _pool_files(name)
        info["slot_files"] = len(files)
        info["slot_bytes"] = sum(_file_bytes(p[len(SHM_DIR):]) for p in files)
    return info


def readable(info: dict[str, Any]) -> dict[str, Any]:
    """``stat``'s dict for people: mode as ``0o600``, times as ISO dates."""
    out = dict(info)
    if "mode" in out:
        out["mode"] = oct(int(out["mode"]))
    for key in ("created", "write_time"):
        if isinstance(out.get(key), float):
            out[key] = _iso(out[key]) if out[key] else "never"
    return out


# ---- remove and purge --------------------------------------------------------------


def remove(name: str) -> bool:
    """Destroy the object ``name`` of any kind; True if something was there."""
    _checks.check_name(name, "shared-memory object")
    return bool(_native.unlink_segname(_native.segment_name(name)))


# ---- purge -------------------------------------------------------------------------


def _abandoned(e: Entry) -> bool:
    """Is nobody using this non-stream segment any more? Arrays and loader
    slots belong to their creator; a channel is abandoned when its creator
    is dead and no live process holds either end."""
    if e.creator_alive is not False:  # alive, or unknown (another PID namespace)
        return False
    if e.kind != "channel":
        return True
    try:
        d = _channel_mod.stat_of_segment(e.name or "", e.segname)
    except Exception:  # noqa: BLE001 - vanished or corrupt meanwhile
        return False
    return not (d["producer"]["alive"] or d["consumer"]["alive"])


def _remove_orphaned_cuda_ipc_files() -> list[str]:
    """Remove PyTorch's ``cuda.shm.<id>.<hex pid>.<seq>`` files whose
    producer is dead."""
    removed: list[str] = []
    try:
        entries = os.listdir(SHM_DIR)
    except OSError:
        return removed
    for name in entries:
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
        age = time.time() - os.stat(SHM_DIR + segname).st_mtime
    except OSError:
        return False
    return age > UNFINISHED_ORPHAN_S


def _remove(entries: Iterable[Entry]) -> list[Entry]:
    removed = []
    for e in entries:
        try:
            if _native.unlink_segname(e.segname):
                removed.append(e)
        except OSError:
            continue
    return removed


def purge_abandoned(kinds: Iterable[str] = ("channel", "array", "loader-pool")) -> list[Entry]:
    """Remove the objects of these kinds that nobody uses any more (creator
    dead; for a channel, no live end either; a loader pool's slot files go
    with its root, and slot files whose root is gone too), and unfinished
    segments whose creator died mid-create. Streams are never removed here.
    Returns the entries removed."""
    wanted = set(kinds)
    entries = scan()
    foreign = [e for e in entries if e.kind in wanted and e.creator_alive is None]
    if foreign:
        warnings.warn(
            f"purge skipped {len(foreign)} object(s) made in another PID namespace "
            f"({', '.join(repr(e.name) for e in foreign)}): their creators' pids cannot be "
            "judged from here; run purge in that namespace, or unlink them by name",
            stacklevel=2,
        )
    pools = []
    if "loader-pool" in wanted:  # the pool module removes root and files together
        dead_pools = set(_loader_pool.purge_dead_loader_pools())
        pools = [e for e in entries if e.kind == "loader-pool" and e.name in dead_pools]
    # then every other abandoned object (a pool root that had no slot file
    # yet included; a root the pool module removed is already gone)
    return pools + _remove(
        e for e in entries
        if (e.kind in wanted and e not in pools and _abandoned(e))
        or (e.kind == "unfinished" and _unfinished_for_long(e.segname))
    )


def purge_entries(*, include_cuda_orphans: bool = False) -> list[Entry]:
    """:func:`purge`, returning the registry entries it removed."""
    removed = _remove(scan(("stream", "gpu-stream", "corrupt")))
    removed += purge_abandoned()
    if include_cuda_orphans:
        _remove_orphaned_cuda_ipc_files()
    return removed


def purge(*, include_cuda_orphans: bool = False) -> list[str]:
    """Remove every stream in /dev/shm (pyshmem's meaning: in use or not),
    and the channels, shared arrays and loader slots that nobody uses any
    more (their creator is dead, and for a channel no live process holds
    either end); return the user names removed, sorted.

    Corrupt segments, and unfinished ones older than a minute, with
    shmstream's prefix are removed too (they have no name to return). With
    ``include_cuda_orphans=True`` it also deletes PyTorch CUDA IPC files
    whose producer process is dead. Not reversible: processes using a
    removed object keep their mapping, but nobody can open it again.
    """
    entries = purge_entries(include_cuda_orphans=include_cuda_orphans)
    return sorted(e.name for e in entries if e.name is not None)
