#!/usr/bin/env python3
"""atheris harness: the bridge's wire decoders (``shmstream.bridge._wire``),
which read what another host sent: a stream frame's header, a channel batch
(head, records, array descriptions), a channel ack, and an export's
metadata (JSON, checked as a whole).

    python tests/fuzz/fuzz_py_bridge_wire.py [libFuzzer flags] CORPUS_DIR...

Input: one selector byte (mod 5: frame head, batch, ack, stream metadata,
channel metadata), then the sample. A batch is its 24-byte attachment, a
4-byte little-endian largest message size, then the payload. Each decoder
may raise ``BadSample`` and nothing else (not even another ValueError):
the importer counts that in ``bad_samples`` and goes on. What a decoder
accepts must hold its promises: records lie inside the payload and an
array message is exactly its bytes; checked metadata has only known keys
of the right types, and a size a mirror can be made with.
"""

from __future__ import annotations

import math
import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fuzzlib as fl

with fl.instrumented():
    from shmstream.bridge import _wire


def _frame(data: bytes) -> None:
    count, *_ = _wire.unpack_frame_head(data)
    assert 1 <= count <= _wire.MAX_COUNT


def _batch(data: bytes) -> None:
    att, rest = data[: _wire.CHANNEL_HEAD.size], data[_wire.CHANNEL_HEAD.size :]
    (most,) = struct.unpack("<I", rest[:4].ljust(4, b"\0"))
    payload = rest[4:]
    head, records = _wire.decode_batch(att, payload, most)
    assert len(records) == head.records
    total = 0
    for end, _type_id, obj, nbytes, meta_len in records:
        assert nbytes <= most and end >= _wire.record_span(meta_len, nbytes)
        total += nbytes + meta_len + _wire.RECORD_HEAD.size
        if isinstance(obj, np.ndarray):
            assert obj.nbytes == nbytes or obj.dtype.itemsize == 0 or math.prod(obj.shape) == 0
        else:
            assert len(obj) == nbytes
    assert total == len(payload)


def _ack(data: bytes) -> None:
    ack = _wire.unpack_ack(data)
    assert 0 < len(ack.importer) <= 32 and set(ack.importer) <= set("0123456789abcdef")


def _meta(kind: str, data: bytes) -> None:
    meta = _wire.check_meta(_wire.loads(data), "x", kind)
    assert meta["kind"] == kind and isinstance(meta["producer_alive"], bool)
    assert type(meta["nbytes"]) is int and meta["nbytes"] >= 0
    if kind == "channel":
        assert 64 <= meta["capacity"] <= _wire.MAX_CAPACITY
    else:
        assert all(type(d) is int and d >= 0 for d in meta["shape"])
        assert meta["layout"] == _wire.layout_id(meta["shape"], meta["dtype"])


STEPS = (
    _frame,
    _batch,
    _ack,
    lambda d: _meta("stream", d),
    lambda d: _meta("channel", d),
)


def test_one_input(data: bytes) -> None:
    if not data:
        return
    try:
        STEPS[data[0] % len(STEPS)](data[1:])
    except _wire.BadSample:
        pass


if __name__ == "__main__":
    fl.main(test_one_input)
