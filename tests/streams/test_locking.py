"""The cross-process write lock: re-entrancy, exclusion across threads and
processes, readers never blocked by an idle lock holder, locked_many, fork.

Lock takeover from a dead owner is in test_crash.py.
"""

from __future__ import annotations

import os
import threading
import time

import numpy as np
import pytest

import shmstream

from support import WAIT, lock_held_by_another_thread


@pytest.fixture
def shm(name):
    h = shmstream.create(name, shape=(4,), dtype=np.int64)
    yield h
    h.close()


# ---- children ------------------------------------------------------------------


def child_hold_lock(stream_name, held, release):
    h = shmstream.open(stream_name)
    h.acquire()
    held.set()
    assert release.wait(WAIT)
    h.release()
    h.close()


def child_try_then_acquire(stream_name, tried, results):
    """Try the lock while the parent holds it, then block on it."""
    h = shmstream.open(stream_name)
    try:
        h.acquire(timeout=0.05)
        results.put("acquired while held")
        h.release()
    except TimeoutError:
        results.put("timeout")
    tried.set()
    start = time.monotonic()
    h.acquire(timeout=WAIT)
    results.put(("acquired", time.monotonic() - start))
    h.release()
    h.close()


def child_increment(stream_name, start, rounds):
    """Read-modify-write under the lock: lost updates show a broken lock."""
    h = shmstream.open(stream_name)
    start.wait(WAIT)
    for _ in range(rounds):
        with h.locked(timeout=WAIT):
            value = h.read(safe=False).copy()
            value += 1
            h.write_locked(value)
    h.close()


def child_write_view_and_wait(stream_name, inside, finish):
    h = shmstream.open(stream_name)
    with h.write_view() as view:
        view[:] = 1
        inside.set()
        assert finish.wait(WAIT)
        view[:] = 2
    h.close()


# ---- re-entrancy ----------------------------------------------------------------


def test_acquire_and_release_are_reentrant_per_handle(shm):
    shm.acquire()
    shm.acquire()
    shm.release()
    shm.write_locked(np.ones(4, np.int64))  # still held after one release
    shm.release()
    with pytest.raises(RuntimeError, match="unlocked"):
        shm.release()


def test_release_without_acquire_raises(shm):
    with pytest.raises(RuntimeError, match="unlocked"):
        shm.release()


def test_locked_is_the_context_manager_form(shm):
    with shm.locked() as h:
        assert h is shm
        shm.write_locked(np.full(4, 3, np.int64))
    with pytest.raises(RuntimeError, match="write_locked"):
        shm.write_locked(np.full(4, 4, np.int64))
    assert shm.read().tolist() == [3, 3, 3, 3]


def test_locked_releases_when_the_block_raises(shm):
    with pytest.raises(KeyError):
        with shm.locked():
            raise KeyError("x")
    with pytest.raises(RuntimeError, match="unlocked"):
        shm.release()


# ---- exclusion ----------------------------------------------------------------


def test_acquire_times_out_promptly_while_another_thread_holds_the_lock(shm):
    with lock_held_by_another_thread(shm):
        second = shmstream.open(shm.name)
        for handle in (shm, second):
            start = time.monotonic()
            with pytest.raises(TimeoutError):
                handle.acquire(timeout=0.05)
            assert time.monotonic() - start < 2.0
        second.close()
    shm.acquire(timeout=WAIT)  # free again
    shm.release()


def test_release_by_a_thread_that_does_not_hold_the_lock_raises(shm):
    shm.acquire()
    errors = []

    def other_thread():
        try:
            shm.release()
        except RuntimeError as exc:
            errors.append(exc)

    t = threading.Thread(target=other_thread)
    t.start()
    t.join(WAIT)
    shm.release()
    assert len(errors) == 1


def test_the_lock_blocks_another_process_until_released(shm, spawn, ctx):
    tried = ctx.Event()
    results = ctx.Queue()
    shm.acquire()
    child = spawn(child_try_then_acquire, shm.name, tried, results)
    try:
        child.wait_event(tried)
        assert results.get(timeout=WAIT) == "timeout"
    finally:
        shm.release()
    status, _ = results.get(timeout=WAIT)
    assert status == "acquired"
    child.result()


def test_acquire_waits_while_another_process_holds_the_lock(shm, spawn, ctx):
    held, release = ctx.Event(), ctx.Event()
    child = spawn(child_hold_lock, shm.name, held, release)
    child.wait_event(held)
    with pytest.raises(TimeoutError):
        shm.acquire(timeout=0.05)
    release.set()
    shm.acquire(timeout=WAIT)
    shm.release()
    child.result()


def test_the_lock_serialises_read_modify_write_across_processes(shm, spawn, ctx):
    rounds = 300
    start = ctx.Event()
    children = [spawn(child_increment, shm.name, start, rounds) for _ in range(2)]
    start.set()
    for _ in range(rounds):
        with shm.locked(timeout=WAIT):
            value = shm.read(safe=False).copy()
            value += 1
            shm.write_locked(value)
    for child in children:
        child.result()
    assert shm.read().tolist() == [3 * rounds] * 4
    assert shm.count == 3 * rounds


