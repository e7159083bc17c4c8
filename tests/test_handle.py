"""The SharedMemory handle: writes, reads, publications, counters,
write_view, close, unlink generations, read-only handles, freshness,
notify, describe, to_config, DLPack and asyncio.

Specification: docs/API.md (pyshmem 1.4.0's handle, and what shmstream
adds), from "Handle attributes" to "Lock".
Locking is in test_locking.py, crashes in test_crash.py, misuse in
test_bad_input.py.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import os
import re
import threading
import time

import numpy as np
import pytest

import shmstream

import support
from support import WAIT

U64_MAX = 2**64 - 1


@pytest.fixture
def shm(name):
    h = shmstream.create(name, shape=(3, 3), dtype=np.float32)
    yield h
    h.close()


@pytest.fixture
def other(shm):
    """A second handle on the same stream, as another component would hold."""
    h = shmstream.open(shm.name)
    yield h
    h.close()


def frame(value, shape=(3, 3), dtype=np.float32):
    return np.full(shape, value, dtype=dtype)


# ---- children ----------------------------------------------------------------


def child_write_when_told(stream_name, go, value):
    h = shmstream.open(stream_name)
    assert go.wait(WAIT)
    h.write(np.full(h.shape, value, dtype=h.dtype))
    h.close()


def child_exit_after_create(stream_name):
    shmstream.create(stream_name, shape=(2,)).close()
    return os.getpid()


# ---- surface -----------------------------------------------------------------


def test_handles_do_not_expose_create_or_open(shm):
    assert not hasattr(shm, "create")
    assert not hasattr(shm, "open")


def test_repr_is_exact_and_survives_close_and_reopen(name):
    h = shmstream.create(name, shape=(3, 3), dtype=np.float32)
    expected = f"SharedMemory(name={name!r}, shape=(3, 3), dtype='float32', gpu_device=None)"
    assert repr(h) == expected
    h.write(frame(1))
    h.close()
    assert repr(h) == expected
    h2 = shmstream.open(name)
    try:
        assert repr(h2) == expected
        assert h2.count == 1
    finally:
        h2.close()


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


# ---- read_new ------------------------------------------------------------------


def test_read_new_blocks_until_a_write_from_another_process(shm, spawn, ctx):
    go = ctx.Event()
    child = spawn(child_write_when_told, shm.name, go, 8.0)
    result = {}

    def reader():
        result["value"] = shm.read_new(timeout=WAIT)

    t = threading.Thread(target=reader)
    t.start()
    support.wait_for_waiter(shm.name)  # parked, nothing published yet
    assert "value" not in result
    go.set()
    t.join(WAIT)
    child.result()
    assert np.array_equal(result["value"], frame(8.0))
    assert shm.last_read_count == 1


def test_read_new_times_out_when_nothing_new_arrives(shm):
    shm.write(frame(1))
    shm.read()
    with pytest.raises(TimeoutError):
        shm.read_new(timeout=0.05)


def test_read_new_with_out_returns_the_same_buffer(shm, other):
    other.write(frame(6))
    out = np.empty((3, 3), np.float32)
    assert shm.read_new(timeout=WAIT, out=out) is out
    assert np.array_equal(out, frame(6))


def test_read_new_returns_a_write_that_landed_between_two_calls(shm, other):
    # pyshmem's read_new is edge-triggered at the call and would wait for
    # the *next* write here; ours returns the one this handle has not seen.
    other.write(frame(1))
    assert np.array_equal(shm.read_new(timeout=WAIT), frame(1))
    other.write(frame(2))  # lands before the next call
    assert np.array_equal(shm.read_new(timeout=1.0), frame(2))
    assert shm.last_read_count == 2


def test_read_new_returns_a_write_made_after_the_handle_was_opened(shm):
    shm.write(frame(1))
    late = shmstream.open(shm.name)  # baseline: count at open == 1
    try:
        shm.write(frame(2))
        assert np.array_equal(late.read_new(timeout=1.0), frame(2))
    finally:
        late.close()


def test_read_new_does_not_return_what_was_current_when_the_handle_was_opened(shm):
    shm.write(frame(1))
    late = shmstream.open(shm.name)
    try:
        with pytest.raises(TimeoutError):
            late.read_new(timeout=0.05)
    finally:
        late.close()


def test_read_new_does_not_return_the_handles_own_last_write(shm, other):
    shm.write(frame(1))
    with pytest.raises(TimeoutError):
        shm.read_new(timeout=0.05)
    other.write(frame(2))
    assert np.array_equal(shm.read_new(timeout=1.0), frame(2))


def test_read_new_skips_to_the_latest_and_counts_missed_writes(shm, other):
    other.read()  # baseline 0
    for v in (1, 2, 3):
        shm.write(frame(v))
    assert np.array_equal(other.read_new(timeout=1.0), frame(3))
    assert other.last_read_count == 3
    assert other.missed_writes == 2


# ---- read_after / wait_for_count ------------------------------------------------


def test_read_after_returns_once_count_is_above_and_updates_last_read_count(shm, other):
    shm.write(frame(1))
    shm.write(frame(2))
    assert np.array_equal(other.read_after(1, timeout=1.0), frame(2))
    assert other.last_read_count == 2
    with pytest.raises(TimeoutError):
        other.read_after(2, timeout=0.05)


def test_read_after_waits_for_a_later_write(shm, spawn, ctx):
    go = ctx.Event()
    child = spawn(child_write_when_told, shm.name, go, 3.0)
    result = {}
    t = threading.Thread(target=lambda: result.setdefault("v", shm.read_after(0, timeout=WAIT)))
    t.start()
    support.wait_for_waiter(shm.name)
    go.set()
    t.join(WAIT)
    child.result()
    assert np.array_equal(result["v"], frame(3.0))
    assert shm.last_read_count == 1


def test_wait_for_count_is_level_triggered(shm, other):
    shm.write(frame(1))
    shm.write(frame(2))
    # both writes happened before the call: it returns at once
    assert other.wait_for_count(after=0, timeout=1.0) == 2
    assert other.wait_for_count(after=1, timeout=1.0) == 2
    with pytest.raises(TimeoutError):
        other.wait_for_count(after=2, timeout=0.05)


def test_wait_for_count_wakes_on_a_write_from_another_process(shm, spawn, ctx):
    go = ctx.Event()
    child = spawn(child_write_when_told, shm.name, go, 1.0)
    result = {}
    t = threading.Thread(
        target=lambda: result.setdefault("c", shm.wait_for_count(after=0, timeout=WAIT))
    )
    t.start()
    support.wait_for_waiter(shm.name)
    go.set()
    t.join(WAIT)
    child.result()
    assert result["c"] == 1


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


# ---- close ------------------------------------------------------------------------------


def test_close_is_idempotent_and_does_not_destroy_the_stream(name):
    h = shmstream.create(name, shape=(2,))
    h.write([1, 2])
    h.close()
    h.close()
    h2 = shmstream.open(name)
    try:
        assert h2.read().tolist() == [1, 2]
    finally:
        h2.close()


def test_close_of_a_handle_whose_lock_another_thread_holds_raises(shm):
    held = threading.Event()
    done = threading.Event()

    def holder():
        with shm.locked():
            held.set()
            done.wait(WAIT)

    t = threading.Thread(target=holder)
    t.start()
    try:
        assert held.wait(WAIT)
        with pytest.raises(RuntimeError, match="another thread owns its lock"):
            shm.close()
    finally:
        done.set()
        t.join(WAIT)
    assert shm.count == 0  # still usable after the refused close


def test_close_of_another_handle_succeeds_while_one_handle_holds_the_lock(shm, other):
    held = threading.Event()
    done = threading.Event()

    def holder():
        with shm.locked():
            held.set()
            done.wait(WAIT)

    t = threading.Thread(target=holder)
    t.start()
    try:
        assert held.wait(WAIT)
        other.close()
    finally:
        done.set()
        t.join(WAIT)
    with pytest.raises(RuntimeError, match="closed shared memory"):
        other.read()
    shm.write(frame(1))
    assert shm.count == 1


BLOCKING_READS = {
    "read_new": lambda h: h.read_new(timeout=WAIT),
    "read_new_publication": lambda h: h.read_new_publication(timeout=WAIT),
    "read_after": lambda h: h.read_after(h.count, timeout=WAIT),
    "read_after_publication": lambda h: h.read_after_publication(h.count, timeout=WAIT),
    "wait_for_count": lambda h: h.wait_for_count(after=h.count, timeout=WAIT),
    "read_new_async": lambda h: asyncio.run(h.read_new_async(timeout=WAIT)),
}


@pytest.mark.parametrize("notify", [False, True], ids=["plain", "notify"])
@pytest.mark.parametrize("method", list(BLOCKING_READS))
def test_close_wakes_a_reader_blocked_on_that_handle(name, method, notify):
    h = shmstream.create(name, shape=(4,), notify=notify)
    outcome = {}

    def reader():
        try:
            BLOCKING_READS[method](h)
            outcome["error"] = None
        except BaseException as exc:  # noqa: BLE001 - the test inspects it
            outcome["error"] = exc
        outcome["at"] = time.monotonic()

    t = threading.Thread(target=reader)
    t.start()
    support.wait_for_waiter(name)
    closed_at = time.monotonic()
    h.close()
    t.join(WAIT)
    assert not t.is_alive(), f"{method} still blocked after close()"
    assert isinstance(outcome["error"], RuntimeError), outcome["error"]
    assert "closed while a read was waiting" in str(outcome["error"])
    assert outcome["at"] - closed_at < 2.0


# ---- unlink / generations -------------------------------------------------------------------


def test_unlink_and_delete_destroy_the_stream(make_name):
    for method in ("unlink", "delete"):
        stream_name = make_name()
        h = shmstream.create(stream_name, shape=(1,))
        getattr(h, method)()
        with pytest.raises(FileNotFoundError):
            shmstream.open(stream_name)


def test_a_handle_from_before_unlink_and_recreate_keeps_its_generation(name):
    old = shmstream.create(name, shape=(2,))
    old.write([1, 1])
    old_id = old.instance_id
    assert isinstance(old_id, str) and len(old_id) == 32
    shmstream.unlink(name)
    new = shmstream.create(name, shape=(2,))
    try:
        assert new.instance_id != old_id and len(new.instance_id) == 32
        assert old.read().tolist() == [1, 1]  # old data
        old.write([2, 2])
        assert new.count == 0  # old writes do not reach the new stream
        assert new.read().tolist() == [0, 0]
        with pytest.raises(shmstream.StaleStreamError, match="newer generation"):
            old.unlink()
        reopened = shmstream.open(name)  # the new stream is still there
        assert reopened.instance_id == new.instance_id
        reopened.close()
    finally:
        old.close()
        new.close()


def test_instance_id_is_shared_by_every_handle_of_one_generation(shm, other):
    assert shm.instance_id == other.instance_id


# ---- read-only handles --------------------------------------------------------------------------


def test_readonly_handle_reads_but_refuses_every_mutation(shm):
    shm.write(frame(3))
    ro = shmstream.open(shm.name, readonly=True)
    try:
        assert ro.readonly is True
        assert np.array_equal(ro.read(), frame(3))
        assert ro.read_publication().count == 1
        assert np.array_equal(np.from_dlpack(ro), frame(3))  # DLPack export allowed
        for attempt in (
            lambda: ro.write(frame(1)),
            ro.clear,
            ro.acquire,
            lambda: ro.read(safe=False),
            ro.unlink,
        ):
            with pytest.raises(PermissionError, match="read-only"):
                attempt()
        assert shm.count == 1
        assert np.array_equal(shm.read(), frame(3))
    finally:
        ro.close()
    shmstream.open(shm.name).close()  # ro.unlink() did not destroy it


def test_readonly_handle_sees_new_writes(shm):
    ro = shmstream.open(shm.name, readonly=True)
    try:
        shm.write(frame(4))
        assert np.array_equal(ro.read_new(timeout=WAIT), frame(4))
    finally:
        ro.close()


def test_a_writable_handle_is_not_readonly(shm):
    assert shm.readonly is False


# ---- freshness ------------------------------------------------------------------------------------


def test_age_is_inf_before_the_first_write_and_small_after(shm):
    assert shm.age == math.inf
    shm.write(frame(1))
    assert 0 <= shm.age < 60


def test_is_stale_before_a_write_and_not_just_after(shm):
    assert shm.is_stale(60) is True
    shm.write(frame(1))
    assert shm.is_stale(60) is False


@pytest.mark.parametrize("max_age", [0, -1])
def test_is_stale_requires_a_positive_max_age(shm, max_age):
    with pytest.raises(ValueError, match="max_age must be positive"):
        shm.is_stale(max_age)


def test_creator_pid_and_producer_alive_for_own_stream(shm, other):
    assert shm.creator_pid == os.getpid() == other.creator_pid
    assert shm.producer_alive() is True


def test_producer_alive_is_false_after_the_creator_exits(name, spawn):
    child = spawn(child_exit_after_create, name)
    pid = child.result()
    child.join()
    h = shmstream.open(name)
    try:
        assert h.creator_pid == pid
        assert h.producer_alive() is False
        assert h.read().tolist() == [0, 0]
    finally:
        h.close()


# ---- notify ------------------------------------------------------------------------------------------


def test_notify_defaults_to_false_and_is_stored_in_to_config(make_name):
    plain = shmstream.create(make_name(), shape=(1,))
    flagged = shmstream.create(make_name(), shape=(1,), notify=True)
    try:
        assert plain.to_config()["notify"] is False
        assert flagged.to_config()["notify"] is True
        reopened = shmstream.open(flagged.name)
        assert reopened.to_config()["notify"] is True
        reopened.close()
    finally:
        plain.close()
        flagged.close()


def test_notify_stream_wakes_a_parked_read_new_when_a_write_lands(name, spawn, ctx):
    h = shmstream.create(name, shape=(4,), notify=True)
    go = ctx.Event()
    child = spawn(child_write_when_told, name, go, 2.0)
    result = {}
    t = threading.Thread(target=lambda: result.setdefault("v", h.read_new(timeout=WAIT)))
    t.start()
    try:
        support.wait_for_waiter(name)
        go.set()
        t.join(WAIT)
        child.result()
        assert result["v"].tolist() == [2, 2, 2, 2]
    finally:
        h.close()


@pytest.mark.parametrize("notify", [False, True], ids=["plain", "notify"])
def test_read_new_times_out_promptly(name, notify):
    h = shmstream.create(name, shape=(4,), notify=notify)
    try:
        start = time.monotonic()
        with pytest.raises(TimeoutError):
            h.read_new(timeout=0.2)
        elapsed = time.monotonic() - start
        assert 0.15 <= elapsed < 2.0
    finally:
        h.close()


# ---- describe / to_config --------------------------------------------------------------------------------


def test_describe_is_a_multiline_summary_with_padded_labels(shm):
    shm.write(frame(1))
    text = shm.describe()
    assert isinstance(text, str) and "\n" in text
    assert shm.name in text
    for label in (
        "name:",
        "shape:",
        "dtype:",
        "size:",
        "gpu_enabled:",
        "gpu_device:",
        "cpu_mirror:",
        "count:",
        "write_time:",
        "write_seq:",
        "owner:",
        "notify:",
    ):
        assert re.search(rf"^{re.escape(label)}", text, re.M), label
    assert "count:        1" in text
    assert f"creator_pid:  {os.getpid()}" in text
    assert "producer:     alive" in text
    for line in text.splitlines():
        m = re.match(r"^([a-z_]+:) +\S", line)
        assert m and m.end() - 1 == 14, f"value not at column 14: {line!r}"


def test_to_config_is_a_plain_dict_describing_the_stream(name):
    h = shmstream.create(name, shape=(2, 5), dtype=np.float64)
    try:
        assert h.to_config() == {
            "name": name,
            "shape": [2, 5],
            "dtype": "float64",
            "gpu_device": None,
            "cpu_mirror": True,
            "notify": False,
        }
    finally:
        h.close()


# ---- DLPack -------------------------------------------------------------------------------------------------


def test_dlpack_device_is_cpu(shm):
    assert shm.__dlpack_device__() == (1, 0)


def test_from_dlpack_gives_a_snapshot_that_later_writes_do_not_change(shm):
    shm.write(frame(1))
    snap = np.from_dlpack(shm)
    shm.write(frame(2))
    assert np.array_equal(snap, frame(1))
    assert np.array_equal(np.from_dlpack(shm), frame(2))


# ---- asyncio ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("notify", [False, True], ids=["plain", "notify"])
def test_read_new_async_returns_a_new_write_without_blocking_the_loop(name, notify):
    h = shmstream.create(name, shape=(4,), notify=notify)
    writer = shmstream.open(name)

    async def main():
        ticks = 0

        async def ticker():
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0)

        tick_task = asyncio.create_task(ticker())
        read_task = asyncio.create_task(h.read_new_async(timeout=WAIT))
        while ticks < 20:  # the loop keeps running while read_new_async waits
            await asyncio.sleep(0)
        writer.write(np.full(4, 5, np.float32))
        value = await read_task
        tick_task.cancel()
        return value

    try:
        assert asyncio.run(main()).tolist() == [5, 5, 5, 5]
    finally:
        writer.close()
        h.close()


@pytest.mark.parametrize("notify", [False, True], ids=["plain", "notify"])
def test_read_new_async_times_out_and_forwards_out(name, notify):
    h = shmstream.create(name, shape=(4,), notify=notify)
    try:
        with pytest.raises(TimeoutError):
            asyncio.run(h.read_new_async(timeout=0.05))
        other = shmstream.open(name)
        other.write(np.arange(4, dtype=np.float32))
        other.close()
        out = np.empty(4, np.float32)
        assert asyncio.run(h.read_new_async(timeout=WAIT, out=out)) is out
        assert out.tolist() == [0, 1, 2, 3]
    finally:
        h.close()


@pytest.mark.parametrize("notify", [False, True], ids=["plain", "notify"])
def test_read_new_async_on_a_closed_handle_raises(name, notify):
    h = shmstream.create(name, shape=(4,), notify=notify)
    h.close()
    with pytest.raises(RuntimeError, match="closed shared memory"):
        asyncio.run(h.read_new_async(timeout=0.05))


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


def test_read_new_is_level_triggered_and_close_wakes_a_waiting_read(name):
    s = shmstream.create(name, shape=(1,), notify=True)
    r = shmstream.open(name)
    s.write(np.ones(1))
    assert r.read_new(timeout=1)[0] == 1  # written before the call: not missed
    with pytest.raises(TimeoutError):
        r.read_new(timeout=0.1)
    assert r.wait_for_count(after=0, timeout=0) == 1
    errors = []

    def waiter():
        try:
            r.read_new()
        except RuntimeError as exc:
            errors.append(str(exc))

    t = threading.Thread(target=waiter)
    t.start()
    support.wait_for_waiter(name)  # the read sleeps
    r.close()
    t.join(WAIT)
    assert not t.is_alive() and "closed while a read was waiting" in errors[0]
    with pytest.raises(RuntimeError, match="closed shared memory"):
        r.read()
    with pytest.raises(RuntimeError, match="closed shared memory"):
        _ = r.count
    assert shmstream.stat(name)["notify"] is True
    s.close()


def test_read_new_async_waits_without_blocking_the_loop(name):
    s = shmstream.create(name, shape=(2,), notify=True)
    r = shmstream.open(name)

    async def main():
        task = asyncio.ensure_future(r.read_new_async(timeout=WAIT))
        # the executor thread sleeps in the native wait
        await asyncio.get_running_loop().run_in_executor(None, support.wait_for_waiter, name)
        s.write(np.arange(2))
        got = await task
        with pytest.raises(TimeoutError):
            await r.read_new_async(timeout=0.1)
        out = np.empty(2, np.float32)
        s.write(np.ones(2))
        assert await r.read_new_async(timeout=1, out=out) is out
        return got

    assert list(asyncio.run(main())) == [0, 1]
    r.close()
    s.close()


@pytest.mark.parametrize("notify", [False, True])
@pytest.mark.parametrize(
    "call",
    [
        "read_new",
        "read_new_publication",
        "read_after",
        "read_after_publication",
        "wait_for_count",
        "read_new_async",
    ],
)
def test_close_wakes_every_kind_of_blocking_read(name, call, notify):
    s = shmstream.create(name, shape=(1,), notify=notify)
    r = shmstream.open(name)
    errors = []

    def waiter():
        try:
            if call == "read_new_async":
                asyncio.run(r.read_new_async())
            elif call.startswith("read_after"):
                getattr(r, call)(5)
            elif call == "wait_for_count":
                r.wait_for_count(after=5)
            else:
                getattr(r, call)()
        except RuntimeError as exc:
            errors.append(str(exc))

    t = threading.Thread(target=waiter)
    t.start()
    support.wait_for_waiter(name)  # the read sleeps
    r.close()
    t.join(WAIT)
    assert not t.is_alive()
    assert "closed while a read was waiting" in errors[0]
    with pytest.raises(RuntimeError, match="closed shared memory"):
        asyncio.run(r.read_new_async(timeout=0.1))
    s.close()
