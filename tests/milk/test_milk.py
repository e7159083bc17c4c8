"""milk/CACAO ImageStreamIO streams across processes (docs/milk.md): a
writer and a reader in separate processes in both directions, every milk
datatype, 1-D to 3-D shapes, several readers each waking on their own
semaphore, a reader that dies holding its claim, a writer killed in the
middle of a frame, no torn frame under a fast writer, keywords.

The files are made by shmstream.milk.create or patched by hand at the
offsets docs/milk.md documents; milk's own library is not needed (the
cross-check against it is by hand, docs/milk.md says how).
"""

from __future__ import annotations

import mmap
import os
import signal
import threading

import numpy as np
import pytest

import shmstream
from shmstream import milk

import support

SHAPES = [(7,), (3, 5), (2, 3, 4)]
WRITE_OFFSET = 288  # IMAGE_METADATA.write (docs/milk.md)


def frame_for(shape: tuple[int, ...], dtype: np.dtype, k: int) -> np.ndarray:
    n = int(np.prod(shape))
    a = (np.arange(n) + 7 * k) % 100
    if dtype.kind == "c":
        return (a + 1j * (a + 1)).astype(dtype).reshape(shape)
    return a.astype(dtype).reshape(shape)


# ---- children -----------------------------------------------------------------


def child_read_each(directory: str, names: list[str], ready) -> list[bool]:
    """Open each stream, wait for its first frame, compare it."""
    handles = [milk.open(n, dir=directory) for n in names]
    for h in handles:
        h.claim()
    ready.set()
    ok = []
    for h in handles:
        got = h.read_new(timeout=support.WAIT)
        ok.append(bool(np.array_equal(got, frame_for(h.shape, h.dtype, 1))))
        h.close()
    return ok


def child_write_each(directory: str, specs: list[tuple[str, tuple, str]], made) -> None:
    for name, shape, dt in specs:
        s = milk.create(name, shape, dt, dir=directory)
        s.write(frame_for(shape, np.dtype(dt), 1))
        s.close()
    made.set()


def child_wake_once(directory: str, name: str, claimed, q) -> None:
    with milk.open(name, dir=directory) as s:
        q.put(s.claim())
        claimed.set()
        q.put(s.read_new(timeout=support.WAIT).tolist())


def child_claim_and_hang(directory: str, name: str, claimed) -> None:
    s = milk.open(name, dir=directory)
    s.claim()
    claimed.set()
    signal.pause()


