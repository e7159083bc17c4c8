"""DirectArray: NumPy indexing over a huge read-only array file.

Cold rows are read with O_DIRECT (no read-ahead, no page-cache pollution)
and their blocks kept in the reader's bounded block cache, so reading them
again costs a copy; rows already in the page cache are copied from it.
docs/direct.md explains how. This module only turns an index into a list of rows ("units": index
positions over the leading dimensions that the index touches) and an output
shape; the C core turns rows into aligned, coalesced reads.
"""

from __future__ import annotations

import math
import operator
import os
import threading
import warnings
from typing import Any

import numpy as np

from .. import _direct
from ..common import _checks
from ..errors import ShmstreamIndexError, ShmstreamTypeError, ShmstreamValueError

__all__ = ["DirectArray", "direct_mmap", "DEFAULT_CACHE_BYTES", "io_backend"]

#: Default bound of a reader's block cache (256 MiB); docs/direct.md says why.
DEFAULT_CACHE_BYTES: int = _direct.DEFAULT_CACHE_BYTES

#: ``io_backend() -> str``: how this process reads cold rows, "io_uring" or
#: "pread" (docs/direct.md, "Threads: io_uring per thread vs a thread pool").
io_backend = _direct.io_backend

#: The largest file size (off_t): offset + array bytes must fit in it.
_MAX_FILE_BYTES = 2**63 - 1

# Filesystems (by st_dev) already warned about: one warning each per process.
_warned_devices: set[int] = set()
_warn_lock = threading.Lock()


def _warn_buffered(path: str) -> None:
    try:
        dev = os.stat(path).st_dev
    except OSError:
        dev = -1
    with _warn_lock:
        if dev in _warned_devices:
            return
        _warned_devices.add(dev)
    warnings.warn(
        f"the filesystem of {path!r} does not support O_DIRECT; DirectArray reads "
        "it with buffered pread instead (read-ahead off)",
        RuntimeWarning,
        stacklevel=3,
    )


def _consumes(item: Any) -> tuple[Any, int]:
    """The index item as NumPy will see it, and how many dimensions it uses."""
    if item is None or item is Ellipsis:
        return item, 0
    if isinstance(item, (bool, np.bool_)):
        return item, 0  # a boolean scalar adds an axis, uses none
    if isinstance(item, (slice, int, np.integer)):
        return item, 1
    arr = item if isinstance(item, np.ndarray) else np.asarray(item)
    if arr.dtype == np.bool_:
        return arr, arr.ndim
    if arr.dtype.kind not in "iu":
        if arr.size == 0:
            return arr.astype(np.intp), 1  # [] selects nothing, as in NumPy
        raise ShmstreamIndexError(
            "only integers, slices (`:`), ellipsis (`...`), numpy.newaxis (`None`) and "
            "integer or boolean arrays are valid indices"
        )
    return arr, 1


