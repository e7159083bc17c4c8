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

Channel ack (importer -> exporter): ``ACK_HEAD`` (magic ``SMA1``, delivered
end position) + the importing bridge's id in UTF-8.
"""

from __future__ import annotations

import hashlib
import json
import math
import struct
from collections.abc import Iterator
from typing import Any, NamedTuple

from .. import _native

STREAM_HEAD = struct.Struct("<4sQQQQQ")
STREAM_MAGIC = b"SMS1"
CHANNEL_HEAD = struct.Struct("<4sQQII")
CHANNEL_MAGIC = b"SMC1"
RECORD_HEAD = struct.Struct("<QIIQ")
ACK_HEAD = struct.Struct("<4sQ")
ACK_MAGIC = b"SMA1"
EOF = 1

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
    if count == 0:
        raise BadSample("frame count 0 (counts start at 1)")
    if count > _native.MAX_COUNT:
        raise BadSample(f"frame count {count} above 2**63 - 1 (no stream counts that far)")
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


def pack_ack(delivered: int, bridge_id: str) -> bytes:
    return ACK_HEAD.pack(ACK_MAGIC, delivered) + bridge_id.encode()


def unpack_ack(payload: bytes) -> tuple[int, str]:
    if len(payload) <= ACK_HEAD.size:
        raise BadSample("ack too short")
    magic, delivered = ACK_HEAD.unpack_from(payload)
    if magic != ACK_MAGIC:
        raise BadSample(f"ack magic {magic!r}")
    return delivered, payload[ACK_HEAD.size :].decode()


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
