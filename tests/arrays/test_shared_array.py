"""Shared arrays: share() once, attach zero-copy in pool workers.

Workers are real processes (spawn, forkserver and fork pools, executors,
plain Process); they synchronise on the pool's own results, queues and
events. Every test leaves /dev/shm as it found it.
"""

from __future__ import annotations

import concurrent.futures
import errno
import gc
import multiprocessing as mp
import os
import pickle
import signal
import subprocess
import sys
import textwrap
import uuid

import numpy as np
import pytest

import shmstream
from shmstream import _native
from shmstream.arrays.shared_array import SharedArray, SharedRecArray, share
from shmstream.errors import StaleStreamError

import support

SHM = "/dev/shm"
TOKEN = f"sa{uuid.uuid4().hex[:8]}"
WAIT = 60.0


def _ours() -> set[str]:
    mine = (f"shmstream-array-{os.getpid()}-", f"shmstream-{TOKEN}")
    return {f for f in os.listdir(SHM) if f.startswith(mine)}


@pytest.fixture(autouse=True)
def no_leftovers():
    before = _ours()
    yield
    gc.collect()
    left = _ours() - before
    for f in left:
        os.unlink(os.path.join(SHM, f))
    assert not left, f"test left segments in /dev/shm: {sorted(left)}"


def segment_exists(a_or_name) -> bool:
    name = a_or_name if isinstance(a_or_name, str) else a_or_name.shm_name
    return os.path.exists(SHM + _native.segment_name(name))


# ---------------------------------------------------------------- pools


@pytest.fixture(scope="module", params=["spawn", "forkserver", "fork"])
def pool(request):
    ctx = mp.get_context(request.param)
    with ctx.Pool(2) as p:
        yield p


# Functions run by workers (module level, so every start method finds them).


def w_describe(a):
    """What a worker sees: type, owner?, writable?, checksum of the bytes."""
    return (type(a).__name__, a.shm_owner, a.flags.writeable, a.shape, a.dtype, a.tobytes())


def w_sum_rows(args):
    a, lo, hi = args
    return float(np.nansum(a[lo:hi]))


def w_write_row(args):
    a, row, value = args
    a[row] = value
    return os.getpid()


def w_try_write(a):
    try:
        a[...] = 0
    except ValueError as exc:
        try:
            a.flags.writeable = True
        except ValueError:
            return f"refused: {exc}"
        return "could turn WRITEABLE on"
    return "wrote"


def w_nansum_field(a):
    return float(np.nansum(a.x)), str(a.t[1]), str(a.s[2]), type(a).__name__


def w_return_it(a):
    return a  # an attached array pickles back as the same descriptor


def test_pool_workers_attach_zero_copy_and_read_only(pool):
    a = np.arange(40_000, dtype=np.float64).reshape(200, 200)
    with share(a) as s:
        kind, owner, writeable, shape, dtype, raw = pool.apply(w_describe, (s,))
        assert (kind, owner, writeable, shape, dtype) == (
            "SharedArray",
            False,
            False,
            a.shape,
            a.dtype,
        )
        assert raw == a.tobytes()
        sums = pool.map(w_sum_rows, [(s, i, i + 50) for i in range(0, 200, 50)])
        assert sums == [float(a[i : i + 50].sum()) for i in range(0, 200, 50)]
        assert pool.apply(w_try_write, (s,)).startswith("refused")
        assert np.array_equal(s, a)  # nothing changed


def test_writable_on_request_workers_write_into_the_parents_memory(pool):
    with share(np.zeros((4, 1000)), writable=True) as s:
        pids = pool.map(w_write_row, [(s, r, r + 1.0) for r in range(4)])
        assert all(pid != os.getpid() for pid in pids)
        assert np.array_equal(s[:, 0], [1.0, 2.0, 3.0, 4.0])
        assert (s[3] == 4.0).all()


