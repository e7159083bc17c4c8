"""Quick checks of the stream surface (the full suite lives beside this)."""
import asyncio
import dataclasses
import os
import threading
import time
import uuid

import numpy as np
import pytest

import shmstream as P


@pytest.fixture
def name():
    n = f"smoke/{uuid.uuid4().hex[:8]} ü"
    yield n
    P.unlink(n)


def test_roundtrip_counters_and_missed(name):
    w = P.create(name, shape=(2, 3), dtype=np.int16)
    r = P.open(name)
    for i in range(3):
        w.write(np.full((2, 3), i), frame_id=2**64 - 1 - i)
    assert r.read()[0, 0] == 2
    assert (r.last_read_count, r.missed_writes, r.total_missed_writes) == (3, 2, 2)
    w.write(np.zeros((2, 3)))
    r.read()
    assert (r.missed_writes, r.total_missed_writes) == (0, 2)
    assert r.frame_id == 2**64 - 3
    pub = r.read_publication()
    assert pub.frame_id == 2**64 - 3 and pub.count == 4
    with pytest.raises(dataclasses.FrozenInstanceError):
        pub.count = 1
    out = np.empty((2, 3), np.int16)
    assert r.read(out=out) is out
    with pytest.raises(ValueError, match="expected shape"):
        w.write(np.zeros(5))
    r.close()
    w.close()


def test_errors_and_names(name):
    with pytest.raises(TypeError):
        P.create(b"x", shape=(1,))
    with pytest.raises(ValueError):
        P.create("", shape=(1,))
    with pytest.raises(ValueError):
        P.create("é" * 200, shape=(1,))
    with pytest.raises(ValueError):
        P.create(name, shape=(-1,))
    with pytest.raises(TypeError):
        P.create(name, shape=(True,))
    with pytest.raises(TypeError):
        P.create(name, shape=(2,), dtype=object)
    with pytest.raises(ValueError, match="size does not match"):
        P.create(name, shape=(2,), size=3)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        P.open(name)
    with pytest.raises(RuntimeError, match="CUDA"):
        P.create(name, shape=(2,), gpu_device="cuda:0")
    s = P.create(name, shape=(2,))
    with pytest.raises(FileExistsError, match=r"use shmstream.open\("):
        P.create(name, shape=(2,))
    assert repr(s) == f"SharedMemory(name={name!r}, shape=(2,), dtype='float32', gpu_device=None)"
    assert name in P.list_streams()
    st = P.stat(name)
    assert st["shape"] == [2] and st["dtype"] == "float32" and st["creator_alive"]
    cfg = s.to_config()
    s.unlink()
    P.unlink(name)  # silent
    s2 = P.SharedMemory.create_from_config(cfg)
    assert s2.dtype == np.float32
    s2.close()
    assert not hasattr(s2, "create") and not hasattr(s2, "open")


def test_structured_and_zero_size(name):
    dt = np.dtype([("a", "<f4"), ("b", "S3"), ("c", "<i8", (2,))])
    s = P.create(name, shape=(4,), dtype=dt)
    x = np.zeros(4, dt)
    x["a"] = [1, 2, 3, 4]
    s.write(x)
    r = P.open(name)
    assert r.dtype == dt and (r.read() == x).all()
    s2 = P.SharedMemory.create_from_config({**s.to_config(), "name": name + "2"})
    assert s2.dtype == dt
    s2.unlink()
    r.close()
    s.unlink()
    z = P.create(name, shape=(0, 3))
    z.write(np.zeros((0, 3)))
    assert z.read().shape == (0, 3)
    z.close()


def test_lock_reentrant_and_view_abort(name):
    s = P.create(name, shape=(3,))
    other = P.open(name)
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
    with pytest.raises(P.InconsistentStreamError):
        other.read(timeout=0.1)
    with pytest.raises(P.InconsistentStreamError):
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
    t0 = time.monotonic()
    with pytest.raises(TimeoutError):
        other.acquire(timeout=0.05)
    assert time.monotonic() - t0 < 1
    with pytest.raises(RuntimeError, match="another thread owns its lock"):
        s.close()
    other.close()  # a different handle closes fine
    with pytest.raises(TimeoutError, match="stable write"):
        P.open(name).read(timeout=0.1)
    done.set()
    t.join()
    s.close()


