"""Streams between PID namespaces that share /dev/shm (docs/containers.md,
docs/ABI.md "Stream lock by lease"): each side runs as pid 1 of its own
namespace (``unshare --pid --fork --mount-proc``), as two containers of a
pod with a memory emptyDir.

A stream made by this build (layout 4) is locked by lease: two pid-1
processes contend for its lock without taking it for their own, a holder
killed in one namespace is taken over from another with its half-written
frame reported, a ``read_new`` reader in one namespace is woken by a writer
in another and sees ``producer_alive`` turn false when it dies, and the
lock's crash points hold with the victim, the repairer and the checker in
three namespaces. Every test here failed on the build before layout 4,
which refused the opener with ``PidNamespaceError``. Skipped where
``unshare --pid`` is not permitted."""

from __future__ import annotations

import os

import numpy as np
import pytest
from test_crash_points import (
    REPAIR_POINTS,
    SHAPE,
    STREAM_POINTS,
    check_recovers,
    check_state_after,
)

import shmstream

import support

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="unshare --pid needs root (or a user namespace)"
)


def _waiters(name: str) -> int:
    return shmstream.stat(name)["waiters"]


def _lock_word(name: str) -> int:
    return support.read_u(support.segment_path(name), *support.field("lock_lease"))


# ---- read_new across namespaces -------------------------------------------------------------


@pytest.mark.parametrize("history", [0, 4])
def test_a_read_new_reader_in_another_namespace_is_woken_and_sees_the_writer_die(
    name, children, history
):
    writer = children(f"""
        import os, numpy as np, shmstream
        h = shmstream.create({name!r}, shape=(4,), dtype="int64", history={history})
        say("created", os.getpid())
        while (line := hear()) != "end":
            h.write(np.full(4, int(line), np.int64), frame_id=int(line))
            say("wrote", line)
        hear()  # until killed
    """)
    assert writer.expect("created") == "1"
    reader = children(f"""
        import os, shmstream
        h = shmstream.open({name!r})
        say("opened", os.getpid(), h.producer_alive())
        while (line := hear()) == "next":
            pub = h.read_new_publication(timeout=30)
            say("got", pub.count, pub.frame_id, int(pub.payload[0]))
        say("alive", h.producer_alive())
        assert hear() == "dead?"
        say("alive", h.producer_alive())
    """)
    assert reader.expect("opened") == "1 True"  # both pid 1; the creator's lease is held
    for k in range(1, 6):
        reader.tell("next")
        # the reader sleeps on the futex (its sleeper slot names its lease) before the write
        support.wait_until(lambda: _waiters(name) == 1, what="the reader asleep")
        writer.tell(str(k))
        assert reader.expect("got") == f"{k} {k} {k}"
        writer.expect("wrote")
    reader.tell("stop")
    assert reader.expect("alive") == "True"
    st = shmstream.stat(name)  # from a third namespace
    assert st["pid_namespace"] == "other" and st["creator_alive"] is True
    writer.kill()
    reader.tell("dead?")
    assert reader.expect("alive") == "False"
    reader.finish()
    assert shmstream.stat(name)["creator_alive"] is False


def test_a_reader_killed_asleep_in_another_namespace_is_healed_by_the_writer(name, children):
    h = shmstream.create(name, shape=(4,), dtype="int64")
    try:
        reader = children(f"""
            import shmstream
            h = shmstream.open({name!r})
            say("waiting")
            h.read_new(timeout=60)
        """)
        reader.expect("waiting")
        support.wait_until(lambda: _waiters(name) == 1, what="the reader asleep")
        reader.kill()
        # Its sleeper slot names its lease, now gone: the write that wakes
        # nobody clears it (a pid word would name pid 1, this namespace's init).
        h.write(np.arange(4))
        assert _waiters(name) == 0
    finally:
        h.close()


# ---- the lock -------------------------------------------------------------------------------


