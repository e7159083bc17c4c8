"""Streams with history (``create(..., history=N)``): every publication of
the last N for a reader that must see every frame, with exact miss counts
(docs/history.md, docs/ABI.md "History").

A writer that dies mid-write is covered in tests/streams/test_crash_points.py (a
history writer killed at every crash point: the abandoned frame never
appears in the history, the rest stays whole).
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

import shmstream
from shmstream import _native

import support

SHAPE = (4, 8)


def frame(k: int, shape=SHAPE) -> np.ndarray:
    return np.full(shape, k, np.int64)


def whole(batch) -> bool:
    """Every frame of the batch is frame k with frame id 1000 + k, k its count."""
    return all(
        np.unique(f).tolist() == [c] and fid == 1000 + c
        for f, c, fid in zip(batch.frames, batch.counts.tolist(), batch.frame_ids.tolist())
    )


@pytest.fixture
def hist(name):
    h = shmstream.create(name, shape=SHAPE, dtype=np.int64, history=8)
    yield h
    h.close()


def write(h, k: int, **kw) -> None:
    h.write(frame(k), frame_id=1000 + k, **kw)


# ---- reading every publication ------------------------------------------------------------


def test_read_since_returns_every_publication_after_a_count_oldest_first_with_its_metadata(
    hist, name
):
    reader = shmstream.open(name, readonly=True)
    try:
        for k in range(1, 7):
            write(hist, k)
        batch = reader.read_since(2)
        assert batch.counts.tolist() == [3, 4, 5, 6]
        assert batch.frame_ids.tolist() == [1003, 1004, 1005, 1006]
        assert batch.frames.shape == (4, *SHAPE) and batch.frames.dtype == np.int64
        assert whole(batch)
        times = batch.write_times_ns.tolist()
        assert times == sorted(times) and times[0] > 0
        assert (batch.missed, batch.after, batch.last_count, len(batch)) == (0, 2, 6, 4)
        pubs = list(batch)
        assert [p.count for p in pubs] == [3, 4, 5, 6]
        assert [p.missed_publications for p in pubs] == [0, 0, 0, 0]
        assert pubs[0].write_time == times[0] / 1e9
    finally:
        reader.close()


def test_read_since_goes_on_from_the_handles_position_or_from_last_count(hist, name):
    reader = shmstream.open(name)  # opened at count 0
    try:
        write(hist, 1)
        write(hist, 2)
        first = reader.read_since()
        assert first.counts.tolist() == [1, 2] and reader.last_read_count == 2
        write(hist, 3)
        assert reader.read_since().counts.tolist() == [3]
        write(hist, 4)
        assert reader.read_since(first.last_count).counts.tolist() == [3, 4]
    finally:
        reader.close()


def test_publications_overwritten_before_they_were_read_are_counted_exactly(hist):
    for k in range(1, 31):
        write(hist, k)
    batch = hist.read_since(0)
    # 8 kept, plus the slot the next write would fill (nothing is in flight)
    assert batch.counts.tolist() == list(range(22, 31))
    assert batch.missed == 21 and whole(batch)
    assert next(iter(batch)).missed_publications == 21
    assert hist.missed_writes == 21 and hist.total_missed_writes == 21


def test_a_gap_in_the_counts_of_a_replayed_or_mirrored_stream_counts_as_missed(hist):
    for k in (5, 9, 10):
        write(hist, k, count=k)
    batch = hist.read_since(0)
    assert batch.counts.tolist() == [5, 9, 10]
    assert batch.missed == 7
    assert [p.missed_publications for p in batch] == [4, 3, 0]


def test_max_frames_returns_the_oldest_and_the_next_read_goes_on_from_there(hist):
    for k in range(1, 8):
        write(hist, k)
    first = hist.read_since(0, max_frames=3)
    assert first.counts.tolist() == [1, 2, 3] and first.last_count == 3 and first.missed == 0
    rest = hist.read_since(first.last_count)
    assert rest.counts.tolist() == [4, 5, 6, 7]


def test_out_fills_a_preallocated_array_instead_of_allocating(hist):
    for k in range(1, 6):
        write(hist, k)
    out = np.zeros((3, *SHAPE), np.int64)
    batch = hist.read_since(0, out=out)
    assert batch.counts.tolist() == [1, 2, 3]  # at most len(out) frames
    assert np.shares_memory(batch.frames, out) and whole(batch)
    batch = hist.read_since(3, out=out)
    assert batch.counts.tolist() == [4, 5] and batch.frames.shape == (2, *SHAPE)


def test_read_since_waits_for_a_newer_publication_and_times_out_without_one(hist, name):
    write(hist, 1)
    with pytest.raises(TimeoutError, match="new write"):
        hist.read_since(1, timeout=0)
    reader = shmstream.open(name)
    got = []
    t = threading.Thread(target=lambda: got.append(reader.read_since(1, timeout=support.WAIT)))
    t.start()
    try:
        support.wait_for_waiter(name)
        write(hist, 2)
        t.join(support.WAIT)
        assert got[0].counts.tolist() == [2]
    finally:
        reader.close()
        t.join(support.WAIT)


def test_an_aborted_write_is_not_history_and_does_not_end_a_wait(hist, name):
    for k in range(1, 4):
        write(hist, k)
    with pytest.raises(ZeroDivisionError):
        with hist.write_view(frame_id=77) as view:
            view[...] = -1  # garbage left in the slot the next write fills
            raise ZeroDivisionError
    reader = shmstream.open(name)
    got = []
    t = threading.Thread(target=lambda: got.append(reader.read_since(3, timeout=support.WAIT)))
    t.start()
    try:
        support.wait_for_waiter(name)  # the failed write does not wake it with an error
        write(hist, 4)
        t.join(support.WAIT)
        assert got[0].counts.tolist() == [4] and whole(got[0])
        batch = hist.read_since(0)
        assert batch.counts.tolist() == [1, 2, 3, 4] and whole(batch) and batch.missed == 0
    finally:
        reader.close()
        t.join(support.WAIT)


def test_a_stream_without_history_returns_its_newest_complete_publication(name):
    h = shmstream.create(name, shape=SHAPE, dtype=np.int64)
    try:
        assert h.history == 0
        for k in range(1, 6):
            write(h, k)
        batch = h.read_since(0)
        assert batch.counts.tolist() == [5] and batch.missed == 4 and whole(batch)
        with pytest.raises(ZeroDivisionError):
            with h.write_view():
                raise ZeroDivisionError
        with pytest.raises(TimeoutError):  # the aborted write is no publication
            h.read_since(5, timeout=0)
        write(h, 6)
        assert h.read_since(5).counts.tolist() == [6]
    finally:
        h.close()


def test_iter_since_yields_every_frame_with_what_was_lost_before_it(hist):
    for k in (1, 2, 4, 5):
        write(hist, k, count=k)
    pubs = list(hist.iter_since(0, timeout=0))
    assert [(p.count, p.frame_id, p.missed_publications) for p in pubs] == [
        (1, 1001, 0),
        (2, 1002, 0),
        (4, 1004, 1),
        (5, 1005, 0),
    ]
    assert all(np.unique(p.payload).tolist() == [p.count] for p in pubs)


def test_read_since_view_gives_read_only_views_of_the_shared_slots(hist):
    for k in range(1, 5):
        write(hist, k)
    with hist.read_since_view(1) as batch:
        assert batch.counts.tolist() == [2, 3, 4] and whole(batch)
        assert all(not v.flags.writeable for v in batch.frames)
        copies = [v.copy() for v in batch.frames]
    assert [c[0, 0] for c in copies] == [2, 3, 4]


def test_read_since_view_raises_when_the_writer_laps_a_view_in_use(name):
    h = shmstream.create(name, shape=SHAPE, dtype=np.int64, history=2)
    try:
        for k in range(1, 4):
            write(h, k)
        with pytest.raises(shmstream.FrameOverwrittenError, match="overwritten"):
            with h.read_since_view(0) as batch:
                assert batch.counts.tolist() == [1, 2, 3]
                write(h, 4)  # overwrites the slot of count 1
    finally:
        h.close()


# ---- across processes -----------------------------------------------------------------------


def child_writer_in_bursts(stream_name, bursts, go, done):
    """Writes each burst at full speed once told to, then reports it done:
    the reader does not read during a burst, so it falls behind by exactly
    the burst."""
    h = shmstream.open(stream_name)
    k = h.count
    for size in bursts:
        assert go.wait(support.WAIT)
        go.clear()
        for _ in range(size):
            k += 1
            h.write(frame(k), frame_id=1000 + k)
        done.set()
    h.close()


def test_a_reader_that_sleeps_through_bursts_sees_every_frame_within_history_and_counts_the_rest(
    hist, name, spawn, ctx
):
    bursts = [8, 3, 9, 12, 1, 20]  # history 8: 9 slots hold a burst of 9 whole
    go, done = ctx.Event(), ctx.Event()
    child = spawn(child_writer_in_bursts, name, bursts, go, done)
    after = 0
    for size in bursts:
        go.set()
        child.wait_event(done)
        done.clear()
        batch = hist.read_since(after, timeout=support.WAIT)
        held = min(size, 9)
        assert batch.counts.tolist() == list(range(after + size - held + 1, after + size + 1))
        assert batch.missed == size - held and whole(batch)
        after = batch.last_count
    assert child.result() is None


def child_writer_at_full_speed(stream_name, n):
    h = shmstream.open(stream_name)
    for k in range(1, n + 1):
        h.write(frame(k, (256, 64)), frame_id=1000 + k)
    h.close()


def test_a_reader_racing_a_full_speed_writer_gets_whole_frames_and_exact_miss_counts(name, spawn):
    n = 20000
    h = shmstream.create(name, shape=(256, 64), dtype=np.int64, history=16)
    try:
        child = spawn(child_writer_at_full_speed, name, n)
        after, got, missed = 0, 0, 0
        while after < n:
            batch = h.read_since(after, timeout=support.WAIT)
            assert batch.last_count > after
            if not len(batch):  # every newer frame was overwritten before its copy
                assert batch.missed == batch.last_count - after
            else:
                assert batch.counts.tolist() == sorted(set(batch.counts.tolist()))
                assert batch.counts[0] > after and batch.last_count >= batch.counts[-1]
            assert whole(batch), "a history frame mixes two writes"
            got += len(batch)
            missed += batch.missed
            after = batch.last_count
        assert got + missed == n  # every publication is either returned or counted
        assert child.result() is None
    finally:
        h.close()


# ---- the handle, the header, the arguments ---------------------------------------------------


def test_history_shows_in_stat_describe_and_the_config(hist, name):
    assert hist.history == 8 and hist.slots == 9
    assert shmstream.stat(name)["history"] == 8
    assert "history:      8" in hist.describe()
    config = hist.to_config()
    assert config["history"] == 8 and "slots" not in config
    hist.unlink()
    again = shmstream.SharedMemory.create_from_config(config)
    try:
        assert again.history == 8
    finally:
        again.close()


@pytest.mark.parametrize(
    "bad,error,match",
    [
        (-1, ValueError, "history must be >= 0"),
        (_native.MAX_HISTORY + 1, ValueError, "history must be 0 to"),
        (1.5, TypeError, "history must be an integer"),
        (True, TypeError, "history must be an integer"),
        ("4", TypeError, "history must be an integer"),
    ],
)
def test_a_bad_history_is_refused(name, bad, error, match):
    with pytest.raises(error, match=match):
        shmstream.create(name, shape=SHAPE, history=bad)


def test_history_with_slots_or_on_a_gpu_stream_is_refused(name):
    with pytest.raises(ValueError, match="leave slots out"):
        shmstream.create(name, shape=SHAPE, history=4, slots=3)
    with pytest.raises(ValueError, match="not available on GPU streams"):
        shmstream.create(name, shape=SHAPE, history=4, gpu_device="cuda:0")


@pytest.mark.parametrize(
    "kwargs,error,match",
    [
        ({"count": -1}, ValueError, "count must be in"),
        ({"count": "3"}, TypeError, "count must be an integer"),
        ({"max_frames": 0}, ValueError, "max_frames must be >= 1"),
        ({"timeout": -1}, ValueError, "timeout must be >= 0"),
        ({"out": np.zeros((2, 3), np.int64)}, ValueError, "out has shape"),
        ({"out": np.zeros((2, *SHAPE), np.int32)}, ValueError, "out has shape"),
        ({"out": [1, 2]}, TypeError, "out must be"),
    ],
)
def test_bad_read_since_arguments_are_refused(hist, kwargs, error, match):
    write(hist, 1)
    with pytest.raises(error, match=match):
        hist.read_since(**{"count": 0, **kwargs})


def test_history_reads_on_a_closed_handle_raise(hist):
    hist.close()
    with pytest.raises(RuntimeError, match="closed"):
        hist.read_since(0)
    with pytest.raises(RuntimeError, match="closed"):
        with hist.read_since_view(0):
            pass


def _rewrite_checksum(path: str) -> None:
    support.patch_identity(path, 0, b"")  # patches nothing, stores the checksum


@pytest.mark.parametrize("how", ["slot count", "history too deep", "records cut"])
def test_a_history_header_that_does_not_add_up_is_refused_as_corrupt(name, how):
    h = shmstream.create(name, shape=SHAPE, dtype=np.int64, history=4)
    h.close()
    path = support.segment_path(name)
    if how == "slot count":
        support.patch_bytes(path, support.field("slot_count")[0], (4).to_bytes(4, "little"))
    elif how == "history too deep":
        support.patch_bytes(
            path, support.field("history")[0], (_native.MAX_HISTORY + 1).to_bytes(4, "little")
        )
    else:
        import os

        os.truncate(path, os.path.getsize(path) - 4096)
    if how != "records cut":
        _rewrite_checksum(path)  # the header is self-consistent but for the rule tested
    with pytest.raises(shmstream.CorruptStreamError):
        shmstream.open(name)
    shmstream.unlink(name)
