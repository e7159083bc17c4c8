"""The slot files of a ``shmstream.torch.DataLoader``'s pool: their names
(``/dev/shm/shmstream.loader-<token>.<k>.<gen>``), sizes, creation and
mapping, the check that no other process truncated one, listing and
purging the files of dead loaders. No torch here. The pool's table, which
says what each slot holds, is in ``_loader_pool.py``.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from typing import Any, NamedTuple

from .. import _native
from ..common._space import SHM_DIR
from ..errors import (
    CorruptStreamError,
    SegmentOwnerError,
    ShmstreamFileNotFoundError,
    ShmstreamOSError,
)

#: User-name prefix of a pool's root segment.
ROOT_PREFIX = "loader-"
#: File-name prefix of slot files. Not the core's "shmstream-": these files
#: have no segment header, and tools that read headers must skip them.
SLOT_FILE_PREFIX = "shmstream.loader-"

#: Default bound on a pool's slot bytes (a quarter of /dev/shm if smaller).
DEFAULT_MAX_BYTES = 1 << 30

_PAGE = 4096


def _align(n: int, a: int) -> int:
    return (n + a - 1) // a * a


def capacity_for(need: int, grow: bool = False) -> int:
    """Bytes of a new slot for a batch of ``need`` bytes, whole pages. A slot
    that replaces one too small (``grow``: batch sizes vary) gets 1/8
    headroom, so slightly bigger batches reuse it; a first slot gets none,
    so that reserving it costs no more than the batch itself."""
    return max(_align(need + need // 8 if grow else need, _PAGE), _PAGE)


def default_max_bytes() -> int:
    """DEFAULT_MAX_BYTES, or a quarter of /dev/shm if that is smaller."""
    try:
        st = os.statvfs(SHM_DIR)
        quarter = st.f_blocks * st.f_frsize // 4
    except OSError:
        return DEFAULT_MAX_BYTES
    return min(DEFAULT_MAX_BYTES, quarter) if quarter > 0 else DEFAULT_MAX_BYTES


# ------------------------------------------- naming, listing, purging


def root_name(token: str) -> str:
    """The user name of a pool's root segment."""
    return ROOT_PREFIX + token


def slot_path(token: str, k: int, gen: int) -> str:
    """The /dev/shm path of slot ``k``, generation ``gen``, of pool ``token``."""
    return f"{SHM_DIR}/{SLOT_FILE_PREFIX}{token}.{k}.{gen}"


def list_slot_files(token: str | None = None) -> dict[str, list[str]]:
    """Slot files in /dev/shm: {pool token: [paths]}, only ``token``'s if
    given. Only regular files count (a FIFO, link or directory with the
    prefix is not a slot: the registry reports it); names are
    ``os.fsdecode``d, so a token may hold lone surrogates."""
    out: dict[str, list[str]] = {}
    try:
        with os.scandir(SHM_DIR) as entries:
            for entry in entries:
                if not entry.name.startswith(SLOT_FILE_PREFIX):
                    continue
                tok = entry.name[len(SLOT_FILE_PREFIX) :].split(".", 1)[0]
                if (token is None or tok == token) and entry.is_file(follow_symlinks=False):
                    out.setdefault(tok, []).append(f"{SHM_DIR}/{entry.name}")
    except OSError:
        pass
    return out


def _owner_alive(seg: Any) -> bool:
    """Is the pool in use? While its owner's lease or any handle's lease on
    its root (a worker's) is held, or this cannot be told; from any PID
    namespace (docs/ABI.md, "Loader pool by lease")."""
    creator, _holder, anyone = (int(v) for v in seg.leases())
    return creator != 0 or anyone != 0


