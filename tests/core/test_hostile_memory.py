"""Shared memory is another process's input for the whole life of a handle
(docs/ABI.md, "The header is trusted once").

A second process rewrites the header of a segment that is already open,
or truncates its file, while the handle is in use. The handle keeps the
geometry it validated at open: no read writes past the caller's buffer or
reads past the mapping, no signal kills the process, writers refuse a
rewritten header naming the field, and a shrunk file is a
CorruptStreamError for every later call. The handle under attack runs in a
child process, so a regression shows as a failed child (its exit code),
not as a dead test runner.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import shmstream

import support

N = 10  # float32 items in the payload of the attacked streams
SENTINEL = -7.0


def _frame(k: int) -> np.ndarray:
    return np.arange(N, dtype=np.float32) + 100 * k


# ---- a header rewritten after open -------------------------------------------

#: (field, value) pairs that each size or locate memory. Every one is stored
#: with a matching checksum: a header that looks whole but lies.
REWRITES = [
    ("payload_bytes", (4096).to_bytes(8, "little")),
    ("slot_count", (0).to_bytes(4, "little")),
    ("slot_count", (7).to_bytes(4, "little")),
    ("slot_stride", (1 << 40).to_bytes(8, "little")),
    ("payload_offset", (1 << 40).to_bytes(8, "little")),
    ("ndim", (8).to_bytes(4, "little")),
    ("shape", (1 << 20).to_bytes(8, "little")),
    ("itemsize", (64).to_bytes(8, "little")),
]


def _cases(rewrites):
    return [pytest.param(f, v, id=f"{f}={int.from_bytes(v, 'little')}") for f, v in rewrites]


def _read_after_rewrite(name, opened, rewritten):
    """Open, then read many ways after the parent rewrote the header."""
    r = shmstream.open(name, readonly=True)
    opened.set()
    assert rewritten.wait(support.WAIT)
    # out= is a view of the front of a larger buffer: the tail must stay.
    big = np.full(4 * N, SENTINEL, dtype=np.float32)
    got = r.read(out=big[:N])
    assert np.array_equal(got, _frame(1)), got
    assert np.all(big[N:] == SENTINEL), "read() wrote past the caller's buffer"
    for _ in range(200):  # heap corruption shows as a crash within a few
        assert np.array_equal(r.read(), _frame(1))
    with r.read_view() as pub:
        assert np.array_equal(pub.payload, _frame(1))
    assert r.shape == (N,) and r.dtype == np.float32
    r.close()
    return True


@pytest.mark.parametrize("field,value", _cases(REWRITES))
def test_a_header_rewritten_after_open_changes_nothing_a_reader_touches(name, spawn, field, value):
    w = shmstream.create(name, shape=(N,), dtype=np.float32)
    try:
        w.write(_frame(1))
        opened, rewritten = support.SPAWN.Event(), support.SPAWN.Event()
        child = spawn(_read_after_rewrite, name, opened, rewritten)
        child.wait_event(opened)
        support.patch_identity(support.segment_path(name), support.field(field)[0], value)
        rewritten.set()
        assert child.result() is True
    finally:
        w.close()


#: The rewrites that move or resize memory: a writer refuses them.
SIZING = [
    (f, v)
    for f, v in REWRITES
    if f in ("payload_bytes", "slot_count", "slot_stride", "ndim", "payload_offset")
]
#: The rewrites that only describe the bytes: the handle's copy rules.
DESCRIBING = [(f, v) for f, v in REWRITES if (f, v) not in SIZING]


@contextlib.contextmanager
def _writer_after_rewrite(name, field, value):
    """A writer handle that published frame 1 before ``field`` was rewritten."""
    w = shmstream.create(name, shape=(N,), dtype=np.float32)
    try:
        w.write(_frame(1))
        support.patch_identity(support.segment_path(name), support.field(field)[0], value)
        yield w
    finally:
        w.close()


@pytest.mark.parametrize("field,value", _cases(SIZING))
def test_a_writer_refuses_a_rewritten_header_and_names_the_field(name, field, value):
    with _writer_after_rewrite(name, field, value) as w:
        with pytest.raises(shmstream.CorruptStreamError, match=f"{field} changed"):
            w.write(_frame(2))
        assert w.count == 1, "a refused write published something"
        # The lock was released: a reader's fallback is not stuck behind it.
        assert np.array_equal(w.read(timeout=support.WAIT), _frame(1))


@pytest.mark.parametrize("field,value", _cases(DESCRIBING))
def test_a_rewritten_shape_or_itemsize_changes_nothing_for_the_writer(name, field, value):
    with _writer_after_rewrite(name, field, value) as w:
        w.write(_frame(2))
        assert w.count == 2 and np.array_equal(w.read(), _frame(2))
        assert w.shape == (N,) and w.dtype == np.float32


def _read_history_after_rewrite(name, opened, rewritten):
    r = shmstream.open(name, readonly=True)
    opened.set()
    assert rewritten.wait(support.WAIT)
    frames = []
    for _ in range(50):
        got = r.read_since(0, timeout=0)
        for frame, count in zip(got.frames, got.counts):
            assert np.array_equal(frame, _frame(int(count))), (count, frame)
        frames = [int(c) for c in got.counts]
    r.close()
    return frames


def test_a_history_stream_whose_header_grows_to_60_slots_reads_only_its_3(name, spawn):
    w = shmstream.create(name, shape=(N,), dtype=np.float32, history=2)  # 3 slots
    try:
        for k in range(1, 4):
            w.write(_frame(k))
        opened, rewritten = support.SPAWN.Event(), support.SPAWN.Event()
        child = spawn(_read_history_after_rewrite, name, opened, rewritten)
        child.wait_event(opened)
        path = support.segment_path(name)
        support.patch_identity(path, support.field("history")[0], (59).to_bytes(4, "little"))
        support.patch_identity(path, support.field("slot_count")[0], (60).to_bytes(4, "little"))
        # A reader that trusted the new count would look for 60 slot records
        # 57 pages past the end of the file.
        rewritten.set()
        counts = child.result()
        assert counts == [1, 2, 3], counts  # all 3 slots hold a publication: no write in flight
    finally:
        w.close()


# ---- a file that shrank under the handle ----------------------------------------


def _read_after_truncate(name, opened, truncated, kind):
    """The handle under attack: every call after the truncation raises
    CorruptStreamError, and the process lives."""
    outcomes = []
    if kind == "channel":
        c = shmstream.open_channel(name)
        opened.set()
        assert truncated.wait(support.WAIT)
        for _ in range(3):
            try:
                c.recv(timeout=1.0)
                outcomes.append("ok")
            except shmstream.CorruptStreamError as exc:
                outcomes.append("shrank" if "shrank" in str(exc) else str(exc))
        c.close()
        return outcomes
    r = shmstream.open(name, readonly=(kind == "reader"))
    view = r.read_view()
    pub = view.__enter__()  # a zero-copy view held across the truncation
    opened.set()
    assert truncated.wait(support.WAIT)
    total = float(np.asarray(pub.payload).sum())  # zeros, not a SIGBUS
    outcomes.append(f"view sum {total}")
    try:
        view.__exit__(None, None, None)
        outcomes.append("view ok")
    except shmstream.CorruptStreamError as exc:
        outcomes.append("view shrank" if "shrank" in str(exc) else str(exc))
    calls = [r.read, lambda: r.read_new(timeout=0.5)]
    if kind == "writer":
        calls.append(lambda: r.write(np.ones(r.shape, np.float32)))
    for call in calls * 2:
        try:
            call()
            outcomes.append("ok")
        except shmstream.CorruptStreamError as exc:
            outcomes.append("shrank" if "shrank" in str(exc) else str(exc))
    r.close()
    return outcomes


@pytest.mark.parametrize("size", [4096, 0], ids=["to-header", "to-zero"])
@pytest.mark.parametrize("kind", ["reader", "writer"])
def test_a_stream_file_truncated_under_a_handle_is_a_corrupt_stream_error(name, spawn, kind, size):
    big = 256 * 1024  # float32 items: a megabyte, many pages past the header
    w = shmstream.create(name, shape=(big,), dtype=np.float32)
    try:
        w.write(np.full(big, 3.0, np.float32))
        opened, truncated = support.SPAWN.Event(), support.SPAWN.Event()
        child = spawn(_read_after_truncate, name, opened, truncated, kind)
        child.wait_event(opened)
        os.truncate(support.segment_path(name), size)
        truncated.set()
        outcomes = child.result()
        assert outcomes[0] == "view sum 0.0", outcomes
        assert outcomes[1:] == ["view shrank"] + ["shrank"] * (len(outcomes) - 2), outcomes
    finally:
        w.close()


def test_a_channel_file_truncated_under_the_consumer_is_a_corrupt_stream_error(name, spawn):
    p = shmstream.channel(name, capacity=1 << 16)
    try:
        p.send(b"x" * 1000)
        opened, truncated = support.SPAWN.Event(), support.SPAWN.Event()
        child = spawn(_read_after_truncate, name, opened, truncated, "channel")
        child.wait_event(opened)
        os.truncate(support.segment_path(name), 4096)
        truncated.set()
        assert child.result() == ["shrank"] * 3
    finally:
        p.close()


# ---- other bus errors keep their meaning --------------------------------------

_FAULT_OUTSIDE = textwrap.dedent(
    """
    import faulthandler, mmap, os, sys, tempfile
    import numpy as np, shmstream
    if sys.argv[1] == "faulthandler":
        faulthandler.enable()
    s = shmstream.create(sys.argv[2], shape=(4,), dtype=np.float32)  # installs the guard
    s.unlink()
    fd, path = tempfile.mkstemp()
    os.ftruncate(fd, 8192)
    m = mmap.mmap(fd, 8192)
    os.ftruncate(fd, 0)
    os.unlink(path)
    print("touching", flush=True)
    m[4096]  # a bus error in a mapping that is not ours
    print("survived", flush=True)
    """
)


@pytest.mark.parametrize("before", ["default", "faulthandler"])
def test_a_bus_error_outside_our_mappings_still_reaches_the_previous_handler(make_name, before):
    proc = subprocess.run(
        [sys.executable, "-c", _FAULT_OUTSIDE, before, make_name()],
        capture_output=True,
        text=True,
        timeout=support.WAIT,
        check=False,
    )
    assert proc.returncode == -signal.SIGBUS, (proc.returncode, proc.stderr)
    assert "touching" in proc.stdout and "survived" not in proc.stdout
    if before == "faulthandler":
        assert "Bus error" in proc.stderr, proc.stderr


# ---- lesser header lies ---------------------------------------------------------


def test_a_dtype_that_contradicts_the_itemsize_is_refused_at_open(name):
    with shmstream.stream(name, shape=(N,), dtype=np.float32):
        # '<f8' and shape 5 keep payload_bytes; itemsize still says 4.
        path = support.segment_path(name)
        support.patch_identity(path, support.field("dtype")[0], b"<f8\0")
        with pytest.raises(ValueError, match="itemsize of 4 bytes"):
            shmstream.open(name)


def test_a_dtype_description_that_is_not_utf8_is_a_clear_error(name):
    with shmstream.stream(name, shape=(N,), dtype=np.float32):
        support.patch_identity(support.segment_path(name), support.field("dtype")[0], b"<\xff4\0")
        with pytest.raises(ValueError, match="not one shmstream writes"):
            shmstream.open(name)


def test_an_unknown_frame_state_is_reported_as_corrupt_not_aborted(name):
    with shmstream.stream(name, shape=(N,), dtype=np.float32) as s:
        s.write(_frame(1))
        support.patch_bytes(
            support.segment_path(name), support.field("state")[0], (77).to_bytes(4, "little")
        )
        with pytest.raises(shmstream.CorruptStreamError, match="frame state 77"):
            s.read()


def _read_since_behind_an_odd_seq(name, ready):
    r = shmstream.open(name, readonly=True)
    ready.set()
    t0 = os.times()
    try:
        r.read_since(0, timeout=1.0)
    except TimeoutError:
        pass
    t1 = os.times()
    r.close()
    return (t1.user - t0.user) + (t1.system - t0.system)


def test_a_seqlock_left_odd_by_a_live_peer_costs_no_core(name, spawn):
    # The writer (this process) lives, so nothing takes its lock over; the
    # reader must wait the second out asleep, not spinning.
    w = shmstream.create(name, shape=(N,), dtype=np.float32, history=2)
    try:
        w.write(_frame(1))
        seq = support.field("seq")[0]
        path = support.segment_path(name)
        odd = support.read_u(path, seq, 8) | 1
        w.acquire()
        try:
            support.patch_bytes(path, seq, odd.to_bytes(8, "little"))
            ready = support.SPAWN.Event()
            child = spawn(_read_since_behind_an_odd_seq, name, ready)
            cpu = child.result()
        finally:
            support.patch_bytes(path, seq, (odd + 1).to_bytes(8, "little"))
            w.release()
        assert cpu < 0.5, f"the reader burnt {cpu:.2f} s of CPU in a 1 s wait"
    finally:
        w.close()


def test_a_lock_word_naming_no_held_lease_is_taken_over_not_waited_on(name):
    # A version-4 stream's lock word names a lease (docs/ABI.md, "Stream
    # lock by lease"): one that nobody holds, or no lease number at all
    # (another process wrote it), is taken over by the next writer at once.
    lock = support.field("lock_lease")[0]
    with shmstream.stream(name, shape=(N,), dtype=np.float32) as s:
        s.write(_frame(0))
        path = support.segment_path(name)
        for k, word in enumerate((2**62 + 12345, 7, 2**63 + 5, 2**64 - 1, 2**63), start=1):
            support.patch_bytes(path, lock, word.to_bytes(8, "little"))
            assert shmstream.stat(name)["lock_owner_alive"] is None  # no owner recorded
            s.write(_frame(k))  # no timeout: must not wait for ever
            assert support.read_u(path, lock, 8) == 0  # released again
            assert s.count == k + 1 and np.array_equal(s.read(), _frame(k))


@pytest.mark.parametrize("plant", ["fifo", "symlink"])
def test_opening_a_name_whose_entry_is_a_fifo_or_link_fails_at_once(name, plant, tmp_path):
    # A reader that opened a FIFO would wait for a writer for ever; a link
    # would hand over a file that is not in /dev/shm.
    path = support.segment_path(name)
    if plant == "fifo":
        os.mkfifo(path)
    else:
        os.symlink(tmp_path / "elsewhere", path)
    for call in (
        lambda: shmstream.open(name),
        lambda: shmstream.open(name, readonly=True),
        lambda: shmstream.open_channel(name),
    ):
        with pytest.raises(OSError, match=r"remove it with shmstream.unlink"):
            call()
    shmstream.unlink(name)
    assert not os.path.lexists(path)
