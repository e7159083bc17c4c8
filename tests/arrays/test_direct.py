"""DirectArray reads what np.memmap reads, cold or cached, from any index."""

import os
import subprocess
import sys
import threading
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import shmstream
from shmstream import DirectArray, _direct, direct_mmap
from shmstream.arrays import direct

# One dtype per itemsize 1..16 (V/S for the odd ones), plus a structured one.
DTYPES = [
    np.dtype(t)
    for t in (
        "u1",
        "<i2",
        "V3",
        "<f4",
        "S5",
        "V6",
        "V7",
        "<u8",
        "V9",
        "S10",
        "V11",
        "V12",
        "V13",
        "V14",
        "V15",
        "<c16",
    )
] + [np.dtype([("a", "<u2"), ("b", "<f8"), ("c", "S3")])]

DEV_SHM = "/dev/shm"


def make_file(path, shape, dtype, offset, seed=0, tail=0):
    """Random array bytes after `offset` junk bytes; flushed to disk so the
    page cache can drop it."""
    rng = np.random.default_rng(seed)
    nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
    with open(path, "wb") as f:
        f.write(rng.integers(0, 256, offset + nbytes + tail, dtype=np.uint8).tobytes())
        f.flush()
        os.fsync(f.fileno())
    return path


def reference(path, shape, dtype, offset, key):
    m = np.memmap(path, mode="r", shape=shape, dtype=dtype, offset=offset)
    try:
        return np.array(m[key])
    finally:
        del m


def evict(path):
    _direct.evict(path)


def cache_pages(path, pages):
    """Brings the given 4 KiB pages of the file into the page cache."""
    fd = os.open(path, os.O_RDONLY)
    try:
        for p in pages:
            os.pread(fd, 4096, int(p) * 4096)
    finally:
        os.close(fd)


def assert_same(got, want):
    assert type(got) is type(want) or (np.ndim(got) == 0 and np.ndim(want) == 0)
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape
    assert got.dtype == want.dtype
    assert got.tobytes() == want.tobytes()


def open_fds():
    return len(os.listdir("/proc/self/fd"))


@pytest.fixture
def arr2d(tmp_path):
    shape, dtype, offset = (5000, 7), np.dtype("<u8"), 123  # 56-byte rows straddle blocks
    path = make_file(str(tmp_path / "a.bin"), shape, dtype, offset)
    return path, shape, dtype, offset


# ---- equality with np.memmap -------------------------------------------------

KEYS = [
    0,
    4999,
    -1,
    -5000,
    np.int64(17),
    slice(None),
    slice(10, 20),
    slice(None, None, 7),
    slice(4000, 10, -13),
    slice(None, None, -1),
    slice(-3, None),
    slice(20, 10),
    (3, 4),
    (-2, -7),
    (slice(100, 200, 3), 5),
    (slice(None, None, 999), slice(1, 5)),
    (Ellipsis, 3),
    (Ellipsis,),
    (1, Ellipsis),
    Ellipsis,
    (),
    [1, 4999, 1, 2, 3],
    [],
    np.array([[4, 5], [9, 0]]),
    ([3, 1], [0, 6]),
    (slice(5, 9), [1, 2]),
    ([7, 8, 9], slice(2, 5)),
    (None, 3),
    (3, None),
    np.arange(5000) % 3 == 0,
    (np.array([True] * 7 + [False] * 4993),),
]


@pytest.mark.parametrize("cold", [True, False], ids=["cold", "cached"])
@pytest.mark.parametrize("key", KEYS, ids=repr)
def test_every_index_kind_matches_memmap(arr2d, key, cold):
    path, shape, dtype, offset = arr2d
    want = reference(path, shape, dtype, offset, key)
    if cold:
        evict(path)
    with DirectArray(path, shape, dtype, offset) as a:
        assert_same(a[key], want)


def test_scalar_reads_return_numpy_scalars(arr2d):
    path, shape, dtype, offset = arr2d
    with DirectArray(path, shape, dtype, offset) as a:
        assert isinstance(a[3, 4], np.uint64)
        assert isinstance(a[3], np.ndarray) and a[3].shape == (7,)


