"""What the bridge puts on the wire (docs/bridge.md, "What is carried").

Everything is little-endian and versioned by its magic. A sample that fails
any check here is bad input: the receiving bridge counts it and drops it.
Nothing here imports zenoh.

Stream frame: payload = the frame's bytes (C order); attachment =
``STREAM_HEAD``: magic ``SMS1``, count, frame_id, write_time_ns, layout (a
64-bit digest of dtype and shape), generation (the source stream's
instance id, first 8 bytes).

Channel batch: attachment = ``CHANNEL_HEAD``: magic ``SMC1``, generation
(the source channel's instance id, first 8 bytes), end position of the
batch, record count, flags (``EOF``: the source producer closed, nothing follows);
payload = records, each ``RECORD_HEAD`` (end position, type_id, meta length,
payload length) + the ring record's array metadata + the payload. A
record's *end position* is its end in the source ring (byte count since the
channel was made): stable across exporter restarts, so the importer can
drop what it already delivered.

Channel ack (importer -> exporter): ``ACK_HEAD`` (magic ``SMA2``, the
generation the importer follows, delivered end position, flags: ``RESEND``
asks the exporter to send again everything past that position) + the
importing bridge's id (its Zenoh id: up to 32 hex digits).

Export metadata (the ``@meta`` queryable's JSON reply) is checked as a whole
by ``check_meta`` before an importer uses any of it.

Everything here decodes bytes another host sent: each decoder raises
BadSample (a ValueError) for anything it does not accept, and nothing else
for any input (``tests/fuzz/fuzz_py_bridge_wire.py``).
"""

from __future__ import annotations

import hashlib
import json
import math
import struct
from collections.abc import Iterator
from typing import Any, NamedTuple

import numpy as np

from .. import _channel, _native
from ..channels.ends import DLPackDtype, describe
from ..common import _dtypes
from ..errors import CorruptStreamError

STREAM_HEAD = struct.Struct("<4sQQQQQ")
STREAM_MAGIC = b"SMS1"
CHANNEL_HEAD = struct.Struct("<4sQQII")
CHANNEL_MAGIC = b"SMC1"
RECORD_HEAD = struct.Struct("<QIIQ")
ACK_HEAD = struct.Struct("<4sQQI")
ACK_MAGIC = b"SMA2"
EOF = 1
RESEND = 1  # ack flag

#: Counts on the wire are the source's publication counts: 1, 2, 3...; one
#: above this (2**62: 146 years at a billion writes a second) is bad input,
#: so a mirror's own count (source count + offset) can never wrap.
MAX_COUNT = 1 << 62
#: Largest channel ring an export may announce (the mirror is made as large):
#: the core's own limit.
MAX_CAPACITY = _channel.MAX_CAPACITY
_BRIDGE_ID_CHARS = frozenset("0123456789abcdef")

#: Most bytes the exporter packs into one channel sample (a larger message
#: travels alone).
BATCH_BYTES = 1 << 20


class BadSample(ValueError):
    """A sample that does not match what its key should carry."""


def layout_id(shape: Any, dtype_text: str) -> int:
    """64-bit digest of a stream's dtype and shape: a frame whose digest
    differs from its mirror's is refused."""
    text = f"{dtype_text}|{tuple(int(d) for d in shape)}".encode()
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "little")


def generation_id(instance_id: str) -> int:
    """The first 8 bytes of a stream's instance id (32 hex characters)."""
    return int(instance_id[:16], 16)


# ---- streams -----------------------------------------------------------------


def pack_frame_head(
    count: int, frame_id: int, write_time_ns: int, layout: int, generation: int
) -> bytes:
    return STREAM_HEAD.pack(STREAM_MAGIC, count, frame_id, write_time_ns, layout, generation)


def unpack_frame_head(attachment: bytes | None) -> tuple[int, int, int, int, int]:
    """(count, frame_id, write_time_ns, layout, generation) — a plain tuple
    (this runs once per frame)."""
    if attachment is None or len(attachment) != STREAM_HEAD.size:
        raise BadSample(
            f"frame header of {0 if attachment is None else len(attachment)} bytes "
            f"(expected {STREAM_HEAD.size})"
        )
    magic, count, frame_id, write_time_ns, layout, generation = STREAM_HEAD.unpack(attachment)
    if magic != STREAM_MAGIC:
        raise BadSample(f"frame header magic {magic!r} (expected {STREAM_MAGIC!r})")
    if count == 0 or count > MAX_COUNT:
        raise BadSample(f"frame count {count} (counts run from 1 to 2**62)")
    return count, frame_id, write_time_ns, layout, generation


