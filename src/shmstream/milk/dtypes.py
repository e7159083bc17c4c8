"""milk's datatype codes (ImageStruct.h ``_DATATYPE_*``) and NumPy's dtypes.

Every code milk's library creates streams with: the integers, half, float,
double and the two complex types (milk's ``complex_float`` is two float32,
re then im: NumPy's complex64). The element sizes come from the C core
(``_milk.itemsize``); tests/milk/test_milk_layout.py checks they agree.
"""

from __future__ import annotations

import numpy as np

from ..errors import ShmstreamValueError

#: milk datatype code -> NumPy dtype (native byte order: milk writes its own).
CODE_TO_DTYPE: dict[int, np.dtype] = {
    1: np.dtype(np.uint8),
    2: np.dtype(np.int8),
    3: np.dtype(np.uint16),
    4: np.dtype(np.int16),
    5: np.dtype(np.uint32),
    6: np.dtype(np.int32),
    7: np.dtype(np.uint64),
    8: np.dtype(np.int64),
    9: np.dtype(np.float32),
    10: np.dtype(np.float64),
    11: np.dtype(np.complex64),
    12: np.dtype(np.complex128),
    13: np.dtype(np.float16),
}

DTYPE_TO_CODE: dict[np.dtype, int] = {dt: code for code, dt in CODE_TO_DTYPE.items()}


def code_of(dtype: object) -> int:
    """The milk datatype code of a NumPy dtype; ValueError for one milk lacks."""
    try:
        dt = np.dtype(dtype)  # type: ignore[call-overload]
    except TypeError as exc:
        raise ShmstreamValueError(f"not a NumPy dtype: {dtype!r}") from exc
    code = DTYPE_TO_CODE.get(dt)  # a byte-swapped dtype is not equal: refused
    if code is None:
        names = ", ".join(str(d) for d in CODE_TO_DTYPE.values())
        raise ShmstreamValueError(f"milk streams have no dtype {dt}; use one of {names}")
    return code


def dtype_of(code: int) -> np.dtype:
    """The NumPy dtype of a milk datatype code (one the parser accepted)."""
    try:
        return CODE_TO_DTYPE[code]
    except KeyError:
        raise ShmstreamValueError(f"unknown milk datatype code {code}") from None
