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

Anyone can put anything in /dev/shm, so every scan opens an entry without
blocking and without following a link, and leaves alone (as a
:class:`Skipped`, with the reason) what is not a regular file or cannot be
read: a FIFO, a symlink, a directory, a file of another user. File names
and stored user names are ``str`` decoded the way Python decodes file
names (undecodable bytes as lone surrogates, ``os.fsdecode``), so no name
stops a scan; :func:`printable` is how they are shown, and the name it
shows is one :func:`remove` accepts.
"""

from __future__ import annotations

import dataclasses
import errno
import os
import stat as _stat
from collections.abc import Iterable
from typing import Any

from .. import _native
from ..common import _kinds, _proc
from ..common._space import SHM_DIR
from ..errors import CorruptStreamError

__all__ = [
    "Entry",
    "FILE_PREFIX",
    "KINDS",
    "Skipped",
    "entry",
    "list_channels",
    "list_streams",
    "creator_alive",
    "examine",
    "file_prefixes",
    "printable",
    "scan",
    "segment_files",
    "survey",
]

FILE_PREFIX = _native.SEGMENT_PREFIX.lstrip("/")
KINDS = ("stream", "gpu-stream", "channel", "array", "loader-pool", "milk")


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
    leases: bool = False  # liveness by lease, right from any PID namespace (ABI.md)

    @property
    def shown(self) -> str:
        """The name ``list`` shows: the user name, or the segment name if
        the header has none, through :func:`printable`."""
        return printable(self.name if self.name is not None else self.segname)


@dataclasses.dataclass(frozen=True)
class Skipped:
    """An entry of /dev/shm with shmstream's prefix that the registry left
    alone: not a regular file, or not readable by this process."""

    segname: str  # "/" + the file name (undecodable bytes as surrogates)
    reason: str  # why, for people: "a FIFO, not a regular file", ...


def printable(text: str, *, backslash: bool = True) -> str:
    """``text`` safe to print on a terminal, the way ``ls -b`` shows names:
    an undecodable byte (a lone surrogate from ``os.fsdecode``) as ``\\xff``,
    a control or other non-printable character (escape codes, bidi
    overrides) as ``\\x1b``, ``\\u202e``..., and a backslash as ``\\\\``
    (``backslash=False`` leaves backslashes alone: for text that is already
    quoted, such as an error message with ``repr`` names). Printable text
    without a backslash is returned unchanged."""
    if text.isprintable() and not (backslash and "\\" in text):
        return text
    out = []
    for ch in text:
        code = ord(ch)
        if 0xDC80 <= code <= 0xDCFF:  # surrogateescape: the byte code - 0xDC00
            out.append(f"\\x{code - 0xDC00:02x}")
        elif ch == "\\":
            out.append("\\\\" if backslash else ch)
        elif ch.isprintable():
            out.append(ch)
        elif code < 0x100:
            out.append(f"\\x{code:02x}")
        elif code < 0x10000:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    return "".join(out)


def _not_regular(mode: int) -> str | None:
    """Why a file of this st_mode is left alone (None: a regular file)."""
    if _stat.S_ISREG(mode):
        return None
    what = (
        "a symbolic link"
        if _stat.S_ISLNK(mode)
        else "a FIFO"
        if _stat.S_ISFIFO(mode)
        else "a directory"
        if _stat.S_ISDIR(mode)
        else "a socket"
        if _stat.S_ISSOCK(mode)
        else "a device"
        if _stat.S_ISCHR(mode) or _stat.S_ISBLK(mode)
        else "a special file"
    )
    return f"{what}, not a regular file"


def _kind_of(seg: Any) -> str:
    return _kinds.recognise(seg)[0]


def _extra_files(kind: str, name: str | None) -> list[str]:
    """Paths of an object's files beside its segment (a loader pool's slots)."""
    entry = _kinds.entry_of(kind)
    if entry is None or entry.extra_files is None or name is None:
        return []
    return entry.extra_files(name)


def file_prefixes() -> tuple[str, ...]:
    """The prefixes of the kinds' files beside their segments."""
    return tuple(k.file_prefix for k in _kinds.TABLE if k.file_prefix)


def segment_files() -> list[str]:
    """POSIX names ("/shmstream-...") of every shmstream file in /dev/shm
    (``os.fsdecode``d: undecodable bytes as lone surrogates)."""
    try:
        entries = os.listdir(SHM_DIR)
    except OSError:
        return []
    return sorted("/" + e for e in entries if e.startswith(FILE_PREFIX))


def _file_bytes(segname: str) -> int:
    try:
        return os.lstat(SHM_DIR + segname).st_size
    except OSError:
        return 0


def entry(segname: str) -> Entry | None:
    """The registry entry of one segment (None if it vanished, or is left
    alone: see :func:`survey`)."""
    found = examine(segname)
    return found if isinstance(found, Entry) else None


