"""The page cache of one file, for the direct part's cold and warm passes:
drop it (``posix_fadvise(DONTNEED)``) and count its resident pages
(``mincore`` on a mapping, which does not fault pages in). The benchmark's
own, so that it needs nothing private of the library."""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import os

import numpy as np

_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
_libc.mmap.argtypes = (
    ctypes.c_void_p,
    ctypes.c_size_t,
    ctypes.c_int,
    ctypes.c_int,
    ctypes.c_int,
    ctypes.c_long,
)
_libc.mmap.restype = ctypes.c_void_p
_libc.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
_libc.mincore.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p)
_MAP_FAILED = ctypes.c_void_p(-1).value


def _oserror(path: str) -> OSError:
    err = ctypes.get_errno()
    return OSError(err, os.strerror(err), path)


def evict(path: str) -> None:
    """Ask the kernel to drop the file's clean cached pages."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def resident(path: str) -> tuple[int, int]:
    """Cached pages and total pages of the file: (resident, total)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        size = os.fstat(fd).st_size
        pages = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
        if pages == 0:
            return 0, 0
        addr = _libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if addr in (None, _MAP_FAILED):
            raise _oserror(path)
    finally:
        os.close(fd)
    try:
        vec = np.zeros(pages, np.uint8)
        if _libc.mincore(addr, size, vec.ctypes.data) != 0:
            raise _oserror(path)
        return int(np.count_nonzero(vec & 1)), pages
    finally:
        _libc.munmap(addr, size)