def child_die_mid_write(path: str, nbytes: int, offset: int) -> None:
    """What a milk writer does before it dies mid-frame: write = 1, half
    the pixels, then SIGKILL."""
    with open(path, "r+b") as f, mmap.mmap(f.fileno(), 0) as m:
        m[WRITE_OFFSET] = 1
        m[offset : offset + nbytes // 2] = b"\xff" * (nbytes // 2)
        os.kill(os.getpid(), signal.SIGKILL)


def child_fast_writer(directory: str, name: str, frames: int) -> None:
    with milk.open(name, dir=directory) as s:
        for k in range(1, frames + 1):
            s.write(np.full(s.shape, k, s.dtype))


def child_keywords(directory: str, name: str) -> dict:
    with milk.open(name, dir=directory) as s:
        kw = s.keywords
        s.set_keyword("FROMCHILD", "yes", "set in the child")
        return kw


# ---- tests ----------------------------------------------------------------------

ALL = [
    (f"s{code}x{len(shape)}", shape, str(dt))
    for code, dt in milk.CODE_TO_DTYPE.items()
    for shape in SHAPES
]


def test_every_datatype_and_shape_from_this_process_to_another(tmp_path):
    d = str(tmp_path)
    streams = [milk.create(n, shape, dt, dir=d) for n, shape, dt in ALL]
    ready = support.SPAWN.Event()
    child = support.Child(child_read_each, (d, [n for n, _, _ in ALL], ready))
    child.wait_event(ready)
    for s in streams:
        s.write(frame_for(s.shape, s.dtype, 1))
    assert child.result() == [True] * len(ALL)
    for s in streams:
        assert s.count == 1
        s.unlink()
        s.close()


def test_every_datatype_and_shape_from_another_process_to_this(tmp_path):
    d = str(tmp_path)
    made = support.SPAWN.Event()
    child = support.Child(child_write_each, (d, ALL, made))
    child.wait_event(made)
    child.result()
    for n, shape, dt in ALL:
        with milk.open(n, dir=d) as s:
            assert s.shape == shape and s.dtype == np.dtype(dt)
            pub = s.read_publication()
            assert np.array_equal(pub.payload, frame_for(shape, np.dtype(dt), 1))
            assert pub.count == 1
            s.unlink()


def test_several_readers_each_wake_on_their_own_semaphore(tmp_path):
    d = str(tmp_path)
    with milk.create("multi", (4, 4), "f4", dir=d, nsem=4) as w:
        kids, queues = [], []
        for _ in range(3):
            claimed, q = support.SPAWN.Event(), support.SPAWN.Queue()
            kids.append(support.Child(child_wake_once, (d, "multi", claimed, q)))
            kids[-1].wait_event(claimed)
            queues.append(q)
        indices = [q.get(timeout=support.WAIT) for q in queues]
        assert sorted(indices) == sorted(set(indices)), indices  # one each
        w.write(np.full((4, 4), 5, np.float32))
        for q, k in zip(queues, kids):
            assert q.get(timeout=support.WAIT) == [[5.0] * 4] * 4
            k.result()
        w.unlink()


def test_a_dead_readers_claim_is_taken_over_and_a_live_one_is_not(tmp_path):
    d = str(tmp_path)
    with milk.create("claims", (2,), "u1", dir=d, nsem=1) as w:
        claimed = support.SPAWN.Event()
        holder = support.Child(child_claim_and_hang, (d, "claims", claimed))
        holder.wait_event(claimed)
        with milk.open("claims", dir=d) as r:
            with pytest.raises(shmstream.ShmstreamOSError) as e:
                r.claim()
            assert "nsem" in str(e.value)
            holder.kill()
            assert r.claim() == 0  # the dead reader's entry is free
            w.write(np.array([1, 2], np.uint8))
            assert r.read_new(timeout=support.WAIT).tolist() == [1, 2]
        with open(w.path, "rb") as f:
            f.seek(w.layout.offsets["semReadPID"])
            assert int(np.frombuffer(f.read(4), np.int32)[0]) == 0  # released on close
        w.unlink()


def test_a_writer_killed_mid_write_never_gives_a_torn_frame(tmp_path):
    d = str(tmp_path)
    with milk.create("killed", (64,), "u1", dir=d) as w:
        w.write(np.zeros(64, np.uint8))
        off = w.layout.offsets["data"]
        child = support.Child(child_die_mid_write, (w.path, 64, off))
        assert child.join() == -signal.SIGKILL
        with milk.open("killed", dir=d, busy_timeout=0.01) as r:
            assert r.writing
            with pytest.raises(shmstream.InconsistentStreamError):
                r.read()
            w.write(np.full(64, 3, np.uint8))  # the next write recovers
            assert r.read().tolist() == [3] * 64
            assert not r.writing
        w.unlink()


def test_no_torn_frame_under_a_fast_writer_in_another_process(tmp_path):
    d = str(tmp_path)
    frames = 3000
    with milk.create("fast", (128, 128), "f4", dir=d) as r:
        child = support.Child(child_fast_writer, (d, "fast", frames))
        reads = 0
        while r.count < frames:
            a = r.read()
            assert (a == a.flat[0]).all(), "torn frame"
            reads += 1
        child.result()
        assert reads > 0
        assert r.read_publication().count == frames
        r.unlink()


def test_read_new_times_out_and_counts_missed_writes(tmp_path):
    with (
        milk.create("miss", (3,), "i4", dir=str(tmp_path)) as w,
        milk.open("miss", dir=str(tmp_path)) as r,
    ):
        with pytest.raises(TimeoutError):
            r.read_new(timeout=0.01)
        assert r.semaphore is not None
        for k in range(4):
            w.write(np.full(3, k, np.int32))
        p = r.read_new_publication(timeout=support.WAIT)
        assert p.count == 4 and p.missed_publications == 3 and r.missed_writes == 3
        assert p.payload.tolist() == [3, 3, 3]
        w.unlink()


def test_keywords_between_processes(tmp_path):
    d = str(tmp_path)
    with milk.create("kw", (2,), "f8", dir=d, nkw=4) as w:
        w.set_keyword("GAIN", 0.25, "loop gain")
        w.set_keyword("NMODES", 42)
        w.set_keyword("MODE", "closed")
        w.set_keyword("NMODES", 43, "updated in place")
        got = support.Child(child_keywords, (d, "kw")).result()
        assert got == {
            "GAIN": (0.25, "loop gain"),
            "NMODES": (43, "updated in place"),
            "MODE": ("closed", ""),
        }
        assert w.keywords["FROMCHILD"] == ("yes", "set in the child")
        with pytest.raises(ValueError):
            w.set_keyword("FULL", 1)  # 4 slots used
        w.unlink()


def test_the_circular_buffer_keeps_each_frame_where_milk_puts_it(tmp_path):
    with milk.create("cb", (2, 2), "u2", dir=str(tmp_path), cb_size=3) as w:
        for k in range(1, 5):
            w.write(np.full((2, 2), k, np.uint16))
        with open(w.path, "rb") as f:
            raw = f.read()
        cbindex = int.from_bytes(raw[296:300], "little")
        cbcycle = int.from_bytes(raw[304:312], "little")
        assert (cbindex, cbcycle) == (1, 1)  # slots 1, 2, 0, 1: one wrap
        base = w.layout.offsets["CBimdata"]
        slots = [np.frombuffer(raw, np.uint16, 4, base + 8 * i)[0] for i in range(3)]
        assert slots == [3, 4, 2]
        w.unlink()


def test_names_dtypes_shapes_and_existing_files_are_checked(tmp_path):
    d = str(tmp_path)
    with pytest.raises(ValueError):
        milk.create("a/b", (2,), "f4", dir=d)
    with pytest.raises(ValueError):
        milk.create("x" * 80, (2,), "f4", dir=d)
    with pytest.raises(ValueError):
        milk.create("b", (2,), "bool", dir=d)
    with pytest.raises(ValueError):
        milk.create("b", (2, 2, 2, 2), "f4", dir=d)
    with pytest.raises(FileNotFoundError) as e:
        milk.open("nothing", dir=d)
    assert "create" in str(e.value)
    with milk.create("dup", (2,), "f4", dir=d) as s:
        with pytest.raises(FileExistsError):
            milk.create("dup", (2,), "f4", dir=d)
        assert oct(os.stat(s.path).st_mode & 0o777) == "0o600"
        s.unlink()
    s.close()
    with pytest.raises(shmstream.HandleClosedError):
        s.read()
    with milk.create("nosem", (2,), "f4", dir=d, nsem=0) as s:
        with pytest.raises(ValueError, match="nsem"):
            s.read_new(timeout=0)
        s.unlink()
    assert os.listdir(d) == []  # no temporary file left behind


def test_the_directory_follows_milks_rule(tmp_path, monkeypatch):
    monkeypatch.setenv("MILK_SHM_DIR", str(tmp_path))
    assert milk.shm_dir() == str(tmp_path)
    with milk.create("env", (2,), "f4") as s:
        assert s.path == os.path.join(str(tmp_path), "env.im.shm")
        s.unlink()
    monkeypatch.setenv("MILK_SHM_DIR", str(tmp_path / "missing"))
    assert milk.shm_dir() in (milk.layout.DEFAULT_DIR, milk.layout.FALLBACK_DIR)


def child_wait_for_ever(directory: str, name: str, waiting) -> str:
    with milk.open(name, dir=directory) as s:
        waiting.set()
        try:
            s.read_new(timeout=None)
        except KeyboardInterrupt:
            return "interrupted"
        return "returned"


def test_read_new_answers_ctrl_c(tmp_path):
    d = str(tmp_path)
    with milk.create("ctrlc", (2,), "f4", dir=d, nsem=2) as w:
        waiting = support.SPAWN.Event()
        child = support.Child(child_wait_for_ever, (d, "ctrlc", waiting))
        child.wait_event(waiting)
        table = w.layout.offsets["semReadPID"]

        def claimed() -> bool:
            with open(w.path, "rb") as f:
                f.seek(table)
                return child.pid in np.frombuffer(f.read(8), np.int32)

        support.wait_until(claimed, what="the child's semaphore claim")
        os.kill(child.pid, signal.SIGINT)
        assert child.result() == "interrupted"
        assert not claimed()  # given back on close
        assert w.count == 0
        w.unlink()


def child_write_counted(directory: str, name: str, frames: int) -> None:
    with milk.open(name, dir=directory) as s:
        for k in range(1, frames + 1):
            s.write(np.full(s.shape, k, s.dtype))


def test_the_circular_buffer_reads_as_history(tmp_path):
    d = str(tmp_path)
    with milk.create("hist", (2, 3), "f8", dir=d, cb_size=4) as r:
        support.Child(child_write_counted, (d, "hist", 5)).result()
        b = r.read_since(0)
        assert b.counts.tolist() == [3, 4, 5]  # cb_size - 1 frames kept
        assert [int(f[0, 0]) for f in b.frames] == [3, 4, 5]
        assert (b.missed, b.last_count) == (2, 5)
        b = r.read_since(3, max_frames=1)
        assert b.counts.tolist() == [4] and b.last_count == 4 and b.missed == 0
        with pytest.raises(TimeoutError):  # nothing newer: it waits, as a stream's does
            r.read_since(5, timeout=0)
        r.unlink()
    with milk.create("nocb", (2,), "f4", dir=d) as s, milk.open("nocb", dir=d) as r:
        # without a circular buffer: the current frame, as a stream without history
        with pytest.raises(TimeoutError):  # nothing written yet
            r.read_since(0, timeout=0.01)
        for k in (1, 2, 3):
            s.write(np.full(2, k, np.float32))
        b = r.read_since(1)
        assert b.counts.tolist() == [3] and b.frames.tolist() == [[3, 3]]
        assert (b.missed, b.last_count) == (1, 3)
        with pytest.raises(TimeoutError):  # a count past 3, not past what r saw (0)
            r.read_since(3, timeout=0.01)
        s.unlink()


def test_iter_since_under_a_fast_writer_is_lossless_or_counted_and_never_torn(tmp_path):
    d = str(tmp_path)
    frames = 2000
    with milk.create("lossless", (32, 32), "f4", dir=d, cb_size=16) as r:
        child = support.Child(child_write_counted, (d, "lossless", frames))
        seen = []
        for f in r.iter_since(0, timeout=support.WAIT):
            assert (f == f.flat[0]).all(), "torn frame"
            seen.append(int(f.flat[0]))
            if seen[-1] == frames:
                break
        child.result()
        assert seen == sorted(set(seen)), "out of order or repeated"
        assert len(seen) + r.missed_writes == frames
        r.unlink()


def child_die_mid_cb_copy(path: str, cbindex_at: int, slot_at: int, nbytes: int) -> None:
    """milk's UpdateIm dying inside the circular buffer copy: write = 1,
    CBindex moved to the next slot, half of it overwritten, SIGKILL."""
    with open(path, "r+b") as f, mmap.mmap(f.fileno(), 0) as m:
        m[WRITE_OFFSET] = 1
        m[cbindex_at : cbindex_at + 4] = (0).to_bytes(4, "little")
        m[slot_at : slot_at + nbytes // 2] = b"\xff" * (nbytes // 2)
        os.kill(os.getpid(), signal.SIGKILL)


def test_history_never_mislabels_a_slot_a_dead_writer_left_half_copied(tmp_path):
    d = str(tmp_path)
    with milk.create("cbdead", (16,), "u1", dir=d, cb_size=4) as w:
        for k in (1, 2, 3):  # slots 1, 2, 3; the next write goes to slot 0
            w.write(np.full(16, k, np.uint8))
        slot0 = w.layout.offsets["CBimdata"]
        child = support.Child(child_die_mid_cb_copy, (w.path, 296, slot0, 16))
        assert child.join() == -signal.SIGKILL
        with milk.open("cbdead", dir=d, busy_timeout=0.01) as r:
            with pytest.raises(shmstream.InconsistentStreamError):
                r.read_since(0)
            w.write(np.full(16, 4, np.uint8))  # the next write recovers
            # The dead writer left CBindex one ahead of cnt0: slots 0 and 3
            # no longer hold frames 3 and 2. Their records say so, so they
            # are left out and counted, never returned under a wrong count.
            b = r.read_since(0)
            assert b.counts.tolist() == [4] and b.frames.tolist() == [[4] * 16]
            assert (b.missed, b.last_count) == (3, 4)
        w.unlink()


def test_close_from_another_thread_cancels_a_wait(tmp_path):
    import threading

    with milk.create("cancel", (2,), "f4", dir=str(tmp_path)) as w:
        r = milk.open("cancel", dir=str(tmp_path))
        r.claim()
        outcome: list[BaseException] = []

        def wait() -> None:
            try:
                r.read_new(timeout=None)
            except BaseException as exc:  # noqa: BLE001 - the test inspects it
                outcome.append(exc)

        t = threading.Thread(target=wait)
        t.start()
        table = w.layout.offsets["semReadPID"]
        sem = w.layout.offsets["semaphores"] + 32 * r.semaphore

        def in_sem_wait() -> bool:
            # glibc's 64-bit sem_t: the value in the low 32 bits of its
            # first word, the number of waiters in the high 32.
            with open(w.path, "rb") as f:
                f.seek(sem)
                return int.from_bytes(f.read(8), "little") >> 32 > 0

        support.wait_until(in_sem_wait, what="the thread inside sem_clockwait")
        r.close()
        t.join(support.WAIT)
        assert not t.is_alive()
        assert len(outcome) == 1 and isinstance(outcome[0], shmstream.WaitCancelledError)
        with open(w.path, "rb") as f:
            f.seek(table)
            assert int(np.frombuffer(f.read(4), np.int32)[0]) == 0  # claim given back
        w.unlink()


# ---- the wait policy (docs/waiting.md) on milk's semaphore wait ---------------------


@pytest.fixture
def policy():
    """The wait policy's test hook; the measured policy again afterwards."""
    from shmstream import _testhooks

    yield _testhooks.wait_policy_override
    _testhooks.wait_policy_override(-1, -1)


def test_read_new_spins_the_policy_s_budget_then_sleeps_on_its_semaphore(tmp_path, policy):
    policy(200_000, 0)  # W = 200 us, a spare core
    d = str(tmp_path)
    with milk.create("spin", (4,), "i8", dir=d) as w, milk.open("spin", dir=d) as r:
        out = np.empty(4, np.int64)
        with pytest.raises(TimeoutError):
            r.read_new(timeout=0.05, out=out)
        p = r.spin_policy
        # no history: the 2-competitive budget, W; then the semaphore
        assert (p["wake_ns"], p["cap_ns"], p["budget_ns"]) == (200_000, 2_000_000, 200_000)
        assert (p["waits"], p["spun"], p["slept"]) == (1, 1, 1)
        # 50 ms is longer than any budget up to the cap: the next wait sleeps
        # at once, and a frame still wakes it through the semaphore
        with pytest.raises(TimeoutError):
            r.read_new(timeout=0.05, out=out)
        assert r.spin_policy["slept_at_once"] == 1
        r.spin_us = 0  # never spin
        with pytest.raises(TimeoutError):
            r.read_new(timeout=0.01, out=out)
        assert r.spin_policy["spun"] == 1 and r.spin_policy["waits"] == 3
        w.write(np.arange(4))
        assert r.read_new(timeout=support.WAIT, out=out).tolist() == [0, 1, 2, 3]
        with pytest.raises(ValueError, match="spin_us"):
            r.spin_us = -1


@pytest.mark.serial  # a reply must come while the reader spins: no other test's load
def test_a_frame_published_while_the_reader_spins_ends_its_wait_there(tmp_path, policy):
    import threading

    policy(2_000_000, 0)  # W = 2 ms, a spare core: a prompt frame comes within the cap
    d, n = str(tmp_path), 100
    with milk.create("fast", (2,), "i8", dir=d) as w, milk.open("fast", dir=d) as r:

        def answer() -> None:
            for i in range(n):
                while r.spin_policy["waits"] <= i:  # the reader's wait i has begun
                    pass
                w.write(np.full(2, i + 1, np.int64))

        t = threading.Thread(target=answer)
        t.start()
        out = np.empty(2, np.int64)
        for i in range(n):
            r.read_new(timeout=support.WAIT, out=out)
            assert out.tolist() == [i + 1, i + 1]
        t.join()
        p = r.spin_policy
    assert p["waits"] == n
    assert p["caught"] >= n // 2, p  # most ended in the spin, not the semaphore


def test_read_since_waits_for_a_newer_frame_as_a_stream_s_does(tmp_path):
    """issue 47, bug 11: with timeout None a milk stream's read_since
    returned an empty batch at once, where a stream's waits for ever."""
    d = str(tmp_path)
    with milk.create("wait", (2,), "u1", dir=d, cb_size=4) as r:
        got = []
        reader = threading.Thread(target=lambda: got.append(r.read_since(0)), daemon=True)
        reader.start()  # waits: nothing is written yet
        support.Child(child_write_counted, (d, "wait", 1)).result()
        reader.join(support.WAIT)
        assert not reader.is_alive() and got[0].counts.tolist() == [1]
        r.unlink()
