"""Misuse gets the exception a Python user expects, with a message that says
what to do, and never crashes the process or damages a stream.

Names, shapes, dtypes, write arguments, corrupt segment headers, closed
handles and read-only handles.
"""

from __future__ import annotations

import asyncio
import os

import numpy as np
import pytest

import shmstream

import support
from support import WAIT

# ---- names ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "suffix", ["cam/left", "../../../../etc/x", "a b", "..", "/", "\\", "温度/センサー", "x" * 200]
)
def test_any_non_empty_name_is_valid_and_stays_inside_dev_shm(make_name, suffix):
    stream_name = make_name(suffix)
    h = shmstream.create(stream_name, shape=(2,))
    try:
        h.write([1, 2])
        path = support.segment_path(stream_name)
        assert os.path.dirname(path) == "/dev/shm" and os.path.isfile(path)
        assert "/" not in os.path.basename(path)
        h2 = shmstream.open(stream_name)
        assert h2.name == stream_name
        assert h2.read().tolist() == [1, 2]
        h2.close()
        assert stream_name in shmstream.list_streams()
    finally:
        h.close()


def test_names_that_map_to_the_same_readable_text_are_distinct_streams(make_name):
    base = make_name()
    names = [base + "/x", base + "_x", base + "?x"]
    handles = [shmstream.create(n, shape=(i + 1,)) for i, n in enumerate(names)]
    try:
        for i, n in enumerate(names):
            h = shmstream.open(n)
            assert h.shape == (i + 1,)
            h.close()
    finally:
        for h in handles:
            h.close()
        for n in names:
            shmstream.unlink(n)


