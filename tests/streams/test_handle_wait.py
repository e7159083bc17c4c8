"""Reads that wait for a write: read_new, read_after, wait_for_count,
read_new_async, notify streams, and close() waking every kind of read
that waits on the closed handle (publication forms included).

Specification: docs/API.md, "read_new", "read_new_async", "read_after",
"Wait" and "Spinning and wake-ups".
Plain reads and writes are in test_handle_write_read.py, the handle's
life in test_handle_lifecycle.py, wait policies in test_wait_policy.py.
The ``shm``/``other`` fixtures are in conftest.py, ``frame`` in support.py.
"""

from __future__ import annotations

import asyncio
import threading
import time

import numpy as np
import pytest

import shmstream

import support
from support import WAIT, frame

# ---- children ----------------------------------------------------------------


def child_write_when_told(stream_name, go, value):
    h = shmstream.open(stream_name)
    assert go.wait(WAIT)
    h.write(np.full(h.shape, value, dtype=h.dtype))
    h.close()


# ---- read_new ------------------------------------------------------------------


def test_read_new_blocks_until_a_write_from_another_process(shm, spawn, ctx):
    go = ctx.Event()
    child = spawn(child_write_when_told, shm.name, go, 8.0)
    result = {}

    def reader():
        result["value"] = shm.read_new(timeout=WAIT)

    t = threading.Thread(target=reader)
    t.start()
    support.wait_for_waiter(shm.name)  # parked, nothing published yet
    assert "value" not in result
    go.set()
    t.join(WAIT)
    child.result()
    assert np.array_equal(result["value"], frame(8.0))
    assert shm.last_read_count == 1


def test_read_new_times_out_when_nothing_new_arrives(shm):
    shm.write(frame(1))
    shm.read()
    with pytest.raises(TimeoutError):
        shm.read_new(timeout=0.05)


def test_read_new_with_out_returns_the_same_buffer(shm, other):
    other.write(frame(6))
    out = np.empty((3, 3), np.float32)
    assert shm.read_new(timeout=WAIT, out=out) is out
    assert np.array_equal(out, frame(6))


def test_read_new_returns_a_write_that_landed_between_two_calls(shm, other):
    # pyshmem's read_new is edge-triggered at the call and would wait for
    # the *next* write here; ours returns the one this handle has not seen.
    other.write(frame(1))
    assert np.array_equal(shm.read_new(timeout=WAIT), frame(1))
    other.write(frame(2))  # lands before the next call
    assert np.array_equal(shm.read_new(timeout=1.0), frame(2))
    assert shm.last_read_count == 2


def test_read_new_returns_a_write_made_after_the_handle_was_opened(shm):
    shm.write(frame(1))
    late = shmstream.open(shm.name)  # baseline: count at open == 1
    try:
        shm.write(frame(2))
        assert np.array_equal(late.read_new(timeout=1.0), frame(2))
    finally:
        late.close()


def test_read_new_does_not_return_what_was_current_when_the_handle_was_opened(shm):
    shm.write(frame(1))
    late = shmstream.open(shm.name)
    try:
        with pytest.raises(TimeoutError):
            late.read_new(timeout=0.05)
    finally:
        late.close()


def test_read_new_does_not_return_the_handles_own_last_write(shm, other):
    shm.write(frame(1))
    with pytest.raises(TimeoutError):
        shm.read_new(timeout=0.05)
    other.write(frame(2))
    assert np.array_equal(shm.read_new(timeout=1.0), frame(2))


def test_read_new_skips_to_the_latest_and_counts_missed_writes(shm, other):
    other.read()  # baseline 0
    for v in (1, 2, 3):
        shm.write(frame(v))
    assert np.array_equal(other.read_new(timeout=1.0), frame(3))
    assert other.last_read_count == 3
    assert other.missed_writes == 2


# ---- read_after / wait_for_count ------------------------------------------------


def test_read_after_returns_once_count_is_above_and_updates_last_read_count(shm, other):
    shm.write(frame(1))
    shm.write(frame(2))
    assert np.array_equal(other.read_after(1, timeout=1.0), frame(2))
    assert other.last_read_count == 2
    with pytest.raises(TimeoutError):
        other.read_after(2, timeout=0.05)


def test_read_after_waits_for_a_later_write(shm, spawn, ctx):
    go = ctx.Event()
    child = spawn(child_write_when_told, shm.name, go, 3.0)
    result = {}
    t = threading.Thread(target=lambda: result.setdefault("v", shm.read_after(0, timeout=WAIT)))
    t.start()
    support.wait_for_waiter(shm.name)
    go.set()
    t.join(WAIT)
    child.result()
    assert np.array_equal(result["v"], frame(3.0))
    assert shm.last_read_count == 1


