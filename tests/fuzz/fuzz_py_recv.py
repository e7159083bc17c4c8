#!/usr/bin/env python3
"""atheris harness: a channel consumer's ``recv``/``recv_zero_copy`` on a
ring whose records (array metadata included) and index words are the
input (fuzz_ring.c's format: capacity byte, tail, head - tail, space.want,
space.waiters, mode byte, ring bytes).

    python tests/fuzz/fuzz_py_recv.py [libFuzzer flags] CORPUS_DIR...

Each message is decoded whole (``data``, ``array``, ``np.asarray`` of a
zero-copy message, the DLPack capsule of either); the channel's ``stat`` is
read too.
"""

from __future__ import annotations

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import shmstream

import fuzzlib as fl


def _dlpack(m: object) -> None:
    """The DLPack layout the same header gives (a capsule made, then dropped)."""
    try:
        m.__dlpack__()
    except BufferError:  # no DLPack dtype (structured, strings): said, not read
        pass


def _drain(rx: object, cap: int, mode: int) -> None:
    for i in range(cap // 64 + 1):
        if (mode >> (i & 7)) & 1:
            with rx.recv_zero_copy(timeout=0) as m:
                bytes(m.data)
                _dlpack(m)
                if m.is_array:
                    a = np.asarray(m)
                    assert fl.within(a, m.data), "zero-copy array outside its message"
                    fl.touch(a)
        else:
            m = rx.recv(timeout=0)
            bytes(m.data)
            _dlpack(m)
            if m.is_array:
                fl.touch(m.array)


def _one(data: bytes) -> None:
    name = fl.fuzz_name("pyrecv")
    capb, tail, delta, want, waiters, mode = fl.RING_FIXED.unpack_from(
        data + bytes(max(0, fl.RING_FIXED.size - len(data)))
    )
    cap = 4096 << (capb & 3)
    ring = data[fl.RING_FIXED.size :][:cap]
    tx = shmstream.channel(name, cap)
    try:
        fd = os.open(fl.seg_path(name), os.O_RDWR)
        try:
            os.pwrite(fd, ((tail + delta) & (2**64 - 1)).to_bytes(8, "little"), 2240)
            os.pwrite(fd, tail.to_bytes(8, "little"), 2304)
            os.pwrite(fd, waiters.to_bytes(4, "little") + want.to_bytes(8, "little"), 2500)
            os.pwrite(fd, ring, 4096)
        finally:
            os.close(fd)
        shmstream.stat(name)
        rx = shmstream.open_channel(name)
        try:
            _drain(rx, cap, mode)
        finally:
            rx.close()
    finally:
        tx.close()
        fl.unlink(name)


test_one_input = fl.guarded(_one)

if __name__ == "__main__":
    fl.main(test_one_input)
