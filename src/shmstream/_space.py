"""Room in /dev/shm: what a segment needs, what is free, and the error a
create that does not fit raises (one message for every kind)."""
from __future__ import annotations

import os

from . import _native

SHM_DIR = "/dev/shm"


def free_bytes() -> int:
    """Bytes free for new segments in /dev/shm."""
    try:
        st = os.statvfs(SHM_DIR)
    except OSError:
        return -1
    return st.f_bavail * st.f_frsize


def no_space_error(name: str, what: str, need: int, layout: str) -> OSError:
    """The ENOSPC of a create, with the sizes a user needs to fix it."""
    free = free_bytes()
    exc = OSError(
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
    64-byte records, rounded up to a page (docs/ABI.md)."""
    page = _native.HEADER_BYTES
    if history:
        slots = history + 1
    records = (64 * slots + page - 1) // page * page if history else 0
    return _native.HEADER_BYTES + slots * ((payload + page - 1) // page * page) + records
