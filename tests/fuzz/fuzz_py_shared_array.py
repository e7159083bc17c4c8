#!/usr/bin/env python3
"""atheris harness: unpickling a ``SharedArray`` from a fuzzed descriptor
over a fuzzed segment.

    python tests/fuzz/fuzz_py_shared_array.py [libFuzzer flags] CORPUS_DIR...

Input: [control byte: bit 0 the descriptor names the segment's real
instance id, bit 1 it carries strides][ndim][dtype text length][dtype
text][ndim x (shape i64, stride i64)][offset i64][flags: bit 0 writable,
bit 1 record array], then a segment input (fuzz_open.c's format). The
descriptor is pickled as ``SharedArray.__reduce__`` makes it and loaded
back; the array must lie inside the segment's payload and is read at
every corner.
"""

from __future__ import annotations

import os
import pickle
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from shmstream import _native
from shmstream.arrays import shared_array

import fuzzlib as fl


class _Descriptor:
    """Pickles as the reduce tuple a SharedArray sends (shared_array._rebuild)."""

    def __init__(self, args: tuple) -> None:
        self.args = args

    def __reduce__(self) -> tuple:
        return (shared_array._rebuild, self.args)


def _dtype(text: bytes) -> np.dtype:
    try:
        return np.dtype(text.decode("ascii"))
    except Exception:  # noqa: BLE001 - not a dtype: the sender's side refuses those
        return np.dtype(np.uint8)


def _one(data: bytes) -> None:
    r = fl.Reader(data)
    ctl, ndim = r.u8(), r.u8() % 10
    dtype = _dtype(r.take(r.u8() % 32))
    dims = [(r.int(8), r.int(8)) for _ in range(ndim)]
    offset, flags = r.int(8), r.u8()
    name = fl.fuzz_name("pyarray")
    b, size, _ = fl.segment_input(r.rest(), name)
    fl.write_segment(name, b, size)
    try:
        instance = bytes(b[144:160]).hex() if ctl & 1 else os.urandom(16).hex()
        shape = tuple(n for n, _ in dims)
        strides = tuple(s for _, s in dims) if ctl & 2 else None
        args = (
            name,
            _native.segment_name(name),
            instance,
            dtype,
            shape,
            strides,
            offset,
            bool(flags & 1),
            bool(flags & 2),
        )
        arr = pickle.loads(pickle.dumps(_Descriptor(args)))
        assert fl.within(arr, arr._shm.ro), "array outside its segment's payload"
        fl.touch(arr)
        del arr
    finally:
        fl.unlink(name)


test_one_input = fl.guarded(_one)

if __name__ == "__main__":
    fl.main(test_one_input)
