#!/usr/bin/env python3
"""atheris harness: ``shmstream.stat`` (and the CLI's ``readable`` form)
and the registry listing (``registry.entry``, what ``list_streams``,
``list_channels`` and ``purge`` read) over a segment whose bytes are the
input (fuzz_open.c's format).

    python tests/fuzz/fuzz_py_stat.py [libFuzzer flags] CORPUS_DIR...

The listing must never raise: a corrupt segment is an entry of kind
"corrupt", so one bad file cannot hide every other from ``shmstream list``.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from shmstream import _native, registry

import fuzzlib as fl


def _one(data: bytes) -> None:
    name = fl.fuzz_name("pystat")
    b, size, _ = fl.segment_input(data, name)
    fl.write_segment(name, b, size)
    try:
        e = registry.entry(_native.segment_name(name))  # may not raise
        assert (
            e is None
            or e.kind in (*registry.KINDS, "corrupt", "unfinished")
            or e.kind.startswith("kind ")
        ), e
        try:
            info = registry.stat(name)
        except FileNotFoundError:
            # The header names another object: stat's rule for two names
            # that hash alike (the segment is not this name's).
            return
        registry.readable(info)
    finally:
        fl.unlink(name)


test_one_input = fl.guarded(_one)

if __name__ == "__main__":
    fl.main(test_one_input)