def test_read_new_level_triggered_and_close_wakes(name):
    s = P.create(name, shape=(1,), notify=True)
    r = P.open(name)
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
    time.sleep(0.1)
    r.close()
    t.join(2)
    assert not t.is_alive() and "closed while a read was waiting" in errors[0]
    with pytest.raises(RuntimeError, match="closed shared memory"):
        r.read()
    with pytest.raises(RuntimeError, match="closed shared memory"):
        r.count
    assert P.stat(name)["notify"] is True
    s.close()


def test_async(name):
    s = P.create(name, shape=(2,), notify=True)
    r = P.open(name)

    async def main():
        task = asyncio.ensure_future(r.read_new_async(timeout=2))
        await asyncio.sleep(0.05)
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


def test_readonly_and_stale(name):
    s = P.create(name, shape=(2,))
    ro = P.open(name, readonly=True)
    assert ro.readonly is True
    for call in (lambda: ro.write(np.ones(2)), ro.clear, ro.acquire, ro.unlink,
                 lambda: ro.read(safe=False)):
        with pytest.raises(PermissionError, match="read-only"):
            call()
    ro.read()
    old_id = s.instance_id
    P.unlink(name)
    s2 = P.create(name, shape=(2,))
    assert s2.instance_id != old_id and len(old_id) == 32
    s.write(np.ones(2))
    assert (s2.read() == 0).all()
    with pytest.raises(P.StaleStreamError, match="newer generation"):
        s.unlink()
    ro.close()
    s2.close()


def test_fork_child_does_not_inherit_lock(name):
    s = P.create(name, shape=(1,))
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


def test_dead_writer_in_write_view(name):
    s = P.create(name, shape=(4,))
    s.write(np.ones(4))
    pid = os.fork()
    if pid == 0:
        with P.open(name).write_view() as v:
            v[:] = 7
            os._exit(0)
    os.waitpid(pid, 0)
    with pytest.raises(P.InconsistentStreamError, match="exited"):
        s.read(timeout=1)
    s.write(np.zeros(4))
    assert (s.read() == 0).all()
    s.close()


def test_locked_many_and_stream(name):
    with P.stream(name, shape=(1,)) as a, P.stream(name + "b", shape=(1,)) as b:
        with P.locked_many([b, a]) as hs:
            assert hs == (b, a)
            with a.write_view_locked() as v:
                v[:] = 1
        with pytest.raises(ValueError, match="unique"):
            with P.locked_many([a, a]):
                pass
        with pytest.raises(ValueError):
            with P.locked_many([a], poll_interval=0):
                pass
    assert name not in P.list_streams()


def test_dlpack_and_freshness(name):
    s = P.create(name, shape=(2,))
    assert s.age == float("inf") and s.is_stale(60)
    s.write(np.ones(2))
    assert not s.is_stale(60) and s.producer_alive()
    with pytest.raises(ValueError, match="max_age must be positive"):
        s.is_stale(0)
    snap = np.from_dlpack(s)
    s.write(np.zeros(2))
    assert (snap == 1).all() and s.__dlpack_device__() == (1, 0)
    assert "count:        2" in s.describe() and "notify:" in s.describe()
    s.close()
    with pytest.raises(RuntimeError, match="closed"):
        s.__dlpack__()


@pytest.mark.parametrize("notify", [False, True])
@pytest.mark.parametrize(
    "call",
    ["read_new", "read_new_publication", "read_after", "read_after_publication",
     "wait_for_count", "read_new_async"],
)
def test_close_wakes_every_blocking_read(name, call, notify):
    s = P.create(name, shape=(1,), notify=notify)
    r = P.open(name)
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
    time.sleep(0.2)
    t0 = time.monotonic()
    r.close()
    t.join(2)
    assert not t.is_alive() and time.monotonic() - t0 < 2
    assert "closed while a read was waiting" in errors[0]
    with pytest.raises(RuntimeError, match="closed shared memory"):
        asyncio.run(r.read_new_async(timeout=0.1))
    s.close()