def test_a_key_with_an_ellipsis_gives_a_0d_array_as_numpy_does(tmp_path):
    # Found by the property test: a[..., 0, 0] was a scalar, and a bytes
    # scalar drops its trailing NULs (S10 came back as S9).
    path = str(tmp_path / "s.bin")
    np.array([[b"\x14\xc9\xa0\xbcl\xcc\xb3\xde\xe1\x00"]], "S10").tofile(path)
    want = np.memmap(path, "S10", "r", shape=(1, 1))
    with DirectArray(path, (1, 1), "S10", 0) as a:
        got = a[..., 0, 0]
        assert isinstance(got, np.ndarray) and got.ndim == 0 and got.dtype == np.dtype("S10")
        assert got == want[..., 0, 0]
        assert isinstance(a[0, 0], np.bytes_)  # no ellipsis: a scalar, as NumPy's


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("offset", [0, 1, 511, 4095, 4097])
def test_itemsizes_and_misaligned_offsets(tmp_path, dtype, offset):
    shape = (3001, 3)
    path = make_file(str(tmp_path / "d.bin"), shape, dtype, offset, seed=offset)
    keys = [slice(None), slice(7, 2900, 41), [3000, 0, 1500, 1501, 7], (slice(None, None, -5), 2)]
    wants = [reference(path, shape, dtype, offset, k) for k in keys]
    evict(path)
    with DirectArray(path, shape, dtype, offset) as a:
        for k, want in zip(keys, wants):
            assert_same(a[k], want)


INDEX_MODES = ["cold", "cached", "partly cached", "no page cache"]
# The reader's block cache before the read: off, empty, holding some of the
# file's blocks, or so small (3 blocks) that a read evicts as it goes.
CACHE_STATES = ["off", "empty", "warm", "tiny"]


