"""Writing and reading a stream through its handles: write and read,
frame_id, publications (all three read_*_publication forms), missed
writes, counters, clear, write_locked and write_view (including a
write_view that aborts).

Specification: docs/API.md (pyshmem 1.4.0's handle, and what shmstream
adds), "Write", "Read" and "Counters and freshness".
read_new, read_after, wait_for_count, read_new_async and notify streams
are in test_handle_wait.py, the handle's life (close,
unlink, read-only, describe) in test_handle_lifecycle.py; locking in
test_locking.py, crashes in test_crash.py, misuse in test_bad_input.py.
The ``shm``/``other`` fixtures are in conftest.py, ``frame`` in support.py.
"""

from __future__ import annotations

import dataclasses
import threading
import time

import numpy as np
import pytest

import shmstream

from support import WAIT, frame

U64_MAX = 2**64 - 1


# ---- write / read ------------------------------------------------------------


def test_write_publishes_a_copy_and_increments_count(shm, other):
    data = frame(2.0)
    assert shm.count == 0
    shm.write(data)
    data[:] = 99  # the stream holds a copy, not the caller's buffer
    assert other.count == 1
    assert np.array_equal(other.read(), frame(2.0))
    shm.write(frame(3.0))
    assert other.count == 2 and shm.count == 2


def test_write_accepts_array_likes_of_the_right_shape(name):
    with shmstream.create(name, shape=(3,), dtype=np.int64) as h:
        h.write([1, 2, 3])
        assert h.read().tolist() == [1, 2, 3]


def test_frame_id_defaults_to_zero_and_is_sticky_when_omitted(shm, other):
    assert other.frame_id == 0
    shm.write(frame(1), frame_id=41)
    assert other.frame_id == 41
    shm.write(frame(2))
    assert other.frame_id == 41
    assert other.read_publication().frame_id == 41


@pytest.mark.parametrize("frame_id", [0, 1, 2**32, 2**63, U64_MAX])
def test_frame_id_covers_the_full_uint64_range(shm, other, frame_id):
    shm.write(frame(1), frame_id=frame_id)
    assert other.frame_id == frame_id
    assert other.read_publication().frame_id == frame_id


def test_read_returns_an_independent_copy(shm):
    shm.write(frame(1))
    a = shm.read()
    assert isinstance(a, np.ndarray) and a.shape == (3, 3) and a.dtype == np.float32
    a[:] = 7  # writable and private
    assert np.array_equal(shm.read(), frame(1))
    shm.write(frame(2))
    assert np.array_equal(a, frame(7))


def test_read_before_any_write_returns_zeros(shm):
    assert np.array_equal(shm.read(), frame(0))


def test_read_with_out_fills_and_returns_the_same_buffer(shm):
    shm.write(frame(4))
    out = np.empty((3, 3), np.float32)
    result = shm.read(out=out)
    assert result is out
    assert np.array_equal(out, frame(4))


def test_read_unsafe_without_the_lock_raises(shm):
    with pytest.raises(RuntimeError, match="safe=False requires"):
        shm.read(safe=False)


def test_read_unsafe_under_the_lock_returns_the_data(shm):
    shm.write(frame(5))
    with shm.locked():
        assert np.array_equal(shm.read(safe=False), frame(5))


# ---- publications ---------------------------------------------------------------


def test_read_publication_returns_payload_and_metadata_of_one_write(shm, other):
    before = time.time()
    shm.write(frame(9), frame_id=90)
    pub = other.read_publication()
    assert isinstance(pub, shmstream.Publication)
    assert np.array_equal(pub.payload, frame(9))
    assert pub.count == 1 and pub.frame_id == 90
    assert before - 1 <= pub.write_time <= time.time() + 1
    assert pub.missed_publications == 0


def test_read_publication_with_out_fills_that_buffer(shm):
    shm.write(frame(3))
    out = np.empty((3, 3), np.float32)
    pub = shm.read_publication(out=out)
    assert pub.payload is out
    assert np.array_equal(out, frame(3))