class DirectArray:
    """A read-only array stored in a file, indexed like a NumPy array.

    ``DirectArray(path, shape, dtype, offset=0)`` describes a C-ordered array
    of ``shape`` and ``dtype`` starting ``offset`` bytes into ``path``.
    Indexing reads just the requested rows and returns a new ndarray (a
    NumPy scalar for a single element), equal to ``np.memmap(...)[index]``.
    Reads from many threads at once are safe and run without the GIL.

    The reader holds one file descriptor until ``close()`` (or the end of a
    ``with`` block). ``use_page_cache=False`` reads with O_DIRECT even rows
    that are in the page cache.

    ``cache_bytes`` (default 256 MiB) bounds the reader's block cache: the
    blocks it reads with O_DIRECT are kept in memory, least recently used
    dropped first, and served from there when read again, by any thread.
    Memory is taken as the cache fills and freed by ``close()``; 0 turns the
    cache off. The file must not change while the reader is open.
    """

    def __init__(
        self,
        path: Any,
        shape: Any,
        dtype: Any,
        offset: int = 0,
        *,
        use_page_cache: bool = True,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
    ) -> None:
        dt = _checks.check_dtype(dtype)
        if dt.itemsize == 0:
            raise ShmstreamTypeError(f"dtype {dt} has no size; give a sized dtype such as 'S8'")
        self._shape = _checks.check_shape(shape, limited=False)
        self._dtype = dt
        self._offset = _checks.check_int("offset", offset, minimum=0, maximum=_MAX_FILE_BYTES)
        cache_bytes = _checks.check_int(
            "cache_bytes (0 turns the block cache off)", cache_bytes, minimum=0
        )
        self._path = _checks.check_path("path", path)
        use_page_cache = _checks.check_bool("use_page_cache", use_page_cache)
        self._nbytes = math.prod(self._shape) * dt.itemsize
        if self._offset + self._nbytes > _MAX_FILE_BYTES:
            raise ShmstreamValueError(
                f"offset {self._offset} + {self._nbytes} array bytes (shape {self._shape} of "
                f"{dt}) is more than any file holds (2**63 - 1 bytes); check shape and offset"
            )
        self._closed = False
        self._tail = self._shape[1:]
        self._row1 = self._row_bytes(1) if self._shape else 0  # bytes of one row of axis 0
        self._reader = _direct.Reader(
            self._path,
            self._offset,
            self._nbytes,
            use_page_cache,
            min(cache_bytes, 2**64 - 1),
        )
        if not self._reader.direct:
            _warn_buffered(self._path)

    # ---- description ----------------------------------------------------

    shape = property(lambda self: self._shape)
    dtype = property(lambda self: self._dtype)
    ndim = property(lambda self: len(self._shape))
    size = property(lambda self: math.prod(self._shape))
    nbytes = property(lambda self: self._nbytes)
    itemsize = property(lambda self: self._dtype.itemsize)
    offset = property(lambda self: self._offset)
    filename = property(lambda self: self._path)
    closed = property(lambda self: self._closed)

    @property
    def direct(self) -> bool:
        """True when cold rows are read with O_DIRECT; False on the buffered
        fallback (filesystems without O_DIRECT, such as tmpfs)."""
        return self._reader.direct

    def stats(self) -> dict[str, int]:
        """Counters since open, in bytes of whole blocks: ``direct_bytes``
        (read from the file with O_DIRECT), ``cache_hit_bytes`` (served from
        the block cache), ``page_cache_bytes`` (copied from the page cache),
        ``cache_used_bytes`` (block-cache memory in use; 0 after close) and
        ``cache_limit_bytes`` (its bound; 0 when there is no block cache)."""
        return self._reader.stats()

    def __len__(self) -> int:
        if not self._shape:
            raise ShmstreamTypeError("len() of a 0-d DirectArray")
        return self._shape[0]

    def __repr__(self) -> str:
        io = "O_DIRECT" if self._reader.direct else "buffered pread (no O_DIRECT here)"
        state = ", closed" if self._closed else ""
        return (
            f"DirectArray({self._path!r}, shape={self._shape}, dtype={self._dtype.str!r}, "
            f"offset={self._offset}, io={io!r}{state})"
        )

    # ---- lifetime -------------------------------------------------------

    def close(self) -> None:
        """Releases the file descriptor; waits for reads in flight. Idempotent."""
        self._closed = True
        self._reader.close()

    def __enter__(self) -> DirectArray:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ---- reading --------------------------------------------------------

    def __getitem__(self, key: Any) -> Any:
        if self._closed:
            raise ShmstreamValueError(
                f"read from a closed DirectArray ({self._path!r}); open a new one to read again"
            )
        if type(key) is slice and self._shape:
            # The hot path (a[i:j:k]), kept short: a warm read is a few µs.
            start, stop, step = key.indices(self._shape[0])
            count = len(range(start, stop, step))
            out = np.empty((count, *self._tail), self._dtype)
            if count and self._row1:
                self._reader.read_strided(start, step, count, self._row1, out)
            return out
        if self._shape and (
            isinstance(key, slice)
            or (isinstance(key, (int, np.integer)) and not isinstance(key, (bool, np.bool_)))
        ):
            return self._read_leading(key)
        return self._read_general(key)

    def _row_bytes(self, k: int) -> int:
        return math.prod(self._shape[k:]) * self._dtype.itemsize

    def _finish(self, out: np.ndarray) -> Any:
        return out[()] if out.ndim == 0 else out

    def _read_leading(self, key: int | np.integer | slice) -> Any:
        """Fast path: one int or slice on the first axis."""
        n0 = self._shape[0]
        if isinstance(key, slice):
            start, stop, step = key.indices(n0)
            count = len(range(start, stop, step))
            out = np.empty((count, *self._shape[1:]), self._dtype)
        else:
            i = operator.index(key)
            if not -n0 <= i < n0:
                raise ShmstreamIndexError(f"index {i} is out of bounds for axis 0 with size {n0}")
            start, step, count = i % n0, 1, 1
            out = np.empty(self._shape[1:], self._dtype)
        if count and out.size:
            self._reader.read_strided(start, step, count, self._row_bytes(1), out)
        return self._finish(out)

    def _read_general(self, key: Any) -> Any:
        items, k = self._leading_key(key)
        units = self._units(items, k)
        out = np.empty(units.shape + self._shape[k:], self._dtype)
        if out.size:
            flat = np.ascontiguousarray(units, dtype=np.int64).reshape(-1)
            self._reader.read_units(flat, self._row_bytes(k), out)
        # NumPy gives a 0-d array, not a scalar, for a key with '...' in it
        # (and a scalar of a bytes dtype would drop its trailing NULs).
        raw = key if isinstance(key, tuple) else (key,)
        return out if any(item is Ellipsis for item in raw) else self._finish(out)

    def _leading_key(self, key: Any) -> tuple[tuple[Any, ...], int]:
        """The key with '...' expanded and trailing whole-axis slices dropped,
        and the number k of leading axes it indexes; axes k.. are read whole."""
        raw = key if isinstance(key, tuple) else (key,)
        items, used, ellipses = [], [], 0
        for item in raw:
            item, n = _consumes(item)  # noqa: PLW2901 - the index, normalised
            ellipses += item is Ellipsis
            items.append(item)
            used.append(n)
        ndim = len(self._shape)
        if ellipses > 1:
            raise ShmstreamIndexError("an index can only have a single ellipsis ('...')")
        if sum(used) > ndim:
            raise ShmstreamIndexError(
                f"too many indices for array: array is {ndim}-dimensional, "
                f"but {sum(used)} were indexed"
            )
        if ellipses:
            at = next(i for i, item in enumerate(items) if item is Ellipsis)
            fill = ndim - sum(used)
            items[at : at + 1] = [slice(None)] * fill
            used[at : at + 1] = [1] * fill
        k = sum(used)
        while (
            items
            and isinstance(items[-1], slice)
            and used[-1] == 1
            and items[-1].indices(self._shape[k - 1]) == (0, self._shape[k - 1], 1)
        ):
            items.pop()
            used.pop()
            k -= 1
        return tuple(items), k

    def _units(self, items: tuple[Any, ...], k: int) -> np.ndarray:
        """Row numbers over the leading k axes, shaped like NumPy's result.

        Indexing is linear, so the flat row number r = sum_d i_d * m_d is
        found by indexing, one axis at a time, a zero-stride broadcast of
        i_d * m_d: NumPy does all the index semantics (negative indices,
        bounds, broadcasting of gathers, placement of their axes) and no
        array of the leading axes' full size is ever built."""
        lead = self._shape[:k]
        if k == 0:
            return np.zeros((), np.int64)[items]
        units = None
        for d in range(k):
            mult = math.prod(lead[d + 1 :])
            axis: np.ndarray = np.arange(lead[d], dtype=np.int64) * mult
            axis = axis.reshape([-1 if j == d else 1 for j in range(k)])
            part = np.broadcast_to(axis, lead)[items]
            units = part if units is None else units + part
        return np.asarray(units)


def direct_mmap(
    path: Any, shape: Any, dtype: Any, offset: int = 0, *, cache_bytes: int = DEFAULT_CACHE_BYTES
) -> DirectArray:
    """direct-mmap's constructor, for code switching from that package:
    ``direct_mmap(path, shape, dtype, offset)`` is a :class:`DirectArray`."""
    return DirectArray(path, shape, dtype, offset, cache_bytes=cache_bytes)