# ---- channels ----------------------------------------------------------------


def record_span(meta_len: int, nbytes: int) -> int:
    """Bytes a message takes in a channel ring (docs/ABI.md, "Records"):
    ``round_up(payload_off + size, 64)`` with ``payload_off`` = 16 without
    metadata, else ``round_up(16 + meta_len, 64)``."""
    payload_off = 16 if meta_len == 0 else -(-(16 + meta_len) // 64) * 64
    return -(-(payload_off + nbytes) // 64) * 64


class BatchHead(NamedTuple):
    generation: int
    end: int
    records: int
    flags: int


def pack_batch_head(generation: int, end: int, records: int, flags: int = 0) -> bytes:
    return CHANNEL_HEAD.pack(CHANNEL_MAGIC, generation, end, records, flags)


def unpack_batch_head(attachment: bytes | None) -> BatchHead:
    if attachment is None or len(attachment) != CHANNEL_HEAD.size:
        raise BadSample(
            f"batch header of {0 if attachment is None else len(attachment)} bytes "
            f"(expected {CHANNEL_HEAD.size})"
        )
    magic, *rest = CHANNEL_HEAD.unpack(attachment)
    if magic != CHANNEL_MAGIC:
        raise BadSample(f"batch header magic {magic!r} (expected {CHANNEL_MAGIC!r})")
    return BatchHead(*rest)


def pack_records(out: bytearray, records: list[tuple[int, int, bytes, Any]]) -> None:
    """Append (end, type_id, meta, payload buffer) records to ``out``."""
    for end, type_id, meta, data in records:
        n = memoryview(data).nbytes
        out += RECORD_HEAD.pack(end, type_id, len(meta), n)
        out += meta
        out += data


class Record(NamedTuple):
    end: int
    type_id: int
    meta: bytes
    data: memoryview


def iter_records(payload: bytes, count: int, max_message: int) -> Iterator[Record]:
    """The records of a batch; BadSample if the bytes do not parse into
    exactly ``count`` records with increasing end positions, each no larger
    than ``max_message`` bytes."""
    view = memoryview(payload)
    off, last = 0, 0
    for _ in range(count):
        if off + RECORD_HEAD.size > len(view):
            raise BadSample("batch ends inside a record header")
        end, type_id, meta_len, n = RECORD_HEAD.unpack_from(view, off)
        off += RECORD_HEAD.size
        if n > max_message or off + meta_len + n > len(view):
            raise BadSample(f"record of {n} bytes does not fit the batch or the ring")
        span = record_span(meta_len, n)
        if end < span or (last and end - last != span):
            raise BadSample("record end positions are not contiguous in the ring")
        meta = bytes(view[off : off + meta_len])
        off += meta_len
        yield Record(end, type_id, meta, view[off : off + n])
        off += n
        last = end
    if off != len(view):
        raise BadSample(f"{len(view) - off} bytes after the last record")


class Ack(NamedTuple):
    generation: int
    delivered: int
    flags: int
    importer: str


def decode_batch(
    attachment: bytes | None, payload: bytes, max_message: int
) -> tuple[BatchHead, list[tuple[int, int, Any, int, int]]]:
    """A channel batch as its head and its records, each ``(end, type_id,
    message, payload bytes, meta bytes)`` with the message ready to send
    (a memoryview, an ndarray for an array message, or the DLPackDtype of
    an array NumPy cannot make); BadSample for
    anything that is not a well-formed batch (nothing else, for any input)."""
    head = unpack_batch_head(attachment)
    out: list[tuple[int, int, Any, int, int]] = []
    for r in iter_records(payload, head.records, max_message):
        if not r.meta:
            out.append((r.end, r.type_id, r.data, len(r.data), 0))
            continue
        try:
            dtype, shape = describe(r.meta)
        except CorruptStreamError as exc:
            raise BadSample(str(exc)) from None
        if len(shape) > _native.MAX_NDIM or frame_bytes(shape, dtype.itemsize) != len(r.data):
            raise BadSample("array message whose size does not match its shape")
        if isinstance(dtype, DLPackDtype):  # bfloat16 & co: the caller drops it alone
            out.append((r.end, r.type_id, dtype, len(r.data), len(r.meta)))
            continue
        try:
            if dtype.itemsize == 0 or math.prod(shape) == 0:
                obj = np.empty(shape, dtype)  # no bytes to view (as channel.recv does)
            else:
                obj = np.frombuffer(r.data, dtype).reshape(shape)
        except ValueError as exc:  # e.g. a zero-size array NumPy finds too big
            raise BadSample(f"array message NumPy refuses: {exc}") from None
        out.append((r.end, r.type_id, obj, len(r.data), len(r.meta)))
    return head, out


def pack_ack(generation: int, delivered: int, bridge_id: str, flags: int = 0) -> bytes:
    return ACK_HEAD.pack(ACK_MAGIC, generation, delivered, flags) + bridge_id.encode()


def unpack_ack(payload: bytes) -> Ack:
    if len(payload) <= ACK_HEAD.size or len(payload) > ACK_HEAD.size + 32:
        raise BadSample(f"ack of {len(payload)} bytes")
    magic, generation, delivered, flags = ACK_HEAD.unpack_from(payload)
    if magic != ACK_MAGIC:
        raise BadSample(f"ack magic {magic!r} (expected {ACK_MAGIC!r})")
    raw = payload[ACK_HEAD.size :]
    if not set(raw.decode("latin-1")) <= _BRIDGE_ID_CHARS:
        raise BadSample("ack from a bridge id that is not a Zenoh id")
    return Ack(generation, delivered, flags, raw.decode("ascii"))


# ---- metadata and status (JSON) ----------------------------------------------


def dumps(obj: dict) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def loads(payload: bytes) -> dict:
    try:
        obj = json.loads(payload)
    except ValueError as exc:
        raise BadSample(f"not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise BadSample("not a JSON object")
    return obj


def frame_bytes(shape: Any, itemsize: int) -> int:
    return math.prod(int(d) for d in shape) * int(itemsize)


def _int(meta: dict, key: str, low: int, high: int) -> int:
    value = meta.get(key)
    if type(value) is not int or not low <= value <= high:
        raise BadSample(f"metadata {key!r} is {value!r}, not an integer in {low}..{high}")
    return value


def check_meta(meta: dict, name: str, kind: str) -> dict[str, Any]:
    """The metadata an exporter announced for ``kind`` ``name``, checked as
    a whole (every key the importer uses, with its type and range), as a new
    dict of those keys only, with ``nbytes``: the bytes its mirror needs
    (payload only; the ring for a channel). BadSample for anything else."""
    if meta.get("kind") != kind:
        raise BadSample(f"metadata says kind {meta.get('kind')!r}, not {kind!r}")
    if meta.get("name") != name:
        raise BadSample("metadata for another name")
    alive = meta.get("producer_alive")
    if not isinstance(alive, bool):
        raise BadSample(f"metadata 'producer_alive' is {alive!r}, not true or false")
    out: dict[str, Any] = {
        "kind": kind,
        "name": name,
        "producer_alive": alive,
        "generation": _int(meta, "generation", 0, (1 << 64) - 1),
    }
    if kind == "channel":
        out["capacity"] = out["nbytes"] = _int(meta, "capacity", 64, MAX_CAPACITY)
        if "end" in meta:
            out["end"] = _int(meta, "end", 0, (1 << 64) - 1)
        return out
    shape = meta.get("shape")
    if not isinstance(shape, list) or len(shape) > _native.MAX_NDIM:
        raise BadSample(
            f"metadata 'shape' is {shape!r}, not a list of at most {_native.MAX_NDIM} sizes"
        )
    for d in shape:
        if type(d) is not int or not 0 <= d <= MAX_CAPACITY:
            raise BadSample(f"metadata 'shape' holds {d!r}, not a size")
    text = meta.get("dtype")
    if not isinstance(text, str) or len(text) > _native.MAX_DTYPE_BYTES:
        raise BadSample("metadata 'dtype' is not a dtype description")
    try:
        dtype = _dtypes.normalize(_dtypes.decode(text))
    except (ValueError, TypeError) as exc:
        raise BadSample(f"metadata 'dtype': {exc}") from None
    notify = meta.get("notify", False)
    if not isinstance(notify, bool):
        raise BadSample(f"metadata 'notify' is {notify!r}, not true or false")
    out.update(shape=shape, dtype=text, notify=notify)
    slots = 1
    if "slots" in meta:
        slots = out["slots"] = _int(meta, "slots", 1, 1 << 16)
    if meta.get("layout") != layout_id(shape, text):
        raise BadSample("metadata 'layout' does not match its shape and dtype")
    out["layout"] = meta["layout"]
    out["nbytes"] = frame_bytes(shape, dtype.itemsize) * slots
    return out
