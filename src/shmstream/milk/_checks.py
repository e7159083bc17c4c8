"""The checks of a milk stream's own arguments and their wording: create's
shape and counts (milk's header holds ``sem`` and ``NBkw`` in 16 bits,
``CBsize`` in 32) and a keyword's name, value and comment (milk's fixed
text fields), so that none reaches the binding as a value it would refuse
with another argument's message or cut short silently."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..common import _checks
from ..errors import ShmstreamTypeError, ShmstreamValueError

#: milk's keyword fields, in bytes (docs/milk.md): name[16], valstr[16] and
#: comment[80], each with its NUL.
KW_NAME_BYTES, KW_STRING_BYTES, KW_COMMENT_BYTES = 15, 15, 79


def check_create(
    shape: Any, nsem: Any, nkw: Any, cb_size: Any, mode: Any
) -> tuple[tuple[int, ...], int, int, int, int]:
    """``create``'s shape (1 to 3 axes), ``nsem``, ``nkw``, ``cb_size`` and
    ``mode``, checked and normalised."""
    shp = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    if not 1 <= len(shp) <= 3 or any(
        isinstance(s, (bool, np.bool_)) or not isinstance(s, (int, np.integer)) or s < 1
        for s in shp
    ):
        raise ShmstreamValueError(f"a milk stream has 1 to 3 axes of at least 1, not {shape!r}")
    if any(s >= 2**32 for s in shp):
        raise ShmstreamValueError(f"a milk axis is below 2**32 elements, not {shape!r}")
    return (
        tuple(int(s) for s in shp),
        _checks.check_int("nsem (milk's reader semaphores)", nsem, minimum=0, maximum=2**16 - 1),
        _checks.check_int("nkw (milk's keyword slots)", nkw, minimum=0, maximum=2**16 - 1),
        _checks.check_int("cb_size (frames of the circular buffer)", cb_size, 0, 2**32 - 1),
        _checks.check_mode(mode),
    )


def check_keyword(name: Any, value: Any, comment: Any) -> str:
    """A keyword's name, value and comment; returns milk's type letter:
    int -> 'L', float -> 'D', str -> 'S'."""
    if not isinstance(name, str) or not name or len(name.encode()) > KW_NAME_BYTES:
        raise ShmstreamValueError(
            f"a milk keyword name is 1 to {KW_NAME_BYTES} bytes, not {name!r}"
        )
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ShmstreamTypeError(f"a keyword value is an int, float or str, not {value!r}")
    if isinstance(value, str) and len(value.encode()) > KW_STRING_BYTES:
        raise ShmstreamValueError(f"a milk keyword string is at most {KW_STRING_BYTES} bytes")
    if not isinstance(comment, str):
        raise ShmstreamTypeError(f"a keyword comment is a str, not {type(comment).__name__}")
    size = len(comment.encode())
    if size > KW_COMMENT_BYTES:
        raise ShmstreamValueError(
            f"a milk keyword comment is at most {KW_COMMENT_BYTES} bytes (milk's field), "
            f"this one is {size}: shorten it"
        )
    return "L" if isinstance(value, int) else "D" if isinstance(value, float) else "S"
