"""A handle's life and what it tells about its stream: its surface and
repr, close, unlink and generations, read-only handles, freshness (age,
creator_pid, producer_alive), describe, to_config and DLPack export.

Specification: docs/API.md, "Handle attributes", "Counters and
freshness", "Lifetime and clean-up", "describe", "to_config" and
"__dlpack__, __dlpack_device__".
Writes and reads are in test_handle_write_read.py, reads that wait (and
close() waking them) in test_handle_wait.py; locking in test_locking.py.
The ``shm``/``other`` fixtures are in conftest.py, ``frame`` in support.py.
"""

from __future__ import annotations

import math
import os
import re

import numpy as np
import pytest

import shmstream

from support import WAIT, frame, lock_held_by_another_thread

# ---- children ----------------------------------------------------------------


def child_exit_after_create(stream_name):
    shmstream.create(stream_name, shape=(2,)).close()
    return os.getpid()


# ---- surface -----------------------------------------------------------------


def test_handles_do_not_expose_create_or_open(shm):
    assert not hasattr(shm, "create")
    assert not hasattr(shm, "open")


def test_repr_is_exact_and_survives_close_and_reopen(name):
    h = shmstream.create(name, shape=(3, 3), dtype=np.float32)
    expected = f"SharedMemory(name={name!r}, shape=(3, 3), dtype='float32', gpu_device=None)"
    assert repr(h) == expected
    h.write(frame(1))
    h.close()
    assert repr(h) == expected
    h2 = shmstream.open(name)
    try:
        assert repr(h2) == expected
        assert h2.count == 1
    finally:
        h2.close()


# ---- close ------------------------------------------------------------------------------


def test_close_is_idempotent_and_does_not_destroy_the_stream(name):
    h = shmstream.create(name, shape=(2,))
    h.write([1, 2])
    h.close()
    h.close()
    h2 = shmstream.open(name)
    try:
        assert h2.read().tolist() == [1, 2]
    finally:
        h2.close()


def test_close_of_a_handle_whose_lock_another_thread_holds_raises(shm):
    with lock_held_by_another_thread(shm):
        with pytest.raises(RuntimeError, match="another thread owns its lock"):
            shm.close()
    assert shm.count == 0  # still usable after the refused close


def test_close_of_another_handle_succeeds_while_one_handle_holds_the_lock(shm, other):
    with lock_held_by_another_thread(shm):
        other.close()
    with pytest.raises(RuntimeError, match="closed shared memory"):
        other.read()
    shm.write(frame(1))
    assert shm.count == 1


# ---- unlink / generations -------------------------------------------------------------------


def test_unlink_and_delete_destroy_the_stream(make_name):
    for method in ("unlink", "delete"):
        stream_name = make_name()
        h = shmstream.create(stream_name, shape=(1,))
        getattr(h, method)()
        with pytest.raises(FileNotFoundError):
            shmstream.open(stream_name)


def test_a_handle_from_before_unlink_and_recreate_keeps_its_generation(name):
    old = shmstream.create(name, shape=(2,))
    old.write([1, 1])
    old_id = old.instance_id
    assert isinstance(old_id, str) and len(old_id) == 32
    shmstream.unlink(name)
    new = shmstream.create(name, shape=(2,))
    try:
        assert new.instance_id != old_id and len(new.instance_id) == 32
        assert old.read().tolist() == [1, 1]  # old data
        old.write([2, 2])
        assert new.count == 0  # old writes do not reach the new stream
        assert new.read().tolist() == [0, 0]
        with pytest.raises(shmstream.StaleStreamError, match="newer generation"):
            old.unlink()
        reopened = shmstream.open(name)  # the new stream is still there
        assert reopened.instance_id == new.instance_id
        reopened.close()
    finally:
        old.close()
        new.close()


def test_instance_id_is_shared_by_every_handle_of_one_generation(shm, other):
    assert shm.instance_id == other.instance_id


# ---- read-only handles --------------------------------------------------------------------------


def test_readonly_handle_reads_but_refuses_every_mutation(shm):
    shm.write(frame(3))
    ro = shmstream.open(shm.name, readonly=True)
    try:
        assert ro.readonly is True
        assert np.array_equal(ro.read(), frame(3))
        assert ro.read_publication().count == 1
        assert np.array_equal(np.from_dlpack(ro), frame(3))  # DLPack export allowed
        for attempt in (
            lambda: ro.write(frame(1)),
            ro.clear,
            ro.acquire,
            lambda: ro.read(safe=False),
            ro.unlink,
        ):
            with pytest.raises(PermissionError, match="read-only"):
                attempt()
        assert shm.count == 1
        assert np.array_equal(shm.read(), frame(3))
    finally:
        ro.close()
    shmstream.open(shm.name).close()  # ro.unlink() did not destroy it


