"""Every crash window, on purpose: a writer (or a channel end) is killed at
each named crash point of the core in turn (docs/ABI.md, "Crash points"),
while readers validate every frame they get.

After each death: readers got only whole frames (payload, frame id and
count of one write) or InconsistentStreamError, never a mix; nobody hangs;
the stream says what the table in docs/ABI.md says; the next write recovers
it completely (parities even, reads without the lock, metadata and payload
of one write); nothing is left in /dev/shm.

The points are armed with ``fault_arm`` in the child: the child writes
good frames until the readers have read some, arms the point, and the next pass kills it with SIGKILL at that
instruction. A point that is never reached fails the test (the child would
exit 0), so no case can pass by missing its window.
"""

from __future__ import annotations

import re
import signal
import threading
from pathlib import Path

import numpy as np
import pytest

import shmstream
from shmstream import _testhooks
from shmstream.errors import ChannelClosedError

import support

SHAPE = (64, 256)  # 128 KiB of int64: a copy long enough for readers to meet it
READERS = 2
#: whole frames every reader must have read before the writer arms its point,
#: so that the death happens while they read
READS_BEFORE_DEATH = 20

#: What each stream point leaves, per docs/ABI.md: "abandoned" (readers get
#: InconsistentStreamError, the publish line describes the previous frame),
#: "published" (the armed write is complete), "previous" (no write began).
STREAM_POINTS = {
    "stream.a": "abandoned",
    "stream.copy": "abandoned",
    "stream.u": "abandoned",
    "stream.b1": "abandoned",
    "stream.slot_even": "abandoned",
    "stream.meta": "abandoned",
    "stream.count": "abandoned",
    "stream.b2": "published",
    "stream.c": "published",
    "lock.acquired": "previous",
    "lock.unlock": "published",
}

#: The points each way of writing passes (write_view fills the slot in
#: place: no copy; an aborted write_view publishes no metadata).
MODE_POINTS = {
    "write": list(STREAM_POINTS),
    "write_view": [p for p in STREAM_POINTS if p != "stream.copy"],
    "clear": [p for p in STREAM_POINTS if p != "stream.copy"],
    "abort": [
        "stream.a",
        "stream.u",
        "stream.b1",
        "stream.slot_even",
        "stream.b2",
        "stream.c",
        "lock.acquired",
        "lock.unlock",
    ],
}

REPAIR_POINTS = ["lock.takeover", "repair.r1", "repair.r3", "repair.r4"]

SLEEP_POINTS = ["sleep.claim", "sleep.release"]
#: A reader killed holding its turn at the lock: tests/streams/test_reader_turn.py.
READ_TURN_POINTS = ["read.claimed", "read.locked"]

#: History streams: every stream point of a write, plus the ones only a
#: history stream passes (its slot record; the repair emptying it).
HISTORY_POINTS = {**STREAM_POINTS, "stream.record": "abandoned"}
HISTORY_REPAIR_POINTS = [*REPAIR_POINTS, "repair.history"]

CHANNEL_POINTS = [
    "ring.record",
    "ring.head",
    "ring.read",
    "ring.tail",
    "ring.release",
    "ring.detach",
]


def frame(k: int) -> np.ndarray:
    return np.full(SHAPE, k, np.int64)


class Boom(Exception):
    pass


# ---- the table of points is the core's ----------------------------------------------


def test_docs_abi_lists_exactly_the_cores_crash_points():
    text = (Path(__file__).resolve().parents[2] / "docs" / "ABI.md").read_text()
    section = text[text.index("### Crash points") :]
    section = section[: section.index("\n## ")]
    documented = re.findall(r"^\| `([a-z_.0-9]+)` \|", section, flags=re.M)
    assert documented == _testhooks.fault_points()


def test_every_stream_and_channel_point_is_tested_here():
    covered = (
        set(STREAM_POINTS)
        | set(REPAIR_POINTS)
        | set(CHANNEL_POINTS)
        | set(SLEEP_POINTS)
        | set(HISTORY_POINTS)
        | set(HISTORY_REPAIR_POINTS)
        | set(READ_TURN_POINTS)
    )
    assert covered == set(_testhooks.fault_points())