@st.composite
def case(draw):
    dtype = draw(st.sampled_from(DTYPES))
    ndim = draw(st.integers(1, 3))
    # Leading axis long enough that rows cross many 4 KiB blocks.
    shape = (draw(st.integers(1, 3000)), *(draw(st.integers(1, 6)) for _ in range(ndim - 1)))
    offset = draw(st.integers(0, 9000))
    if draw(st.booleans()):
        key = draw(hnp.basic_indices(shape, min_dims=0, allow_ellipsis=True, allow_newaxis=True))
    else:
        key = draw(
            hnp.integer_array_indices(
                shape, result_shape=hnp.array_shapes(min_dims=1, max_dims=2, max_side=40)
            )
        )
        # Gathers on the leading axes, the rest taken whole, often.
        if isinstance(key, tuple) and len(key) > 1 and draw(st.booleans()):
            key = key[: draw(st.integers(1, len(key)))]
        if isinstance(key, tuple) and len(key) == 1 and draw(st.booleans()):
            key = key[0].tolist()
    mode = draw(st.sampled_from(INDEX_MODES))
    cache = draw(st.sampled_from(CACHE_STATES))
    return dtype, shape, offset, key, mode, cache


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(case(), st.randoms(use_true_random=False))
def test_property_equals_memmap(tmp_path, c, rnd):
    dtype, shape, offset, key, mode, cache = c
    path = make_file(str(tmp_path / "p.bin"), shape, dtype, offset, seed=rnd.randrange(1 << 30))
    want = reference(path, shape, dtype, offset, key)
    evict(path)
    cache_bytes = {"off": 0, "tiny": 3 * 4096}.get(cache, direct.DEFAULT_CACHE_BYTES)
    with DirectArray(
        path,
        shape,
        dtype,
        offset,
        use_page_cache=(mode != "no page cache"),
        cache_bytes=cache_bytes,
    ) as a:
        if cache in ("warm", "tiny") and shape[0] > 0:
            # Blocks of random rows read (cold) into the block cache first.
            a[np.unique(np.array([rnd.randrange(shape[0]) for _ in range(20)]))]
        if mode == "cached":
            cache_pages(path, range(os.path.getsize(path) // 4096 + 1))
        elif mode == "partly cached":
            pages = os.path.getsize(path) // 4096 + 1
            cache_pages(path, [p for p in range(pages) if rnd.random() < 0.5])
        assert_same(a[key], want)
        assert_same(a[key], want)  # again: now partly from the block cache
        st_ = a.stats()
        assert st_["cache_used_bytes"] <= st_["cache_limit_bytes"] <= cache_bytes


def test_large_requests_span_many_batches(tmp_path):
    # 24 MiB: more than one thread's 8 MiB bounce buffer and 64 in-flight reads.
    shape, dtype = (3 * 1024 * 1024, 1), np.dtype("<u8")
    path = make_file(str(tmp_path / "big.bin"), shape, dtype, 100)
    keys = [
        slice(None),
        slice(1, None, 600),
        slice(None, None, -1000),
        np.random.default_rng(1).integers(0, shape[0], 5000),
    ]
    wants = [reference(path, shape, dtype, 100, k) for k in keys]
    for k, want in zip(keys, wants):
        evict(path)
        cache_pages(path, range(0, 6000, 3))  # mixed cached and cold spans
        with DirectArray(path, shape, dtype, 100) as a:
            assert_same(a[k], want)


# ---- what the cold path does to the page cache -----------------------------------


def test_cold_reads_leave_the_page_cache_alone(arr2d):
    path, shape, dtype, offset = arr2d
    evict(path)
    assert _direct.resident(path)[0] == 0
    with DirectArray(path, shape, dtype, offset) as a:
        assert a.direct
        a[::10]
        a[[5, 4000, 17]]
    assert _direct.resident(path)[0] == 0


# ---- the block cache ----------------------------------------------------------


def block_of(a):
    return a._reader.block_bytes


@pytest.fixture
def bytes1d(tmp_path):
    """A 4 MiB uint8 array at offset 0: a[k * block] lies in block k."""
    shape, dtype = (4 << 20,), np.dtype("u1")
    path = make_file(str(tmp_path / "b.bin"), shape, dtype, 0, seed=3)
    return path, shape, dtype


def test_second_pass_is_served_from_the_block_cache(arr2d):
    path, shape, dtype, offset = arr2d
    keys = [slice(None, None, 10), [5, 4000, 17, 4000], (slice(4999, 0, -97), 3)]
    wants = [reference(path, shape, dtype, offset, k) for k in keys]
    evict(path)
    with DirectArray(path, shape, dtype, offset) as a:
        assert a.stats()["cache_limit_bytes"] == direct.DEFAULT_CACHE_BYTES == 256 << 20
        assert a.stats()["cache_used_bytes"] == 0  # nothing taken before the first read
        for k, want in zip(keys, wants):
            assert_same(a[k], want)
        first = a.stats()
        assert first["direct_bytes"] > 0 and first["cache_used_bytes"] == first["direct_bytes"]
        for k, want in zip(keys, wants):
            assert_same(a[k], want)
        second = a.stats()
        assert second["direct_bytes"] == first["direct_bytes"]  # no disk read on the second pass
        assert second["cache_hit_bytes"] >= first["direct_bytes"]
        assert second["page_cache_bytes"] == 0
    assert _direct.resident(path)[0] == 0  # and still nothing added to the page cache
    assert a.stats()["cache_used_bytes"] == 0  # close() freed it


def test_page_cache_is_still_used_and_not_copied(arr2d):
    path, shape, dtype, offset = arr2d
    want = reference(path, shape, dtype, offset, slice(None, None, 3))  # file now in the page cache
    with DirectArray(path, shape, dtype, offset) as a:
        assert_same(a[::3], want)
        st_ = a.stats()
        assert st_["direct_bytes"] == 0 and st_["page_cache_bytes"] > 0
        assert st_["cache_used_bytes"] == 0


def test_eviction_respects_the_bound_and_drops_the_least_recent(bytes1d):
    path, shape, dtype = bytes1d
    want = reference(path, shape, dtype, 0, slice(None))
    evict(path)
    with DirectArray(path, shape, dtype, cache_bytes=10 * 4096 + 100) as a:
        B = block_of(a)
        cap = (10 * 4096 + 100) // B
        assert a.stats()["cache_limit_bytes"] == cap * B
        direct_bytes = lambda: a.stats()["direct_bytes"]  # noqa: E731
        for k in range(cap):  # fill it
            assert a[k * B] == want[k * B]
        assert a.stats()["cache_used_bytes"] == cap * B
        before = direct_bytes()
        assert a[0] == want[0]  # block 0 now the most recent
        assert direct_bytes() == before
        assert a[cap * B] == want[cap * B]  # one more: evicts block 1, the least recent
        assert direct_bytes() == before + B
        assert a[0] == want[0]
        assert direct_bytes() == before + B  # block 0 kept
        assert a[B] == want[B]
        assert direct_bytes() == before + 2 * B  # block 1 was dropped
        assert a.stats()["cache_used_bytes"] == cap * B
        # Reads far larger than the cache stay within it, and stay right.
        assert_same(a[::7], want[::7])
        assert_same(a[::-3], want[::-3])
        assert a.stats()["cache_used_bytes"] == cap * B


def test_sharded_cache_stays_within_its_bound(bytes1d):
    path, shape, dtype = bytes1d
    want = reference(path, shape, dtype, 0, slice(None))
    evict(path)
    limit = 1 << 20  # 256 blocks: several shards
    with DirectArray(path, shape, dtype, cache_bytes=limit) as a:
        for _ in range(2):
            assert_same(a[::1000], want[::1000])  # 4 MiB of blocks through a 1 MiB cache
            st_ = a.stats()
            assert 0 < st_["cache_used_bytes"] <= st_["cache_limit_bytes"] <= limit
        rows = np.arange(0, 512 * block_of(a), block_of(a))[:200]  # 200 blocks: all fit
        assert_same(a[rows], want[rows])
        before = a.stats()["direct_bytes"]
        assert_same(a[rows], want[rows])
        assert a.stats()["direct_bytes"] == before


@pytest.mark.parametrize("cache_bytes", [0, 4095])
def test_cache_bytes_zero_or_below_a_block_turns_it_off(arr2d, cache_bytes):
    path, shape, dtype, offset = arr2d
    want = reference(path, shape, dtype, offset, slice(None, None, 10))
    evict(path)
    with DirectArray(path, shape, dtype, offset, cache_bytes=cache_bytes) as a:
        assert_same(a[::10], want)
        first = a.stats()["direct_bytes"]
        assert_same(a[::10], want)
        st_ = a.stats()
        assert first > 0 and st_["direct_bytes"] == 2 * first
        assert st_["cache_hit_bytes"] == st_["cache_used_bytes"] == st_["cache_limit_bytes"] == 0


def test_bad_cache_bytes(arr2d):
    path, shape, dtype, offset = arr2d
    with pytest.raises(ValueError, match="cache_bytes"):
        DirectArray(path, shape, dtype, offset, cache_bytes=-1)
    with pytest.raises(TypeError):
        DirectArray(path, shape, dtype, offset, cache_bytes=1.5)
    with direct_mmap(path, shape, dtype, offset, cache_bytes=1 << 20) as a:
        assert a.stats()["cache_limit_bytes"] == 1 << 20


@pytest.mark.parametrize("cache_bytes", [64 * 4096, 256 << 20], ids=["evicting", "roomy"])
def test_threads_share_the_block_cache(arr2d, cache_bytes):
    path, shape, dtype, offset = arr2d
    full = reference(path, shape, dtype, offset, slice(None))
    evict(path)
    errors = []
    with DirectArray(path, shape, dtype, offset, cache_bytes=cache_bytes) as a:
        barrier = threading.Barrier(8)

        def work(seed):
            rng = np.random.default_rng(seed)
            barrier.wait()
            try:
                for _ in range(60):
                    idx = rng.integers(0, 5000, 50)
                    assert np.array_equal(a[idx], full[idx])
                    s = int(rng.integers(0, 2000))
                    assert np.array_equal(a[s : s + 3000 : 7], full[s : s + 3000 : 7])
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(e)

        threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        st_ = a.stats()
        assert st_["cache_used_bytes"] <= st_["cache_limit_bytes"] <= cache_bytes
        assert st_["cache_hit_bytes"] > 0
        if cache_bytes > a.nbytes + 2 * 4096:
            # Everything fits: once read, the whole array comes from memory.
            assert np.array_equal(a[:], full)
            before = a.stats()["direct_bytes"]
            assert np.array_equal(a[::-1], full[::-1])
            assert a.stats()["direct_bytes"] == before
    assert not errors


# ---- lifetime, descriptors, threads ------------------------------------------


def test_one_descriptor_per_reader_whatever_the_reads(arr2d):
    path, shape, dtype, offset = arr2d
    with DirectArray(path, shape, dtype, offset) as warm:
        warm[::100]  # this thread's io_uring exists from here on
    before = open_fds()
    with DirectArray(path, shape, dtype, offset) as a:
        assert open_fds() == before + 1
        for i in range(300):
            a[i : i + 500 : 50]
            a[[i, 4999 - i]]
        assert open_fds() == before + 1
    assert open_fds() == before


def test_close_is_idempotent_and_reads_after_close_fail(arr2d):
    path, shape, dtype, offset = arr2d
    a = DirectArray(path, shape, dtype, offset)
    a.close()
    a.close()
    assert "closed" in repr(a)
    with pytest.raises(ValueError, match="closed"):
        a[0]
    with pytest.raises(ValueError, match="closed"):
        a._reader.read_strided(0, 1, 1, 56, np.empty(7, "<u8"))  # the core checks too


def test_description_and_direct_mmap_signature(arr2d):
    path, shape, dtype, offset = arr2d
    with direct_mmap(path, shape, "uint64", offset) as a:
        assert isinstance(a, DirectArray)
        assert (a.shape, a.dtype, a.ndim, a.nbytes, len(a)) == (shape, dtype, 2, 5000 * 56, 5000)
        assert "O_DIRECT" in repr(a) and repr(path) in repr(a)
    assert shmstream.DirectArray is DirectArray


def test_many_threads_read_at_once(arr2d):
    path, shape, dtype, offset = arr2d
    full = reference(path, shape, dtype, offset, slice(None))
    evict(path)
    errors = []
    with DirectArray(path, shape, dtype, offset) as a:

        def work(seed):
            rng = np.random.default_rng(seed)
            try:
                for _ in range(50):
                    idx = rng.integers(0, 5000, 40)
                    assert np.array_equal(a[idx], full[idx])
                    s = int(rng.integers(0, 4000))
                    assert np.array_equal(a[s : s + 1000 : 37], full[s : s + 1000 : 37])
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(e)

        threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors


def test_close_while_other_threads_read(arr2d):
    path, shape, dtype, offset = arr2d
    a = DirectArray(path, shape, dtype, offset)
    started, outcomes = threading.Barrier(5), []

    def work():
        started.wait()
        try:
            while True:
                a[::3]
        except ValueError as e:
            outcomes.append(str(e))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    started.wait()
    a.close()
    for t in threads:
        t.join()
    assert len(outcomes) == 4 and all("closed" in o for o in outcomes)


def test_forked_child_reads_with_its_own_ring(arr2d):
    path, shape, dtype, offset = arr2d
    want = reference(path, shape, dtype, offset, slice(None, None, 13))
    with DirectArray(path, shape, dtype, offset) as a:
        a[::13]
        pid = os.fork()
        if pid == 0:
            ok = np.array_equal(a[::13], want)
            os._exit(0 if ok else 1)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert np.array_equal(a[::13], want)


def test_pread_backend_gives_the_same_rows(arr2d):
    path, shape, _dtype, offset = arr2d
    code = (
        "import numpy as np, sys; from shmstream import DirectArray, _direct\n"
        "assert _direct.io_backend() == 'pread'\n"
        f"a = DirectArray({path!r}, {shape}, 'u8', {offset})\n"
        f"m = np.memmap({path!r}, mode='r', shape={shape}, dtype='u8', offset={offset})\n"
        "_direct.evict(a.filename)\n"
        "sys.exit(0 if np.array_equal(a[::7], m[::7]) and np.array_equal(a[[9, 2, 4000]], m[[9, 2, 4000]]) else 1)\n"
    )
    env = dict(os.environ, SHMSTREAM_DIRECT_IO="pread")
    subprocess.run([sys.executable, "-c", code], env=env, check=True)


# ---- fallback without O_DIRECT -----------------------------------------------------


@pytest.fixture
def shm_file():
    path = os.path.join(DEV_SHM, f"shmstream-test-direct-{os.getpid()}.bin")
    yield path
    if os.path.exists(path):
        os.unlink(path)


def test_tmpfs_falls_back_to_pread_with_one_warning(shm_file, monkeypatch):
    shape, dtype = (2000, 5), np.dtype("<f4")
    make_file(shm_file, shape, dtype, 3)
    monkeypatch.setattr(direct, "_warned_devices", set())
    with pytest.warns(RuntimeWarning, match="O_DIRECT"):
        a = DirectArray(shm_file, shape, dtype, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        b = DirectArray(shm_file, shape, dtype, 3)  # no second warning
    with a, b:
        assert not a.direct and "buffered" in repr(a)
        assert a.stats()["cache_limit_bytes"] == 0  # buffered reads fill the page cache instead
        for key in [slice(None, None, 3), [5, 1999, 5], (slice(4, 9), 2), -1]:
            assert_same(a[key], reference(shm_file, shape, dtype, 3, key))


# ---- bad input ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "key",
    [
        5000,
        -5001,
        [0, 5000],
        (0, 7),
        (slice(None), -8),
        np.array([-5001]),
        (0, 0, 0),
        (Ellipsis, Ellipsis),
    ],
    ids=repr,
)
def test_out_of_range_index_is_index_error(arr2d, key):
    path, shape, dtype, offset = arr2d
    with DirectArray(path, shape, dtype, offset) as a:
        with pytest.raises(IndexError):
            a[key]


def test_non_integer_index_is_index_error(arr2d):
    path, shape, dtype, offset = arr2d
    with DirectArray(path, shape, dtype, offset) as a:
        with pytest.raises(IndexError):
            a[1.5]
        with pytest.raises(IndexError):
            a[["a"]]


def test_short_file_is_value_error_at_open(arr2d):
    path, shape, dtype, offset = arr2d
    with pytest.raises(ValueError, match="fewer than"):
        DirectArray(path, (5001, 7), dtype, offset)
    with pytest.raises(ValueError, match="fewer than"):
        DirectArray(path, shape, dtype, offset + 1)


def test_missing_file_is_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError):
        DirectArray(str(tmp_path / "nope.bin"), (10,), "u1")


def test_object_dtype_is_type_error(arr2d):
    path, _, _, _ = arr2d
    with pytest.raises(TypeError, match="object"):
        DirectArray(path, (10,), object)


def test_bad_shape_offset_and_directory(arr2d, tmp_path):
    path, _, _, _ = arr2d
    with pytest.raises(ValueError):
        DirectArray(path, (-1, 3), "u1")
    with pytest.raises(ValueError):
        DirectArray(path, (10,), "u1", offset=-1)
    with pytest.raises(TypeError):
        DirectArray(path, "ten", "u1")
    with pytest.raises(ValueError, match="regular file"):
        DirectArray(str(tmp_path), (1,), "u1")


def test_empty_arrays_and_zero_rows(tmp_path):
    path = make_file(str(tmp_path / "e.bin"), (0,), "u1", 10)
    with DirectArray(path, (0, 4), "u4", 10) as a:
        assert a[:].shape == (0, 4) and len(a) == 0
        with pytest.raises(IndexError):
            a[0]


@pytest.mark.parametrize("warm", [False, True], ids=["cold", "read-before"])
def test_a_file_truncated_under_a_reader_is_an_OSError_not_a_signal(tmp_path, warm):
    """docs/direct.md: truncating the file under a reader gives
    ShmstreamOSError ("became shorter than the array") for a read after the
    cut, pages read before it included (issue 47 found the docs saying
    SIGBUS)."""
    path = tmp_path / "a.bin"
    np.arange(1 << 16, dtype=np.uint64).tofile(path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a filesystem without O_DIRECT
        a = shmstream.DirectArray(str(path), (1 << 16,), "u8")
    try:
        if warm:
            assert int(a[:].sum()) == (1 << 16) * ((1 << 16) - 1) // 2
        os.truncate(path, 0)
        with pytest.raises(shmstream.ShmstreamOSError, match="became shorter than the array"):
            a[60000:60010]
    finally:
        a.close()
