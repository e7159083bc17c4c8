"""Channels when a peer process dies (kill -9): the other end learns it and
never hangs, and a new process can take the dead end over. Synchronised on
events only; a child kills itself once the parent is waiting."""

from __future__ import annotations

import os
import signal
import time

import pytest

import shmstream
from shmstream.errors import ChannelBrokenError, ChannelBusyError, ChannelClosedError

from channel_util import SPAWN

CAP = 4096


def _producer_then_die(name, n, die):
    tx = shmstream.open_channel(name, role="producer")
    tx.send_many([i.to_bytes(2, "little") for i in range(n)])
    with tx.send_zero_copy(100):  # a half-written message that is never committed
        die.wait()
        os.kill(os.getpid(), signal.SIGKILL)


def test_killed_producer_means_end_of_stream_after_its_messages_then_takeover(name):
    rx = shmstream.channel(name, CAP, role="consumer")
    die = SPAWN.Event()
    child = SPAWN.Process(target=_producer_then_die, args=(name, 10, die))
    child.start()
    try:
        got = [int.from_bytes(rx.recv(timeout=30).data, "little") for _ in range(10)]
        assert got == list(range(10))
        with pytest.raises(ChannelBusyError):  # the producer is alive: its end is taken
            shmstream.open_channel(name, role="producer")
        die.set()
        t0 = time.monotonic()
        with pytest.raises(ChannelClosedError, match="died"):
            rx.recv()  # no timeout: must not hang
        assert time.monotonic() - t0 < 10
        with pytest.raises(ChannelClosedError):  # and it stays so
            rx.recv(timeout=0)
        child.join(10)
        # A new producer takes the dead one's end over.
        tx = shmstream.open_channel(name, role="producer")
        assert tx.stat()["producer"]["takeovers"] == 1
        tx.send(b"new")
        assert rx.recv(timeout=5).data == b"new"
        tx.close()
    finally:
        child.kill()
        rx.close()


def _consumer_then_die(name, ready, die):
    rx = shmstream.open_channel(name)
    rx.recv(timeout=30)
    with rx.recv_zero_copy(timeout=30) as m:  # read, never released
        assert m.data == b"second"
        ready.set()
        die.wait()
        os.kill(os.getpid(), signal.SIGKILL)


def test_killed_consumer_breaks_a_waiting_send_and_a_new_consumer_takes_over(name):
    tx = shmstream.channel(name, CAP)
    ready, die = SPAWN.Event(), SPAWN.Event()
    child = SPAWN.Process(target=_consumer_then_die, args=(name, ready, die))
    child.start()
    try:
        tx.send(b"first")
        tx.send(b"second")
        assert ready.wait(30)
        n = 0
        while True:  # fill the ring
            try:
                tx.send(bytes(500), timeout=0)
                n += 1
            except TimeoutError:
                break
        die.set()
        t0 = time.monotonic()
        with pytest.raises(ChannelBrokenError, match="died"):
            tx.send(bytes(500))  # no timeout: must not hang
        assert time.monotonic() - t0 < 10
        child.join(10)
        rx = shmstream.open_channel(name)
        # "second" was read but never released: it is delivered again.
        assert rx.recv(timeout=5).data == b"second"
        assert len(rx.drain(1000)) == n
        rx.close()
    finally:
        child.kill()
        tx.close()


def _hold_end(name, role, ready, stop):
    ch = shmstream.open_channel(name, role=role)
    ready.set()
    stop.wait(30)
    ch.close()


@pytest.mark.parametrize("role", ["producer", "consumer"])
def test_an_end_held_by_another_live_process_is_refused(name, role):
    other = "consumer" if role == "producer" else "producer"
    mine = shmstream.channel(name, CAP, role=other)
    ready, stop = SPAWN.Event(), SPAWN.Event()
    child = SPAWN.Process(target=_hold_end, args=(name, role, ready, stop))
    child.start()
    try:
        assert ready.wait(30)
        with pytest.raises(ChannelBusyError, match="one producer and one consumer"):
            shmstream.open_channel(name, role=role)
        stop.set()
        child.join(30)
        assert child.exitcode == 0
        again = shmstream.open_channel(name, role=role)  # cleanly closed: free again
        again.close()
    finally:
        child.kill()
        mine.close()


def test_unlink_while_attached_keeps_the_handles_working_and_leaves_nothing(name):
    tx = shmstream.channel(name, CAP)
    rx = shmstream.open_channel(name)
    assert tx.unlink() is True
    assert not os.path.exists("/dev/shm" + shmstream._native.segment_name(name))
    tx.send(b"still here")
    assert rx.recv(timeout=1).data == b"still here"
    tx.close()
    rx.close()
    assert shmstream.unlink_channel(name) is False