def test_an_unknown_crash_point_is_refused():
    with pytest.raises(ValueError, match="unknown crash point"):
        _testhooks.fault_arm("stream.nowhere")


# ---- children ---------------------------------------------------------------------------


def write_one(h, mode: str, k: int) -> None:
    if mode == "write":
        h.write(frame(k), frame_id=k)
    elif mode == "clear":
        # clear() publishes zeros and keeps the frame id: give it the id
        # of the zero frame first so that every frame stays self-describing
        h.clear()
    elif mode == "write_view":
        with h.write_view(frame_id=k) as view:
            view[...] = k
    elif mode == "abort":
        try:
            with h.write_view(frame_id=k) as view:
                view[: SHAPE[0] // 2] = k
                raise Boom
        except Boom:
            pass
    else:
        raise AssertionError(mode)


def child_write_then_die(stream_name, mode, point, progress, last_good):
    """Writes frames 1, 2, ... until the readers have read enough of them,
    reports the last good one, arms `point` and dies in the next write."""
    h = shmstream.open(stream_name)
    k = 0
    while k < 2 or progress.value < READERS * READS_BEFORE_DEATH:
        k += 1
        h.write(frame(k), frame_id=k)
    last_good.value = k  # shared memory: still there after the SIGKILL
    _testhooks.fault_arm(point)
    write_one(h, mode, k + 1)
    return "survived"  # the point was never reached


def child_repair_then_die(stream_name, point):
    h = shmstream.open(stream_name)
    _testhooks.fault_arm(point)
    h.write(frame(999), frame_id=999)  # takes the dead writer's lock over
    return "survived"


def child_reader(stream_name, progress, stop, report):
    """Reads until told to stop; counts whole frames, failed-write errors and
    mixed frames (the one thing that must never happen)."""
    h = shmstream.open(stream_name)
    whole = inconsistent = contributed = 0
    mixed = []
    while not stop.is_set():
        try:
            pub = h.read_publication(timeout=support.WAIT)
        except shmstream.InconsistentStreamError:
            inconsistent += 1
            continue
        values = np.unique(pub.payload)
        # a frame k is k everywhere with frame id k and count k; a clear()
        # is zeros (the frame id stays); anything else mixes two writes
        ok = values.tolist() == [0] or (
            values.tolist() == [pub.frame_id] and pub.frame_id == pub.count
        )
        if ok:
            whole += 1
            if pub.count and contributed < READS_BEFORE_DEATH:
                contributed += 1
                with progress.get_lock():
                    progress.value += 1
        else:
            mixed.append((pub.count, pub.frame_id, values[:4].tolist()))
    h.close()
    report.put((whole, inconsistent, mixed))


# ---- helpers ----------------------------------------------------------------------------


def kill_writer_at(spawn, ctx, stream_name, mode, point, readers=READERS):
    """Run the writer to its death at `point` with readers racing it (they
    read across the death and so repair the stream; readers=0 leaves the
    repair to the caller). Returns the last good count and the readers'
    reports."""
    progress = ctx.Value("q", 0 if readers else READERS * READS_BEFORE_DEATH)
    stop, report, last_good = ctx.Event(), ctx.Queue(), ctx.Value("q", 0)
    children = [spawn(child_reader, stream_name, progress, stop, report) for _ in range(readers)]
    writer = spawn(child_write_then_die, stream_name, mode, point, progress, last_good)
    code = writer.join()
    good = last_good.value
    assert code == -signal.SIGKILL, f"the writer did not die at {point} (exit code {code})"
    if readers:
        # the readers keep reading across the death and its repair
        h = shmstream.open(stream_name)
        try:
            for _ in range(20):
                try:
                    h.read(timeout=support.WAIT)
                except shmstream.InconsistentStreamError:
                    pass
        finally:
            h.close()
    stop.set()
    reports = [report.get(timeout=support.WAIT) for _ in children]
    for r in children:
        assert r.join() == 0
    return good, reports


def check_state_after(h, outcome: str, mode: str, good: int) -> int:
    """The stream as docs/ABI.md's table says; returns the count to expect
    before the recovery write."""
    if outcome == "abandoned":
        with pytest.raises(shmstream.InconsistentStreamError, match="exited"):
            h.read(timeout=support.WAIT)
        last = h.read_last_complete(timeout=support.WAIT)
        assert last.state == "abandoned"
        assert last.count == good and last.frame_id == good
        assert np.unique(last.payload).tolist() == [good]
        assert shmstream.stat(h.name)["aborted_writes"] == 1
        return good
    pub = h.read_publication(timeout=support.WAIT)
    if outcome == "previous":
        assert (pub.count, pub.frame_id) == (good, good)
        assert np.unique(pub.payload).tolist() == [good]
        return good
    assert outcome == "published"
    if mode == "clear":  # zeros, frame id kept
        assert (pub.count, pub.frame_id) == (good + 1, good)
        assert not pub.payload.any()
    else:
        assert (pub.count, pub.frame_id) == (good + 1, good + 1)
        assert np.unique(pub.payload).tolist() == [good + 1]
    return good + 1


def check_recovers(h, count_before: int) -> None:
    """The next good write recovers the stream completely."""
    k = count_before + 1
    h.write(frame(k), frame_id=k)
    st = shmstream.stat(h.name)
    assert st["write_sequence"] % 2 == 0, "the publish seqlock is left inverted"
    assert st["state"] == "valid"
    before = st["lock_acquisitions"]
    for _ in range(100):
        pub = h.read_publication(timeout=support.WAIT)
        assert (pub.count, pub.frame_id) == (k, k)
        assert np.unique(pub.payload).tolist() == [k]
    assert shmstream.stat(h.name)["lock_acquisitions"] == before, "reads fall back to the lock"


def check_readers(reports) -> None:
    for whole, _inconsistent, mixed in reports:
        assert not mixed, f"a reader got mixed frames: {mixed[:3]}"
        assert whole >= READS_BEFORE_DEATH


# ---- streams ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "mode,point",
    [(m, p) for m, points in MODE_POINTS.items() for p in points],
)
def test_a_writer_killed_at_each_point_leaves_whole_frames_or_an_error(
    name, spawn, ctx, mode, point
):
    h = shmstream.create(name, shape=SHAPE, dtype=np.int64)
    try:
        good, reports = kill_writer_at(spawn, ctx, name, mode, point)
        check_readers(reports)
        outcome = STREAM_POINTS[point]
        if mode == "abort" and outcome == "published":
            # the abort's own window completed: the stream reports the abort
            with pytest.raises(shmstream.InconsistentStreamError, match="aborted"):
                h.read(timeout=support.WAIT)
            assert h.read_last_complete().count == good
            count = good
        else:
            count = check_state_after(h, outcome, mode, good)
        check_recovers(h, count)
    finally:
        h.close()