@pytest.mark.parametrize(
    "call",
    [
        lambda h: h.write(np.arange(4, dtype=np.int64), timeout=0.05),  # the native fast path
        lambda h: h.write([1, 2, 3, 4], timeout=0.05),  # the converting path
        lambda h: h.write(np.arange(4, dtype=np.int64), count=9, timeout=0.05),
        lambda h: h.clear(timeout=0.05),
    ],
    ids=["write", "write-converted", "write-count", "clear"],
)
def test_write_and_clear_time_out_while_another_process_holds_the_lock(shm, spawn, ctx, call):
    held, release = ctx.Event(), ctx.Event()
    child = spawn(child_hold_lock, shm.name, held, release)
    try:
        child.wait_event(held)
        with pytest.raises(shmstream.ShmstreamTimeoutError, match="lock of"):
            call(shm)
        assert shm.count == 0  # nothing was written
        with pytest.raises(TypeError, match="timeout must be a number"):
            shm.write(np.arange(4, dtype=np.int64), timeout="1")
    finally:
        release.set()
    child.result()
    call(shm)  # the lock is free: the same call publishes
    assert shm.count >= 1


def test_a_write_waiting_for_the_lock_lets_other_threads_run(shm, spawn, ctx):
    held, release = ctx.Event(), ctx.Event()
    child = spawn(child_hold_lock, shm.name, held, release)
    child.wait_event(held)
    started, errors = threading.Event(), []

    def write() -> None:
        started.set()
        try:
            shm.write(np.full(4, 7, np.int64), timeout=WAIT)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    writer = threading.Thread(target=write)
    writer.start()
    try:
        assert started.wait(WAIT)
        # This thread runs while the writer waits: a write that kept the
        # GIL would not let join() return before its own timeout (WAIT).
        writer.join(0.2)
        assert writer.is_alive() and shm.count == 0
    finally:
        release.set()
    writer.join(WAIT)
    child.result()
    assert not errors and shm.read().tolist() == [7] * 4


def test_an_idle_lock_holder_does_not_block_readers(shm, spawn, ctx):
    shm.write(np.arange(4, dtype=np.int64))
    held, release = ctx.Event(), ctx.Event()
    child = spawn(child_hold_lock, shm.name, held, release)
    try:
        child.wait_event(held)
        reader = shmstream.open(shm.name)
        assert reader.read(timeout=1.0).tolist() == [0, 1, 2, 3]
        assert reader.read_publication(timeout=1.0).count == 1
        reader.close()
    finally:
        release.set()
    child.result()


def test_read_times_out_while_a_write_is_in_progress(shm, spawn, ctx):
    shm.write(np.zeros(4, np.int64))
    inside, finish = ctx.Event(), ctx.Event()
    child = spawn(child_write_view_and_wait, shm.name, inside, finish)
    try:
        child.wait_event(inside)
        with pytest.raises(TimeoutError, match="stable write"):
            shm.read(timeout=0.1)
    finally:
        finish.set()
    child.result()
    assert shm.read(timeout=WAIT).tolist() == [2, 2, 2, 2]
    assert shm.count == 2


# ---- locked_many ------------------------------------------------------------------


@pytest.fixture
def three(make_name):
    handles = [shmstream.create(make_name(s), shape=(2,)) for s in ("c", "a", "b")]
    yield handles
    for h in handles:
        h.close()


def test_locked_many_locks_every_handle_and_yields_them_in_caller_order(three):
    with shmstream.locked_many(three, timeout=WAIT) as held:
        assert isinstance(held, tuple)
        assert held == tuple(three)
        for i, h in enumerate(held):
            with h.write_view_locked(frame_id=i) as view:
                view[:] = i
    for i, h in enumerate(three):
        assert h.read().tolist() == [i, i]
        assert h.frame_id == i
        with pytest.raises(RuntimeError, match="unlocked"):
            h.release()  # all released on exit


def test_locked_many_rejects_a_repeated_stream(three):
    again = shmstream.open(three[0].name)
    try:
        with pytest.raises(ValueError, match="unique"):
            with shmstream.locked_many([three[0], again]):
                pass
    finally:
        again.close()


@pytest.mark.parametrize("poll_interval", [0, -1e-3])
def test_locked_many_rejects_a_non_positive_poll_interval(three, poll_interval):
    with pytest.raises(ValueError):
        with shmstream.locked_many(three, poll_interval=poll_interval):
            pass