def examine(segname: str) -> Entry | Skipped | None:
    """One ``shmstream-*`` name of /dev/shm: its entry, why it is left
    alone, or None if it vanished. Never raises, never blocks."""
    try:  # the reason, for people; the C core checks the type on the fd it opens
        why = _not_regular(os.lstat(SHM_DIR + segname).st_mode)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return Skipped(segname, f"cannot stat it: {exc.strerror}")
    if why is not None:
        return Skipped(segname, why)
    try:
        seg = _native.Segment.peek(os.fsencode(segname))
    except FileNotFoundError:
        return None
    except BlockingIOError:  # magic still 0: the creator is filling it (or died doing so)
        return Entry(segname, None, "unfinished", _file_bytes(segname), None, None, None)
    except (CorruptStreamError, ValueError):
        return Entry(segname, None, "corrupt", _file_bytes(segname), None, None, None)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENODEV):  # replaced since the lstat
            return Skipped(segname, "not a regular file")
        return Skipped(segname, f"cannot read it: {exc.strerror}")  # another user's, ...
    except Exception as exc:  # noqa: BLE001 - one bad entry never stops a scan
        return Skipped(segname, f"cannot read it: {exc}")
    try:
        return _entry_of(segname, seg)
    except Exception as exc:  # noqa: BLE001
        return Skipped(segname, f"cannot read its header: {exc}")


def _entry_of(segname: str, seg: Any) -> Entry:
    pid = int(seg.creator_pid)
    kind = _kind_of(seg)
    size = _file_bytes(segname)
    size += sum(_file_bytes(p[len(SHM_DIR) :]) for p in _extra_files(kind, seg.name))
    # Every kind but a plain shared array judges liveness by lease.
    leases = int(seg.layout_version) != _native.LAYOUT_VERSION_ARRAY
    created = seg.created_ns / 1e9
    return Entry(segname, seg.name, kind, size, pid, creator_alive(seg), created, leases)


def creator_alive(seg: Any) -> bool | None:
    """Is the creator alive? Made in another PID namespace its pid means
    nothing here (docs/ABI.md, "Owner and PID namespace"): a stream's or
    loader pool's creator is judged by its lease, anything else is None."""
    if int(seg.pidns_match) == 0:  # leases()[0] is -1 but for a stream or loader pool
        return {1: True, 0: False}.get(int(seg.leases()[0]))
    return _proc.alive(int(seg.creator_pid), int(seg.creator_start_ticks))


def _odd_slot_files() -> list[Skipped]:
    """Names with a kind's file prefix (``shmstream.loader-*``) that are not
    regular files: the kind never uses them, nothing removes them."""
    prefixes = file_prefixes()
    odd = []
    try:
        with os.scandir(SHM_DIR) as found:
            for d in found:
                if (
                    prefixes
                    and d.name.startswith(prefixes)
                    and not d.is_file(follow_symlinks=False)
                ):
                    try:
                        why = _not_regular(d.stat(follow_symlinks=False).st_mode)
                    except OSError:
                        continue  # vanished
                    odd.append(Skipped("/" + d.name, why or "not a regular file"))
    except OSError:
        pass
    return odd


def survey(kinds: Iterable[str] | None = None) -> tuple[list[Entry], list[Skipped]]:
    """:func:`scan`, and what it left alone: the ``shmstream-*`` and
    ``shmstream.loader-*`` names of /dev/shm that are not regular files or
    cannot be read, each with the reason, sorted by name."""
    wanted = None if kinds is None else set(kinds)
    found: list[Entry] = []
    skipped: list[Skipped] = []
    for segname in segment_files():
        e = examine(segname)
        if isinstance(e, Skipped):
            skipped.append(e)
        elif e is not None and (wanted is None or e.kind in wanted):
            found.append(e)
    skipped += _odd_slot_files()
    outside, odd = _kinds.outside_survey(wanted)  # milk's streams, in milk's directory
    found += [Entry(**r.entry(k), creator_alive=creator_alive(r)) for k, r in outside]
    skipped += [Skipped(path, why) for path, why in odd]
    return (
        sorted(found, key=lambda e: (e.kind, e.name or "", e.segname)),
        sorted(skipped, key=lambda s: s.segname),
    )


def scan(kinds: Iterable[str] | None = None) -> list[Entry]:
    """Every shmstream segment in /dev/shm (of the given kinds), sorted by
    kind and name. Entries that are not regular files or cannot be read are
    left out (:func:`survey` says which, and why)."""
    return survey(kinds)[0]


def list_streams() -> list[str]:
    """Sorted names of the streams in /dev/shm, GPU streams included (other
    kinds, and unreadable or corrupt segments, are left out)."""
    return sorted(e.name for e in scan(("stream", "gpu-stream")) if e.name is not None)


def list_channels() -> list[str]:
    """Sorted names of the channels in /dev/shm."""
    return sorted(e.name for e in scan(("channel",)) if e.name is not None)
