"""milk's file layout (docs/milk.md): the documented field table, the
compiled mirror of IMAGE_METADATA and the bytes of a live file agree; the
section offsets follow milk's sizing rule; hostile files (truncated before
or after open, another version, bad sizes, GPU-located, not a file) are
clear errors, never a signal.
"""

from __future__ import annotations

import os
import re
import struct
from pathlib import Path

import numpy as np
import pytest

import shmstream
from shmstream import _milk, milk

MILK_MD = Path(__file__).resolve().parents[2] / "docs" / "milk.md"
ROW = re.compile(r"^\|\s*(\d+)\s*\|\s*(\d+)\s*\|\s*`([A-Za-z_]\w*)`\s*\|")


def documented() -> dict[str, tuple[int, int]]:
    out = {}
    for line in MILK_MD.read_text(encoding="utf-8").splitlines():
        m = ROW.match(line.strip())
        if m:
            out[m.group(3)] = (int(m.group(1)), int(m.group(2)))
    return out


def test_the_documented_table_is_the_compiled_layout():
    compiled = {k: (int(v[0]), int(v[1])) for k, v in _milk.metadata_fields().items()}
    assert documented() == compiled
    assert _milk.METADATA_BYTES == 384
    end = max(o + s for o, s in compiled.values())
    assert end == 384


def test_the_dtype_table_matches_the_cores_element_sizes():
    for code, dt in milk.CODE_TO_DTYPE.items():
        assert _milk.itemsize(code) == dt.itemsize, code
    assert [c for c in range(256) if _milk.itemsize(c)] == sorted(milk.CODE_TO_DTYPE)


def r8(n: int) -> int:
    return (n + 7) & ~7


def sizing(shape_milk, itemsize, nkw, nsem, cbsize, nproctrace=10) -> dict[str, int]:
    """milk's ImageStreamIO_image_sizing, written again from the header."""
    frame = int(np.prod(shape_milk)) * itemsize
    off, out = r8(384), {}
    for name, n in [
        ("data", frame),
        ("keywords", 128 * nkw),
        ("semaphores", 32 * nsem),
        ("semlog", 32),
        ("semReadPID", 4 * nsem),
        ("semWritePID", 4 * nsem),
        ("semctrl", 4 * nsem),
        ("semstatus", 4 * nsem),
        ("streamproctrace", 64 * nproctrace),
        ("CircBuff_md", 48 * cbsize),
        ("CBimdata", frame * cbsize),
    ]:
        out[name] = off
        off += r8(n)
    out["total"] = off
    return out


@pytest.mark.parametrize(
    ("shape", "dtype", "nkw", "nsem", "cb"),
    [((5,), "u1", 0, 1, 0), ((3, 7), "f4", 16, 10, 0), ((2, 3, 5), "c16", 3, 4, 2)],
)
def test_a_live_file_has_its_fields_at_the_documented_offsets(
    tmp_path, shape, dtype, nkw, nsem, cb
):
    f = documented()
    with milk.create("abi", shape, dtype, dir=str(tmp_path), nkw=nkw, nsem=nsem, cb_size=cb) as s:
        s.write(np.ones(shape, dtype))
        s.write(np.ones(shape, dtype))
        raw = Path(s.path).read_bytes()

        def u(field: str, fmt: str, index: int = 0):
            return struct.unpack_from("<" + fmt, raw, f[field][0] + index * struct.calcsize(fmt))[0]

        want = sizing(shape[::-1], np.dtype(dtype).itemsize, nkw, nsem, cb)
        assert len(raw) == want["total"] == s.layout.total_bytes
        offs = s.layout.offsets
        for k, v in want.items():
            if k != "total":
                assert offs[k] == v, k
        assert raw[:5] == b"2.00\0"
        assert raw[32:36] == b"abi\0"
        assert u("naxis", "B") == len(shape)
        assert [u("size", "I", i) for i in range(len(shape))] == list(shape[::-1])
        assert u("nelement", "Q") == int(np.prod(shape))
        assert u("datatype", "B") == milk.DTYPE_TO_CODE[np.dtype(dtype)]
        assert u("shared", "B") == 1 and u("location", "b") == -1
        assert u("sem", "H") == nsem and u("NBkw", "H") == nkw and u("NBproctrace", "H") == 10
        assert u("cnt0", "Q") == 2 and u("write", "B") == 0
        assert u("CBsize", "I") == cb
        assert u("imdatamemsize", "Q") == np.dtype(dtype).itemsize * int(np.prod(shape))
        assert u("inode", "Q") == os.stat(s.path).st_ino
        assert u("creatorPID", "i") == os.getpid()
        pids = struct.unpack_from(f"<{nsem}i", raw, offs["semWritePID"])
        assert pids == (os.getpid(),) * nsem  # every semaphore was posted
        assert all(raw[offs["keywords"] + 128 * i + 16] == ord("N") for i in range(nkw))
        assert np.array_equal(
            np.frombuffer(raw, dtype, int(np.prod(shape)), offs["data"]),
            np.ones(int(np.prod(shape))),
        )
        s.unlink()


