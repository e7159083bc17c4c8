"""What travels in a channel record: the ``Message`` types, the array
metadata of a record (docs/ABI.md: u32 ndim, u32 dtype_len, u64 shape[ndim],
dtype text; the core encodes and parses it) and what it describes, DLPack
dtypes, and the zero-copy loan and batch objects that the two ends
(``ends.py``) hand out.
"""

from __future__ import annotations

import math
from typing import Any, Literal, NamedTuple

import numpy as np

from .. import _channel
from ..common import _checks, _dtypes
from ..errors import (
    CorruptStreamError,
    ShmstreamTypeError,
    ShmstreamValueError,
)

__all__ = ["Message", "ZeroCopyMessage", "DLPackDtype", "describe"]

Message = _channel.Message
ZeroCopyMessage = _channel.ZeroCopyMessage

_CACHE_LIMIT = 1024
_meta_cache: dict = {}  # (dtype, shape) -> record metadata bytes
_desc_cache: dict = {}  # record metadata bytes -> (dtype, shape)


# ---- array metadata (docs/ABI.md: u32 ndim, u32 dtype_len, u64 shape[ndim], dtype text)


class DLPackDtype(NamedTuple):
    """The element type of an array message whose dtype NumPy has no name
    for (bfloat16, the float8 kinds): its DLPack type code and bits, one
    lane. :func:`describe` gives one; ``torch.from_dlpack(msg)`` reads such
    a message (copied or zero-copy) and ``msg.data`` has its bytes."""

    code: int
    bits: int

    @property
    def itemsize(self) -> int:
        return self.bits // 8

    @property
    def name(self) -> str:
        known = _DLPACK_NAMES.get((self.code, self.bits))
        return known or f"DLPack dtype (code {self.code}, {self.bits} bits)"


#: DLPack (code, bits) -> the name frameworks give it, for messages.
_DLPACK_NAMES = {(4, 16): "bfloat16"}


def _meta_of(text: str, shape: tuple) -> bytes:
    _checks.check_ndim(shape)
    meta = _channel.encode_meta(text, tuple(shape))  # the core's encoder
    if meta is None:
        raise ShmstreamValueError(f"dtype {text} is too complex to describe in a message header")
    return meta


def array_meta(dtype: np.dtype, shape: tuple) -> bytes:
    key = (dtype, shape)
    meta = _meta_cache.get(key)
    if meta is None:
        meta = _meta_of(_dtypes.encode(_dtypes.normalize(dtype)), shape)
        if len(_meta_cache) < _CACHE_LIMIT:
            _meta_cache[key] = meta
    return meta


def _dtype_of_text(text: str) -> np.dtype | DLPackDtype:
    dl = _channel.dlpack_dtype(text) if text.startswith(_channel.DLPACK_TEXT_PREFIX) else None
    if dl is not None:
        return DLPackDtype(*dl)
    return _dtypes.decode(text)


def describe(meta: bytes) -> tuple[np.dtype | DLPackDtype, tuple[int, ...]]:
    """The (dtype, shape) that an array message's ``meta`` header describes
    (``ZeroCopyMessage.meta``, a received record's meta): a NumPy dtype, or
    a :class:`DLPackDtype` for one NumPy has no name for (bfloat16). The
    header was written by another process: an unreadable one raises
    CorruptStreamError."""
    desc = _desc_cache.get(meta)
    if desc is None:
        parsed = _channel.parse_meta(bytes(meta))  # the core's parser: counts checked
        if parsed is None:
            raise CorruptStreamError(
                "message carries an unreadable array description: its dimensions or text "
                "do not fit in it"
            )
        text, shape = parsed
        try:
            dtype = _dtype_of_text(text.decode())
        except Exception as exc:  # noqa: BLE001 - written by another process: untrusted
            raise CorruptStreamError(
                f"message carries an unreadable array description: {exc}"
            ) from None
        desc = (dtype, shape)
        if len(_desc_cache) < _CACHE_LIMIT:
            _desc_cache[bytes(meta)] = desc
    return desc


def _decode(meta: bytes, data: Any) -> np.ndarray:
    dtype, shape = describe(meta)
    if isinstance(dtype, DLPackDtype):
        raise ShmstreamTypeError(
            f"this message holds {dtype.name}, which NumPy has no dtype for: read it with "
            "torch.from_dlpack(msg) (a received or a zero-copy message), or take its raw "
            "bytes from msg.data"
        )
    if dtype.itemsize == 0 or math.prod(shape) == 0:
        return np.empty(shape, dtype)
    return np.frombuffer(data, dtype=dtype).reshape(shape)


_channel.set_decoder(_decode)


class ZeroCopyBatch(list):
    """Messages from ``drain_zero_copy``; released when the block ends."""

    def __enter__(self) -> ZeroCopyBatch:
        return self

    def __exit__(self, *exc: Any) -> Literal[False]:
        _channel.release_all(self)  # one native call for the batch
        self.clear()
        return False


class Loan:
    """``with tx.send_zero_copy(...) as buf``: commit on exit, roll back on error."""

    __slots__ = ("_ch", "_nbytes", "_meta", "_type_id", "_timeout", "_dtype", "_shape", "_view")

    def __init__(self, ch, nbytes, meta, type_id, timeout, dtype, shape):
        self._ch, self._nbytes, self._meta = ch, nbytes, meta
        self._type_id, self._timeout = type_id, timeout
        self._dtype, self._shape, self._view = dtype, shape, None

    def __enter__(self) -> Any:
        raw = self._ch.loan(self._nbytes, self._meta, self._timeout)
        if self._dtype is None:
            self._view = raw
        elif self._dtype.itemsize == 0 or self._nbytes == 0:
            self._view = np.empty(self._shape, self._dtype)
        else:
            self._view = np.frombuffer(raw, dtype=self._dtype).reshape(self._shape)
        return self._view

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> Literal[False]:
        view, self._view = self._view, None
        if isinstance(view, memoryview):
            try:
                view.release()
            except BufferError:
                pass  # the caller made views of it; they must not outlive the block
        if exc_type is None:
            self._ch.commit(self._nbytes, self._type_id, self._meta is not None)
        else:
            self._ch.rollback()
        return False


def dlpack_payload(obj: Any) -> tuple[Any, bytes | None] | None:
    """What send() sends for a DLPack tensor: (an ndarray, None) when NumPy
    has its dtype, else (its bytes, their array header). The dtype is read
    from the tensor's own DLPack description (bfloat16 needs no NumPy).
    None: obj is no DLPack tensor."""
    if not hasattr(obj, "__dlpack__") or isinstance(obj, (bytes, bytearray, memoryview)):
        return None
    try:
        text, shape, data = _channel.dlpack_import(obj)
    except TypeError:  # nanobind could not import it: not a DLPack tensor it knows
        return None
    if not text.startswith(_channel.DLPACK_TEXT_PREFIX):
        if data is None:  # strided: NumPy's view of it, made contiguous by send
            return np.from_dlpack(obj), None
        return np.frombuffer(data, np.dtype(text)).reshape(shape), None
    if data is None:
        name = _dtype_of_text(text).name  # type: ignore[union-attr]
        raise ShmstreamValueError(
            f"a {name} tensor is sent from C-contiguous memory: call .contiguous() first"
        )
    return data, _meta_of(text, tuple(shape))
