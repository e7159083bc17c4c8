"""Room in /dev/shm: what a segment needs, what is free, and the error a
create that does not fit raises (one message for every kind)."""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Iterator

from .. import _native
from ..errors import ShmstreamOSError

SHM_DIR = "/dev/shm"


def free_bytes() -> int:
    """Bytes free for new segments in /dev/shm."""
    try:
        st = os.statvfs(SHM_DIR)
    except OSError:
        return -1
    return st.f_bavail * st.f_frsize


@contextlib.contextmanager
def room_for(name: str, what: str, need: int, layout: str) -> Iterator[None]:
    """Around a create of ``need`` bytes: a size /dev/shm cannot hold is
    refused at once, with the sizes (reserving it would first take every
    free page, seconds per GiB), and the create's own ENOSPC becomes the
    same error. One place for every kind."""
    free = free_bytes()
    if 0 <= free < need:
        raise no_space_error(name, what, need, layout)
    try:
        yield
    except OSError as exc:
        if exc.errno != errno.ENOSPC:
            raise
        raise no_space_error(name, what, need, layout) from None


def free_inodes() -> int:
    """Files that can still be made in /dev/shm (-1: unknown)."""
    try:
        st = os.statvfs(SHM_DIR)
    except OSError:
        return -1
    return st.f_favail if st.f_files else -1  # f_files 0: no inode limit


def no_space_error(name: str, what: str, need: int, layout: str) -> OSError:
    """The ENOSPC of a create, with the sizes a user needs to fix it. A
    tmpfs out of inodes says ENOSPC too, with bytes to spare: then the
    message is about files, not bytes."""
    free = free_bytes()
    if free_inodes() == 0:
        return ShmstreamOSError(
            28,  # ENOSPC
            f"cannot create {what} {name!r}: {SHM_DIR} has no free inodes (it holds as many "
            f"files as it may, with {free} bytes still free); remove what is no longer used "
            f"('shmstream list', 'shmstream purge'), or allow more files (e.g. mount -o "
            f"remount,nr_inodes=1m {SHM_DIR})",
        )
    exc = ShmstreamOSError(
        28,  # ENOSPC
        f"cannot create {what} {name!r}: it needs {need} bytes in {SHM_DIR} ({layout}), and "
        f"{SHM_DIR} has {free if free >= 0 else 'an unknown number of'} bytes free; make "
        f"{SHM_DIR} larger (e.g. mount -o remount,size=2G {SHM_DIR}, or docker --shm-size), "
        "remove what is no longer used ('shmstream list', 'shmstream purge'), or make the "
        "object smaller",
    )
    return exc


def segment_bytes(payload: int, slots: int, history: int = 0) -> int:
    """The size of a segment: the 4096-byte header and slots of payload,
    each rounded up to a page; with history, history + 1 slots and their
    64-byte records, rounded up to a page (docs/ABI.md). The core's formula
    (ss_segment_bytes), the one its create uses."""
    return _native.segment_bytes(payload, slots, history)
