"""Every fixed-size NumPy dtype round-trips through a stream: the dtype
itself (recovered by open, to_config and stat) and every payload byte, in
this process and in another one.
"""

from __future__ import annotations

import numpy as np
import pytest

import shmstream

SHAPE = (3, 4)

DTYPES = {
    "bool": np.bool_,
    "int8": np.int8,
    "int16": np.int16,
    "int32": np.int32,
    "int64": np.int64,
    "uint8": np.uint8,
    "uint16": np.uint16,
    "uint32": np.uint32,
    "uint64": np.uint64,
    "float16": np.float16,
    "float32": np.float32,
    "float64": np.float64,
    "longdouble": np.longdouble,
    "complex64": np.complex64,
    "complex128": np.complex128,
    "clongdouble": np.clongdouble,
    "datetime64[ns]": "M8[ns]",
    "datetime64[D]": "M8[D]",
    "datetime64": "M8",
    "timedelta64[us]": "m8[us]",
    "timedelta64[s]": "m8[s]",
    "bytes S1": "S1",
    "bytes S16": "S16",
    "unicode U1": "U1",
    "unicode U8": "U8",
    "void V12": "V12",
    "big-endian >i4": ">i4",
    "big-endian >f8": ">f8",
    "big-endian >c16": ">c16",
    "big-endian >M8[ms]": ">M8[ms]",
    "record": [("x", "<f4"), ("y", "<i8")],
    "aligned record": np.dtype([("a", "u1"), ("b", "<f8"), ("c", "<u2")], align=True),
    "record with gaps": np.dtype(
        {"names": ["a", "b"], "formats": ["u1", "<f8"], "offsets": [0, 16], "itemsize": 32}
    ),
    "nested record": [("id", "<u4"), ("pos", [("x", "<f8"), ("y", "<f8")]), ("ok", "?")],
    "subarray field": [("m", "<f4", (3, 3)), ("v", "<i2", (4,))],
    "nested subarray record": [("pts", [("x", "<f4"), ("tag", "S4")], (2,)), ("n", "<u8")],
    "titled field": [(("temperature in K", "t"), "<f8"), ("n", "<i4")],
    "mixed record": [("when", "<M8[us]"), ("label", "U5"), ("raw", "V3"), ("z", ">c8")],
}

IDS = list(DTYPES)


def random_payload(dtype: np.dtype, shape=SHAPE, seed=0) -> np.ndarray:
    """Random bytes viewed as ``dtype`` (NaNs and odd bit patterns included:
    the stream must carry bytes, not values)."""
    rng = np.random.default_rng(seed)
    n = int(np.prod(shape)) * dtype.itemsize
    raw = rng.integers(0, 256, n, dtype=np.uint8)
    if dtype == np.bool_:
        raw &= 1
    return raw.view(dtype).reshape(shape)


def child_read_all(names):
    out = []
    for stream_name in names:
        h = shmstream.open(stream_name)
        payload = h.read()
        out.append((h.dtype, h.shape, payload.tobytes()))
        h.close()
    return out


@pytest.mark.parametrize("dtype", list(DTYPES.values()), ids=IDS)
def test_every_fixed_size_dtype_round_trips_dtype_and_bytes(make_name, dtype):
    dt = np.dtype(dtype)
    stream_name = make_name()
    data = random_payload(dt)
    h = shmstream.create(stream_name, shape=SHAPE, dtype=dt)
    try:
        assert h.dtype == dt and h.size == data.nbytes
        h.write(data)
        reader = shmstream.open(stream_name)
        assert reader.dtype == dt
        assert reader.dtype.descr == dt.descr  # names, offsets, order, titles
        assert reader.shape == SHAPE
        got = reader.read()
        assert got.dtype == dt and got.tobytes() == data.tobytes()
        assert reader.read_publication().payload.tobytes() == data.tobytes()
        reader.close()
    finally:
        h.close()