@pytest.mark.parametrize("first", ["stream.copy", "stream.count"])
@pytest.mark.parametrize("point", REPAIR_POINTS)
def test_a_process_killed_while_repairing_leaves_the_same_repair_to_the_next(
    name, spawn, ctx, first, point
):
    h = shmstream.create(name, shape=SHAPE, dtype=np.int64)
    try:
        good, _ = kill_writer_at(spawn, ctx, name, "write", first, readers=0)
        repairer = spawn(child_repair_then_die, name, point)
        code = repairer.join()
        assert code == -signal.SIGKILL, f"the repairer did not die at {point} (exit {code})"
        # a third process finds the same abandoned frame, counted once
        count = check_state_after(h, "abandoned", "write", good)
        check_recovers(h, count)
    finally:
        h.close()


def test_a_blocked_reader_learns_of_the_death_without_waiting_out_its_timeout(name, spawn, ctx):
    h = shmstream.create(name, shape=SHAPE, dtype=np.int64)
    reader = shmstream.open(name)
    outcome = []

    def follow():
        try:
            while True:  # every new frame, until the writer's death is reported
                reader.read_new(timeout=support.WAIT)
        except Exception as exc:  # noqa: BLE001 - the test checks which one
            outcome.append(exc)

    t = threading.Thread(target=follow)
    t.start()
    try:
        kill_writer_at(spawn, ctx, name, "write", "stream.slot_even", readers=0)
        t.join(support.WAIT)
        assert not t.is_alive(), "a reader hangs on a dead writer"
        assert isinstance(outcome[0], shmstream.InconsistentStreamError), outcome
        assert "exited" in str(outcome[0])
    finally:
        reader.close()
        t.join(support.WAIT)
        h.close()