def test_the_article_record_array_through_a_pool(pool):
    n = 10_000
    dt = np.dtype([("t", "M8[ms]"), ("x", "f8"), ("s", "U6")])
    r = np.zeros(n, dt).view(np.recarray)
    r.t = np.datetime64("2024-01-01") + np.arange(n).astype("m8[ms]")
    r.x = np.arange(n, dtype=float)
    r.x[::7] = np.nan
    r.s = np.char.add("id", np.arange(n).astype("U4"))
    with share(r) as s:
        assert isinstance(s, SharedRecArray)
        got = pool.map(w_nansum_field, [s, s])
        assert got == [(float(np.nansum(r.x)), str(r.t[1]), str(r.s[2]), "SharedRecArray")] * 2
        # A single column pickles as a strided view of the same segment.
        assert len(pickle.dumps(s.x)) < 1000
        assert pool.apply(w_sum_rows, ((s.x, 0, n),)) == float(np.nansum(r.x))


def test_an_attached_array_pickles_back_as_a_view_of_the_same_segment(pool):
    with share(np.arange(10)) as s:
        back = pool.apply(w_return_it, (s[2:5],))
        assert isinstance(back, SharedArray) and np.array_equal(back, [2, 3, 4])
        assert back.__array_interface__["data"][0] == s[2:5].__array_interface__["data"][0]


@pytest.mark.parametrize("method", ["spawn", "fork"])
def test_process_pool_executor(method):
    with (
        share(np.arange(1000.0)) as s,
        concurrent.futures.ProcessPoolExecutor(1, mp_context=mp.get_context(method)) as ex,
    ):
        assert ex.submit(w_sum_rows, (s, 0, 1000)).result(timeout=WAIT) == float(
            np.arange(1000.0).sum()
        )
        assert list(ex.map(w_sum_rows, [(s, 0, 10), (s[10:], 0, 10)])) == [45.0, 145.0]


def p_report(a, q):
    q.put((type(a).__name__, a.shm_owner, float(a.sum()), a.flags.writeable))


@pytest.mark.parametrize("method", ["spawn", "forkserver", "fork"])
def test_plain_process_argument(method):
    ctx = mp.get_context(method)
    q = ctx.Queue()
    with share(np.ones(1000)) as s:
        p = ctx.Process(target=p_report, args=(s, q))
        p.start()
        kind, owner, total, writeable = q.get(timeout=WAIT)
        p.join(WAIT)
        assert p.exitcode == 0 and kind == "SharedArray" and total == 1000.0
        assert owner is False  # a fork child inherits the object but not the ownership
        assert writeable is (method == "fork")  # fork passes the parent's own object
        assert segment_exists(s)  # the child never unlinks


# --------------------------------------------------------------- dtypes

DTYPES = [
    "?",
    "u1",
    "i1",
    "u2",
    "i2",
    "u4",
    "i4",
    "u8",
    "i8",
    "f2",
    "f4",
    "f8",
    "g",
    "c8",
    "c16",
    "M8[ns]",
    "M8[D]",
    "m8[us]",
    "U7",
    "S5",
    "V3",
    ">i4",
    "<f8",
    [("a", "i4"), ("b", "f8", (2, 3)), ("c", "U3")],
    [("rec", [("x", "f4"), ("when", "M8[s]"), ("deep", [("z", "u1")])]), ("n", "i2")],
    np.dtype({"names": ["p", "q"], "formats": ["u1", "f8"], "offsets": [0, 16], "itemsize": 32}),
    np.dtype([(("Title", "t"), "i4")]),
]


def _filled(dt: np.dtype, shape) -> np.ndarray:
    raw = np.random.default_rng(7).integers(
        0, 255, size=int(np.prod(shape)) * dt.itemsize, dtype=np.uint8
    )
    a = raw.view(dt).reshape(shape) if dt.itemsize else np.zeros(shape, dt)
    if dt.kind == "U":  # keep code points valid
        a = np.char.mod("s%d", np.arange(a.size)).reshape(shape).astype(dt)
    return a