def test_wait_for_count_is_level_triggered(shm, other):
    shm.write(frame(1))
    shm.write(frame(2))
    # both writes happened before the call: it returns at once
    assert other.wait_for_count(after=0, timeout=1.0) == 2
    assert other.wait_for_count(after=1, timeout=1.0) == 2
    with pytest.raises(TimeoutError):
        other.wait_for_count(after=2, timeout=0.05)


def test_wait_for_count_wakes_on_a_write_from_another_process(shm, spawn, ctx):
    go = ctx.Event()
    child = spawn(child_write_when_told, shm.name, go, 1.0)
    result = {}
    t = threading.Thread(
        target=lambda: result.setdefault("c", shm.wait_for_count(after=0, timeout=WAIT))
    )
    t.start()
    support.wait_for_waiter(shm.name)
    go.set()
    t.join(WAIT)
    child.result()
    assert result["c"] == 1


# ---- notify ------------------------------------------------------------------------------------------


def test_notify_defaults_to_false_and_is_stored_in_to_config(make_name):
    plain = shmstream.create(make_name(), shape=(1,))
    flagged = shmstream.create(make_name(), shape=(1,), notify=True)
    try:
        assert plain.to_config()["notify"] is False
        assert flagged.to_config()["notify"] is True
        reopened = shmstream.open(flagged.name)
        assert reopened.to_config()["notify"] is True
        reopened.close()
    finally:
        plain.close()
        flagged.close()


def test_notify_stream_wakes_a_parked_read_new_when_a_write_lands(name, spawn, ctx):
    h = shmstream.create(name, shape=(4,), notify=True)
    go = ctx.Event()
    child = spawn(child_write_when_told, name, go, 2.0)
    result = {}
    t = threading.Thread(target=lambda: result.setdefault("v", h.read_new(timeout=WAIT)))
    t.start()
    try:
        support.wait_for_waiter(name)
        go.set()
        t.join(WAIT)
        child.result()
        assert result["v"].tolist() == [2, 2, 2, 2]
    finally:
        h.close()


@pytest.mark.parametrize("notify", [False, True], ids=["plain", "notify"])
def test_read_new_times_out_promptly(name, notify):
    h = shmstream.create(name, shape=(4,), notify=notify)
    try:
        start = time.monotonic()
        with pytest.raises(TimeoutError):
            h.read_new(timeout=0.2)
        elapsed = time.monotonic() - start
        assert 0.15 <= elapsed < 2.0
    finally:
        h.close()


# ---- asyncio ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("notify", [False, True], ids=["plain", "notify"])
def test_read_new_async_returns_a_new_write_without_blocking_the_loop(name, notify):
    h = shmstream.create(name, shape=(4,), notify=notify)
    writer = shmstream.open(name)

    async def main():
        ticks = 0

        async def ticker():
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0)

        tick_task = asyncio.create_task(ticker())
        read_task = asyncio.create_task(h.read_new_async(timeout=WAIT))
        while ticks < 20:  # the loop keeps running while read_new_async waits
            await asyncio.sleep(0)
        writer.write(np.full(4, 5, np.float32))
        value = await read_task
        tick_task.cancel()
        return value

    try:
        assert asyncio.run(main()).tolist() == [5, 5, 5, 5]
    finally:
        writer.close()
        h.close()


@pytest.mark.parametrize("notify", [False, True], ids=["plain", "notify"])
def test_read_new_async_times_out_and_forwards_out(name, notify):
    h = shmstream.create(name, shape=(4,), notify=notify)
    try:
        with pytest.raises(TimeoutError):
            asyncio.run(h.read_new_async(timeout=0.05))
        other = shmstream.open(name)
        other.write(np.arange(4, dtype=np.float32))
        other.close()
        out = np.empty(4, np.float32)
        assert asyncio.run(h.read_new_async(timeout=WAIT, out=out)) is out
        assert out.tolist() == [0, 1, 2, 3]
    finally:
        h.close()


@pytest.mark.parametrize("notify", [False, True], ids=["plain", "notify"])
def test_read_new_async_on_a_closed_handle_raises(name, notify):
    h = shmstream.create(name, shape=(4,), notify=notify)
    h.close()
    with pytest.raises(RuntimeError, match="closed shared memory"):
        asyncio.run(h.read_new_async(timeout=0.05))


# ---- close wakes a waiting read ----------------------------------------------


