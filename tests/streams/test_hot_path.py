"""The hot path of write/read/read_new: an ndarray of exactly the stream's
dtype and shape goes through one native call; every other argument takes the
checked path, with the same results and the same errors."""

from __future__ import annotations

import numpy as np
import pytest

import shmstream

REC = [("a", "<f4"), ("b", "<i2")]


def test_fast_and_checked_writes_publish_the_same_bytes(name):
    with shmstream.create(name, shape=(4, 6), dtype=np.float32) as w, shmstream.open(name) as r:
        src = np.arange(24, dtype=np.float32).reshape(4, 6)
        for value in (
            src,
            src.tolist(),
            np.asfortranarray(src),
            src.astype(np.float64),
            src[:, :].view(np.ndarray),
        ):
            w.write(value + 0 if isinstance(value, np.ndarray) else value)
            assert np.array_equal(r.read(), src)
        big = np.zeros((8, 12), np.float32)
        big[::2, ::2] = src
        w.write(big[::2, ::2])  # strided: converted, not refused
        assert np.array_equal(r.read(out=np.empty((4, 6), np.float32)), src)
        assert w.count == 6


def test_an_equal_dtype_object_that_is_not_the_same_one_is_accepted(name):
    with shmstream.create(name, shape=(3,), dtype=np.dtype(REC)) as w, shmstream.open(name) as r:
        src = np.array([(1.5, 2), (3.5, 4), (5.5, 6)], dtype=np.dtype(REC))
        assert src.dtype is not w.dtype and src.dtype == w.dtype
        w.write(src)
        out = np.empty(3, np.dtype(REC))
        assert r.read(out=out) is out
        assert out.tolist() == src.tolist()
        w.write(src)
        assert r.read_new(out=out, timeout=5) is out and r.missed_writes == 0


def test_frame_id_of_any_integer_type_is_stored(name):
    with shmstream.create(name, shape=(2,), dtype=np.uint8) as w:
        a = np.ones(2, np.uint8)
        w.write(a, frame_id=7)
        assert w.frame_id == 7
        w.write(a, frame_id=np.uint64(2**64 - 1))
        assert w.frame_id == 2**64 - 1
        with pytest.raises(ValueError, match="frame_id"):
            w.write(a, frame_id=-1)
        with pytest.raises(ValueError, match="frame_id"):
            w.write(a, frame_id=2**64)
        assert w.count == 2


def test_wrong_out_arrays_keep_their_errors(name):
    with shmstream.create(name, shape=(4,), dtype=np.float32) as w, shmstream.open(name) as r:
        w.write(np.ones(4, np.float32))
        for read in (r.read, lambda **kw: r.read_new(timeout=0, **kw)):
            with pytest.raises(ValueError, match="needs shape"):
                read(out=np.empty(5, np.float32))
            with pytest.raises(ValueError, match="needs shape"):
                read(out=np.empty(4, np.float64))
            frozen = np.empty(4, np.float32)
            frozen.flags.writeable = False
            with pytest.raises(ValueError, match="C-contiguous, writable"):
                read(out=frozen)
            with pytest.raises(ValueError, match="C-contiguous, writable"):
                read(out=np.empty(8, np.float32)[::2])
            with pytest.raises(TypeError, match=r"numpy.ndarray"):
                read(out=[0.0] * 4)


def test_read_new_per_call_spin_us_is_checked_and_honoured(name):
    with shmstream.create(name, shape=(2,), dtype=np.int64) as w, shmstream.open(name) as r:
        out = np.empty(2, np.int64)
        for i, spin in enumerate((0, 2.5, 10**13, None), start=1):
            w.write(np.full(2, i, np.int64))
            assert r.read_new(out=out, spin_us=spin, timeout=5) is out
            assert out.tolist() == [i, i] and r.last_read_count == i
        with pytest.raises(TimeoutError):
            r.read_new(out=out, spin_us=1, timeout=0.01)
        with pytest.raises(ValueError, match="spin_us"):
            r.read_new(out=out, spin_us=-1, timeout=0)
        with pytest.raises(ValueError, match="spin_us"):
            r.read_new(out=out, spin_us=float("nan"), timeout=0)
        for bad in (True, "5", [5]):
            with pytest.raises(TypeError, match="spin_us"):
                r.read_new(out=out, spin_us=bad, timeout=0)


def test_writes_and_reads_inside_the_lock_take_the_locked_path(name):
    with shmstream.create(name, shape=(3,), dtype=np.float32) as w:
        other = shmstream.open(name)
        try:
            with w.locked():
                w.write(np.full(3, 2, np.float32))
                # the same thread through another handle: the lock is shared
                other.write(np.full(3, 3, np.float32))
                assert other.read().tolist() == [3, 3, 3]
            assert w.read(out=np.empty(3, np.float32)).tolist() == [3, 3, 3]
            assert w.count == 2
        finally:
            other.close()


def test_closed_and_read_only_handles_still_refuse(name):
    with shmstream.create(name, shape=(3,), dtype=np.float32):
        ro = shmstream.open(name, readonly=True)
        a = np.zeros(3, np.float32)
        with pytest.raises(PermissionError):
            ro.write(a)
        assert ro.read(out=a) is a
        ro.close()
        with pytest.raises(RuntimeError, match="closed"):
            ro.read(out=a)
        with pytest.raises(RuntimeError, match="closed"):
            ro.read_new(out=a, timeout=0)