@pytest.fixture(scope="module")
def spawn_pool():
    with mp.get_context("spawn").Pool(1) as p:
        yield p


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_every_fixed_size_dtype_round_trips_through_a_worker(spawn_pool, dtype):
    a = _filled(np.dtype(dtype), (3, 5))
    with share(a) as s:
        assert s.dtype == a.dtype and s.shape == a.shape
        _kind, _owner, _writeable, shape, got_dtype, raw = spawn_pool.apply(w_describe, (s,))
        assert got_dtype == a.dtype and shape == a.shape
        assert raw == a.tobytes()
        if a.dtype.names:
            assert got_dtype.names == a.dtype.names and got_dtype.fields == a.dtype.fields


def test_recarray_keeps_fields_names_nested_records_and_datetimes(spawn_pool):
    dt = np.dtype([("when", "M8[us]"), ("pos", [("x", "f4"), ("y", "f4")]), ("tag", "S4")])
    r = np.rec.array([(np.datetime64("2020-02-29T12:00"), (1.5, -2.0), b"ab")] * 4, dtype=dt)
    with share(r) as s:
        out = pickle.loads(pickle.dumps(s))
        assert isinstance(out, np.recarray) and out.dtype.names == ("when", "pos", "tag")
        assert out.pos.y[0] == -2.0 and out.when[3] == np.datetime64("2020-02-29T12:00")
        assert isinstance(out[0], np.record)
        kind, _, _, _, _got_dtype, raw = spawn_pool.apply(w_describe, (s,))
        assert kind == "SharedRecArray" and raw == r.tobytes()


def test_empty_and_zero_dimensional_arrays(spawn_pool):
    for a in (np.zeros((0, 3)), np.array(3.25), np.zeros(0, [("a", "i4")])):
        with share(a) as s:
            _, _, _, shape, dt, raw = spawn_pool.apply(w_describe, (s,))
            assert shape == a.shape and dt == a.dtype
            assert raw == a.tobytes()


@pytest.mark.parametrize(
    "bad",
    [
        np.array(["a", 1, None], dtype=object),
        np.zeros(3, [("id", "i4"), ("payload", "O")]),
        np.zeros(2, [("outer", [("inner", "O")])]),
    ],
    ids=["object", "object-field", "nested-object-field"],
)
def test_object_dtypes_are_refused_with_an_explanation(bad):
    before = _ours()
    with pytest.raises(TypeError, match="Python object") as err:
        share(bad)
    assert "pass the array to the workers normally" in str(err.value)
    assert _ours() == before


def test_masked_arrays_and_bad_arguments_are_refused():
    with pytest.raises(TypeError, match="masked"):
        share(np.ma.masked_array([1, 2], mask=[0, 1]))
    with pytest.raises(TypeError, match="name"):
        share(np.zeros(2), name=5)
    with pytest.raises(ValueError, match="dimensions"):
        share(np.zeros((1,) * 9))


# --------------------------------------------------------------- lifetime


def test_close_unlinks_the_name_and_keeps_local_data_readable():
    s = share(np.arange(5), name=f"{TOKEN}-close")
    assert segment_exists(s) and s.shm_owner
    s.close()
    assert not segment_exists(s)
    assert s.sum() == 10  # still mapped here
    s.close()  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        pickle.dumps(s)


def test_context_manager_exit_unlinks():
    with share(np.arange(5)) as s:
        name = s.shm_name
        assert segment_exists(name)
    assert not segment_exists(name)


def test_garbage_collection_of_the_last_owner_reference_unlinks():
    s = share(np.arange(100))
    name = s.shm_name
    view = s[10:20]
    del s
    assert segment_exists(name)  # a view still refers to it
    data = pickle.dumps(view)
    del view
    gc.collect()
    assert not segment_exists(name)
    with pytest.raises(FileNotFoundError, match="keep the SharedArray"):
        pickle.loads(data)


def test_a_reused_name_is_detected_as_stale():
    name = f"{TOKEN}-reuse"
    s = share(np.arange(3), name=name)
    old = pickle.dumps(s)
    s.close()
    del s
    gc.collect()  # drop this process's mapping of the first generation
    with share(np.arange(3), name=name):
        with pytest.raises(StaleStreamError):
            pickle.loads(old)


