#!/usr/bin/env python3
"""atheris harness: ``shmstream.open`` and every read on a segment whose
bytes are the input (the format of fuzz_open.c: control byte, then the
segment; the checksum, name and file size fix-ups of fuzzlib.segment_input).

    python tests/fuzz/fuzz_py_open.py [libFuzzer flags] CORPUS_DIR...

What a read returns is read at every corner (fuzzlib.touch), so an array
built over memory the header does not own, or a dtype that holds object
pointers, is a crash here rather than later.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import shmstream

import fuzzlib as fl


def _read_all(s: shmstream.SharedMemory, cpu_payload: bool) -> None:
    s.describe()
    s.to_config()
    if not cpu_payload:  # a GPU stream without CPU mirror: reads need a device
        return
    fl.touch(s.read(timeout=0))
    with s.read_view(timeout=0) as pub:
        fl.touch(pub.payload)
    s.read_last_complete(timeout=0)
    if s.history:
        fl.touch(s.read_since(0, timeout=0).frames)
        with s.read_since_view(0, timeout=0) as v:
            for frame in v:
                fl.touch(frame.payload)


def _one(data: bytes) -> None:
    name = fl.fuzz_name("pyopen")
    b, size, ctl = fl.segment_input(data, name)
    fl.write_segment(name, b, size)
    try:
        s = shmstream.open(name, readonly=bool(ctl & fl.READONLY))
        try:
            flags = fl.u32(b, 20)
            _read_all(s, not (flags & 2) or bool(flags & 4))
        finally:
            s.close()
    finally:
        fl.unlink(name)


test_one_input = fl.guarded(_one)

if __name__ == "__main__":
    fl.main(test_one_input)