BLOCKING_READS = {
    "read_new": lambda h: h.read_new(timeout=WAIT),
    "read_new_publication": lambda h: h.read_new_publication(timeout=WAIT),
    "read_after": lambda h: h.read_after(h.count, timeout=WAIT),
    "read_after_publication": lambda h: h.read_after_publication(h.count, timeout=WAIT),
    "wait_for_count": lambda h: h.wait_for_count(after=h.count, timeout=WAIT),
    "read_new_async": lambda h: asyncio.run(h.read_new_async(timeout=WAIT)),
}


@pytest.mark.parametrize("notify", [False, True], ids=["plain", "notify"])
@pytest.mark.parametrize("method", list(BLOCKING_READS))
def test_close_wakes_a_reader_blocked_on_that_handle(name, method, notify):
    h = shmstream.create(name, shape=(4,), notify=notify)
    outcome = {}

    def reader():
        try:
            BLOCKING_READS[method](h)
            outcome["error"] = None
        except BaseException as exc:  # noqa: BLE001 - the test inspects it
            outcome["error"] = exc
        outcome["at"] = time.monotonic()

    t = threading.Thread(target=reader)
    t.start()
    support.wait_for_waiter(name)
    closed_at = time.monotonic()
    h.close()
    t.join(WAIT)
    assert not t.is_alive(), f"{method} still blocked after close()"
    assert isinstance(outcome["error"], RuntimeError), outcome["error"]
    assert "closed while a read was waiting" in str(outcome["error"])
    assert outcome["at"] - closed_at < 2.0


# ---- from the former surface smoke test --------------------------------------


def test_read_new_is_level_triggered_and_close_wakes_a_waiting_read(name):
    s = shmstream.create(name, shape=(1,), notify=True)
    r = shmstream.open(name)
    s.write(np.ones(1))
    assert r.read_new(timeout=1)[0] == 1  # written before the call: not missed
    with pytest.raises(TimeoutError):
        r.read_new(timeout=0.1)
    assert r.wait_for_count(after=0, timeout=0) == 1
    errors = []

    def waiter():
        try:
            r.read_new()
        except RuntimeError as exc:
            errors.append(str(exc))

    t = threading.Thread(target=waiter)
    t.start()
    support.wait_for_waiter(name)  # the read sleeps
    r.close()
    t.join(WAIT)
    assert not t.is_alive() and "closed while a read was waiting" in errors[0]
    with pytest.raises(RuntimeError, match="closed shared memory"):
        r.read()
    with pytest.raises(RuntimeError, match="closed shared memory"):
        _ = r.count
    assert shmstream.stat(name)["notify"] is True
    s.close()


def test_read_new_async_waits_without_blocking_the_loop(name):
    s = shmstream.create(name, shape=(2,), notify=True)
    r = shmstream.open(name)

    async def main():
        task = asyncio.ensure_future(r.read_new_async(timeout=WAIT))
        # the executor thread sleeps in the native wait
        await asyncio.get_running_loop().run_in_executor(None, support.wait_for_waiter, name)
        s.write(np.arange(2))
        got = await task
        with pytest.raises(TimeoutError):
            await r.read_new_async(timeout=0.1)
        out = np.empty(2, np.float32)
        s.write(np.ones(2))
        assert await r.read_new_async(timeout=1, out=out) is out
        return got

    assert list(asyncio.run(main())) == [0, 1]
    r.close()
    s.close()


@pytest.mark.parametrize("notify", [False, True])
@pytest.mark.parametrize(
    "call",
    [
        "read_new",
        "read_new_publication",
        "read_after",
        "read_after_publication",
        "wait_for_count",
        "read_new_async",
    ],
)
def test_close_wakes_every_kind_of_blocking_read(name, call, notify):
    s = shmstream.create(name, shape=(1,), notify=notify)
    r = shmstream.open(name)
    errors = []

    def waiter():
        try:
            if call == "read_new_async":
                asyncio.run(r.read_new_async())
            elif call.startswith("read_after"):
                getattr(r, call)(5)
            elif call == "wait_for_count":
                r.wait_for_count(after=5)
            else:
                getattr(r, call)()
        except RuntimeError as exc:
            errors.append(str(exc))

    t = threading.Thread(target=waiter)
    t.start()
    support.wait_for_waiter(name)  # the read sleeps
    r.close()
    t.join(WAIT)
    assert not t.is_alive()
    assert "closed while a read was waiting" in errors[0]
    with pytest.raises(RuntimeError, match="closed shared memory"):
        asyncio.run(r.read_new_async(timeout=0.1))
    s.close()
