"""Shared by the atheris harnesses (tests/fuzz/fuzz_*.py) and make_seeds.py:
the input formats (the same as the C harnesses', so seeds serve both), the
one fuzz-only segment name per process, and the rule for what a harness may
raise. Importable without atheris: the test suite replays the corpora by
calling each harness's ``test_one_input`` on every file.
"""

from __future__ import annotations

import contextlib
import os
import struct
import sys
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any


def instrumented() -> AbstractContextManager[Any]:
    """Around the imports of shmstream modules: atheris instruments them for
    coverage when a harness runs as a fuzzer (its script is the program and
    atheris is installed); a no-op when the test suite replays a corpus.
    Only shmstream is instrumented: numpy and torch would take minutes."""
    if not os.path.basename(sys.argv[0]).startswith("fuzz_py_"):
        return contextlib.nullcontext()
    try:
        import atheris
    except ImportError:
        return contextlib.nullcontext()
    return atheris.instrument_imports(include=["shmstream"])


with instrumented():
    import shmstream
    from shmstream import _native, errors

SHM_DIR = "/dev/shm"
HEADER_BYTES = 4096

# The control byte of a segment input (tests/fuzz/fuzz_common.h).
FIX_CHECKSUM, SET_NAME, EXTEND, READONLY, SET_MAGIC = 1, 2, 4, 8, 16
#: Largest file FZ_EXTEND makes (fuzz_common.h: FZ_MAX_FILE).
MAX_FILE = 4 << 20
MAGIC = 0x314D5254534D4853
KIND_STREAM, KIND_CHANNEL, KIND_ARRAY = 1, 2, 3

#: Fixed-size prefix of a ring input (fuzz_ring.c): capacity byte, tail,
#: head - tail, space.want, space.waiters, mode byte.
RING_FIXED = struct.Struct("<BQQQIB")
#: Fixed-size prefix of a history input (fuzz_history.c).
HISTORY_FIXED = struct.Struct("<BQBQQII")

#: What a harness may let through: the library's documented errors and a
#: ValueError/TypeError (a caller's mistake, or an input refused with a
#: message). Anything else, a crash or a hang, is a finding.
ALLOWED: tuple[type[BaseException], ...] = (
    errors.CorruptStreamError,
    errors.StaleStreamError,
    errors.InconsistentStreamError,
    errors.FrameOverwrittenError,
    errors.ChannelClosedError,
    errors.ChannelBrokenError,
    errors.ChannelBusyError,
    TimeoutError,
    ValueError,
    TypeError,
)


def tag() -> str:
    return os.environ.get("SS_FUZZ_TAG") or "x"


def fuzz_name(harness: str) -> str:
    """``fuzz-<tag>-<harness>-<pid>``, as fuzz_common.h's fz_name."""
    return f"fuzz-{tag()}-{harness}-{os.getpid()}"


def seg_path(name: str) -> str:
    return SHM_DIR + _native.segment_name(name)


def fnv1a64(data: bytes, h: int = 0xCBF29CE484222325) -> int:
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def checksum(header: bytes | bytearray) -> int:
    """The identity checksum: FNV-1a 64 of bytes 8..2039 (magic as zero)."""
    return fnv1a64(bytes(header[8:2040]))


def u32(b: bytes | bytearray, off: int) -> int:
    return int.from_bytes(b[off : off + 4], "little")


def u64(b: bytes | bytearray, off: int) -> int:
    return int.from_bytes(b[off : off + 8], "little")


def claimed_bytes(h: bytes | bytearray) -> int:
    """Bytes the header claims (fuzz_common.h: fz_claimed_bytes)."""
    if u32(h, 12) == KIND_CHANNEL:
        return HEADER_BYTES + u64(h, 32)
    slots = u32(h, 48)
    need = HEADER_BYTES + u64(h, 40) * slots
    if u32(h, 1968):
        need += -(-64 * slots // 4096) * 4096
    return need


def segment_input(data: bytes, name: str) -> tuple[bytearray, int, int]:
    """(bytes, file size, control byte) of a segment input, fixed up as
    fuzz_open.c does."""
    ctl = data[0] if data else 0
    b = bytearray(data[1:])
    if len(b) < HEADER_BYTES:
        b += bytes(HEADER_BYTES - len(b))
    if u64(b, 0) == 0:  # an unfinished creator: open would wait, not parse
        b[0:8] = MAGIC.to_bytes(8, "little")
    if ctl & SET_NAME:
        raw = name.encode()
        b[168:172] = len(raw).to_bytes(4, "little")
        b[176:432] = raw + bytes(256 - len(raw))
    if ctl & SET_MAGIC:
        b[0:8] = MAGIC.to_bytes(8, "little")
    if ctl & FIX_CHECKSUM:
        b[2040:2048] = checksum(b).to_bytes(8, "little")
    size = len(b)
    if ctl & EXTEND:
        need = claimed_bytes(b)
        if size < need <= MAX_FILE:
            size = need
    return b, size, ctl


def write_segment(name: str, b: bytes | bytearray, size: int) -> None:
    fd = os.open(seg_path(name), os.O_CREAT | os.O_TRUNC | os.O_RDWR, 0o600)
    try:
        os.ftruncate(fd, size)
        os.pwrite(fd, bytes(b), 0)
    finally:
        os.close(fd)


def unlink(name: str) -> None:
    try:
        os.unlink(seg_path(name))
    except FileNotFoundError:
        pass


class Reader:
    """Consumes an input from the front (zero past its end): descriptors
    built field by field, without atheris's FuzzedDataProvider."""

    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def take(self, n: int) -> bytes:
        b = self.data[self.pos : self.pos + n]
        self.pos += n
        return b + bytes(n - len(b))

    def u8(self) -> int:
        return self.take(1)[0]

    def int(self, n: int, signed: bool = True) -> int:
        return int.from_bytes(self.take(n), "little", signed=signed)

    def rest(self) -> bytes:
        b = self.data[self.pos :]
        self.pos = len(self.data)
        return b


def touch(a: Any) -> None:
    """Read ``a``'s elements at every corner (its lowest and highest
    addresses are among them): an array reaching past its memory faults
    here, where copying a huge broadcast view whole would only run out of
    memory."""
    import itertools

    import numpy as np

    a = np.asarray(a)
    if a.size:
        for idx in itertools.product(*[(0, n - 1) for n in a.shape]):
            a[idx].tobytes()


def within(a: Any, buf: Any) -> bool:
    """Whether every byte of array ``a`` lies inside buffer ``buf``."""
    import numpy as np
    from numpy.lib.array_utils import byte_bounds

    if np.asarray(a).nbytes == 0:  # no byte to be outside (a 0-size item or dim)
        return True
    lo, hi = byte_bounds(np.asarray(a))
    blo, bhi = byte_bounds(np.frombuffer(buf, dtype=np.uint8))
    return blo <= lo and hi <= bhi


def guarded(fn: Callable[[bytes], Any]) -> Callable[[bytes], None]:
    """``test_one_input``: runs ``fn`` and lets through only ALLOWED."""

    def test_one_input(data: bytes) -> None:
        try:
            fn(data)
        except ALLOWED:
            pass

    test_one_input.__name__ = "test_one_input"
    test_one_input.__doc__ = fn.__doc__
    return test_one_input


def main(test_one_input: Callable[[bytes], None]) -> None:
    """The atheris entry point (tests/fuzz/run.sh runs ``python fuzz_x.py
    corpus... -max_total_time=N``)."""
    import atheris

    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()


__all__ = ["shmstream"]
