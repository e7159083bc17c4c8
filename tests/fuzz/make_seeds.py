"""Write the seed corpora of the fuzz harnesses (tests/fuzz/corpus/<harness>/
seed-*), made with the library itself so they follow the current layout.

    python tests/fuzz/make_seeds.py

Valid segments of every kind and layout (streams of 1, 2 and 8 slots, a
structured dtype, a history stream, a shared array, a channel with records
in its ring, a GPU stream's header), then a few edge cases (truncated, no
slots). Regression inputs (regress-*) are not touched. Each file is at most
a few KiB: the harnesses grow a header to the file it claims (FZ_EXTEND).
"""

from __future__ import annotations

import glob
import os
import pickle
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import shmstream

import fuzzlib as fl

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "corpus")
FIX = fl.FIX_CHECKSUM | fl.SET_NAME | fl.EXTEND


def _write(harness: str, label: str, data: bytes) -> None:
    d = os.path.join(CORPUS, harness)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, f"seed-{label}"), "wb") as f:
        f.write(data)


def _file(name: str) -> bytes:
    with open(fl.seg_path(name), "rb") as f:
        return f.read()


def _strip(b: bytes) -> bytes:
    """Trailing zeros go (the harness reads them back as zero)."""
    return b.rstrip(b"\0") or b"\0"


def _segment_seeds(label: str, b: bytes, full: bool = False) -> None:
    """A whole segment for fuzz_header, fuzz_open and the Python open/stat
    harnesses."""
    head = b[: fl.HEADER_BYTES]
    _write("fuzz_header", label, bytes([0]) + struct.pack("<Q", len(b)) + _strip(head))
    body = _strip(b if full else head)
    for h in ("fuzz_open", "fuzz_py_open", "fuzz_py_stat"):
        _write(h, label, bytes([FIX]) + body)


def _streams(prefix: str) -> None:
    cases = {
        "stream-1slot": dict(shape=(4,), dtype=np.float32, slots=1),
        "stream-2slots": dict(shape=(2, 3), dtype=np.int16),
        "stream-8slots": dict(shape=(8,), dtype=np.uint8, slots=8),
        "stream-record": dict(shape=(2,), dtype=np.dtype([("x", "<f4"), ("y", "<i8", (2,))])),
        "stream-scalar": dict(shape=(), dtype=np.float64),
        "stream-history": dict(shape=(4,), dtype=np.float32, history=2),
    }
    for label, kw in cases.items():
        name = f"{prefix}-{label}"
        with shmstream.stream(name, **kw) as s:
            for i in range(3):
                s.write(np.full(s.shape, i, dtype=s.dtype))
            b = _file(name)
            _segment_seeds(label, b, full=label == "stream-history")
            if label == "stream-history":
                _history_seeds(b)
            if label == "stream-2slots":
                _segment_seeds("edge-truncated", b[:600])
                _segment_seeds("edge-short-file", b[: fl.HEADER_BYTES])
                gpu = _gpu_header(b)
                _segment_seeds("stream-gpu", gpu)
                _segment_seeds("stream-gpu-mirror", _gpu_header(b, mirror=True))


