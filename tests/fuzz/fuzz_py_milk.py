#!/usr/bin/env python3
"""atheris harness: a milk/CACAO ImageStreamIO stream file whose bytes are
the input, opened with ``shmstream.milk.open`` (the metadata parser of
src/core/milk.c, the size check against the file, the mapping), read, its
keywords listed, its frame viewed in place; ``shmstream.stat("milk:f")``
and ``shmstream list``'s survey of the directory (src/core/milk.c's
``ss_milk_peek``: pread, no mapping); and ``shmstream.milk.parse`` on the
first 384 bytes with the input's length as the file size.

    python tests/fuzz/fuzz_py_milk.py [libFuzzer flags] CORPUS_DIR...

Only the library's documented errors may come out (fuzzlib.ALLOWED).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fuzzlib as fl

with fl.instrumented():
    import shmstream.milk


def _one(data: bytes) -> None:
    try:
        shmstream.milk.parse(data[:384].ljust(384, b"\0"), len(data))
    except fl.ALLOWED:
        pass
    # A directory per input: libFuzzer ends a campaign with _exit, so
    # nothing registered at exit would remove a shared one.
    directory = tempfile.mkdtemp(prefix="fuzz-milk-")
    try:
        with open(os.path.join(directory, "f.im.shm"), "wb") as f:
            f.write(data)
        os.environ["MILK_SHM_DIR"] = directory  # where stat and list look
        try:
            info = shmstream.stat("milk:f")
            assert info["kind"] == "milk" and info["segment"].endswith("f.im.shm")
        except fl.ALLOWED:
            pass
        found, skipped = shmstream.registry.survey(("milk",))  # never raises
        assert len(found) + len(skipped) == 1
        with shmstream.milk.open("f", dir=directory, busy_timeout=0.001) as s:
            frame = s.read()
            assert frame.shape == s.shape and frame.dtype == s.dtype
            assert s.layout.total_bytes == len(data)
            s.keywords  # noqa: B018 - reads every keyword record
            with s.read_view() as pub:
                assert pub.payload.shape == s.shape
    finally:
        shutil.rmtree(directory, ignore_errors=True)


test_one_input = fl.guarded(_one)

if __name__ == "__main__":
    fl.main(test_one_input)