def test_duplicate_name_and_open_by_name():
    name = f"{TOKEN}-named"
    with share(np.arange(6.0).reshape(2, 3), name=name) as s:
        with pytest.raises(FileExistsError) as taken:
            share(np.zeros(1), name=name)
        # the message ends with its next step, not with strerror's words
        assert taken.value.errno == errno.EEXIST
        assert str(taken.value).endswith(f"remove it with shmstream.unlink('{name}')")
        ro = SharedArray.open(name)
        assert np.array_equal(ro, s) and not ro.flags.writeable
        rw = SharedArray.open(name, writable=True)
        rw[0, 0] = 42
        assert s[0, 0] == 42
    with pytest.raises(FileNotFoundError, match="share"):
        SharedArray.open(name)


def fork_child_drops(a, q):
    del a
    gc.collect()
    q.put("dropped")


def test_a_fork_child_that_drops_the_creators_object_does_not_unlink():
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    with share(np.arange(4)) as s:
        p = ctx.Process(target=fork_child_drops, args=(s, q))
        p.start()
        assert q.get(timeout=WAIT) == "dropped"
        p.join(WAIT)
        assert segment_exists(s)


CREATOR_SCRIPT = textwrap.dedent("""
    import multiprocessing as mp, sys
    import numpy as np
    from shmstream import share

    def total(a):
        return float(a.sum())

    if __name__ == "__main__":
        s = share(np.ones(100_000))
        print(s.shm_name, flush=True)
        for method in ("spawn", "forkserver", "fork"):
            with mp.get_context(method).Pool(2) as p:
                assert p.map(total, [s] * 4) == [100_000.0] * 4
        # exits holding s: the creator's exit unlinks it
""")


def test_workers_cause_no_resource_tracker_warnings_and_creator_exit_unlinks(tmp_path):
    script = tmp_path / "creator.py"
    script.write_text(
        CREATOR_SCRIPT.replace(
            "from shmstream import share", "from shmstream.arrays.shared_array import share"
        )
    )
    out = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120, check=False
    )
    assert out.returncode == 0, out.stderr
    assert out.stderr == ""  # no resource_tracker leak warnings, no KeyError noise
    assert not segment_exists(out.stdout.split()[0])


def die_holding(name, conn):
    s = share(np.arange(10), name=name)  # noqa: F841 - held until the kill
    conn.send("shared")  # a pipe write is done when send returns
    os.kill(os.getpid(), signal.SIGKILL)


def test_purge_removes_what_dead_creators_left_and_nothing_else(monkeypatch):
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    dead = f"{TOKEN}-dead"
    support.purge_sees_only(monkeypatch, {dead, f"{TOKEN}-alive"})
    p = ctx.Process(target=die_holding, args=(dead, child))
    p.start()
    assert parent.poll(WAIT) and parent.recv() == "shared"
    p.join(WAIT)
    assert p.exitcode == -signal.SIGKILL and segment_exists(dead)
    with share(np.arange(3), name=f"{TOKEN}-alive") as live:
        removed = shmstream.purge(kinds=["array"])
        assert dead in removed and live.shm_name not in removed
        assert not segment_exists(dead) and segment_exists(live)


def test_exported_from_the_package():
    if not hasattr(shmstream, "share"):
        pytest.skip("shmstream/__init__.py does not export share yet")
    assert shmstream.share is share and shmstream.SharedArray is SharedArray


def test_a_descriptor_pointing_before_the_segment_is_refused(name):
    # NumPy accepts a negative buffer offset (without strides) and points
    # before the buffer: a received descriptor must not (a fuzz finding).
    with shmstream.share(np.arange(8, dtype=np.int32), name) as a:
        fn, args = a.__reduce__()
        bad = (*args[:5], None, -16, *args[7:])  # strides None, offset -16
        with pytest.raises(ValueError, match="points outside the shared memory"):
            fn(*bad)
        assert np.array_equal(fn(*args), np.arange(8))