def test_two_pid1_processes_contend_for_the_lock_and_the_killed_holder_is_taken_over(
    name, children
):
    h = shmstream.create(name, shape=(8,), dtype="int64")
    h.write(np.full(8, 5), frame_id=5)
    try:
        holder = children(f"""
            import shmstream
            h = shmstream.open({name!r})
            with h.write_view(frame_id=6) as v:
                v[:4] = 6  # half a frame, then held until killed
                say("inside")
                hear()
        """)
        holder.expect("inside")
        rival = children(f"""
            import os, shmstream
            h = shmstream.open({name!r})
            try:
                with h.locked(timeout=0):
                    say("took it from a live holder")
            except TimeoutError:
                say("busy", os.getpid())
            say("waiting")
            with h.locked(timeout=60):
                say("took")
                try:
                    h.read(timeout=0)
                except shmstream.InconsistentStreamError as exc:
                    say("inconsistent", "exited" in str(exc))
            h.write([7] * 8, frame_id=7)
            say("wrote")
        """)
        # pid 1 against pid 1: busy, not EDEADLK nor taken over
        assert rival.expect("busy") == "1"
        rival.expect("waiting")
        # the rival sleeps on the lock: the waiters bit is on the holder's word
        support.wait_until(lambda: _lock_word(name) >> 63, what="the rival asleep on the lock")
        assert shmstream.stat(name)["lock_owner_alive"] is True
        holder.kill()
        rival.expect("took")
        assert rival.expect("inconsistent") == "True"  # the half-written frame is reported
        rival.expect("wrote")
        rival.finish()
        pub = h.read_publication(timeout=support.WAIT)
        assert (pub.count, pub.frame_id, pub.payload.tolist()) == (2, 7, [7] * 8)
        assert shmstream.stat(name)["aborted_writes"] == 1
    finally:
        h.close()


def test_two_pid1_processes_increment_under_the_lock_without_losing_one(name, children):
    # Both are pid 1 with tid 1: a lock judged by tid would let both in (or
    # answer EDEADLK); by lease, every read-modify-write is exclusive.
    n = 2000
    h = shmstream.create(name, shape=(1,), dtype="int64")
    try:
        code = f"""
            import shmstream
            h = shmstream.open({name!r})
            say("ready")
            assert hear() == "go"
            for _ in range({n}):
                with h.locked(timeout=60):
                    h.write_locked(h.read() + 1)
            say("done")
        """
        a, b = children(code), children(code)
        a.expect("ready")
        b.expect("ready")
        a.tell("go")
        b.tell("go")
        a.expect("done", timeout=120)
        b.expect("done", timeout=120)
        a.finish()
        b.finish()
        assert h.read().tolist() == [2 * n] and h.count == 2 * n
    finally:
        h.close()


def test_a_writer_killed_inside_write_view_is_seen_from_another_namespace(name, children):
    writer = children(f"""
        import numpy as np, shmstream
        h = shmstream.create({name!r}, shape=(8,), dtype="int64")
        h.write(np.full(8, 3), frame_id=3)
        with h.write_view(frame_id=4) as v:
            v[:] = 4
            say("inside")
            hear()
    """)
    writer.expect("inside")
    reader = children(f"""
        import shmstream
        h = shmstream.open({name!r})
        say("waiting")
        try:
            h.read_new(timeout=60)
        except shmstream.InconsistentStreamError as exc:
            say("inconsistent", "exited" in str(exc))
        last = h.read_last_complete(timeout=30)
        say("last", last.state, last.frame_id, int(last.payload[0]))
    """)
    reader.expect("waiting")
    support.wait_until(lambda: _waiters(name) == 1, what="the reader asleep")
    st = shmstream.stat(name)
    assert st["state"] == "valid" and st["lock_owner_alive"] is True
    writer.kill()
    assert reader.expect("inconsistent") == "True"
    assert reader.expect("last") == "abandoned 3 3"
    reader.finish()
    with shmstream.open(name) as h:  # and from a third namespace
        with pytest.raises(shmstream.InconsistentStreamError, match="exited"):
            h.read(timeout=support.WAIT)
        h.write(np.full(8, 9), frame_id=9)
        assert h.read().tolist() == [9] * 8


# ---- crash points: victim, repairer and checker in three namespaces ----------------------------


def _victim(name: str, point: str, k: int) -> str:
    # exit=True: pid 1 of a namespace ignores a SIGKILL it sends itself, so it
    # dies by _exit(86) at the point; its lease goes with it all the same
    return f"""
        import numpy as np, shmstream
        from shmstream import _testhooks
        h = shmstream.open({name!r})
        for k in range(1, {k} + 1):
            h.write(np.full({SHAPE!r}, k, np.int64), frame_id=k)
        _testhooks.fault_arm({point!r}, 1, True)
        h.write(np.full({SHAPE!r}, {k} + 1, np.int64), frame_id={k} + 1)
        say("survived")
    """


K = 5


