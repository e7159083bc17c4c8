"""Many writers and readers at once, across processes and threads.

Every payload is self-checking: all elements of a frame equal one value,
and that value is also the frame id published with it. A torn read (bytes of
two frames) or a frame id from another write shows up as a mismatch.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import shmstream

from support import WAIT

SHAPE = (128, 1024)  # 1 MiB of float64: a copy takes long enough to race
MIN_READS = 1500
MIN_DISTINCT = 50


def check_frame(pub) -> str | None:
    """None if the publication is one whole frame, else what is wrong."""
    payload = pub.payload
    first = payload.flat[0]
    if not (payload == first).all():
        return f"torn: values {np.unique(payload)[:5]} in one frame"
    if int(first) != pub.frame_id:
        return f"frame_id {pub.frame_id} published with payload {first}"
    return None


# ---- children ---------------------------------------------------------------------


def child_writer(stream_name, writer_id, start, stop):
    h = shmstream.open(stream_name)
    start.wait(WAIT)
    i = 0
    while not stop.is_set():
        i += 1
        value = writer_id * 1_000_000 + i
        h.write(np.full(h.shape, value, np.float64), frame_id=value)
    h.close()
    return i


def child_reader(stream_name, start):
    h = shmstream.open(stream_name)
    start.wait(WAIT)
    deadline = time.monotonic() + WAIT
    reads, distinct, problems = 0, set(), []
    while reads < MIN_READS or len(distinct) < MIN_DISTINCT:
        pub = h.read_publication(timeout=WAIT)
        reads += 1
        distinct.add(pub.frame_id)
        problem = check_frame(pub)
        if problem:
            problems.append(problem)
        if time.monotonic() > deadline:
            break
    h.close()
    return reads, len(distinct), problems[:10]


def child_echo(request_name, response_name, rounds, ready):
    req = shmstream.open(request_name)
    resp = shmstream.open(response_name)
    ready.set()  # opened before the first request: it is newer than the open
    for _ in range(rounds):
        value = req.read_new(timeout=WAIT)
        resp.write(value + 1)
    req.close()
    resp.close()


def child_echo_same_stream(stream_name, rounds, ready):
    h = shmstream.open(stream_name)
    ready.set()
    for _ in range(rounds):
        value = h.read_new(timeout=WAIT)  # never its own write
        h.write(-value)
    h.close()


def child_write_n(stream_name, n, start):
    h = shmstream.open(stream_name)
    start.wait(WAIT)
    for i in range(1, n + 1):
        h.write(np.full(h.shape, i, np.int64), frame_id=i)
    h.close()


def child_wait_once(stream_name, ready):
    h = shmstream.open(stream_name)
    ready.wait(WAIT)  # a Barrier: every reader has opened
    value = h.read_new(timeout=WAIT)
    h.close()
    return value.tolist()


# ---- torn reads ---------------------------------------------------------------------------


@pytest.mark.parametrize("slots", [1, 2, 3])
def test_readers_never_see_a_torn_frame_while_several_processes_write(name, spawn, ctx, slots):
    h = shmstream.create(name, shape=SHAPE, dtype=np.float64, slots=slots)
    start, stop = ctx.Event(), ctx.Event()
    writers = [spawn(child_writer, name, k, start, stop) for k in (1, 2)]
    readers = [spawn(child_reader, name, start) for _ in range(2)]
    try:
        start.set()
        results = [r.result(timeout=2 * WAIT) for r in readers]
    finally:
        stop.set()
    writes = [w.result() for w in writers]
    try:
        total_reads = sum(r[0] for r in results)
        assert total_reads >= 2 * MIN_READS
        for _reads, distinct, problems in results:
            assert problems == [], problems
            assert distinct >= MIN_DISTINCT, "the readers did not race any writer"
        assert h.count == sum(writes)
        assert check_frame(h.read_publication()) is None
    finally:
        h.close()


def test_readers_never_see_a_torn_frame_while_several_threads_write(name):
    h = shmstream.create(name, shape=(64, 1024), dtype=np.float64)
    stop = threading.Event()
    problems, writes = [], []

    def writer(k):
        w = shmstream.open(name)
        i = 0
        while not stop.is_set():
            i += 1
            value = k * 1_000_000 + i
            w.write(np.full(w.shape, value, np.float64), frame_id=value)
        writes.append(i)
        w.close()

    def reader():
        r = shmstream.open(name)
        for _ in range(500):
            problem = check_frame(r.read_publication(timeout=WAIT))
            if problem:
                problems.append(problem)
        r.close()

    writer_threads = [threading.Thread(target=writer, args=(k,)) for k in (1, 2)]
    reader_threads = [threading.Thread(target=reader) for _ in range(2)]
    for t in writer_threads + reader_threads:
        t.start()
    for t in reader_threads:
        t.join(2 * WAIT)
    stop.set()
    for t in writer_threads:
        t.join(WAIT)
    try:
        assert problems == []
        assert h.count == sum(writes)
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
def test_read_new_under_a_writer_that_never_pauses_pairs_each_payload_with_its_own_count(
    name, spawn, ctx, slots
):
    # Small frames make the writer's publish and the reader's check race as
    # often as possible: a payload must never come with another write's
    # count or frame id, and read_new must never return a frame twice.
    h = shmstream.create(name, shape=(8,), dtype=np.int64, slots=slots)
    start, stop = ctx.Event(), ctx.Event()
    writer = spawn(child_write_until, name, start, stop)
    problems, last = [], 0
    try:
        start.set()
        for _ in range(20000):
            pub = h.read_new_publication(timeout=WAIT)
            if pub.count <= last:
                problems.append(f"count {pub.count} after {last}")
            if not (pub.payload == pub.count).all() or pub.frame_id != pub.count:
                problems.append(f"count {pub.count} frame {pub.frame_id} payload {pub.payload[0]}")
            last = pub.count
            if len(problems) > 5:
                break
    finally:
        stop.set()
    writer.result()
    try:
        assert problems == []
    finally:
        h.close()


# ---- read_new never misses a request ------------------------------------------------------


@pytest.mark.parametrize("notify", [False, True], ids=["plain", "notify"])
def test_request_response_ping_pong_over_read_new_never_deadlocks(make_name, spawn, ctx, notify):
    rounds = 1000
    req = shmstream.create(make_name("req"), shape=(1,), dtype=np.int64, notify=notify)
    resp = shmstream.create(make_name("resp"), shape=(1,), dtype=np.int64, notify=notify)
    ready = ctx.Event()
    echo = spawn(child_echo, req.name, resp.name, rounds, ready)
    try:
        assert ready.wait(WAIT)
        for i in range(rounds):
            req.write(np.array([i]))
            # The reply may land before this call: read_new must still
            # return it (pyshmem's edge-triggered read_new deadlocks here).
            assert resp.read_new(timeout=WAIT)[0] == i + 1, f"round {i}"
        echo.result()
        assert resp.count == rounds and resp.missed_writes == 0
        assert resp.total_missed_writes == 0
    finally:
        req.close()
        resp.close()


def test_ping_pong_on_one_stream_never_returns_a_handles_own_write(name, spawn, ctx):
    rounds = 500
    h = shmstream.create(name, shape=(1,), dtype=np.int64)
    ready = ctx.Event()
    echo = spawn(child_echo_same_stream, name, rounds, ready)
    try:
        assert ready.wait(WAIT)
        for i in range(1, rounds + 1):
            h.write(np.array([i]))
            assert h.read_new(timeout=WAIT)[0] == -i, f"round {i}"
        echo.result()
        assert h.count == 2 * rounds
    finally:
        h.close()


def test_read_new_publication_accounts_for_every_write_as_read_or_missed(name, spawn, ctx):
    n = 3000
    h = shmstream.create(name, shape=(16,), dtype=np.int64)
    start = ctx.Event()
    writer = spawn(child_write_n, name, n, start)
    reads, missed, last = 0, 0, 0
    try:
        start.set()
        while last < n:
            pub = h.read_new_publication(timeout=WAIT)
            assert pub.count > last
            assert pub.missed_publications == pub.count - last - 1
            assert (pub.payload == pub.count).all() and pub.frame_id == pub.count
            reads += 1
            missed += pub.missed_publications
            last = pub.count
        writer.result()
        assert reads + missed == n
        assert h.total_missed_writes == missed
        with pytest.raises(TimeoutError):
            h.read_new_publication(timeout=0.05)
    finally:
        h.close()


def test_one_write_wakes_every_waiting_reader_process(name, spawn, ctx):
    h = shmstream.create(name, shape=(3,), dtype=np.int64)
    ready = ctx.Barrier(4)
    readers = [spawn(child_wait_once, name, ready) for _ in range(3)]
    try:
        ready.wait(WAIT)  # all three opened before the write
        h.write(np.array([7, 8, 9]))
        for r in readers:
            assert r.result() == [7, 8, 9]
    finally:
        h.close()