@pytest.mark.parametrize("dtype", list(DTYPES.values()), ids=IDS)
def test_the_dtype_text_of_to_config_and_stat_recreates_the_same_dtype(make_name, dtype):
    dt = np.dtype(dtype)
    source = make_name()
    h = shmstream.create(source, shape=SHAPE, dtype=dt)
    try:
        cfg = h.to_config()
        assert isinstance(cfg["dtype"], str)
        cfg["name"] = make_name()
        copy = shmstream.SharedMemory.create_from_config(cfg)
        assert copy.dtype == dt
        copy.close()
        text = shmstream.stat(source)["dtype"]
        assert isinstance(text, str)
        again = shmstream.create(make_name(), shape=SHAPE, dtype=text)
        assert again.dtype == dt
        again.close()
    finally:
        h.close()


@pytest.mark.parametrize(
    "dtype, text",
    [
        (np.float32, "float32"),
        (np.float64, "float64"),
        (np.int8, "int8"),
        (np.uint64, "uint64"),
        (np.bool_, "bool"),
        (np.complex64, "complex64"),
        (np.float16, "float16"),
    ],
    ids=str,
)
def test_stat_and_to_config_name_simple_dtypes_like_pyshmem(name, dtype, text):
    h = shmstream.create(name, shape=(2,), dtype=dtype)
    try:
        assert h.to_config()["dtype"] == text
        assert shmstream.stat(name)["dtype"] == text
    finally:
        h.close()


def test_every_dtype_round_trips_to_another_process(make_name, spawn):
    names, expected, handles = [], [], []
    for i, dtype in enumerate(DTYPES.values()):
        dt = np.dtype(dtype)
        data = random_payload(dt, seed=i)
        h = shmstream.create(make_name(), shape=SHAPE, dtype=dt)
        h.write(data)
        handles.append(h)
        names.append(h.name)
        expected.append((dt, data.tobytes()))
    try:
        got = spawn(child_read_all, names).result()
        for (dt, raw), (got_dt, got_shape, got_raw), label in zip(expected, got, IDS):
            assert got_dt == dt, label
            assert got_shape == SHAPE, label
            assert got_raw == raw, label
    finally:
        for h in handles:
            h.close()


@pytest.mark.parametrize(
    "shape", [(1,), (7,), (2, 3, 4), (1, 1, 1, 1, 1, 1, 1, 2), (1000, 3)], ids=str
)
def test_shapes_from_one_to_eight_dimensions_round_trip(name, shape):
    data = np.arange(int(np.prod(shape)), dtype=np.int32).reshape(shape)
    h = shmstream.create(name, shape=shape, dtype=np.int32)
    try:
        h.write(data)
        reader = shmstream.open(name)
        assert reader.shape == shape
        assert np.array_equal(reader.read(), data)
        reader.close()
    finally:
        h.close()


def test_a_subarray_dtype_extends_the_shape_like_numpy(name):
    dt = np.dtype(("<f4", (2,)))
    like_numpy = np.zeros((3,), dtype=dt)
    h = shmstream.create(name, shape=(3,), dtype=dt)
    try:
        assert h.shape == like_numpy.shape == (3, 2)
        assert h.dtype == like_numpy.dtype == np.float32
    finally:
        h.close()


def test_float_nan_and_infinity_bit_patterns_survive(name):
    data = np.array([np.nan, -np.nan, np.inf, -np.inf, -0.0, 5e-324], np.float64)
    data[1] = np.frombuffer(b"\x01\x00\x00\x00\x00\x00\xf8\x7f", np.float64)[0]  # payload NaN
    h = shmstream.create(name, shape=data.shape, dtype=np.float64)
    try:
        h.write(data)
        assert h.read().tobytes() == data.tobytes()
    finally:
        h.close()


# ---- from the former surface smoke test --------------------------------------


def test_structured_and_zero_size_streams_round_trip(name):
    dt = np.dtype([("a", "<f4"), ("b", "S3"), ("c", "<i8", (2,))])
    s = shmstream.create(name, shape=(4,), dtype=dt)
    x = np.zeros(4, dt)
    x["a"] = [1, 2, 3, 4]
    s.write(x)
    r = shmstream.open(name)
    assert r.dtype == dt and (r.read() == x).all()
    s2 = shmstream.SharedMemory.create_from_config({**s.to_config(), "name": name + "2"})
    assert s2.dtype == dt
    s2.unlink()
    r.close()
    s.unlink()
    z = shmstream.create(name, shape=(0, 3))
    z.write(np.zeros((0, 3)))
    assert z.read().shape == (0, 3)
    z.close()