def test_the_debugger_reproduction_of_issue_10(name, spawn, ctx):
    # The writer stops inside publish() with the publish seq odd (where it
    # calls the clock) and is killed there; then four good writes.
    h = shmstream.create(name, shape=SHAPE, dtype=np.int64)
    try:
        good, reports = kill_writer_at(spawn, ctx, name, "write", "stream.meta")
        check_readers(reports)
        with pytest.raises(shmstream.InconsistentStreamError, match="exited"):
            h.read()
        for k in range(good + 1, good + 5):
            h.write(frame(k), frame_id=k)
        st = shmstream.stat(name)
        assert st["write_sequence"] % 2 == 0 and st["count"] == good + 4
        before = st["lock_acquisitions"]
        for _ in range(100):
            h.read()
        assert shmstream.stat(name)["lock_acquisitions"] == before
    finally:
        h.close()


# ---- history streams ----------------------------------------------------------------------

HISTORY = 8
#: The dying write publishes frame MARK + k (frame id MARK + k) as count k, so
#: a reader that returns it can be caught: an abandoned write must never be
#: history, a published one must be.
MARK = 1 << 40


def child_history_write_then_die(stream_name, point, progress, last_good):
    h = shmstream.open(stream_name)
    k = 0
    while k < HISTORY or progress.value < READERS * READS_BEFORE_DEATH:
        k += 1
        h.write(frame(k), frame_id=k)
    last_good.value = k
    _testhooks.fault_arm(point)
    h.write(frame(MARK + k + 1), frame_id=MARK + k + 1)
    return "survived"


def child_history_reader(stream_name, progress, until, report):
    """Follows the history with read_since until it has read count `until`
    (set by the parent once known); reports the counts it got, the marked
    ones, and any frame that is not whole or not in order (the things that
    must never happen)."""
    h = shmstream.open(stream_name)
    after = h.count
    got, marked, bad = [], [], []
    while not (until.value and after >= until.value):
        try:
            batch = h.read_since(after, timeout=0.05)
        except TimeoutError:
            continue
        for count, fid, payload in zip(
            batch.counts.tolist(), batch.frame_ids.tolist(), batch.frames
        ):
            values = np.unique(payload).tolist()
            if values != [fid] or fid not in (count, MARK + count) or (got and count <= got[-1]):
                bad.append((count, fid, values[:4]))
            got.append(count)
            if fid != count:
                marked.append(count)
            if len(got) <= READS_BEFORE_DEATH:
                with progress.get_lock():
                    progress.value += 1
        after = batch.last_count
    h.close()
    report.put((got, marked, bad))


def kill_history_writer_at(spawn, ctx, stream_name, point):
    progress, until = ctx.Value("q", 0), ctx.Value("q", 0)
    report, last_good = ctx.Queue(), ctx.Value("q", 0)
    readers = [
        spawn(child_history_reader, stream_name, progress, until, report) for _ in range(READERS)
    ]
    writer = spawn(child_history_write_then_die, stream_name, point, progress, last_good)
    code = writer.join()
    assert code == -signal.SIGKILL, f"the writer did not die at {point} (exit code {code})"
    # a write after the death: the readers see the stream go on past it
    h = shmstream.open(stream_name)
    try:
        h.write(
            frame(last_good.value + 100),
            frame_id=last_good.value + 100,
            count=last_good.value + 100,
        )
    finally:
        h.close()
    until.value = last_good.value + 100
    reports = [report.get(timeout=support.WAIT) for _ in readers]
    for r in readers:
        assert r.join() == 0
    return last_good.value, reports


