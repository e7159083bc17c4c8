"""Module-level API: create/open/unlink/stream/list_streams/purge/stat,
exported names, exceptions, Publication, create_from_config.

Specification: docs/API.md (pyshmem 1.4.0's module level, and what
shmstream adds), "Make, attach, destroy" and "Inspect".
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import shmstream

import support
from support import WAIT

# ---- children (module level so that 'spawn' can import them) -------------


def child_open_and_read(stream_name):
    h = shmstream.open(stream_name)
    try:
        return h.shape, h.dtype.str, h.size, h.read(), h.count
    finally:
        h.close()


def child_create_write_exit(stream_name):
    h = shmstream.create(stream_name, shape=(4,), dtype=np.int32)
    h.write(np.arange(4, dtype=np.int32) + 7)
    h.close()
    return os.getpid()


def child_write_until(stream_name, stop):
    h = shmstream.open(stream_name)
    i = 0
    while not stop.is_set():
        i += 1
        h.write(np.full(h.shape, i, dtype=h.dtype))
    h.close()
    return i


def run_python(code: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


# ---- importability ---------------------------------------------------------


def test_create_and_open_are_callable_and_SharedMemory_is_exported():
    assert callable(shmstream.create)
    assert callable(shmstream.open)
    assert isinstance(shmstream.SharedMemory, type)
    for attr in (
        "unlink",
        "unlink_quiet",
        "stream",
        "list_streams",
        "purge",
        "stat",
        "locked_many",
        "gpu_available",
    ):
        assert callable(getattr(shmstream, attr)), attr


def test_importing_and_using_cpu_streams_never_imports_torch(name):
    proc = run_python(
        """
        import sys
        import numpy as np
        import shmstream
        h = shmstream.create(sys.argv[1], shape=(2, 3))
        h.write(np.ones((2, 3), np.float32))
        assert h.read().sum() == 6
        shmstream.stat(sys.argv[1]); shmstream.list_streams()
        h.unlink()
        print("torch" in sys.modules)
        """,
        name,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "False"


# ---- create ---------------------------------------------------------------


def test_create_returns_a_handle_describing_the_stream(name):
    h = shmstream.create(name, shape=[2, 3], dtype=np.float64)
    try:
        assert isinstance(h, shmstream.SharedMemory)
        assert h.name == name
        assert h.shape == (2, 3) and isinstance(h.shape, tuple)
        assert isinstance(h.dtype, np.dtype) and h.dtype == np.float64
        assert h.size == 2 * 3 * 8
        assert h.gpu_device is None
    finally:
        h.close()


def test_create_defaults_to_float32(name):
    with shmstream.create(name, shape=(5,)) as h:
        assert h.dtype == np.float32
        assert h.size == 20


def test_create_accepts_unicode_names(make_name):
    stream_name = make_name("κάμερα/左-📷")
    h = shmstream.create(stream_name, shape=(3,))
    h.write([1, 2, 3])
    h.close()
    h2 = shmstream.open(stream_name)
    try:
        assert h2.name == stream_name
        assert h2.read().tolist() == [1, 2, 3]
    finally:
        h2.close()


def test_create_of_an_existing_name_raises_FileExistsError_naming_open(name):
    h = shmstream.create(name, shape=(1,))
    try:
        with pytest.raises(FileExistsError) as info:
            shmstream.create(name, shape=(1,))
        assert "already exists" in str(info.value)
        assert f"use shmstream.open({name!r})" in str(info.value)
    finally:
        h.close()


def test_create_of_an_existing_name_leaves_the_existing_stream_intact(name):
    h = shmstream.create(name, shape=(2,), dtype=np.int64)
    h.write([5, 6])
    with pytest.raises(FileExistsError):
        shmstream.create(name, shape=(9, 9), dtype=np.float32)
    try:
        assert h.read().tolist() == [5, 6]
        assert h.count == 1
    finally:
        h.close()


def test_create_with_a_size_that_does_not_match_shape_and_dtype_raises(name):
    with pytest.raises(ValueError, match="size does not match"):
        shmstream.create(name, shape=(2, 3), dtype=np.float32, size=25)
    with pytest.raises(FileNotFoundError):
        shmstream.open(name)


def test_create_with_a_matching_size_is_accepted(name):
    with shmstream.create(name, shape=(2, 3), dtype=np.float32, size=24) as h:
        assert h.size == 24


def test_create_as_context_manager_only_closes_by_default(name):
    with shmstream.create(name, shape=(2,)) as h:
        h.write([1.5, 2.5])
    with pytest.raises(RuntimeError, match="closed shared memory"):
        h.read()
    h2 = shmstream.open(name)
    try:
        assert h2.read().tolist() == [1.5, 2.5]
    finally:
        h2.close()


def test_create_with_auto_unlink_destroys_the_stream_on_exit(name):
    with shmstream.create(name, shape=(2,), auto_unlink=True) as h:
        h.write([1, 2])
    with pytest.raises(FileNotFoundError):
        shmstream.open(name)


# ---- open -----------------------------------------------------------------


def test_open_recovers_shape_dtype_size_and_contents(name):
    data = np.arange(12, dtype=np.int16).reshape(3, 4)
    h = shmstream.create(name, shape=(3, 4), dtype=np.int16)
    h.write(data)
    h2 = shmstream.open(name)
    try:
        assert h2.shape == (3, 4)
        assert h2.dtype == np.int16
        assert h2.size == 24
        assert np.array_equal(h2.read(), data)
        assert h2.count == 1
    finally:
        h2.close()
        h.close()


def test_open_from_another_process_sees_shape_dtype_and_contents(name, spawn):
    data = np.linspace(0, 1, 6, dtype=np.float64).reshape(2, 3)
    h = shmstream.create(name, shape=(2, 3), dtype=np.float64)
    h.write(data)
    try:
        shape, dtype, size, payload, count = spawn(child_open_and_read, name).result()
        assert shape == (2, 3) and dtype == "<f8" and size == 48
        assert np.array_equal(payload, data) and count == 1
    finally:
        h.close()


def test_open_works_after_the_creating_process_has_exited(name, spawn):
    child = spawn(child_create_write_exit, name)
    child.result()
    assert child.join() == 0
    h = shmstream.open(name)
    try:
        assert h.read().tolist() == [7, 8, 9, 10]
        assert h.dtype == np.int32
    finally:
        h.close()


def test_open_of_a_missing_name_raises_FileNotFoundError_naming_create(name):
    with pytest.raises(FileNotFoundError) as info:
        shmstream.open(name)
    assert "does not exist" in str(info.value)
    assert f"shmstream.create({name!r}, ...)" in str(info.value)


def test_open_repeatedly_while_another_process_writes_never_raises(name, spawn, ctx):
    h = shmstream.create(name, shape=(64, 64), dtype=np.float32)
    stop = ctx.Event()
    writer = spawn(child_write_until, name, stop)
    try:
        h.wait_for_count(after=0, timeout=WAIT)  # the writer is running
        for _ in range(200):
            h2 = shmstream.open(name)
            frame = h2.read(timeout=WAIT)
            assert (frame == frame.flat[0]).all()
            h2.close()
        assert h.count > 0
    finally:
        stop.set()
        assert writer.result() > 0
        h.close()


def test_a_child_that_opens_reads_and_exits_prints_no_resource_tracker_warning(name):
    h = shmstream.create(name, shape=(3,))
    h.write([1, 2, 3])
    try:
        proc = run_python(
            """
            import sys, shmstream
            h = shmstream.open(sys.argv[1])
            print(h.read().tolist())
            """,
            name,
        )
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.strip() == "[1.0, 2.0, 3.0]"
        assert "resource_tracker" not in proc.stderr
        assert "leaked" not in proc.stderr
        h2 = shmstream.open(name)  # still attachable
        assert h2.read().tolist() == [1, 2, 3]
        h2.close()
    finally:
        h.close()


# ---- unlink ---------------------------------------------------------------


def test_unlink_destroys_the_stream_so_open_raises(name):
    shmstream.create(name, shape=(1,)).close()
    shmstream.unlink(name)
    with pytest.raises(FileNotFoundError):
        shmstream.open(name)
    assert name not in shmstream.list_streams()


def test_unlink_of_a_missing_name_is_silent(name):
    assert shmstream.unlink(name) is None
    assert shmstream.unlink_quiet(name) is None


def test_unlink_quiet_destroys_an_existing_stream(name):
    shmstream.create(name, shape=(1,)).close()
    shmstream.unlink_quiet(name)
    with pytest.raises(FileNotFoundError):
        shmstream.open(name)


def test_unlink_frees_the_name_for_a_new_create(name):
    shmstream.create(name, shape=(1,)).close()
    shmstream.unlink(name)
    h = shmstream.create(name, shape=(2, 2), dtype=np.uint8)
    try:
        assert h.shape == (2, 2) and h.count == 0
    finally:
        h.close()


# ---- stream() -------------------------------------------------------------


def test_stream_yields_a_writable_handle_and_unlinks_on_normal_exit(name):
    with shmstream.stream(name, shape=(2,), dtype=np.int64) as h:
        assert isinstance(h, shmstream.SharedMemory)
        h.write([3, 4])
        assert h.read().tolist() == [3, 4]
    with pytest.raises(FileNotFoundError):
        shmstream.open(name)


def test_stream_unlinks_on_an_exception_and_propagates_it(name):
    class Boom(Exception):
        pass

    with pytest.raises(Boom):
        with shmstream.stream(name, shape=(2,)) as h:
            h.write([1, 2])
            raise Boom()
    with pytest.raises(FileNotFoundError):
        shmstream.open(name)


# ---- list_streams ----------------------------------------------------------


def test_list_streams_returns_sorted_user_names_including_new_and_unicode(make_name):
    names = [make_name("b"), make_name("a/x"), make_name("ü-温度")]
    handles = [shmstream.create(n, shape=(1,)) for n in names]
    try:
        listed = shmstream.list_streams()
        assert isinstance(listed, list)
        assert all(isinstance(n, str) for n in listed)
        assert listed == sorted(listed)
        for n in names:
            assert n in listed
        assert not [n for n in listed if n.endswith("_meta") or n.endswith("_gpu")]
    finally:
        for h in handles:
            h.close()


def test_list_streams_forgets_unlinked_streams(name):
    shmstream.create(name, shape=(1,)).close()
    assert name in shmstream.list_streams()
    shmstream.unlink(name)
    assert name not in shmstream.list_streams()


# ---- purge (in a private /dev/shm: purge removes every stream) -------------

PURGE_SCRIPT = """
import os, subprocess, sys
import shmstream

