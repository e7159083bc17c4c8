"""A reader's turn at the lock (docs/ABI.md, "Reader's turn"): a snapshot
reader whose copies keep failing names its lease in ``read_pending``;
writers do not take the lock while a live reader's claim stands, and a dead
reader's claim holds nobody up.

The reader is sent to its turn on purpose: this process holds a
``write_view`` open, so the reader waits 50 µs for that write in flight and
then asks for its turn; the test watches the word, not the clock.
"""

from __future__ import annotations

import signal

import numpy as np
import pytest

import shmstream
from shmstream import _testhooks

import support

N = 1024
#: a lease number nobody holds (leases are random in 2**62 .. 2**63 - 2)
DEAD_LEASE = (1 << 62) + 0x5EED
WAITERS = 1 << 63


def turn_word(name: str) -> int:
    return support.read_u(support.segment_path(name), *support.field("read_pending"))


def set_turn_word(name: str, value: int) -> None:
    offset, size = support.field("read_pending")
    support.patch_bytes(support.segment_path(name), offset, value.to_bytes(size, "little"))


def wait_for_turn(name: str, child: support.Child) -> int:
    """The claim a reader made, once it is there (the child's death or its
    end before that fails the test)."""
    words = support.HeaderWords(name)

    def claim() -> int | str | None:
        if words.u64("read_pending") & ~WAITERS:
            return words.u64("read_pending") & ~WAITERS
        return None if child.process.is_alive() else "gone"

    try:
        got = support.wait_until(claim, what="a reader's claim in read_pending")
    finally:
        words.close()
    assert got != "gone", f"the reader ended (exit code {child.process.exitcode}) before its claim"
    return int(got)


def test_a_live_readers_turn_holds_writers_back_and_a_dead_ones_does_not(name):
    h = shmstream.create(name, shape=(N,), dtype=np.int64)
    try:
        h.write(np.full(N, 1), frame_id=1)
        # A live lease (this process's own handle) in the word: a claim that
        # stands. A trylock defers to it and a write waits, up to its timeout.
        live = support.read_u(support.segment_path(name), *support.field("creator_lease"))
        set_turn_word(name, live)
        with pytest.raises(TimeoutError):
            h.write(np.full(N, 2), frame_id=2, timeout=0)
        with pytest.raises(TimeoutError):
            h.write(np.full(N, 2), frame_id=2, timeout=0.05)
        assert h.count == 1 and turn_word(name) == live | WAITERS  # the writer slept on it
        # Readers are not held back by it: no write is in flight.
        assert h.read_publication().count == 1
        # A lease nobody holds (a reader that died with its turn, waiters
        # bit and all): the next write clears it and goes on at once.
        set_turn_word(name, DEAD_LEASE | WAITERS)
        h.write(np.full(N, 3), frame_id=3, timeout=0)
        assert turn_word(name) == 0
        pub = h.read_publication()
        assert (pub.count, pub.frame_id) == (2, 3) and np.unique(pub.payload).tolist() == [3]
    finally:
        h.close()


def child_read_and_die_at(stream_name: str, point: str) -> None:
    h = shmstream.open(stream_name, readonly=True)
    _testhooks.fault_arm(point)
    h.read(timeout=support.WAIT)  # killed at `point` inside this read


def child_read_once(stream_name: str) -> tuple[int, int, list[int]]:
    h = shmstream.open(stream_name, readonly=True)
    pub = h.read_publication(timeout=support.WAIT)
    return pub.count, pub.frame_id, np.unique(pub.payload).tolist()


@pytest.mark.parametrize("point", ["read.claimed", "read.locked"])
def test_a_reader_killed_holding_its_turn_blocks_no_writer(name, spawn, point):
    h = shmstream.create(name, shape=(N,), dtype=np.int64)
    try:
        h.write(np.full(N, 1), frame_id=1)
        with h.write_view(frame_id=2) as view:
            view[:] = 2
            reader = spawn(child_read_and_die_at, name, point)
            # The reader waited for this write in flight, then asked for its
            # turn; read.claimed kills it right there, read.locked once this
            # write_view lets the lock go.
            assert wait_for_turn(name, reader) >= 1 << 62
        assert reader.join() == -signal.SIGKILL
        # Its dead lease is in read_pending (and, at read.locked, in the
        # lock word): the next write clears the one and takes the other over.
        h.write(np.full(N, 3), frame_id=3, timeout=support.WAIT)
        assert turn_word(name) == 0
        assert support.read_u(support.segment_path(name), *support.field("lock_lease")) == 0
        assert shmstream.stat(name)["state"] == "valid"
        # Nothing to repair: a reader writes no frame.
        assert spawn(child_read_once, name).result() == (3, 3, [3])
        h.write(np.full(N, 4), frame_id=4, timeout=0)  # not even a trylock is held back
        assert h.count == 4
    finally:
        h.close()
