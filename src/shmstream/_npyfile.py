"""A NumPy ``.npy`` file written a row at a time, readable by ``np.load``
at any moment.

The header is written first with room for any row count, then rewritten in
place with the true count whenever the caller syncs (and at close), so a
writer killed mid-way leaves a file that ``np.load`` reads up to its last
sync (rows written after it are ignored: ``np.load`` reads as many as the
header says). Plain NumPy format 1.0 (2.0 for a header over 64 KiB), so no
shmstream is needed to read it.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from .errors import ShmstreamValueError

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
        self.synced = 0  # in the header on disk
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
        self.synced = rows

    def close(self) -> None:
        if self._file.closed:
            return
        self.flush()
        self.write_count(self.rows)
        self._file.close()