def check_history_after_death(h, outcome: str, good: int) -> None:
    """The history holds whole frames of the good writes, the marked one
    exactly when it was published, and the recovery write after them."""
    batch = h.read_since(good - HISTORY + 2, timeout=support.WAIT)
    published = outcome == "published"
    want = list(range(good - HISTORY + 3, good + 1)) + ([good + 1] if published else [])
    want.append(good + 100)  # the write after the death
    assert batch.counts.tolist() == want
    for count, fid, payload in zip(batch.counts.tolist(), batch.frame_ids.tolist(), batch.frames):
        expected = MARK + count if published and count == good + 1 else count
        assert fid == expected and np.unique(payload).tolist() == [expected]
    assert batch.missed == (good + 100) - (good - HISTORY + 2) - len(want)


@pytest.mark.parametrize("point", list(HISTORY_POINTS))
def test_a_history_writer_killed_at_each_point_leaves_whole_history_without_the_dead_frame(
    name, spawn, ctx, point
):
    h = shmstream.create(name, shape=SHAPE, dtype=np.int64, history=HISTORY)
    try:
        good, reports = kill_history_writer_at(spawn, ctx, name, point)
        outcome = HISTORY_POINTS[point]
        for got, marked, bad in reports:
            assert not bad, f"a history reader got mixed or unordered frames: {bad[:3]}"
            assert len(got) >= READS_BEFORE_DEATH
            # an abandoned write is never history; a published one is
            assert marked == ([good + 1] if outcome == "published" else []), (marked, good)
            assert got[-1] == good + 100
        check_history_after_death(h, outcome, good)
    finally:
        h.close()


@pytest.mark.parametrize("first", ["stream.copy", "stream.count"])
@pytest.mark.parametrize("point", HISTORY_REPAIR_POINTS)
def test_a_process_killed_while_repairing_a_history_stream_leaves_the_history_whole(
    name, spawn, ctx, first, point
):
    h = shmstream.create(name, shape=SHAPE, dtype=np.int64, history=HISTORY)
    try:
        progress = ctx.Value("q", READERS * READS_BEFORE_DEATH)  # no readers to wait for
        last_good = ctx.Value("q", 0)
        writer = spawn(child_history_write_then_die, name, first, progress, last_good)
        assert writer.join() == -signal.SIGKILL
        good = last_good.value
        repairer = spawn(child_repair_then_die, name, point)
        assert repairer.join() == -signal.SIGKILL, f"the repairer did not die at {point}"
        # a third process finds the same abandoned frame, counted once
        check_state_after(h, "abandoned", "write", good)
        h.write(frame(good + 100), frame_id=good + 100, count=good + 100)
        check_history_after_death(h, "abandoned", good)
    finally:
        h.close()


# ---- sleepers -----------------------------------------------------------------------------


def child_sleep_then_die(stream_name, point):
    h = shmstream.open(stream_name)
    _testhooks.fault_arm(point)
    h.read_new(timeout=support.WAIT)  # claims a sleeper slot, sleeps, is woken, releases it
    return "survived"


@pytest.mark.parametrize("point", SLEEP_POINTS)
def test_a_reader_killed_claiming_or_releasing_its_sleeper_slot_leaves_no_phantom(
    name, spawn, point
):
    h = shmstream.create(name, shape=(4,), dtype=np.int64)
    words = support.HeaderWords(name)
    try:
        child = spawn(child_sleep_then_die, name, point)
        if point == "sleep.release":  # it dies on its way out of a sleep
            support.wait_for_waiter(name)
            h.write(np.full(4, 1, np.int64), frame_id=1)
        assert child.join() == -signal.SIGKILL
        # no sleeper bit is left: writes make no wake-up syscall for nobody
        assert words.u64("sleepers") == 0 and shmstream.stat(name)["waiters"] == 0
        # and a live reader still sleeps and is woken
        reader = shmstream.open(name)
        got = []
        t = threading.Thread(target=lambda: got.append(reader.read_new(timeout=support.WAIT)))
        t.start()
        support.wait_for_waiter(name)
        h.write(np.full(4, 7, np.int64), frame_id=7)
        t.join(support.WAIT)
        assert got and got[0].tolist() == [7, 7, 7, 7]
        reader.close()
    finally:
        words.close()
        h.close()


