"""milk streams' entry in the kinds' table: ``shmstream list`` and ``stat``
show the streams of milk's directory as kind ``milk``, named
``milk:NAME``, and the viewer, the recorder and the bridge open them by
that name (docs/milk.md, "The command, the viewer, record and the bridge");
``shmstream unlink milk:NAME`` removes one.

Files are read with ``pread`` (src/core/milk.c, ``ss_milk_peek``): listing
maps, claims and writes nothing. Purge never removes them: they are milk's
(unlink, by name, does).
"""

from __future__ import annotations

import dataclasses
import errno
import os
from stat import S_ISREG
from typing import Any

from .. import _milk
from ..common import _kinds
from ..errors import ShmstreamFileNotFoundError
from ._errors import on_stat_denied
from .dtypes import dtype_of
from .layout import SUFFIX, instance_id, listed_dir, path_of, shm_dir, unix_ns
from .stream import MilkStream
from .stream import open as open_milk
from .stream import unlink as unlink_milk

PREFIX = "milk:"


@dataclasses.dataclass(frozen=True)
class Record:
    """What the registry reads of a milk file, as it reads a segment's
    header: the keys every kind shares, and milk's own (``info``)."""

    name: str  # "milk:NAME"
    segname: str  # the file's path
    instance_id: str  # inode and creationtime: which file this is
    creator_pid: int
    created_ns: int  # UNIX time (milk's creationtime is TAI)
    mode: int
    file_mode: int
    owner_uid: int
    file_bytes: int
    info: dict[str, Any]
    kind: int = -1  # no segment kind: the other kinds' recognise says no
    flags: int = 0
    creator_start_ticks: int = 0  # milk records none: liveness by pid
    pidns_match: int = 2  # milk records no PID namespace: "unknown"

    def entry(self, kind: str) -> dict[str, Any]:
        """The fields of its ``registry.Entry`` but liveness (the registry judges it)."""
        return {
            "segname": self.segname,
            "name": self.name,
            "kind": kind,
            "bytes": self.file_bytes,
            "creator_pid": self.creator_pid,
            "created": self.created_ns / 1e9,
        }


def _record(name: str, path: str) -> Record:
    d = _milk.peek(path)
    perm = int(d["file_mode"]) & 0o7777
    return Record(
        name=PREFIX + name,
        segname=path,
        instance_id=instance_id(int(d["inode"]), int(d["creationtime_ns"])),
        creator_pid=int(d["creatorPID"]),
        created_ns=unix_ns(int(d["creationtime_ns"])),
        mode=perm,
        file_mode=perm,
        owner_uid=int(d["file_uid"]),
        file_bytes=int(d["file_bytes"]),
        info=d,
    )


def _peek(name: str) -> Record:
    short = name[len(PREFIX) :]
    path = path_of(short)
    try:
        return _record(short, path)
    except FileNotFoundError:
        exc = ShmstreamFileNotFoundError(
            f"no shmstream object and no milk stream named {name!r} (looked for {path}; "
            "point MILK_SHM_DIR at milk's directory)"
        )
        exc.errno = errno.ENOENT
        raise exc from None
    except PermissionError as e:
        raise on_stat_denied(e, short, path) from None


def _survey() -> tuple[list[Record], list[tuple[str, str]]]:
    directory = listed_dir()
    if directory is None:
        return [], []
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return [], []
    found, odd = [], []
    for f in names:
        if not f.endswith(SUFFIX) or f == SUFFIX:
            continue
        path = os.path.join(directory, f)
        try:
            if not S_ISREG(os.lstat(path).st_mode):
                odd.append((path, "not a regular file"))
                continue
            found.append(_record(f[: -len(SUFFIX)], path))
        except FileNotFoundError:
            continue  # removed since the listing
        except Exception as exc:  # noqa: BLE001 - one bad file never stops a listing
            odd.append((path, f"not a milk stream shmstream reads: {exc}"))
    return found, odd


def _recognise(record: Any) -> str | None:
    return "milk" if isinstance(record, Record) else None


def _stat(record: Record, kind: str) -> dict[str, Any]:
    d = record.info
    size = tuple(int(s) for s in d["size"][: d["naxis"]])
    cb = int(d["cbsize"])
    write_ns = int(d["writetime_ns"])
    return {
        "shape": list(size[::-1]),
        "dtype": str(dtype_of(d["datatype"])),
        "size": int(d["frame_bytes"]),
        "count": int(d["cnt0"]),
        "frame_id": int(d["cnt1"]),
        "write_time": unix_ns(write_ns) / 1e9 if write_ns else 0.0,
        "writing": bool(d["write"]),
        "history": cb - 1 if cb >= 2 else 0,
        "cb_size": cb,
        "semaphores": int(d["nsem"]),
        "readers": [int(p) for p in d["semReadPID"] if p > 0],
        "keywords": int(d["nkw"]),
        "version": d["version"],
        "milk_dir": os.path.dirname(record.segname) or shm_dir(),
    }


def _open_reader(name: str) -> MilkStream:
    return open_milk(name[len(PREFIX) :])


def _remove(name: str) -> bool:
    """``shmstream unlink milk:NAME``: the file, as milk's destroyIm removes
    it (milk.unlink's checks); False when there is none."""
    try:
        unlink_milk(name[len(PREFIX) :])
    except FileNotFoundError:
        return False
    except ValueError:  # a name milk cannot have ('/'...): no such stream
        return False
    return True


_kinds.register(
    _kinds.Kind(
        names=("milk",),
        recognise=_recognise,
        stat=_stat,
        prefix=PREFIX,
        peek=_peek,
        survey=_survey,
        open_reader=_open_reader,
        purged=False,
        remove=_remove,
    )
)