@pytest.mark.parametrize("point", list(STREAM_POINTS))
def test_a_writer_dying_at_each_point_in_another_namespace_is_repaired_here(name, children, point):
    pytest.importorskip("shmstream._testhooks", reason="a build without test hooks")
    h = shmstream.create(name, shape=SHAPE, dtype=np.int64)
    try:
        victim = children(_victim(name, point, K))
        assert victim.proc.wait(support.WAIT) == 86, victim.proc.stderr.read()
        check_recovers(h, check_state_after(h, STREAM_POINTS[point], "write", K))
    finally:
        h.close()


@pytest.mark.parametrize("point", REPAIR_POINTS)
def test_a_repairer_dying_in_a_second_namespace_leaves_the_repair_to_a_third(name, children, point):
    pytest.importorskip("shmstream._testhooks", reason="a build without test hooks")
    h = shmstream.create(name, shape=SHAPE, dtype=np.int64)
    try:
        victim = children(_victim(name, "stream.count", K))
        assert victim.proc.wait(support.WAIT) == 86
        repairer = children(f"""
            import numpy as np, shmstream
            from shmstream import _testhooks
            h = shmstream.open({name!r})
            _testhooks.fault_arm({point!r}, 1, True)
            h.write(np.full({SHAPE!r}, 999, np.int64), frame_id=999)  # takes the lock over
            say("survived")
        """)
        assert repairer.proc.wait(support.WAIT) == 86
        check_recovers(h, check_state_after(h, "abandoned", "write", K))
    finally:
        h.close()


# ---- stat and purge from a third namespace ------------------------------------------------------


# purge of loader pools sweeps every dead pool in /dev/shm (other tests')
@pytest.mark.serial
def test_stat_and_purge_from_a_third_namespace_judge_streams_by_lease(
    name, make_name, children, monkeypatch
):
    gone, chan_live, chan_gone = make_name(), make_name(), make_name()
    support.purge_sees_only(monkeypatch, {name, gone, chan_live, chan_gone})
    live = children(f"""
        import shmstream
        h = shmstream.create({name!r}, shape=(2,), dtype="int32")
        tx = shmstream.channel({chan_live!r}, 4096, role="producer")
        say("made")
        hear()
    """)
    live.expect("made")
    dead = children(f"""
        import os, shmstream
        shmstream.create({gone!r}, shape=(2,), dtype="int32")
        shmstream.channel({chan_gone!r}, 4096, role="producer")
        say("made")
        os._exit(0)  # leaves both behind, their leases gone with the process
    """)
    dead.expect("made")
    try:
        assert dead.proc.wait(support.WAIT) == 0
        a, b = shmstream.stat(name), shmstream.stat(gone)
        assert (a["pid_namespace"], a["creator_pid"], a["creator_alive"]) == ("other", 1, True)
        assert (b["pid_namespace"], b["creator_pid"], b["creator_alive"]) == ("other", 1, False)
        # only what is abandoned goes (streams are not abandonable kinds: never removed here)
        removed = shmstream.purge(kinds=("channel", "array", "loader-pool"))
        assert list(removed) == [chan_gone]
        assert {name, gone} <= set(shmstream.list_streams())
        assert chan_live in shmstream.list_channels()
    finally:
        live.cleanup()  # the names go with the make_name fixture


# ---- whose lease: this process's handles and a fork child's --------------------------------------


def test_a_lock_held_through_another_handle_of_this_thread_is_a_deadlock_not_a_wait(name):
    # The word names a lease of this process: the owner tid is this
    # process's to compare (another process's tid never is).
    a = shmstream.create(name, shape=(2,), dtype="int32")
    b = shmstream.open(name)
    try:
        a._seg.lock(None)
        with pytest.raises(shmstream.LockHeldError, match="through another handle"):
            b._seg.lock(None)
        a._seg.unlock()
    finally:
        b.close()
        a.close()


def test_a_fork_child_that_dies_holding_the_lock_through_an_inherited_handle_is_taken_over(
    name,
):
    import signal

    h = shmstream.create(name, shape=(2,), dtype="int32")
    try:
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child locks with the inherited handle: a lease of its own
            try:
                h._seg.lock(None)
                os.write(w, b"1")
                os.kill(os.getpid(), signal.SIGKILL)
            finally:
                os._exit(1)
        os.close(w)
        assert os.read(r, 1) == b"1"
        os.close(r)
        assert os.waitpid(pid, 0)[1] == signal.SIGKILL
        # the child's lease died with it (the parent's lives on): taken over
        h.write([1, 2], timeout=support.WAIT)
        assert h.read().tolist() == [1, 2] and _lock_word(name) == 0
    finally:
        h.close()