def test_a_name_of_255_utf8_bytes_is_accepted(make_name):
    prefix = make_name()
    for filler in ("a", "é"):
        stream_name = prefix + filler * ((255 - len(prefix)) // len(filler.encode()))
        stream_name += "a" * (255 - len(stream_name.encode()))
        assert len(stream_name.encode()) == 255
        h = shmstream.create(stream_name, shape=(1,))
        try:
            assert shmstream.open(stream_name).name == stream_name
            assert stream_name in shmstream.list_streams()
        finally:
            h.close()
            shmstream.unlink(stream_name)


BAD_NAMES = {
    "empty": "",
    "256 ascii bytes": "a" * 256,
    "256 utf-8 bytes": "é" * 128,
    "NUL": "cam\x00left",
    "lone surrogate": "cam\ud800",
}


@pytest.mark.parametrize("bad", list(BAD_NAMES.values()), ids=list(BAD_NAMES))
def test_an_invalid_name_raises_ValueError_everywhere(bad):
    with pytest.raises(ValueError):
        shmstream.create(bad, shape=(1,))
    with pytest.raises(ValueError):
        shmstream.open(bad)
    with pytest.raises(ValueError):
        shmstream.stat(bad)
    with pytest.raises(ValueError):
        shmstream.unlink(bad)


@pytest.mark.parametrize("bad", [b"bytes", 7, None, ["a"]], ids=repr)
def test_a_name_that_is_not_a_str_raises_TypeError(bad):
    with pytest.raises(TypeError):
        shmstream.create(bad, shape=(1,))
    with pytest.raises(TypeError):
        shmstream.open(bad)
    with pytest.raises(TypeError):
        shmstream.unlink(bad)


# ---- shapes and dtypes -----------------------------------------------------------


@pytest.mark.parametrize(
    "shape, error",
    [
        ((-1,), ValueError),
        ((2, -3), ValueError),
        ((1,) * 9, ValueError),  # more dimensions than the header holds
        ((2.5,), TypeError),
        (("3",), TypeError),
        ("33", TypeError),
        (None, TypeError),
        ((True, 2), TypeError),
    ],
    ids=repr,
)
def test_a_bad_shape_is_refused_and_creates_nothing(name, shape, error):
    with pytest.raises(error):
        shmstream.create(name, shape=shape)
    assert not os.path.exists(support.segment_path(name))


def test_a_payload_too_large_for_memory_is_refused_and_leaves_nothing(name):
    with pytest.raises((ValueError, OSError, OverflowError, MemoryError)):
        shmstream.create(name, shape=(2**40, 2**30), dtype=np.float64)
    with pytest.raises((ValueError, OSError, OverflowError, MemoryError)):
        shmstream.create(name, shape=(2**20, 2**20, 2**10), dtype=np.uint8)  # 1 PiB
    assert not os.path.exists(support.segment_path(name))


@pytest.mark.parametrize(
    "dtype",
    [object, np.dtype([("a", "f4"), ("b", object)]), "O"],
    ids=["object", "record with object", "'O'"],
)
def test_object_dtypes_are_refused_with_TypeError(name, dtype):
    with pytest.raises(TypeError, match="object"):
        shmstream.create(name, shape=(2,), dtype=dtype)
    assert not os.path.exists(support.segment_path(name))


@pytest.mark.parametrize("dtype", ["not-a-dtype", "U", "S", 3.5], ids=repr)
def test_dtypes_without_a_fixed_size_or_meaning_are_refused(name, dtype):
    with pytest.raises(TypeError):
        shmstream.create(name, shape=(2,), dtype=dtype)
    assert not os.path.exists(support.segment_path(name))


# ---- write / read arguments -----------------------------------------------------


@pytest.fixture
def shm(name):
    h = shmstream.create(name, shape=(2, 3), dtype=np.float32)
    h.write(np.ones((2, 3), np.float32), frame_id=1)
    yield h
    h.close()


@pytest.mark.parametrize(
    "value",
    [np.zeros((3, 2), np.float32), np.zeros(6, np.float32), np.zeros((2, 3, 1)), [[1, 2, 3]], 5.0],
    ids=["transposed", "flat", "extra axis", "short list", "scalar"],
)
def test_write_of_a_wrong_shape_raises_ValueError_and_changes_nothing(shm, value):
    with pytest.raises(ValueError, match="shape"):
        shm.write(value)
    assert shm.count == 1
    assert np.array_equal(shm.read(), np.ones((2, 3), np.float32))


@pytest.mark.parametrize(
    "value",
    [
        np.full((2, 3), "abc"),
        [["a", "b", "c"]] * 2,
        np.zeros((2, 3), dtype=[("x", "f4"), ("y", "f4")]),
    ],
    ids=["str array", "str lists", "record"],
)
def test_write_of_data_that_does_not_convert_to_the_dtype_raises_and_changes_nothing(shm, value):
    with pytest.raises((ValueError, TypeError)):
        shm.write(value)
    assert shm.count == 1
    assert np.array_equal(shm.read(), np.ones((2, 3), np.float32))


def test_write_converts_other_numeric_dtypes_like_numpy_asarray(shm):
    shm.write(np.arange(6, dtype=np.int64).reshape(2, 3))
    out = shm.read()
    assert out.dtype == np.float32 and out.tolist() == [[0, 1, 2], [3, 4, 5]]


@pytest.mark.parametrize(
    "frame_id, error",
    [(-1, ValueError), (2**64, ValueError), (1.5, TypeError), ("7", TypeError)],
    ids=repr,
)
def test_a_frame_id_outside_uint64_is_refused_and_publishes_nothing(shm, frame_id, error):
    with pytest.raises(error):
        shm.write(np.zeros((2, 3), np.float32), frame_id=frame_id)
    assert shm.count == 1 and shm.frame_id == 1


@pytest.mark.parametrize(
    "out",
    [
        np.empty((3, 2), np.float32),
        np.empty((2, 3), np.float64),
        np.empty((2, 6), np.float32)[:, ::2],
    ],
    ids=["wrong shape", "wrong dtype", "not contiguous"],
)
def test_read_into_an_unfit_out_buffer_raises_ValueError(shm, out):
    with pytest.raises(ValueError):
        shm.read(out=out)


def test_read_into_a_read_only_out_buffer_raises_ValueError(shm):
    out = np.empty((2, 3), np.float32)
    out.flags.writeable = False
    with pytest.raises(ValueError):
        shm.read(out=out)


def test_read_into_something_that_is_not_an_array_raises_TypeError(shm):
    with pytest.raises(TypeError):
        shm.read(out=bytearray(24))


@pytest.mark.parametrize("timeout", [-1, float("nan")], ids=repr)
def test_a_negative_or_nan_timeout_raises_ValueError(shm, timeout):
    with pytest.raises(ValueError):
        shm.read_new(timeout=timeout)
    with pytest.raises(ValueError):
        shm.wait_for_count(after=5, timeout=timeout)


@pytest.mark.parametrize(
    "after,error", [(-1, ValueError), (2**64, ValueError), ("x", TypeError), (None, TypeError)]
)
def test_a_bad_count_for_wait_for_count_and_read_after_is_refused(shm, after, error):
    # a count of the wrong type is a TypeError, as read_since's (issue 37)
    with pytest.raises(error, match="after must be"):
        shm.wait_for_count(after=after, timeout=0)
    with pytest.raises(error, match="after must be"):
        shm.read_after(after, timeout=0)


# ---- corrupt segments -------------------------------------------------------------


def _corrupt(name, how):
    path = support.segment_path(name)
    if how == "magic":
        support.patch_bytes(path, 0, b"NOTSHMS!")
    elif how == "version":
        support.patch_bytes(path, 8, (99).to_bytes(4, "little"))  # unknown (2 is history)
    elif how == "checksum byte":
        offset = support.field("checksum")[0] + 3
        support.patch_bytes(path, offset, bytes([support.read_u(path, offset, 1) ^ 0x40]))
    elif how == "shape byte":  # checksummed identity field
        support.patch_bytes(path, support.field("shape")[0], (9).to_bytes(8, "little"))
    elif how == "truncated payload":
        os.truncate(path, 4096)
    elif how == "truncated header":
        os.truncate(path, 100)
    elif how == "never finished":  # magic 0: a creator that died mid-create
        support.patch_bytes(path, 0, bytes(8))
    else:
        raise AssertionError(how)


CORRUPTIONS = [
    "magic",
    "version",
    "checksum byte",
    "shape byte",
    "truncated payload",
    "truncated header",
    "never finished",
]


@pytest.mark.parametrize("how", CORRUPTIONS)
def test_a_corrupt_header_is_refused_with_CorruptStreamError_and_can_be_unlinked(name, how):
    h = shmstream.create(name, shape=(64, 64), dtype=np.float32)
    h.write(np.ones((64, 64), np.float32))
    h.close()
    _corrupt(name, how)
    with pytest.raises(shmstream.CorruptStreamError) as info:
        shmstream.open(name)
    assert f"shmstream.unlink({name!r})" in str(info.value)  # says what to do
    if how == "version":
        assert "version" in str(info.value)
    if how not in ("truncated header", "never finished"):
        # (those two wait 2 s each for a creator that might still be busy)
        with pytest.raises(shmstream.CorruptStreamError):
            shmstream.open(name, readonly=True)
        assert name not in shmstream.list_streams()  # listing skips it, no crash
    shmstream.unlink(name)
    assert not os.path.exists(support.segment_path(name))
    with pytest.raises(FileNotFoundError):
        shmstream.open(name)


def test_stat_of_a_corrupt_segment_raises_CorruptStreamError_naming_the_stream(name):
    shmstream.create(name, shape=(4,)).close()
    _corrupt(name, "magic")
    with pytest.raises(shmstream.CorruptStreamError) as info:
        shmstream.stat(name)
    # the advice must work: unlink by the user's name, not the segment file's
    assert f"shmstream.unlink({name!r})" in str(info.value)


def test_a_corrupt_segment_does_not_affect_other_streams(make_name):
    good, bad = make_name(), make_name()
    g = shmstream.create(good, shape=(2,))
    g.write([1, 2])
    shmstream.create(bad, shape=(2,)).close()
    _corrupt(bad, "checksum byte")
    try:
        with pytest.raises(shmstream.CorruptStreamError):
            shmstream.open(bad)
        assert shmstream.open(good).read().tolist() == [1, 2]
        assert good in shmstream.list_streams()
    finally:
        g.close()


def test_a_segment_holding_another_name_with_the_same_file_is_refused(make_name):
    a, b = make_name(), make_name()
    shmstream.create(a, shape=(2,)).close()
    # simulate a hash collision: b's segment file holds a's header
    os.rename(support.segment_path(a), support.segment_path(b))
    with pytest.raises(shmstream.CorruptStreamError):
        shmstream.open(b)


# ---- closed handles ---------------------------------------------------------------

CLOSED_OPERATIONS = {
    "read": lambda h: h.read(),
    "read_new": lambda h: h.read_new(timeout=0),
    "read_publication": lambda h: h.read_publication(),
    "read_after": lambda h: h.read_after(0, timeout=0),
    "wait_for_count": lambda h: h.wait_for_count(after=0, timeout=0),
    "write": lambda h: h.write(np.zeros((2, 3), np.float32)),
    "write_locked": lambda h: h.write_locked(np.zeros((2, 3), np.float32)),
    "write_view": lambda h: h.write_view().__enter__(),
    "acquire": lambda h: h.acquire(),
    "release": lambda h: h.release(),
    "clear": lambda h: h.clear(),
    "count": lambda h: h.count,
    "write_time": lambda h: h.write_time,
    "write_sequence": lambda h: h.write_sequence,
    "describe": lambda h: h.describe(),
    "read_new_async": lambda h: asyncio.run(h.read_new_async(timeout=0)),
}


@pytest.mark.parametrize("operation", list(CLOSED_OPERATIONS))
def test_a_closed_handle_refuses_with_closed_shared_memory(shm, operation):
    shm.close()
    with pytest.raises(RuntimeError, match="closed shared memory") as info:
        CLOSED_OPERATIONS[operation](shm)
    assert f"shmstream.open({shm.name!r})" in str(info.value)  # what to do


@pytest.mark.parametrize("method", ["__dlpack__", "__dlpack_device__"])
def test_a_closed_handle_refuses_dlpack(shm, method):
    shm.close()
    with pytest.raises(RuntimeError, match="closed"):
        getattr(shm, method)()


def test_closing_a_handle_leaves_other_handles_working(shm):
    other = shmstream.open(shm.name)
    shm.close()
    assert other.read().tolist() == [[1, 1, 1], [1, 1, 1]]
    other.write(np.zeros((2, 3), np.float32))
    assert other.count == 2
    other.close()


# ---- read-only handles ----------------------------------------------------------------

READONLY_REFUSALS = {
    "write": lambda h: h.write(np.zeros((2, 3), np.float32)),
    "write_locked": lambda h: h.write_locked(np.zeros((2, 3), np.float32)),
    "write_view": lambda h: h.write_view().__enter__(),
    "clear": lambda h: h.clear(),
    "acquire": lambda h: h.acquire(),
    "locked": lambda h: h.locked().__enter__(),
    "read unsafe": lambda h: h.read(safe=False),
    "read_publication unsafe": lambda h: h.read_publication(safe=False),
    "unlink": lambda h: h.unlink(),
}


@pytest.mark.parametrize("operation", list(READONLY_REFUSALS))
def test_a_readonly_handle_refuses_mutation_with_read_only(shm, operation):
    ro = shmstream.open(shm.name, readonly=True)
    try:
        with pytest.raises(PermissionError, match="read-only"):
            READONLY_REFUSALS[operation](ro)
        assert shm.count == 1 and shm.frame_id == 1
        assert np.array_equal(ro.read(timeout=WAIT), np.ones((2, 3), np.float32))
    finally:
        ro.close()
    assert shmstream.open(shm.name).count == 1  # still exists


# ---- from the former surface smoke test --------------------------------------


def test_errors_name_what_to_do_for_names_and_arguments(name):
    with pytest.raises(TypeError):
        shmstream.create(b"x", shape=(1,))
    with pytest.raises(ValueError):
        shmstream.create("", shape=(1,))
    with pytest.raises(ValueError):
        shmstream.create("é" * 200, shape=(1,))
    with pytest.raises(ValueError):
        shmstream.create(name, shape=(-1,))
    with pytest.raises(TypeError):
        shmstream.create(name, shape=(True,))
    with pytest.raises(TypeError):
        shmstream.create(name, shape=(2,), dtype=object)
    with pytest.raises(ValueError, match="size does not match"):
        shmstream.create(name, shape=(2,), size=3)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        shmstream.open(name)
    with pytest.raises(RuntimeError, match="CUDA"):
        shmstream.create(name, shape=(2,), gpu_device="cuda:0")
    s = shmstream.create(name, shape=(2,))
    with pytest.raises(FileExistsError, match=r"use shmstream.open\("):
        shmstream.create(name, shape=(2,))
    assert repr(s) == f"SharedMemory(name={name!r}, shape=(2,), dtype='float32', gpu_device=None)"
    assert name in shmstream.list_streams()
    st = shmstream.stat(name)
    assert st["shape"] == [2] and st["dtype"] == "float32" and st["creator_alive"]
    cfg = s.to_config()
    s.unlink()
    shmstream.unlink(name)  # silent
    s2 = shmstream.SharedMemory.create_from_config(cfg)
    assert s2.dtype == np.float32
    s2.close()
    assert not hasattr(s2, "create") and not hasattr(s2, "open")


# ---- fuzz findings (tests/fuzz/README.md), as named tests ----------------------


def test_a_header_whose_dtype_holds_object_pointers_is_refused(name):
    # Copying the payload into an object array made its bytes pointers:
    # read() crashed the interpreter.
    with shmstream.stream(name, shape=(2,), dtype=np.float64) as h:
        h.write(np.array([1.5, 2.5]))
        path = support.segment_path(name)
        support.patch_identity(path, support.field("dtype")[0], b"|O8\0")
        support.patch_identity(path, support.field("dtype_len")[0], (3).to_bytes(4, "little"))
        with pytest.raises(ValueError, match="object references"):
            shmstream.open(name)


def test_an_unreadable_dtype_description_is_a_ValueError(name):
    with shmstream.stream(name, shape=(2,), dtype=[("x", "<f4")]):
        support.patch_identity(support.segment_path(name), support.field("dtype")[0], b"[('x',\0")
        with pytest.raises(ValueError, match="not one shmstream writes"):
            shmstream.open(name)


@pytest.mark.parametrize(
    "args,kwargs", [((), {}), (("x",), {"shape": (2,)}), ((), {"name": "x", "shape": (2,)})]
)
def test_calling_the_handle_class_says_how_handles_are_made(args, kwargs):
    # pyshmem users try SharedMemory(name=..., shape=...): the error must say
    # what to call instead, not "unexpected keyword argument".
    with pytest.raises(TypeError, match=r"made by shmstream.create\(\) or shmstream.open\(\)"):
        shmstream.SharedMemory(*args, **kwargs)