def _gpu_header(b: bytes, mirror: bool = False) -> bytes:
    """A GPU stream's header as ss_gpu_create writes it (no CUDA needed to
    parse one): flags GPU (+ CPU mirror), 2 slots, the GPU area."""
    h = bytearray(b[: fl.HEADER_BYTES])
    payload = fl.u64(h, 32)
    stride = -(-payload // 512) * 512 or 512
    h[20:24] = (2 | (4 if mirror else 0)).to_bytes(4, "little")
    h[40:48] = ((-(-payload // 4096) * 4096) if mirror else 0).to_bytes(8, "little")
    h[48:52] = (2).to_bytes(4, "little")
    area = struct.pack("<Ii16sIIQQi", 1, 0, bytes(range(16)), 2, 0, stride, 2 * stride, 1)
    h[1456 : 1456 + len(area)] = area
    h[2040:2048] = fl.checksum(h).to_bytes(8, "little")
    out = bytes(h)
    if mirror:
        out += bytes(2 * fl.u64(h, 40))
    return out


def _history_seeds(b: bytes) -> None:
    slots = fl.u32(b, 48)
    stride = fl.u64(b, 40)
    records = b[fl.HEADER_BYTES + stride * slots :][: 64 * slots]
    pub = fl.HISTORY_FIXED.pack(
        fl.u32(b, 1968) - 1,
        0,
        0,
        fl.u64(b, 2112),
        fl.u64(b, 2120),
        fl.u32(b, 2160),
        fl.u32(b, 2144),
    )
    _write("fuzz_history", "written", pub + records)
    _write(
        "fuzz_history",
        "after1-max1",
        fl.HISTORY_FIXED.pack(
            fl.u32(b, 1968) - 1, 1, 1, fl.u64(b, 2112), fl.u64(b, 2120), fl.u32(b, 2160), 0
        )
        + records,
    )


def _array(prefix: str) -> None:
    a = shmstream.share(np.arange(12, dtype=np.int32).reshape(3, 4), f"{prefix}-array")
    b = _file(f"{prefix}-array")
    _segment_seeds("array", b)
    d = a[1:, ::2]
    desc = pickle.dumps(d)
    _write("fuzz_py_shared_array", "view", shared_array_input(b, d))
    _write("fuzz_py_shared_array", "whole", shared_array_input(b, a))
    del desc
    a.close()


def shared_array_input(seg: bytes, arr: np.ndarray) -> bytes:
    """fuzz_py_shared_array.py's format: control byte, the descriptor
    (dtype text, shape, strides, offset, flags), then the segment."""
    _, args = arr.__reduce__()
    dtype, shape, strides, offset, writable, rec = args[3:]
    text = dtype.str.encode()
    head = struct.pack("<BBB", 0x7, len(shape), len(text)) + text
    head += b"".join(struct.pack("<qq", n, s) for n, s in zip(shape, strides))
    head += struct.pack("<qB", offset, int(writable) | (2 if rec else 0))
    return head + bytes([FIX]) + _strip(seg[: fl.HEADER_BYTES])


def _channel(prefix: str) -> None:
    name = f"{prefix}-channel"
    tx = shmstream.channel(name, 4096)
    try:
        rx = shmstream.open_channel(name)
        tx.send(b"hello")
        tx.send(np.arange(6, dtype=np.float32).reshape(2, 3), type_id=7)
        tx.send(np.zeros((2,), dtype=[("a", "<i4"), ("b", "S3")]))
        rx.recv(0)  # the tail moves past the first record
        tx.send(b"x" * 100)
        b = _file(name)
        rx.close()
    finally:
        tx.close()
        shmstream.unlink_channel(name)
    _segment_seeds("channel", b, full=True)
    head, tail = fl.u64(b, 2240), fl.u64(b, 2304)
    ring = b[fl.HEADER_BYTES : fl.HEADER_BYTES + 4096]
    for label, mode in (("commit", 0), ("skip", 0x55)):
        fixed = fl.RING_FIXED.pack(0, tail, head - tail, 0, 0, mode)
        for h in ("fuzz_ring", "fuzz_py_recv"):
            _write(h, label, fixed + _strip(ring))
    _write("fuzz_ring", "empty", fl.RING_FIXED.pack(1, 0, 0, 0, 0, 0))


def _channel_dlpack(prefix: str) -> None:
    """A ring with an array message of a dtype NumPy has no name for (its
    DLPack text, bfloat16: 'dlpack:4:16'), then a float32 one."""
    name = f"{prefix}-dlchannel"
    tx = shmstream.channel(name, 4096)
    try:
        text = b"dlpack:4:16"
        tx._ch.send(bytes(range(12)), 5, struct.pack("<IIQQ", 2, len(text), 2, 3) + text, None)
        tx.send(np.arange(4, dtype=np.float32), type_id=6)
        b = _file(name)
    finally:
        tx.close()
        shmstream.unlink_channel(name)
    head, tail = fl.u64(b, 2240), fl.u64(b, 2304)
    ring = b[fl.HEADER_BYTES : fl.HEADER_BYTES + 4096]
    for label, mode in (("dlpack-copied", 0), ("dlpack-in-place", 0xFF)):
        _write(
            "fuzz_py_recv",
            label,
            fl.RING_FIXED.pack(0, tail, head - tail, 0, 0, mode) + _strip(ring),
        )


def _loader() -> None:
    """fuzz_py_loader.py's format: the real descriptor as packed, then with
    each field group replaced by a consistent value."""
    meta = struct.pack("<qBB", 0, 0, 1) + bytes([4]) + bytes([1]) + bytes([0])
    _write("fuzz_py_loader", "as-packed", bytes(40))
    _write("fuzz_py_loader", "fresh", bytes([64]) + bytes(39))
    _write(
        "fuzz_py_loader",
        "one-tensor",
        bytes([16 | 32]) + bytes(32) + bytes([1]) + meta + bytes([1, 0]) + bytes(range(16)),
    )
    _write("fuzz_py_loader", "lost-slot", bytes([4]) + struct.pack("<qqqq", 0, 0, 99, 0))


def _live() -> None:
    """fuzz_live.c's programs: [history bit] then steps [op][offset u16][len]
    [bytes]; op % 8: 0 read, 1 read_new, 2 view, 3 write, 4 history, 5 wait,
    6 last complete, 7 truncate to offset % 8 pages."""
    import random

    from shmstream import _testhooks

    at = {k: v[0] for k, v in _testhooks.layout().items()}

    def step(op: int, offset: int, data: bytes = b"") -> bytes:
        return struct.pack("<BHB", op, offset, len(data)) + data

    every_call = b"".join(step(op, 0) for op in range(7))
    u32, u64 = struct.Struct("<I").pack, struct.Struct("<Q").pack
    seeds = {
        "reads-plain": b"\0" + every_call,
        "reads-history": b"\1" + every_call,
        "grow-payload": b"\0" + step(0, at["payload_bytes"], u64(4096)) + every_call,
        "zero-slots": b"\1" + step(4, at["slot_count"], u32(0)) + every_call,
        "huge-stride": b"\0" + step(2, at["slot_stride"], u64(1 << 40)) + every_call,
        "grow-history": b"\1"
        + step(4, at["slot_count"], u32(60))
        + step(4, at["history"], u32(59))
        + step(4, 0),
        "bad-slot": b"\1" + step(0, at["slot"], u32(0xFFFFFFFF)) + every_call,
        "forged-records": b"\1"
        + step(4, 4096, b"\2" + b"\xff" * 63)
        + step(4, 4096 + 64, b"\2" + b"\xff" * 63),
        "shrink-to-header": b"\0" + step(7, 1) + every_call + step(0, 0),
        "shrink-to-zero": b"\1" + step(7, 0) + every_call + step(3, 0),
    }
    for label, data in seeds.items():
        _write("fuzz_live", label, data)
    rng = random.Random(1)  # the same programs on every run
    offsets = [
        at[k]
        for k in (
            "payload_bytes",
            "slot_stride",
            "slot_count",
            "payload_offset",
            "shape",
            "history",
            "seq",
            "slot",
            "state",
            "count",
        )
    ]
    for i in range(30):
        data = bytes([rng.randrange(2)])
        for _ in range(rng.randrange(1, 12)):
            offset = rng.choice([*offsets, rng.randrange(5000)])
            data += step(rng.randrange(8), offset, rng.randbytes(rng.randrange(9)))
        _write("fuzz_live", f"random-{i:02d}", data)


def _bridge_wire() -> None:
    """fuzz_py_bridge_wire: one valid sample of each kind (selector byte first)."""
    from shmstream.bridge import _wire

    _write("fuzz_py_bridge_wire", "frame", b"\0" + _wire.pack_frame_head(7, 8, 9, 10, 11))
    # Messages as a channel carries them (its array metadata included).
    name = fl.fuzz_name("seeds-wire")
    tx = shmstream.channel(name, 1 << 16)
    rx = shmstream.open_channel(name)
    try:
        for obj in (
            b"hello",
            np.zeros((2, 2), "<f4"),
            np.empty(3, np.dtype([])),
            np.zeros(2, [("a", "<i2"), ("b", "S3")]),
        ):
            tx.send(obj, type_id=len(obj))
        records, end = [], 0
        for m in rx.drain_zero_copy(10, timeout=5):
            end += _wire.record_span(len(m.meta), m.nbytes)
            records.append((end, m.type_id, bytes(m.meta), bytes(m.data)))
            m.release()
    finally:
        tx.close()
        rx.close()
        shmstream.unlink_channel(name)
    payload = bytearray()
    _wire.pack_records(payload, records)
    head = _wire.pack_batch_head(5, end, len(records))
    _write("fuzz_py_bridge_wire", "batch", b"\1" + head + struct.pack("<I", 1 << 20) + payload)
    eof = _wire.pack_batch_head(5, end, 0, _wire.EOF)
    _write("fuzz_py_bridge_wire", "batch-eof", b"\1" + eof + struct.pack("<I", 1 << 20))
    _write("fuzz_py_bridge_wire", "ack", b"\2" + _wire.pack_ack(5, end, "0123456789abcdef", 1))
    stream = {
        "kind": "stream",
        "name": "x",
        "shape": [4, 3],
        "dtype": "[('a', '<i4'), ('b', '|S3')]",
        "notify": False,
        "layout": _wire.layout_id([4, 3], "[('a', '<i4'), ('b', '|S3')]"),
        "generation": 12,
        "producer_alive": True,
        "slots": 2,
    }
    _write("fuzz_py_bridge_wire", "meta-stream", b"\3" + _wire.dumps(stream))
    channel = {
        "kind": "channel",
        "name": "x",
        "capacity": 4096,
        "generation": 12,
        "producer_alive": False,
        "end": 640,
    }
    _write("fuzz_py_bridge_wire", "meta-channel", b"\4" + _wire.dumps(channel))


def main() -> None:
    for f in glob.glob(os.path.join(CORPUS, "*", "seed-*")):
        os.unlink(f)
    prefix = fl.fuzz_name("seeds")
    _streams(prefix)
    _array(prefix)
    _channel(prefix)
    _channel_dlpack(prefix)
    _loader()
    _live()
    _bridge_wire()
    for d in sorted(glob.glob(os.path.join(CORPUS, "*"))):
        files = os.listdir(d)
        print(
            f"{os.path.basename(d)}: {len(files)} files, "
            f"{sum(os.path.getsize(os.path.join(d, f)) for f in files)} bytes"
        )


if __name__ == "__main__":
    main()