shm = "/dev/shm"
names = ["a", "cam/left", "温度"]
for n in names:
    shmstream.create(n, shape=(2,)).close()
unrelated = os.path.join(shm, "not-a-stream")
open(unrelated, "wb").close()

dead = subprocess.Popen(["true"]); dead.wait()
orphan = os.path.join(shm, "cuda.shm.%d.%x.%d" % (1, dead.pid, 0))
living = os.path.join(shm, "cuda.shm.%d.%x.%d" % (1, os.getpid(), 0))
for p in (orphan, living):
    open(p, "wb").close()

removed = shmstream.purge()
assert isinstance(removed, list), removed
assert sorted(removed) == sorted(names), removed
assert shmstream.list_streams() == [], shmstream.list_streams()
for n in names:
    try:
        shmstream.open(n)
    except FileNotFoundError:
        pass
    else:
        raise AssertionError(n + " survived purge")
assert os.path.exists(unrelated), "purge removed a file that is not a stream"
assert os.path.exists(orphan), "purge() without the flag removed a CUDA IPC file"

shmstream.create("again", shape=(1,)).close()
removed = shmstream.purge(include_cuda_orphans=True)
assert removed == ["again"], removed
assert not os.path.exists(orphan), "include_cuda_orphans=True kept a dead producer's file"
assert os.path.exists(living), "include_cuda_orphans=True removed a live producer's file"
assert shmstream.purge() == []
print("ok")
"""


@pytest.mark.root
def test_purge_removes_every_stream_and_only_dead_cuda_ipc_files_when_asked():
    reason = support.private_shm_available()
    if reason:
        pytest.skip(f"purge removes every stream on the machine; {reason}")
    proc = support.run_in_private_shm(PURGE_SCRIPT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip() == "ok"


# ---- stat -----------------------------------------------------------------


def test_stat_reports_metadata_of_a_stream(name):
    h = shmstream.create(name, shape=(2, 3), dtype=np.float32)
    try:
        info = shmstream.stat(name)
        assert isinstance(info, dict)
        assert info["name"] == name
        assert info["shape"] == [2, 3]
        assert info["dtype"] == "float32"
        assert info["gpu_enabled"] is False
        assert info["notify"] is False
        assert info["creator_pid"] == os.getpid()
        assert info["creator_alive"] is True
    finally:
        h.close()


def test_stat_reports_the_notify_flag(name):
    shmstream.create(name, shape=(1,), notify=True).close()
    assert shmstream.stat(name)["notify"] is True


def test_stat_works_without_any_open_handle_and_from_the_creator_record(name, spawn):
    child = spawn(child_create_write_exit, name)
    pid = child.result()
    child.join()
    info = shmstream.stat(name)
    assert info["creator_pid"] == pid
    assert info["creator_alive"] is False
    assert info["dtype"] == "int32"
    assert info["shape"] == [4]


def test_stat_of_a_missing_name_raises_FileNotFoundError(name):
    with pytest.raises(FileNotFoundError):
        shmstream.stat(name)


# ---- GPU constants ----------------------------------------------------------


def test_gpu_supported_dtypes_is_a_frozenset_and_gpu_available_is_a_bool():
    assert isinstance(shmstream.GPU_SUPPORTED_DTYPES, frozenset)
    assert isinstance(shmstream.gpu_available(), bool)


# ---- exceptions -------------------------------------------------------------


def test_exception_types_are_exported_runtime_errors_with_one_meaning_each():
    kinds = {
        shmstream.InconsistentStreamError,
        shmstream.StaleStreamError,
        shmstream.CorruptStreamError,
    }
    assert len(kinds) == 3
    for kind in kinds:
        assert issubclass(kind, Exception)
        assert issubclass(kind, RuntimeError)  # pyshmem code catches RuntimeError


# ---- Publication ------------------------------------------------------------


def test_publication_is_a_frozen_dataclass_with_the_documented_fields():
    pub = shmstream.Publication(
        payload=np.zeros(2), count=3, frame_id=4, write_time=5.0, missed_publications=1
    )
    assert dataclasses.is_dataclass(pub)
    assert [f.name for f in dataclasses.fields(pub)] == [
        "payload",
        "count",
        "frame_id",
        "write_time",
        "missed_publications",
        "state",
    ]
    with pytest.raises(dataclasses.FrozenInstanceError):
        pub.count = 9


# ---- create_from_config -----------------------------------------------------


def test_create_from_config_recreates_a_stream_from_to_config(make_name):
    source_name, copy_name = make_name(), make_name()
    h = shmstream.create(source_name, shape=(4, 2), dtype=np.float64, notify=True)
    cfg = h.to_config()
    h.close()
    cfg["name"] = copy_name
    h2 = shmstream.SharedMemory.create_from_config(cfg)
    try:
        assert (h2.name, h2.shape, h2.dtype) == (copy_name, (4, 2), np.float64)
        assert h2.to_config()["notify"] is True
    finally:
        h2.close()


def test_create_from_config_defaults_dtype_to_float32(name):
    h = shmstream.SharedMemory.create_from_config({"name": name, "shape": [3]})
    try:
        assert h.dtype == np.float32 and h.shape == (3,)
    finally:
        h.close()


# ---- from the former surface smoke test --------------------------------------


def test_readonly_handles_refuse_writes_and_old_generations_are_stale(name):
    s = shmstream.create(name, shape=(2,))
    ro = shmstream.open(name, readonly=True)
    assert ro.readonly is True
    for call in (
        lambda: ro.write(np.ones(2)),
        ro.clear,
        ro.acquire,
        ro.unlink,
        lambda: ro.read(safe=False),
    ):
        with pytest.raises(PermissionError, match="read-only"):
            call()
    ro.read()
    old_id = s.instance_id
    shmstream.unlink(name)
    s2 = shmstream.create(name, shape=(2,))
    assert s2.instance_id != old_id and len(old_id) == 32
    s.write(np.ones(2))
    assert (s2.read() == 0).all()
    with pytest.raises(shmstream.StaleStreamError, match="newer generation"):
        s.unlink()
    ro.close()
    s2.close()


def test_dlpack_gives_a_snapshot_and_closed_handles_refuse(name):
    s = shmstream.create(name, shape=(2,))
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


def test_an_unsafe_publication_view_carries_the_metadata_of_the_published_frame(name):
    # safe=False reads the count, frame id and time through ss_publication
    # (one closed publish window) and views the slot in place.
    with shmstream.stream(name, shape=(3,), dtype=np.float32) as h:
        h.write(np.array([1, 2, 3], np.float32), frame_id=41)
        h.write(np.array([4, 5, 6], np.float32), frame_id=42)
        with h.locked():
            pub = h.read_publication(safe=False)
            assert (pub.count, pub.frame_id) == (2, 42)
            assert pub.write_time == pytest.approx(h.write_time)
            assert pub.payload.tolist() == [4, 5, 6]


def test_writes_convert_as_numpy_assigns_unless_the_handle_asks_for_a_safe_cast(name):
    with shmstream.stream(name, shape=(2,), dtype=np.int32) as h:
        h.write(np.array([2**40 + 5, 1]))  # the default: pyshmem's np.asarray(value, dtype)
        assert h.read().tolist() == [5, 1]
        with pytest.raises(ValueError, match="out of bounds"):  # a Python int that cannot fit
            h.write([2**40, 1])
        h.casting = "safe"
        for lossy in (np.array([2**40, 1]), [float("nan"), 1.0], np.array([1.5, 2.5])):
            with pytest.raises(TypeError, match="not a 'safe' cast"):
                h.write(lossy)
        assert h.count == 1, "a refused write published something"
        h.write(np.array([3, 4], np.int16))  # int16 -> int32 is safe
        assert h.read().tolist() == [3, 4]
        with pytest.raises(ValueError, match="casting must be one of"):
            h.casting = "bogus"  # refused when set, not at the next write (issue 37)
        assert h.casting == "safe"


def test_stream_takes_creates_keywords_spelled_once():
    import inspect

    create_params = dict(inspect.signature(shmstream.create).parameters)
    del create_params["auto_unlink"]  # a temporary stream always has it
    assert dict(inspect.signature(shmstream.stream).parameters) == create_params
    with pytest.raises(TypeError):
        shmstream.stream("never-made", shape=(1,), no_such_keyword=1)
    with pytest.raises(TypeError):
        shmstream.stream("never-made")  # shape is required, as for create
    assert shmstream.unlink_quiet is shmstream.unlink
