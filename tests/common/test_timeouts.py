"""Timeouts mean what a user expects, for every blocking call of every part:
None and ``math.inf`` wait for ever (a value beyond ~292 years too), 0 does
not wait, NaN and negative values are a ValueError, and anything but a
number of seconds is a TypeError that names the argument (not nanobind's
"incompatible function arguments")."""

from __future__ import annotations

import math
import threading

import numpy as np
import pytest

import shmstream

import support
from support import WAIT

#: How long a "wait for ever" must at least last here: a deadline that
#: overflowed used to give up after one 100 ms wait chunk.
MORE_THAN_A_CHUNK_S = 0.5


def _stream_waits():
    return {
        "read_new": lambda h, t: h.read_new(timeout=t),
        "read_new_publication": lambda h, t: h.read_new_publication(timeout=t),
        "read_after": lambda h, t: h.read_after(h.count, timeout=t),
        "wait_for_count": lambda h, t: h.wait_for_count(after=h.count, timeout=t),
        "read_new_view": lambda h, t: h.read_new_view(timeout=t).__enter__(),
    }


FOREVER = [None, math.inf, 1e300]


@pytest.mark.parametrize("forever", FOREVER, ids=repr)
@pytest.mark.parametrize("call", list(_stream_waits()))
def test_a_stream_wait_with_an_endless_timeout_waits_until_a_write(name, call, forever):
    writer = shmstream.create(name, shape=(2,), dtype=np.int64)
    reader = shmstream.open(name)
    result = []
    wait = _stream_waits()[call]

    def run():
        try:
            result.append(wait(reader, forever))
        except BaseException as exc:  # noqa: BLE001 - the test reports it
            result.append(exc)

    t = threading.Thread(target=run)
    t.start()
    try:
        support.wait_for_waiter(name)
        t.join(MORE_THAN_A_CHUNK_S)
        assert t.is_alive(), f"{call}(timeout={forever!r}) gave up: {result}"
        writer.write(np.array([4, 2]), frame_id=1)
        t.join(WAIT)
        assert not t.is_alive() and not isinstance(result[0], BaseException), result
    finally:
        reader.close()  # wakes the thread if it still waits
        t.join(WAIT)
        writer.close()


@pytest.mark.parametrize("forever", FOREVER, ids=repr)
def test_acquire_with_an_endless_timeout_waits_for_the_holder(name, forever):
    h = shmstream.create(name, shape=(2,))
    held, release = threading.Event(), threading.Event()

    def holder():
        other = shmstream.open(name)
        with other.locked():
            held.set()
            release.wait(WAIT)
        other.close()

    got = []

    def waiter():
        got.append(h.acquire(timeout=forever))
        h.release()

    t_hold = threading.Thread(target=holder)
    t_hold.start()
    held.wait(WAIT)
    t_wait = threading.Thread(target=waiter)
    t_wait.start()
    try:
        t_wait.join(MORE_THAN_A_CHUNK_S)
        assert t_wait.is_alive(), "acquire gave up while the lock was held"
        release.set()
        t_wait.join(WAIT)
        assert got == [None]
    finally:
        release.set()
        t_hold.join(WAIT)
        t_wait.join(WAIT)
        h.close()


@pytest.mark.parametrize("forever", [None, math.inf], ids=repr)
def test_channel_recv_with_an_endless_timeout_waits_for_a_message(make_name, forever):
    chan = make_name("chan")
    tx = shmstream.channel(chan, 4096)
    rx = shmstream.open_channel(chan)
    got = []
    t = threading.Thread(target=lambda: got.append(rx.recv(timeout=forever).data))
    t.start()
    try:
        t.join(MORE_THAN_A_CHUNK_S)
        assert t.is_alive(), "recv gave up"
        tx.send(b"late")
        t.join(WAIT)
        assert got == [b"late"]
    finally:
        tx.close()
        t.join(WAIT)
        rx.close()


# ---- bad timeouts -------------------------------------------------------------------------


def _calls(h, ch):
    return {
        "read": lambda t: h.read(timeout=t),
        "read_new": lambda t: h.read_new(timeout=t),
        "read_after": lambda t: h.read_after(0, timeout=t),
        "wait_for_count": lambda t: h.wait_for_count(after=0, timeout=t),
        "acquire": lambda t: h.acquire(timeout=t),
        "write_view": lambda t: h.write_view(timeout=t).__enter__(),
        "read_view": lambda t: h.read_view(timeout=t).__enter__(),
        "locked_many": lambda t: shmstream.locked_many([h], timeout=t).__enter__(),
        "recv": lambda t: ch.recv(timeout=t),
    }


@pytest.mark.parametrize(
    "bad, error",
    [
        (float("nan"), ValueError),
        (-1, ValueError),
        (-1e-9, ValueError),
        ("1", TypeError),
        (b"1", TypeError),
        (True, TypeError),
        ([1], TypeError),
    ],
    ids=repr,
)
def test_a_bad_timeout_is_refused_with_the_right_error_naming_the_argument(make_name, bad, error):
    h = shmstream.create(make_name(), shape=(2,))
    chan = make_name("chan")
    tx = shmstream.channel(chan, 4096)
    rx = shmstream.open_channel(chan)
    try:
        h.write(np.ones(2, np.float32))
        for what, call in _calls(h, rx).items():
            with pytest.raises(error, match="timeout") as info:
                call(bad)
            assert "incompatible function arguments" not in str(info.value), what
    finally:
        tx.close()
        rx.close()
        h.close()


def test_a_zero_timeout_does_not_wait(name):
    h = shmstream.create(name, shape=(2,))
    try:
        with pytest.raises(TimeoutError):
            h.read_new(timeout=0)
        with pytest.raises(TimeoutError):
            h.wait_for_count(after=h.count, timeout=0.0)
    finally:
        h.close()