def test_readonly_handle_sees_new_writes(shm):
    ro = shmstream.open(shm.name, readonly=True)
    try:
        shm.write(frame(4))
        assert np.array_equal(ro.read_new(timeout=WAIT), frame(4))
    finally:
        ro.close()


def test_a_writable_handle_is_not_readonly(shm):
    assert shm.readonly is False


# ---- freshness ------------------------------------------------------------------------------------


def test_age_is_inf_before_the_first_write_and_small_after(shm):
    assert shm.age == math.inf
    shm.write(frame(1))
    assert 0 <= shm.age < 60


def test_is_stale_before_a_write_and_not_just_after(shm):
    assert shm.is_stale(60) is True
    shm.write(frame(1))
    assert shm.is_stale(60) is False


@pytest.mark.parametrize("max_age", [0, -1])
def test_is_stale_requires_a_positive_max_age(shm, max_age):
    with pytest.raises(ValueError, match="max_age must be positive"):
        shm.is_stale(max_age)


def test_creator_pid_and_producer_alive_for_own_stream(shm, other):
    assert shm.creator_pid == os.getpid() == other.creator_pid
    assert shm.producer_alive() is True


def test_producer_alive_is_false_after_the_creator_exits(name, spawn):
    child = spawn(child_exit_after_create, name)
    pid = child.result()
    child.join()
    h = shmstream.open(name)
    try:
        assert h.creator_pid == pid
        assert h.producer_alive() is False
        assert h.read().tolist() == [0, 0]
    finally:
        h.close()


# ---- describe / to_config --------------------------------------------------------------------------------


def test_describe_is_a_multiline_summary_with_padded_labels(shm):
    shm.write(frame(1))
    text = shm.describe()
    assert isinstance(text, str) and "\n" in text
    assert shm.name in text
    for label in (
        "name:",
        "shape:",
        "dtype:",
        "size:",
        "gpu_enabled:",
        "gpu_device:",
        "cpu_mirror:",
        "count:",
        "write_time:",
        "write_seq:",
        "owner:",
        "notify:",
    ):
        assert re.search(rf"^{re.escape(label)}", text, re.M), label
    assert "count:        1" in text
    assert f"creator_pid:  {os.getpid()}" in text
    assert "producer:     alive" in text
    for line in text.splitlines():
        m = re.match(r"^([a-z_]+:) +\S", line)
        assert m and m.end() - 1 == 14, f"value not at column 14: {line!r}"


def test_to_config_is_a_plain_dict_describing_the_stream(name):
    h = shmstream.create(name, shape=(2, 5), dtype=np.float64)
    try:
        assert h.to_config() == {
            "name": name,
            "shape": [2, 5],
            "dtype": "float64",
            "gpu_device": None,
            "cpu_mirror": True,
            "notify": False,
        }
    finally:
        h.close()


# ---- DLPack -------------------------------------------------------------------------------------------------


def test_dlpack_device_is_cpu(shm):
    assert shm.__dlpack_device__() == (1, 0)


def test_from_dlpack_gives_a_snapshot_that_later_writes_do_not_change(shm):
    shm.write(frame(1))
    snap = np.from_dlpack(shm)
    shm.write(frame(2))
    assert np.array_equal(snap, frame(1))
    assert np.array_equal(np.from_dlpack(shm), frame(2))


def child_set_up_stream(name: str) -> int:
    shmstream.create(name, shape=(2,), dtype=np.int32)  # exits: the creator is gone
    return os.getpid()


def test_creator_alive_judges_the_creator_not_the_writer(name, spawn):
    """issue 47: "producer" meant "creator". A stream a set-up process made
    and another writes: frames flow while its creator is dead, which
    creator_alive() says by name; producer_alive() is pyshmem's name for it."""
    spawn(child_set_up_stream, name).result()
    with shmstream.open(name) as h:
        h.write(np.array([1, 2], np.int32))
        assert h.read().tolist() == [1, 2]
        assert h.creator_alive() is False and h.producer_alive() is False
        assert "producer:     dead" in h.describe()
    with shmstream.create(name + "-mine", shape=(2,), auto_unlink=True) as mine:
        assert mine.creator_alive() is True and mine.producer_alive() is True