def purge_dead_loader_pools() -> list[str]:
    """Remove the pools nobody uses any more (their loader and workers are
    gone; or their root is gone or unreadable): their slot files and root
    segment. Returns the root names of the pools removed. Pools in use are
    left alone."""
    removed = []
    for token, paths in list_slot_files().items():
        try:
            segname = _native.segment_name(root_name(token))
        except (TypeError, ValueError):
            segname = None  # no root can have this name (not UTF-8, too long)
        try:
            if segname is None:
                raise ShmstreamFileNotFoundError(root_name(token))
            seg = _native.Segment.peek(segname)
            owner_alive = _owner_alive(seg)
            del seg
        except BlockingIOError:
            continue  # a root still being created: its owner is alive
        except OSError as exc:  # gone, or not a segment we can read: the slots are orphans
            owner_alive = False
            if exc.errno in (errno.ELOOP, errno.ENODEV):
                segname = None  # a link or FIFO, not a root: left alone (the registry says so)
        except Exception:  # noqa: BLE001 - a corrupt root: nobody can use the slots
            owner_alive = False
        if owner_alive:
            continue
        for path in paths:
            with contextlib.suppress(OSError):
                os.unlink(path)
        if segname is not None:
            with contextlib.suppress(OSError):
                _native.unlink_segname(segname)
        removed.append(root_name(token))
    return sorted(removed)


# ------------------------------------------------------------- slot files


def create_slot_file(path: str, capacity: int) -> Any:
    """Create, reserve and map a new slot file (unpopulated: the first batch
    goes straight into fresh pages); a ``_native.FileMapping``. OSError
    (ENOSPC: /dev/shm is full) leaves nothing behind."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        os.ftruncate(fd, capacity)
        os.posix_fallocate(fd, 0, capacity)
        return _native.FileMapping(fd, capacity, False)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(path)
        raise
    finally:
        os.close(fd)


def map_slot_file(path: str, capacity: int, populate: bool, owner_uid: int) -> Any:
    """Map an existing slot file (a ``_native.FileMapping``: mapped through
    the core, so a file truncated under it later gives zero pages and its
    ``lost`` mark, not a SIGBUS); ``populate`` maps every page now (a worker
    about to write it) instead of one fault per page. The file must belong
    to ``owner_uid``, the owner of the pool's root segment (which open
    checked): a slot file planted under the pool's name by another user
    would feed its bytes to the batches (docs/ABI.md, "Owner and PID
    namespace")."""
    fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ShmstreamOSError(
                errno.ENODEV,
                f"loader slot file {path} is not a regular file; remove it and restart the epoch",
            )
        if st.st_uid != owner_uid:
            raise SegmentOwnerError(
                errno.EACCES,
                f"loader slot file {path} belongs to uid "
                f"{st.st_uid}, not to the pool's owner (uid {owner_uid}); "
                "remove it and restart the epoch",
            )
        size = st.st_size
        if size != capacity:
            raise CorruptStreamError(
                f"loader slot file {path} has {size} bytes, its pool says {capacity}: "
                "another process changed it; the slot is replaced"
            )
        return _native.FileMapping(fd, capacity, populate)
    finally:
        os.close(fd)


def unlink_quiet(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


class Taken:
    """A slot a worker took: write the batch into ``buf`` (the whole slot);
    ``mapping`` is its FileMapping (``lost`` once the file shrank under it)."""

    __slots__ = ("k", "gen", "seq", "capacity", "buf", "fresh", "mapping")

    def __init__(
        self, k: int, gen: int, seq: int, capacity: int, buf: Any, fresh: bool, mapping: Any
    ) -> None:
        self.k, self.gen, self.seq, self.capacity = k, gen, seq, capacity
        self.buf, self.fresh, self.mapping = buf, fresh, mapping


def check_written(token: str, taken: Taken) -> None:
    """After a worker wrote its batch into ``taken``: CorruptStreamError if
    the slot's file was truncated meanwhile (the bytes went to zero pages)."""
    check_whole(slot_path(token, taken.k, taken.gen), taken.capacity, taken.mapping)


class Mapped(NamedTuple):
    """This process's mapping of one generation of a slot file."""

    gen: int
    buf: Any  # the bytes as the caller uses them (a uint8 array or tensor)
    mapping: Any  # the _native.FileMapping behind them


def check_whole(path: str, capacity: int, mapping: Any) -> None:
    """CorruptStreamError if the slot file is shorter than its pool says, or
    was seen shorter (a bus error under the mapping): another process
    truncated it. Its bytes, read through the mapping, are zeros then, not
    the batch (docs/loader.md, "Edge cases and what happens")."""
    try:
        short = os.stat(path).st_size < capacity
    except FileNotFoundError:  # removed: its pages stay, the mapping is whole
        short = False
    if short or mapping.lost:
        raise CorruptStreamError(
            f"loader slot file {path} was truncated by another process while in use; "
            "the batch in it is lost, the slot is replaced for the next ones"
        )