def test_a_full_sleeper_table_of_dead_owners_is_taken_over_by_the_next_sleeper(name):
    h = shmstream.create(name, shape=(4,), dtype=np.int64)
    offset, size = _testhooks.layout()["sleeper"]
    dead = 0x7FFFFFF0  # a pid that does not run (pid_max is far below)
    support.patch_bytes(
        support.segment_path(name), offset, (dead | (1 << 32)).to_bytes(8, "little") * (size // 8)
    )
    reader = shmstream.open(name)
    got = []
    t = threading.Thread(target=lambda: got.append(reader.read_new(timeout=support.WAIT)))
    try:
        t.start()
        support.wait_for_waiter(name)  # it sleeps in a slot it took over
        words = support.HeaderWords(name)
        assert bin(words.u64("sleepers")).count("1") == 1
        words.close()
        h.write(np.full(4, 3, np.int64), frame_id=3)
        t.join(support.WAIT)
        assert got and got[0].tolist() == [3, 3, 3, 3]
    finally:
        reader.close()
        t.join(support.WAIT)
        h.close()


# ---- channels ---------------------------------------------------------------------------

K = 100  # messages before the armed one


@pytest.fixture
def chan(make_name):
    return make_name("chan")


def child_producer_die(chan, point, zero_copy):
    tx = shmstream.open_channel(chan, role="producer")
    for i in range(K):
        tx.send(i.to_bytes(4, "little"))
    _testhooks.fault_arm(point)  # one core: the arming covers channels too
    if point == "ring.detach":
        tx.close()
    else:
        tx.send(K.to_bytes(4, "little"))
    return "survived"


def child_consumer_die(chan, point, zero_copy):
    rx = shmstream.open_channel(chan, role="consumer")
    for i in range(K):
        assert int.from_bytes(rx.recv(timeout=support.WAIT).data, "little") == i
    _testhooks.fault_arm(point)  # one core: the arming covers channels too
    if point == "ring.detach":
        rx.close()
    elif zero_copy:
        with rx.recv_zero_copy(timeout=support.WAIT) as m:
            assert int.from_bytes(bytes(m.data), "little") == K
    else:
        assert int.from_bytes(rx.recv(timeout=support.WAIT).data, "little") == K
    return "survived"


PRODUCER_POINTS = {"ring.record": K, "ring.head": K + 1, "ring.detach": K}
#: consumer points: the first message the next consumer receives
CONSUMER_POINTS = {"ring.read": K, "ring.tail": K + 1, "ring.release": K, "ring.detach": K}


@pytest.mark.parametrize("point", list(PRODUCER_POINTS))
def test_a_producer_killed_at_each_point_ends_the_stream_cleanly(chan, spawn, point):
    rx = shmstream.channel(chan, 1 << 16, role="consumer")
    try:
        child = spawn(child_producer_die, chan, point, False)
        got = []
        with pytest.raises(ChannelClosedError):
            while True:  # no timeout: the dead producer must end the wait
                got.append(int.from_bytes(rx.recv().data, "little"))
        assert child.join() == -signal.SIGKILL
        assert got == list(range(PRODUCER_POINTS[point]))
        tx = shmstream.open_channel(chan, role="producer")  # takes over
        tx.send(b"\x07\x00\x00\x00")
        assert rx.recv(timeout=support.WAIT).data == b"\x07\x00\x00\x00"
        tx.close()
    finally:
        rx.close()


@pytest.mark.parametrize("point", list(CONSUMER_POINTS))
def test_a_consumer_killed_at_each_point_loses_no_message(chan, spawn, point):
    tx = shmstream.channel(chan, 1 << 16, role="producer")
    try:
        for i in range(K + 3):
            tx.send(i.to_bytes(4, "little"))
        child = spawn(child_consumer_die, chan, point, point == "ring.release")
        assert child.join() == -signal.SIGKILL
        rx = shmstream.open_channel(chan, role="consumer")  # takes over
        rest = [int.from_bytes(m.data, "little") for m in rx.drain(1000)]
        assert rest == list(range(CONSUMER_POINTS[point], K + 3))
        rx.close()
    finally:
        tx.close()
