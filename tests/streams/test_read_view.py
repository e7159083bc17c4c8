"""Zero-copy reads: read_view / read_new_view yield a Publication whose
payload is a read-only view of the shared slot, and say so when the writer
overwrote it during the block instead of handing over a mixed frame."""

import numpy as np
import pytest

import shmstream

from support import WAIT


def test_read_view_yields_the_latest_frame_read_only_with_its_metadata(name):
    h = shmstream.create(name, shape=(4,), dtype=np.float32)
    try:
        h.write(np.arange(4, dtype=np.float32), frame_id=9)
        r = shmstream.open(name)
        with r.read_view() as pub:
            assert pub.payload.tolist() == [0, 1, 2, 3]
            assert (pub.count, pub.frame_id) == (1, 9)
            assert not pub.payload.flags.writeable
            with pytest.raises(ValueError):
                pub.payload[0] = 1
        r.close()
    finally:
        h.close()


def test_read_new_view_waits_for_a_publication_the_handle_has_not_seen(name):
    h = shmstream.create(name, shape=(2,), dtype=np.int64)
    try:
        r = shmstream.open(name)
        h.write(np.array([1, 1]))  # lands before the call: not missed
        with r.read_new_view(timeout=WAIT) as pub:
            assert pub.payload.tolist() == [1, 1] and pub.count == 1
        with pytest.raises(TimeoutError):
            with r.read_new_view(timeout=0.05):
                pass
        h.write(np.array([2, 2]))
        h.write(np.array([3, 3]))
        with r.read_new_view(timeout=WAIT) as pub:
            assert pub.payload.tolist() == [3, 3]
            assert pub.missed_publications == 1 and r.missed_writes == 1
        r.close()
    finally:
        h.close()


def test_one_write_during_the_view_fills_the_other_slot_and_the_view_stays_valid(name):
    h = shmstream.create(name, shape=(3,), dtype=np.int64)  # 2 slots
    try:
        h.write(np.array([1, 1, 1]))
        with h.read_view() as pub:
            h.write(np.array([2, 2, 2]))
            assert pub.payload.tolist() == [1, 1, 1]
    finally:
        h.close()


@pytest.mark.parametrize("slots, writes", [(1, 1), (2, 2), (3, 3)])
def test_a_view_the_writer_laps_raises_FrameOverwrittenError(name, slots, writes):
    h = shmstream.create(name, shape=(3,), dtype=np.int64, slots=slots)
    try:
        h.write(np.array([1, 1, 1]))
        with pytest.raises(shmstream.FrameOverwrittenError, match="overwritten"):
            with h.read_view():
                for k in range(writes):
                    h.write(np.full(3, 10 + k))
    finally:
        h.close()


def child_write_until(stream_name, start, stop):
    h = shmstream.open(stream_name)
    start.wait(WAIT)
    i = 0
    while not stop.is_set():
        i += 1
        h.write(np.full(h.shape, i, np.int64), frame_id=i)
    h.close()
    return i


@pytest.mark.parametrize("slots", [1, 2])
def test_under_a_writer_that_never_pauses_a_view_is_whole_or_reported(name, spawn, ctx, slots):
    h = shmstream.create(name, shape=(4096,), dtype=np.int64, slots=slots)
    start, stop = ctx.Event(), ctx.Event()
    writer = spawn(child_write_until, name, start, stop)
    whole = overwritten = 0
    problems = []
    try:
        start.set()
        while whole + overwritten < 3000 and len(problems) < 5:
            try:
                with h.read_new_view(timeout=WAIT) as pub:
                    copy = np.array(pub.payload)
                    count, frame_id = pub.count, pub.frame_id
            except shmstream.FrameOverwrittenError:
                overwritten += 1
                continue
            whole += 1
            if not (copy == count).all() or frame_id != count:
                problems.append((count, frame_id, np.unique(copy)[:4].tolist()))
    finally:
        stop.set()
    writer.result()
    try:
        assert problems == [], "a view that validated held bytes of another frame"
        assert whole > 0
    finally:
        h.close()


def test_read_view_on_a_closed_handle_names_open(name):
    h = shmstream.create(name, shape=(1,))
    h.close()
    with pytest.raises(RuntimeError, match="closed shared memory"):
        with h.read_view():
            pass


# ---- a view kept after its block (issue 47, bug 6) ---------------------------


def child_write_view_kept(name):
    """Fills a frame with write_view, then tries to write the kept array."""
    with shmstream.open(name) as h:
        with h.write_view() as a:
            a[:] = 1
        try:
            a[:] = 9
        except ValueError as exc:
            return str(exc)
        return "wrote"


@pytest.mark.parametrize("locked", [False, True], ids=["write_view", "write_view_locked"])
def test_a_write_view_array_kept_after_its_block_is_read_only(name, locked):
    h = shmstream.create(name, shape=(3,), dtype=np.int64)
    try:
        r = shmstream.open(name)
        if locked:
            with h.locked(), h.write_view_locked() as a:
                a[:] = 1
        else:
            with h.write_view() as a:
                a[:] = 1
        with pytest.raises(ValueError, match="read-only"):
            a[:] = 9
        assert r.read().tolist() == [1, 1, 1]
        with h.write_view() as b:  # the next block's array is writable again
            b[:] = 2
        assert r.read().tolist() == [2, 2, 2] and not a.flags.writeable
        r.close()
    finally:
        h.close()


def test_a_write_view_array_kept_in_another_process_does_not_reach_readers(name, spawn):
    h = shmstream.create(name, shape=(3,), dtype=np.int64)
    try:
        assert "read-only" in spawn(child_write_view_kept, name).result()
        assert h.read().tolist() == [1, 1, 1]
    finally:
        h.close()


def _view_payloads(h):
    """Each zero-copy read view of ``h``: (the block, what it yields' frames)."""
    return [
        (h.read_view, lambda pub: pub.payload),
        (lambda: h.read_new_view(timeout=0), lambda pub: pub.payload),
        (lambda: h.read_since_view(0), lambda batch: batch.frames),
    ]


@pytest.mark.parametrize("which", [0, 1, 2], ids=["read_view", "read_new_view", "since_view"])
def test_a_read_view_used_after_its_block_raises_ViewEndedError(name, which):
    h = shmstream.create(name, shape=(3,), dtype=np.int64, history=4)
    try:
        r = shmstream.open(name)
        h.write(np.array([1, 1, 1]))
        block, frames = _view_payloads(r)[which]
        with block() as kept:
            inside = frames(kept)
            assert np.asarray(inside).ravel().tolist()[:3] == [1, 1, 1]
        h.write(np.array([2, 2, 2]))  # the slot may now hold a newer frame
        for use in (np.asarray, lambda p: p[0], lambda p: p.sum(), lambda p: p + 1, len):
            with pytest.raises(shmstream.ViewEndedError, match="ended with its block"):
                use(frames(kept))
        assert "ended zero-copy view" in repr(frames(kept))
        r.close()
    finally:
        h.close()