def test_read_publication_frame_id_matches_payload_while_a_writer_races(name):
    h = shmstream.create(name, shape=(256, 256), dtype=np.float64)
    stop = threading.Event()

    def writer():
        w = shmstream.open(name)
        i = 0
        while not stop.is_set():
            i += 1
            w.write(np.full((256, 256), i, np.float64), frame_id=i)
        w.close()

    t = threading.Thread(target=writer)
    t.start()
    try:
        h.wait_for_count(after=0, timeout=WAIT)
        for _ in range(300):
            pub = h.read_publication(timeout=WAIT)
            first = pub.payload.flat[0]
            assert (pub.payload == first).all(), "torn payload"
            assert pub.frame_id == int(first), (pub.frame_id, first)
            assert pub.count >= pub.frame_id  # clear()/others never ran
    finally:
        stop.set()
        t.join(WAIT)
        h.close()


def test_read_new_publication_times_out_when_nothing_new(shm):
    with pytest.raises(TimeoutError):
        shm.read_new_publication(timeout=0.05)


def test_read_new_publication_returns_the_next_publication(shm, other):
    shm.write(frame(1), frame_id=5)
    pub = other.read_new_publication(timeout=1.0)
    assert pub.count == 1 and pub.frame_id == 5
    assert np.array_equal(pub.payload, frame(1))


def test_read_after_publication_returns_a_publication_above_count(shm, other):
    shm.write(frame(1), frame_id=1)
    shm.write(frame(2), frame_id=2)
    pub = other.read_after_publication(1, timeout=1.0)
    assert pub.count == 2 and pub.frame_id == 2
    assert np.array_equal(pub.payload, frame(2))
    assert other.last_read_count == 2
    with pytest.raises(TimeoutError):
        other.read_after_publication(2, timeout=0.05)


# ---- missed writes ------------------------------------------------------------------


def test_missed_writes_counts_writes_skipped_between_two_reads(shm, other):
    assert other.last_read_count == 0
    for v in (1, 2, 3):
        shm.write(frame(v))
    other.read()
    assert other.last_read_count == 3
    assert other.missed_writes == 2
    assert other.total_missed_writes == 2
    shm.write(frame(4))
    other.read()
    assert other.last_read_count == 4
    assert other.missed_writes == 0
    assert other.total_missed_writes == 2


def test_publication_missed_publications_counts_like_missed_writes(shm, other):
    for v in (1, 2, 3):
        shm.write(frame(v))
    assert other.read_publication().missed_publications == 2
    shm.write(frame(4))
    assert other.read_publication().missed_publications == 0
    assert other.total_missed_writes == 2


# ---- counters ------------------------------------------------------------------------


def test_count_write_time_write_sequence_and_frame_id_properties(shm, other):
    assert shm.count == 0 and shm.frame_id == 0
    seq0 = shm.write_sequence
    assert isinstance(seq0, int)
    before = time.time()
    shm.write(frame(1), frame_id=3)
    after = time.time()
    assert other.count == 1
    assert before - 1 <= other.write_time <= after + 1
    assert other.write_sequence > seq0
    assert other.frame_id == 3
    seq1 = other.write_sequence
    shm.write(frame(2))
    assert other.write_sequence > seq1


def test_clear_zeroes_the_payload_and_counts_as_a_write(shm, other):
    shm.write(frame(5))
    shm.clear()
    assert shm.count == 2
    assert np.array_equal(other.read(), frame(0))


# ---- write_locked ----------------------------------------------------------------------


def test_write_locked_requires_the_lock(shm):
    with pytest.raises(RuntimeError, match="write_locked"):
        shm.write_locked(frame(1))
    assert shm.count == 0


def test_write_locked_rejects_a_wrong_shape(shm):
    with shm.locked():
        with pytest.raises(ValueError, match="shape"):
            shm.write_locked(np.zeros((2, 2), np.float32))
    assert shm.count == 0


