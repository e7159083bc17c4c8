"""dtype <-> the text stored in a segment header.

Simple dtypes are stored as ``dtype.str`` (``'<f4'``); structured ones as the
``repr`` of NumPy's array-protocol description, which round-trips nested
records, sub-arrays, titles and datetime fields exactly.
"""

from __future__ import annotations

import ast
import warnings
from typing import Any

import numpy as np

from .. import _native
from ..errors import ShmstreamTypeError, ShmstreamValueError


def normalize(dtype: Any) -> np.dtype:
    """The np.dtype for ``dtype``, refusing what cannot live in shared memory."""
    try:
        dt = np.dtype(dtype)
    except TypeError as exc:
        raise ShmstreamTypeError(f"dtype {dtype!r} is not understood by NumPy: {exc}") from None
    if dt.hasobject:
        raise ShmstreamTypeError(
            f"dtype {dt} holds Python object references, which are pointers into one "
            "process's heap and mean nothing in another process; store fixed-size data "
            "instead (e.g. fixed-width strings 'U16'/'S16', or numeric codes)"
        )
    if dt.itemsize == 0 and dt.names is None and dt.kind in "USV":
        raise ShmstreamTypeError(
            f"dtype {dt} has no size; give strings a width, e.g. 'U16' or 'S16'"
        )
    return dt


def encode(dt: np.dtype) -> str:
    """Header text for a normalized dtype."""
    if dt.names is None and dt.subdtype is None and not dt.metadata:
        text = dt.str
    else:
        text = repr(np.lib.format.dtype_to_descr(dt))
    if len(text.encode()) > _native.MAX_DTYPE_BYTES:
        raise ShmstreamValueError(
            f"dtype {dt} is too complex to describe in a stream header "
            f"(more than {_native.MAX_DTYPE_BYTES} bytes of description)"
        )
    return text


def decode(text: str) -> np.dtype:
    """np.dtype from header text written by ``encode``. The text comes from
    another process (a segment header, a message): anything ``encode``
    cannot have written is a ValueError, and so is a dtype holding object
    references, which would make copied bytes into pointers (a fuzz finding:
    a header saying ``|O8`` crashed ``read()``)."""
    try:
        # encode never writes a deprecated alias ('a8'): one is foreign text,
        # refused here rather than warned about in every reader.
        with warnings.catch_warnings():
            warnings.simplefilter("error", DeprecationWarning)
            if text.startswith("[") or text.startswith("("):
                dt = np.lib.format.descr_to_dtype(ast.literal_eval(text))
            else:
                dt = np.dtype(text)
    except Exception as exc:  # noqa: BLE001 - SyntaxError, RecursionError, ...: all mean unreadable
        raise ShmstreamValueError(
            f"dtype description {text[:80]!r} is not one shmstream writes "
            f"({type(exc).__name__}: {exc}); the segment or message is corrupt or foreign"
        ) from None
    if dt.hasobject:
        raise ShmstreamValueError(
            f"dtype description {text[:80]!r} holds Python object references, which "
            "shmstream never stores; the segment or message is corrupt or foreign"
        )
    if dt.itemsize == 0 and dt.names is None and dt.kind in "USV":
        # normalize refuses these, so encode never wrote one; NumPy would
        # make 'S' into 'S1' and allocate one byte per item of a claimed
        # shape (a fuzz finding: 2**61 items through the bridge).
        raise ShmstreamValueError(
            f"dtype description {text[:80]!r} is a string or void type of no size, which "
            "shmstream never stores; the segment or message is corrupt or foreign"
        )
    return dt


def of_segment(segment: Any) -> np.dtype:
    """The dtype a segment header describes, checked against the header's
    itemsize: a description that contradicts it (a foreign or rewritten
    header) would make every read fail later, so it fails here, once."""
    dt = decode(segment.dtype)
    if dt.itemsize != int(segment.itemsize):
        raise ShmstreamValueError(
            f"the header of {segment.name!r} describes dtype {str(dt)!r} ({dt.itemsize} bytes) "
            f"but an itemsize of {int(segment.itemsize)} bytes; the segment is corrupt or "
            f"foreign: remove it with shmstream.unlink({segment.name!r}) and create it again"
        )
    return dt


def plain_name(dt: np.dtype) -> str:
    """pyshmem-style dtype string for humans and configs: 'float32', or the
    description text for structured dtypes."""
    if dt.names is None and dt.subdtype is None:
        return dt.name if dt.kind not in "USMm" else dt.str
    return encode(dt)


def config_text(dt: np.dtype) -> str:
    """pyshmem-style dtype text ('float32') that gives ``dt`` back through
    ``create(dtype=...)``; the exact description where the short name would
    lose something (byte order, structure)."""
    text = plain_name(dt)
    try:
        back = decode(text) if text[:1] in "[(" else np.dtype(text)
        if normalize(back) == dt:
            return text
    except (TypeError, ValueError, SyntaxError):
        pass
    return encode(dt) if dt.names is not None else dt.str
