"""A NumPy ``.npy`` file written a row at a time, readable by ``np.load``
at any moment (:class:`NpyAppender`), and one mapped for reading under the
core's bus-error guard (:class:`MappedNpy`).

The header is written first with room for any row count, then rewritten in
place with the true count whenever the caller syncs (and at close), so a
writer killed mid-way leaves a file that ``np.load`` reads up to its last
sync (rows written after it are ignored: ``np.load`` reads as many as the
header says). Plain NumPy format 1.0 (2.0 for a header over 64 KiB), so no
shmstream is needed to read it.
"""

from __future__ import annotations

import math
import os
from typing import Any, Literal

import numpy as np

from ..errors import ShmstreamValueError

_MAGIC = b"\x93NUMPY"
_ALIGN = 64  # NumPy aligns the data after the header to 64 bytes
#: A row count no recording reaches: the header is sized for its digits.
_MAX_ROWS = 10**19


class NpyAppender:
    """Rows of ``row_shape`` and ``dtype`` appended to a new .npy file."""

    def __init__(
        self, path: str | os.PathLike[str], dtype: np.dtype, row_shape: tuple[int, ...]
    ) -> None:
        self.path = os.fspath(path)
        self.dtype = np.dtype(dtype)
        self.row_shape = tuple(row_shape)
        self.rows = 0  # appended
        self._descr = np.lib.format.dtype_to_descr(self.dtype)
        self._header_size = len(self._header(_MAX_ROWS, 0))
        self._file: Any = open(self.path, "xb")  # noqa: SIM115 - closed by close()
        self._file.write(self._header(0, self._header_size))
        self._file.flush()  # np.load reads an empty array from the start

    def _header(self, rows: int, size: int) -> bytes:
        """The header for ``rows`` rows, padded with spaces to ``size``
        bytes (0: the smallest 64-byte multiple)."""
        text = repr(
            {"descr": self._descr, "fortran_order": False, "shape": (rows, *self.row_shape)}
        ).encode("latin1")
        for version, len_bytes in ((1, 2), (2, 4)):
            fixed = len(_MAGIC) + 2 + len_bytes
            total = size or -(-(fixed + len(text) + 1) // _ALIGN) * _ALIGN
            if total - fixed < 256**len_bytes:
                pad = total - fixed - len(text) - 1
                if pad < 0:  # pragma: no cover - size comes from _MAX_ROWS
                    raise ShmstreamValueError("npy header does not fit its reserved size")
                body = text + b" " * pad + b"\n"
                return _MAGIC + bytes([version, 0]) + len(body).to_bytes(len_bytes, "little") + body
        raise ShmstreamValueError(
            "dtype description too long for a .npy header"
        )  # pragma: no cover

    def append(self, rows: Any) -> None:
        """Append rows (an array of shape ``(n, *row_shape)``, C-contiguous,
        of this dtype)."""
        data = np.ascontiguousarray(rows, dtype=self.dtype)
        if data.shape[1:] != self.row_shape:
            raise ShmstreamValueError(
                f"rows of shape {data.shape[1:]} appended to {self.path}, whose "
                f"rows have shape {self.row_shape}"
            )
        self._file.write(data.data.cast("B") if data.size else b"")
        self.rows += data.shape[0]

    def flush(self) -> None:
        self._file.flush()

    def write_count(self, rows: int) -> None:
        """Rewrite the header with ``rows`` (rows already flushed)."""
        f = self._file
        end = f.tell()
        f.seek(0)
        f.write(self._header(rows, self._header_size))
        f.flush()
        f.seek(end)

    def close(self) -> None:
        if self._file.closed:
            return
        self.flush()
        self.write_count(self.rows)
        self._file.close()


class MappedNpy:
    """A ``.npy`` file opened for reading, its data mapped read-only through
    the core's bus-error guard (``_native.FileMapping``, src/core/guard.c)
    rather than ``np.memmap``: the file is another process's input, and one
    truncated while mapped gives zero pages and the ``lost`` mark here, not
    a SIGBUS that kills the reader. ``array`` is the data (read-only);
    callers that copy out of it check :attr:`lost` after the copy.

    Raises ValueError for a file that is no readable ``.npy`` (no magic, a
    bad header, an object dtype) and :class:`CorruptStreamError` for one
    shorter than its header says."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        from .. import _native
        from ..errors import CorruptStreamError

        self.path = os.fspath(path)
        self._mapping: Any = None
        with open(self.path, "rb") as f:
            if f.read(len(_MAGIC)) != _MAGIC:
                raise ValueError("it does not start with the .npy magic")
            f.seek(0)
            version = np.lib.format.read_magic(f)
            if version == (1, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
            elif version in ((2, 0), (3, 0)):
                shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
            else:
                raise ValueError(f"unknown .npy format version {version}")
            if any(d < 0 for d in shape):
                raise ValueError(f"its header gives a negative shape {shape}")
            if dtype.hasobject:
                raise ValueError("it holds Python objects (an object dtype), not numbers")
            offset = f.tell()
            nbytes = math.prod(shape) * dtype.itemsize
            size = os.fstat(f.fileno()).st_size
            if size < offset + nbytes:
                raise CorruptStreamError(
                    f"{self.path} is shorter ({size} bytes) than its header says "
                    f"({offset + nbytes} bytes for {shape} of {dtype}): it was truncated"
                )
            order: Literal["C", "F"] = "F" if fortran else "C"
            self.array: np.ndarray
            if nbytes == 0:
                self.array = np.empty(shape, dtype, order=order)
            else:
                self._mapping = _native.FileMapping(f.fileno(), offset + nbytes, False)
                self.array = np.ndarray(
                    shape, dtype, buffer=self._mapping.buffer(), offset=offset, order=order
                )

    @property
    def lost(self) -> bool:
        """The file shrank under the mapping: what was read may be zeros."""
        return self._mapping is not None and bool(self._mapping.lost)