# ---- hostile files ------------------------------------------------------------


def made(tmp_path, name="h", shape=(4, 4)) -> str:
    with milk.create(name, shape, "f4", dir=str(tmp_path)) as s:
        return s.path


def patch(path: str, offset: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(data)


def test_another_version_is_refused_naming_it(tmp_path):
    path = made(tmp_path)
    patch(path, 0, b"1.00\0")
    with pytest.raises(shmstream.LayoutVersionError, match=r"'1\.00'"):
        milk.open("h", dir=str(tmp_path))


@pytest.mark.parametrize(
    ("offset", "data"),
    [
        (112, b"\x04"),  # naxis 4
        (112, b"\x00"),  # naxis 0
        (116, b"\0\0\0\0"),  # an axis of 0
        (128, struct.pack("<Q", 999)),  # nelement disagrees
        (136, b"\x14"),  # datatype 20 (event): milk refuses it too
        (136, b"\x00"),
        (224, b"\x00"),  # shared 0
        (312, struct.pack("<Q", 1)),  # imdatamemsize disagrees
        (258, struct.pack("<H", 60000)),  # more semaphores than the file holds
        (116, struct.pack("<III", 2**31, 2**31, 2**31)),  # sizes that overflow
    ],
)
def test_bad_metadata_is_a_corrupt_stream_error(tmp_path, offset, data):
    path = made(tmp_path)
    patch(path, offset, data)
    with pytest.raises(shmstream.CorruptStreamError):
        milk.open("h", dir=str(tmp_path))


def test_a_gpu_located_stream_is_refused(tmp_path):
    path = made(tmp_path)
    patch(path, 240, b"\x00")
    with pytest.raises(ValueError, match="GPU"):
        milk.open("h", dir=str(tmp_path))


@pytest.mark.parametrize("size", [0, 100, 384, 385, -8])
def test_a_truncated_or_grown_file_is_refused_at_open(tmp_path, size):
    path = made(tmp_path)
    full = os.path.getsize(path)
    os.truncate(path, full + 8 if size < 0 else size)
    with pytest.raises(shmstream.CorruptStreamError):
        milk.open("h", dir=str(tmp_path))


def test_a_file_truncated_after_open_is_an_error_not_a_signal(tmp_path):
    path = made(tmp_path, shape=(64, 64))
    with milk.open("h", dir=str(tmp_path)) as r:
        r.read()
        os.truncate(path, 400)
        with pytest.raises(shmstream.CorruptStreamError):
            r.read()
        with pytest.raises(shmstream.CorruptStreamError):
            r.write(np.zeros((64, 64), np.float32))


def test_what_is_not_a_regular_file_is_refused(tmp_path):
    os.mkfifo(tmp_path / "fifo.im.shm")
    with pytest.raises(shmstream.ShmstreamOSError):
        milk.open("fifo", dir=str(tmp_path))
    os.mkdir(tmp_path / "dir.im.shm")
    with pytest.raises(OSError):
        milk.open("dir", dir=str(tmp_path))


def test_the_parser_on_bytes_agrees_with_open(tmp_path):
    path = made(tmp_path)
    raw = Path(path).read_bytes()
    lay = milk.parse(raw[:384], len(raw))
    assert lay.shape == (4, 4) and lay.dtype == np.float32 and lay.total_bytes == len(raw)
    with pytest.raises(shmstream.CorruptStreamError):
        milk.parse(raw[:200], len(raw))
    with pytest.raises(shmstream.CorruptStreamError):
        milk.parse(raw[:384], len(raw) - 8)