def test_locked_many_releases_taken_locks_when_a_later_one_times_out(make_name):
    first = shmstream.create(make_name("a"), shape=(1,))
    second = shmstream.create(make_name("b"), shape=(1,))
    try:
        with lock_held_by_another_thread(second):
            with pytest.raises(TimeoutError):
                with shmstream.locked_many([second, first], timeout=0.1):
                    pass
            # 'first' (taken before 'second' in name order) was released again:
            # another thread can take it.
            got = []
            probe = threading.Thread(target=lambda: got.append(_try_lock(first)))
            probe.start()
            probe.join(WAIT)
            assert got == [True]
    finally:
        first.close()
        second.close()


def _try_lock(handle) -> bool:
    try:
        handle.acquire(timeout=0)
    except TimeoutError:
        return False
    handle.release()
    return True


class DuckHandle:
    """Any object with ``name`` and ``locked(timeout=, poll_interval=)``."""

    def __init__(self, name, log):
        self.name = name
        self.log = log

    def locked(self, *, timeout=None, poll_interval=1e-3):
        handle = self

        class Scope:
            def __enter__(self):
                handle.log.append(("enter", handle.name))
                return handle

            def __exit__(self, *exc):
                handle.log.append(("exit", handle.name))

        return Scope()


def test_locked_many_accepts_duck_typed_handles_in_name_order_and_exits_in_reverse():
    log = []
    ducks = [DuckHandle(n, log) for n in ("b", "c", "a")]
    with shmstream.locked_many(ducks) as held:
        assert held == tuple(ducks)
        log.append(("body", ""))
    assert log == [
        ("enter", "a"),
        ("enter", "b"),
        ("enter", "c"),
        ("body", ""),
        ("exit", "c"),
        ("exit", "b"),
        ("exit", "a"),
    ]


# ---- fork --------------------------------------------------------------------------


def test_a_forked_child_does_not_inherit_the_parents_held_lock(shm):
    shm.acquire()
    try:
        pid = os.fork()
        if pid == 0:  # child: report through the exit code only
            code = 0
            try:
                try:
                    shm.acquire(timeout=0.05)
                    code = 1  # took a lock its parent's thread holds
                except TimeoutError:
                    pass
                try:
                    shm.write_locked(np.zeros(4, np.int64))
                    code = code or 2  # believed it held the lock
                except RuntimeError:
                    pass
            except BaseException:  # noqa: BLE001 - a forked child reports by exit code
                code = 3
            os._exit(code)
        _, status = os.waitpid(pid, 0)
    finally:
        shm.release()
    assert os.waitstatus_to_exitcode(status) == 0
    assert shm.count == 0


# ---- from the former surface smoke test --------------------------------------


def test_the_lock_is_reentrant_and_an_aborted_view_leaves_the_stream_invalid(name):
    s = shmstream.create(name, shape=(3,))
    other = shmstream.open(name)
    s.acquire()
    s.acquire()
    s.write_locked(np.ones(3))
    with s.write_view_locked() as v:
        v[:] = 5
    s.release()
    s.release()
    with pytest.raises(RuntimeError, match="unlocked"):
        s.release()
    with pytest.raises(RuntimeError, match="write_locked"):
        s.write_locked(np.ones(3))
    assert (other.read() == 5).all()
    with pytest.raises(KeyError):
        with s.write_view() as v:
            v[:] = 9
            raise KeyError
    with pytest.raises(shmstream.InconsistentStreamError):
        other.read(timeout=0.1)
    with pytest.raises(shmstream.InconsistentStreamError):
        other.read_new(timeout=0.1)
    s.write(np.zeros(3))
    assert (other.read() == 0).all()
    # another thread holds the lock
    held, done = threading.Event(), threading.Event()

    def hold():
        with s.write_view():
            held.set()
            done.wait(5)

    t = threading.Thread(target=hold)
    t.start()
    held.wait(5)
    with pytest.raises(TimeoutError):
        other.acquire(timeout=0.05)
    with pytest.raises(RuntimeError, match="another thread owns its lock"):
        s.close()
    other.close()  # a different handle closes fine
    with pytest.raises(TimeoutError, match="stable write"):
        shmstream.open(name).read(timeout=0.1)
    done.set()
    t.join()
    s.close()


def test_a_fork_child_does_not_inherit_the_lock(name):
    s = shmstream.create(name, shape=(1,))
    with s.locked():
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                s.write_locked(np.ones(1))
                code = 1
            except RuntimeError:
                pass
            os._exit(code)
        _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    s.close()


def test_locked_many_and_the_temporary_stream_context(name):
    with shmstream.stream(name, shape=(1,)) as a, shmstream.stream(name + "b", shape=(1,)) as b:
        with shmstream.locked_many([b, a]) as hs:
            assert hs == (b, a)
            with a.write_view_locked() as v:
                v[:] = 1
        with pytest.raises(ValueError, match="unique"):
            with shmstream.locked_many([a, a]):
                pass
        with pytest.raises(ValueError):
            with shmstream.locked_many([a], poll_interval=0):
                pass
    assert name not in shmstream.list_streams()
