"""The hot path of write/read/read_new: an ndarray of exactly the stream's
dtype and shape goes through one native call; every other argument takes the
checked path, with the same results and the same errors."""
from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import shmstream

import support

REC = [("a", "<f4"), ("b", "<i2")]


def test_fast_and_checked_writes_publish_the_same_bytes(name):
    with shmstream.create(name, shape=(4, 6), dtype=np.float32) as w, shmstream.open(name) as r:
        src = np.arange(24, dtype=np.float32).reshape(4, 6)
        for value in (src, src.tolist(), np.asfortranarray(src), src.astype(np.float64),
                      src[:, :].view(np.ndarray)):
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


def _asleep_after(name: str, started: list[float]) -> float:
    """Seconds from the waiting thread's call (``started[0]``) until the
    stream counts a reader asleep (its own waiters count, polled)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if started and shmstream.stat(name)["waiters"]:
            return time.monotonic() - started[0]
        time.sleep(0.001)
    raise AssertionError("no reader fell asleep within 10 s")


def test_a_handle_whose_spins_end_asleep_learns_to_sleep_at_once(name):
    with shmstream.create(name, shape=(1,), dtype=np.int64) as w, shmstream.open(name) as r:
        out = np.empty(1, np.int64)

        def wait_in_thread(started: list[float]) -> threading.Thread:
            def wait() -> None:
                started.append(time.monotonic())
                r.read_new(out=out, spin_us=10**7)
            t = threading.Thread(target=wait)
            t.start()
            return t

        # A fresh handle spins its budget (10 s here, cut to the binding's
        # first 100 ms wait chunk) before it sleeps.
        started: list[float] = []
        t = wait_in_thread(started)
        assert _asleep_after(name, started) >= 0.09
        w.write(np.ones(1, np.int64))
        t.join(5)
        assert not t.is_alive() and r.last_read_count == 1
        # Two spins that end asleep (1 ms budget, no writer): the producer is
        # slower than the budget, so the next wait sleeps at once.
        for _ in range(2):
            with pytest.raises(TimeoutError):
                r.read_new(out=out, spin_us=1000, timeout=0.05)
        # (the second may already have slept at once, if the first wait's
        # spin counted as a miss: skipped is then 1)
        misses, skipped, _ = r._seg.spin_policy
        assert misses >= 2 and skipped < 2
        # A 10 s budget, yet the wait goes to sleep without spinning: the
        # handle counts the skipped spin, and the thread burns no CPU in it.
        cpu = time.thread_time()
        with pytest.raises(TimeoutError):
            r.read_new(out=out, spin_us=10**7, timeout=0.05)
        assert time.thread_time() - cpu < 0.025
        assert r._seg.spin_policy[:2] == (misses, skipped + 1)
        # ... and it still wakes for the next write.
        t = wait_in_thread([])
        support.wait_until(lambda: shmstream.stat(name)["waiters"], what="the reader asleep")
        w.write(np.full(1, 2, np.int64))
        t.join(5)
        assert not t.is_alive() and out[0] == 2