def test_write_locked_counts_as_a_write_visible_to_safe_reads(shm, other):
    with shm.locked():
        shm.write_locked(frame(3), frame_id=12)
        shm.write_locked(frame(4))
    assert other.count == 2
    pub = other.read_publication()
    assert np.array_equal(pub.payload, frame(4)) and pub.frame_id == 12


# ---- write_view -------------------------------------------------------------------------


def test_write_view_yields_the_live_payload_and_publishes_on_exit(shm, other):
    with shm.write_view(frame_id=7) as view:
        assert isinstance(view, np.ndarray)
        assert view.shape == (3, 3) and view.dtype == np.float32
        view[:] = 2
        view[0, 0] = 1
    assert other.count == 1
    pub = other.read_publication()
    assert pub.frame_id == 7
    expected = frame(2)
    expected[0, 0] = 1
    assert np.array_equal(pub.payload, expected)


def test_write_view_that_raises_propagates_and_leaves_the_stream_invalid(shm, other):
    shm.write(frame(1))

    class Boom(Exception):
        pass

    with pytest.raises(Boom):
        with shm.write_view() as view:
            view[:] = 5
            raise Boom()
    with pytest.raises(shmstream.InconsistentStreamError):
        other.read(timeout=0.1)
    with pytest.raises(shmstream.InconsistentStreamError):
        other.read_publication(timeout=0.1)
    # the lock was released: the next good write recovers the stream
    shm.write(frame(2))
    assert np.array_equal(other.read(timeout=0.1), frame(2))


@pytest.mark.parametrize(
    "wait", ["read_new", "wait_for_count", "read_after", "read_new_publication"]
)
def test_a_blocking_read_on_an_aborted_stream_raises_at_once_instead_of_waiting(shm, other, wait):
    with pytest.raises(ValueError):
        with shm.write_view():
            raise ValueError("abort")
    start = time.monotonic()
    with pytest.raises(shmstream.InconsistentStreamError):
        {
            "read_new": lambda: other.read_new(timeout=WAIT),
            "wait_for_count": lambda: other.wait_for_count(after=0, timeout=WAIT),
            "read_after": lambda: other.read_after(0, timeout=WAIT),
            "read_new_publication": lambda: other.read_new_publication(timeout=WAIT),
        }[wait]()
    assert time.monotonic() - start < 2.0


def test_write_view_locked_requires_the_lock(shm):
    with pytest.raises(RuntimeError, match="write_view_locked"):
        with shm.write_view_locked():
            pass
    assert shm.count == 0


def test_write_view_locked_publishes_under_a_held_lock(shm, other):
    with shm.locked():
        with shm.write_view_locked(frame_id=4) as view:
            view[:] = 8
    assert other.count == 1
    assert other.frame_id == 4
    assert np.array_equal(other.read(), frame(8))


# ---- from the former surface smoke test --------------------------------------


def test_a_round_trip_updates_count_frame_id_and_missed_writes(name):
    w = shmstream.create(name, shape=(2, 3), dtype=np.int16)
    r = shmstream.open(name)
    for i in range(3):
        w.write(np.full((2, 3), i), frame_id=2**64 - 1 - i)
    assert r.read()[0, 0] == 2
    assert (r.last_read_count, r.missed_writes, r.total_missed_writes) == (3, 2, 2)
    w.write(np.zeros((2, 3)))
    r.read()
    assert (r.missed_writes, r.total_missed_writes) == (0, 2)
    assert r.frame_id == 2**64 - 3
    pub = r.read_publication()
    assert pub.frame_id == 2**64 - 3 and pub.count == 4
    with pytest.raises(dataclasses.FrozenInstanceError):
        pub.count = 1
    out = np.empty((2, 3), np.int16)
    assert r.read(out=out) is out
    with pytest.raises(ValueError, match="expected shape"):
        w.write(np.zeros(5))
    r.close()
    w.close()
