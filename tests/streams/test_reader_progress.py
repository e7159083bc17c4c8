"""Readers never starve under contending writers (issue 48; docs/ABI.md,
"Reader's turn"): three or six writer processes contend for one stream's
lock and write back to back (``write`` and ``write_view`` in turn), while
two reader processes each complete a fixed number of snapshot reads
(``read_publication(out=)``, as pyshmem's own stress test does), and go on
until at least ``MOVED`` writes landed while they read. Every reader must
finish, none torn and none going back in count.

Synchronised on a barrier (readers start once every writer has written)
and on the readers' results; the writers stop when the readers are done.
A reader that starved would fail by its result's timeout, not by a timed
assertion, so a slow machine makes the test slower, not red.
"""

from __future__ import annotations

import numpy as np
import pytest

import shmstream

import support

READERS = 2
#: frame bytes -> reads each reader completes (fewer for big frames: each
#: copy of 4 MiB is a millisecond on a small machine)
READS = {4096: 2000, 128 * 1024: 400, 4 * 1024 * 1024: 40}
#: writes a reader must see land while it reads, so that it read under
#: contention whatever the scheduler did
MOVED = 20


def writer(stream_name, value, started, stop):
    h = shmstream.open(stream_name)
    payload = np.full(h.shape, value, dtype=np.int64)
    writes = 0
    while writes < 2 or not stop.is_set():
        if writes % 2:
            h.write(payload, frame_id=value, timeout=support.WAIT)
        else:
            with h.write_view(frame_id=value, timeout=support.WAIT) as view:
                view[: view.size // 2] = value
                view[view.size // 2 :] = value
        writes += 1
        if writes == 1:
            started.wait(support.WAIT)
    h.close()
    return writes


def reader(stream_name, reads, started):
    h = shmstream.open(stream_name, readonly=True)
    out = np.empty(h.shape, dtype=np.int64)
    torn = regressions = 0
    started.wait(support.WAIT)
    first = last = h.count
    done = 0
    # the quota, and at least MOVED writes landing while this reader reads
    # (on a busy machine the writers may not run during a short quota)
    while done < reads or last - first < MOVED:
        pub = h.read_publication(out=out, timeout=support.WAIT)
        # each writer fills the frame with its value and stamps it as the
        # frame id: anything else mixes two writes
        if not (out == out[0]).all() or pub.frame_id != out[0]:
            torn += 1
        if pub.count < last:
            regressions += 1
        last = pub.count
        done += 1
    h.close()
    return torn, regressions, done


@pytest.mark.parametrize("nbytes", sorted(READS), ids=lambda n: f"{n // 1024}KiB")
@pytest.mark.parametrize("writers", [3, 6])
def test_every_reader_completes_its_reads_while_writers_contend(name, spawn, ctx, writers, nbytes):
    h = shmstream.create(name, shape=(nbytes // 8,), dtype=np.int64)
    try:
        started = ctx.Barrier(writers + READERS + 1)
        stop = ctx.Event()
        ws = [spawn(writer, name, v, started, stop) for v in range(1, writers + 1)]
        rs = [spawn(reader, name, READS[nbytes], started) for _ in range(READERS)]
        started.wait(support.WAIT)  # every writer has written once: they contend
        try:
            reports = [r.result() for r in rs]
        finally:
            stop.set()
        writes = [w.result() for w in ws]
        for torn, regressions, _done in reports:
            assert (torn, regressions) == (0, 0)
        assert all(n >= 2 for n in writes)
        assert h.count == sum(writes)
    finally:
        h.close()


def history_reader(stream_name, reads, started):
    h = shmstream.open(stream_name, readonly=True)
    empty = torn = wrong_accounting = 0
    started.wait(support.WAIT)
    after = h.count
    for _ in range(reads):
        batch = h.read_since(after, timeout=support.WAIT)
        if len(batch.frames) == 0:
            empty += 1
        for frame, fid in zip(batch.frames, batch.frame_ids):
            if not (frame == frame[0]).all() or fid != frame[0]:
                torn += 1
        if batch.last_count - after != len(batch.frames) + batch.missed:
            wrong_accounting += 1
        after = batch.last_count
    h.close()
    return empty, torn, wrong_accounting


@pytest.mark.parametrize("history", [1, 4])
def test_a_history_reader_outrun_by_writers_still_gets_the_newest_frame(name, spawn, ctx, history):
    # docs/ABI.md, "History": after a few rounds in which every frame it
    # located was overwritten under its copy, read_since copies the newest
    # publication by the snapshot protocol (the reader's turn at the lock),
    # so no batch is empty while writers keep publishing.
    # Six writers of 4 MiB frames outrun two readers on a small machine (the
    # build before this rule returned 36 and 45 empty batches of 300 here).
    writers = 6
    h = shmstream.create(name, shape=(4 * 1024 * 1024 // 8,), dtype=np.int64, history=history)
    try:
        started = ctx.Barrier(writers + READERS + 1)
        stop = ctx.Event()
        ws = [spawn(writer, name, v, started, stop) for v in range(1, writers + 1)]
        rs = [spawn(history_reader, name, 200, started) for _ in range(READERS)]
        started.wait(support.WAIT)
        try:
            reports = [r.result() for r in rs]
        finally:
            stop.set()
        writes = [w.result() for w in ws]
        assert reports == [(0, 0, 0)] * READERS
        assert h.count == sum(writes)
    finally:
        h.close()
