"""Recording a stream to disk and replaying it (``shmstream record`` /
``shmstream replay``, ``shmstream.record`` / ``shmstream.replay``;
docs/history.md): plain NumPy files, identical frames and metadata through
record -> replay -> record, clean stops, clear errors."""

from __future__ import annotations

import json
import math
import signal
import subprocess
import sys
import threading

import numpy as np
import pytest

import shmstream
from shmstream.cli import main as cli_main

import support

SHAPE = (16, 8)


def frame(k: int) -> np.ndarray:
    return np.full(SHAPE, k, np.float32) + np.arange(8, dtype=np.float32) / 8


def publish(h, ks, gaps=True) -> None:
    """Frames with their own frame ids, explicit counts (with gaps) and
    write times 1 ms apart, as a replay or a mirror would publish them."""
    t0 = 1_700_000_000_000_000_000
    for k in ks:
        h.write(
            frame(k),
            frame_id=10_000 + k,
            count=k if gaps else None,
            write_time_ns=t0 + k * 1_000_000,
        )


def same_recordings(a, b) -> None:
    assert len(a) == len(b) > 0
    assert np.array_equal(a.frames, b.frames)
    for col in ("counts", "frame_ids", "write_times_ns"):
        assert getattr(a, col).tolist() == getattr(b, col).tolist(), col
    assert (a.shape, a.dtype, a.history) == (b.shape, b.dtype, b.history)


# ---- the file is plain NumPy -----------------------------------------------------------------


def test_a_recording_is_npy_files_and_json_that_numpy_alone_reads(make_name, tmp_path):
    src = make_name()
    h = shmstream.create(src, shape=SHAPE, dtype=np.float32, history=32)
    try:
        publish(h, [1, 2, 3, 5, 8])
        stats = shmstream.record(src, tmp_path / "rec", since=0, frames=5)
        assert (stats.frames, stats.missed, stats.stopped_by) == (5, 3, "frames")
    finally:
        h.close()
    rec = tmp_path / "rec"
    frames = np.load(rec / "frames.npy", mmap_mode="r")
    assert frames.shape == (5, *SHAPE) and frames.dtype == np.float32
    assert np.array_equal(frames[3], frame(5))
    assert np.load(rec / "counts.npy").tolist() == [1, 2, 3, 5, 8]
    assert np.load(rec / "frame_ids.npy").tolist() == [10_001, 10_002, 10_003, 10_005, 10_008]
    times = np.load(rec / "write_times_ns.npy")
    assert times.dtype == np.uint64 and times[1] - times[0] == 1_000_000
    info = json.loads((rec / "stream.json").read_text())
    assert info["format"] == "shmstream-recording" and info["complete"] is True
    assert (info["name"], info["shape"], info["dtype"], info["history"]) == (
        src,
        list(SHAPE),
        "float32",
        32,
    )
    assert (info["frames"], info["missed"], info["first_count"], info["last_count"]) == (5, 3, 1, 8)
    loaded = shmstream.load_recording(rec)
    assert len(loaded) == 5 and loaded.missed == 3 and loaded.complete
    assert [p.missed_publications for p in loaded] == [0, 0, 0, 1, 2]


def test_record_replay_record_gives_identical_frames_and_metadata(make_name, tmp_path):
    first, second = make_name("first"), make_name("second")
    h = shmstream.create(first, shape=SHAPE, dtype=np.float32, history=64)
    try:
        publish(h, [3, 4, 7, 8, 9, 20, 21])
        shmstream.record(first, tmp_path / "a", since=0, frames=7)
    finally:
        h.close()
    # the history asked for: by default a replay's stream keeps no more than the 7 frames
    stats = shmstream.replay(tmp_path / "a", second, rate=math.inf, history=64)
    assert (stats.frames, stats.created, stats.stopped_by) == (7, True, "end")
    shmstream.record(second, tmp_path / "b", since=0, frames=7)
    same_recordings(
        shmstream.load_recording(tmp_path / "a"), shmstream.load_recording(tmp_path / "b")
    )
    assert shmstream.stat(second)["history"] == 64  # created as asked


def child_replay(path, name):
    return shmstream.replay(path, name, rate=math.inf).frames


def child_record(name, path, since, frames):
    st = shmstream.record(name, path, since=since, frames=frames)
    return st.frames, st.missed


def test_a_recorder_in_another_process_gets_every_frame_of_a_replay_within_history(
    make_name, tmp_path, spawn
):
    src, live = make_name("src"), make_name("live")
    h = shmstream.create(src, shape=SHAPE, dtype=np.float32, history=512)
    try:
        publish(h, range(1, 401), gaps=False)
        shmstream.record(src, tmp_path / "a", since=0, frames=400)
    finally:
        h.close()
    target = shmstream.create(live, shape=SHAPE, dtype=np.float32, history=512)
    try:
        recorder = spawn(child_record, live, str(tmp_path / "b"), 0, 400)
        replayer = spawn(child_replay, str(tmp_path / "a"), live)
        assert replayer.result() == 400
        assert recorder.result() == (400, 0)
    finally:
        target.close()
    same_recordings(
        shmstream.load_recording(tmp_path / "a"), shmstream.load_recording(tmp_path / "b")
    )


def child_fast_writer(name, n):
    h = shmstream.open(name)
    for k in range(1, n + 1):
        h.write(frame(k), frame_id=10_000 + k)
    h.close()


def test_recording_a_stream_without_history_counts_every_frame_it_could_not_see(
    make_name, tmp_path, spawn
):
    name = make_name()
    h = shmstream.create(name, shape=SHAPE, dtype=np.float32)
    stop, result = threading.Event(), []
    recorder = threading.Thread(
        target=lambda: result.append(shmstream.record(name, tmp_path / "r", since=0, stop=stop))
    )
    try:
        recorder.start()
        writer = spawn(child_fast_writer, name, 3000)
        assert writer.result() is None
        stop.set()
        recorder.join(support.WAIT)
        st = result[0]
        rec = shmstream.load_recording(tmp_path / "r")
        assert len(rec) == st.frames > 0 and st.stopped_by == "stop"
        # what it saw is whole and in order, and every other publication is
        # counted as missed: nothing unaccounted for
        assert st.frames + st.missed == st.last_count == int(rec.counts[-1])
        assert rec.missed + int(rec.counts[0]) - 1 == st.missed
        for p in rec:
            assert np.array_equal(p.payload, frame(p.count)) and p.frame_id == 10_000 + p.count
    finally:
        stop.set()
        recorder.join(support.WAIT)
        h.close()


# ---- replay pacing and counts ----------------------------------------------------------------


def test_replay_as_recorded_keeps_the_recorded_spacing(make_name, tmp_path):
    src, dst = make_name(), make_name()
    h = shmstream.create(src, shape=SHAPE, dtype=np.float32, history=16)
    try:
        t0 = 1_700_000_000_000_000_000
        for i, k in enumerate(range(1, 6)):
            h.write(frame(k), frame_id=k, write_time_ns=t0 + i * 20_000_000)  # 20 ms apart
        shmstream.record(src, tmp_path / "a", since=0, frames=5)
    finally:
        h.close()
    shmstream.replay(tmp_path / "a", dst, restamp=True)  # publication times are now's
    out = shmstream.open(dst)
    try:
        times = out.read_since(0).write_times_ns.astype(np.int64)
    finally:
        out.close()
    # a frame is never published before its recorded offset (sleeps only wait longer)
    gaps = (times - times[0]).tolist()
    for i, gap in enumerate(gaps):
        assert gap >= i * 20_000_000 - 2_000_000, gaps


def test_replay_at_a_fixed_rate_spaces_the_frames_by_its_period(make_name, tmp_path):
    src, dst = make_name(), make_name()
    h = shmstream.create(src, shape=SHAPE, dtype=np.float32, history=16)
    try:
        publish(h, range(1, 6))
        shmstream.record(src, tmp_path / "a", since=0, frames=5)
    finally:
        h.close()
    shmstream.replay(tmp_path / "a", dst, rate=50, restamp=True)
    out = shmstream.open(dst)
    try:
        batch = out.read_since(0)
    finally:
        out.close()
    times = batch.write_times_ns.astype(np.int64)
    assert all(t - times[0] >= i * 20_000_000 - 2_000_000 for i, t in enumerate(times.tolist()))
    assert batch.counts.tolist() == [1, 2, 3, 4, 5]  # counts kept, times restamped


def test_replay_into_a_stream_past_the_recorded_counts_needs_renumber(make_name, tmp_path):
    src = make_name()
    h = shmstream.create(src, shape=SHAPE, dtype=np.float32, history=16)
    try:
        publish(h, [1, 2, 3])
        shmstream.record(src, tmp_path / "a", since=0, frames=3)
        with pytest.raises(ValueError, match="renumber"):
            shmstream.replay(tmp_path / "a", src, rate=math.inf)
        shmstream.replay(tmp_path / "a", src, rate=math.inf, renumber=True)
        batch = h.read_since(3)
        assert batch.counts.tolist() == [4, 5, 6]
        assert batch.frame_ids.tolist() == [10_001, 10_002, 10_003]
    finally:
        h.close()


# ---- clear errors ------------------------------------------------------------------------------


def _recording(make_name, tmp_path, n=3):
    src = make_name()
    h = shmstream.create(src, shape=SHAPE, dtype=np.float32, history=16)
    try:
        publish(h, range(1, n + 1))
        shmstream.record(src, tmp_path / "rec", since=0, frames=n)
    finally:
        h.close()
    return tmp_path / "rec"


def test_replay_into_a_stream_of_another_shape_or_dtype_says_so(make_name, tmp_path):
    rec = _recording(make_name, tmp_path)
    other = make_name()
    h = shmstream.create(other, shape=(3, 3), dtype=np.float32)
    try:
        with pytest.raises(ValueError, match=r"shape \(16, 8\).*shape \(3, 3\)"):
            shmstream.replay(rec, other)
    finally:
        h.close()


@pytest.mark.parametrize(
    "damage,error,match",
    [
        ("missing", FileNotFoundError, "no recording at"),
        ("no json", ValueError, "stream.json is missing"),
        ("bad json", ValueError, "corrupt stream.json"),
        ("other format", ValueError, "is not a shmstream recording"),
        ("no frames", ValueError, "frames.npy is missing"),
        ("frames not npy", ValueError, "frames.npy is not a NumPy .npy file"),
        ("frames header garbage", ValueError, "frames.npy is not a readable NumPy"),
        ("short column", ValueError, "columns have"),
        ("shape mismatch", ValueError, "is inconsistent"),
        ("counts go back", ValueError, "counts do not increase"),
        ("a file", ValueError, "is not a shmstream recording"),
    ],
)
def test_a_bad_recording_is_refused_with_a_clear_error(make_name, tmp_path, damage, error, match):
    rec = _recording(make_name, tmp_path)
    info = json.loads((rec / "stream.json").read_text())
    if damage == "missing":
        rec = tmp_path / "nowhere"
    elif damage == "no json":
        (rec / "stream.json").unlink()
    elif damage == "bad json":
        (rec / "stream.json").write_text("{not json")
    elif damage == "other format":
        (rec / "stream.json").write_text(json.dumps({**info, "format": "x"}))
    elif damage == "no frames":
        (rec / "frames.npy").unlink()
    elif damage == "frames not npy":  # NumPy alone would call it pickled data
        (rec / "frames.npy").write_bytes(b"garbage" * 10)
    elif damage == "frames header garbage":
        (rec / "frames.npy").write_bytes(b"\x93NUMPY\x01\x00\x10\x00{'descr': garbage" + bytes(60))
    elif damage == "short column":
        np.save(rec / "frame_ids.npy", np.arange(2, dtype=np.uint64))
    elif damage == "shape mismatch":
        (rec / "stream.json").write_text(json.dumps({**info, "shape": [8, 16]}))
    elif damage == "counts go back":
        np.save(rec / "counts.npy", np.array([3, 2, 1], np.uint64))
    elif damage == "a file":
        rec = rec / "frames.npy"
    with pytest.raises(error, match=match) as caught:
        shmstream.load_recording(rec)
    assert "pickled" not in str(caught.value)
    with pytest.raises(error, match=match):  # and replay says the same
        shmstream.replay(rec, make_name(), rate=math.inf)


def test_recording_onto_an_existing_path_needs_overwrite_and_only_replaces_a_recording(
    make_name, tmp_path
):
    rec = _recording(make_name, tmp_path)
    src = make_name()
    h = shmstream.create(src, shape=SHAPE, dtype=np.float32, history=4)
    try:
        publish(h, [1])
        with pytest.raises(FileExistsError, match="overwrite"):
            shmstream.record(src, rec, since=0, frames=1)
        shmstream.record(src, rec, since=0, frames=1, overwrite=True)
        assert len(shmstream.load_recording(rec)) == 1
        (tmp_path / "mine").mkdir()
        with pytest.raises(FileExistsError, match="not a shmstream recording"):
            shmstream.record(src, tmp_path / "mine", since=0, frames=1, overwrite=True)
        with pytest.raises(FileNotFoundError, match="create"):
            shmstream.record(make_name(), tmp_path / "x", frames=1)
        with pytest.raises(ValueError, match="frames must be >= 1"):
            shmstream.record(src, tmp_path / "y", frames=0)
    finally:
        h.close()


def test_a_recording_cut_short_by_a_kill_reads_up_to_its_last_sync(make_name, tmp_path):
    rec = _recording(make_name, tmp_path, n=6)
    info = json.loads((rec / "stream.json").read_text())
    (rec / "stream.json").write_text(json.dumps({**info, "complete": False}))
    # killed after frames 5 and 6 reached frames.npy but not all the columns
    np.save(rec / "write_times_ns.npy", np.load(rec / "write_times_ns.npy")[:4])
    loaded = shmstream.load_recording(rec)
    assert not loaded.complete and len(loaded) == 4 and loaded.frames.shape[0] == 4


# ---- the command line ------------------------------------------------------------------------


def test_the_cli_records_and_replays(make_name, tmp_path, capsys):
    src, dst = make_name(), make_name()
    h = shmstream.create(src, shape=SHAPE, dtype=np.float32, history=16)
    try:
        publish(h, [1, 2, 4])
        assert (
            cli_main(
                ["record", src, "-o", str(tmp_path / "a"), "--backlog", "--frames", "3", "--quiet"]
            )
            == 0
        )
        out = capsys.readouterr().out
        assert "recorded 3 frames" in out and "missed 1" in out
        replay = ["replay", str(tmp_path / "a"), dst, "--fast", "--history", "16", "--quiet"]
        assert cli_main(replay) == 0
        assert "replayed 3 frames" in capsys.readouterr().out
        assert cli_main(["replay", str(tmp_path / "nowhere"), dst]) == 1
        assert "no recording at" in capsys.readouterr().err
        assert cli_main(["record", src, "-o", str(tmp_path / "b"), "--frames", "0"]) == 2
    finally:
        h.close()
    same_recordings(shmstream.load_recording(tmp_path / "a"), _record_all(dst, tmp_path / "c"))


def _record_all(name, path):
    shmstream.record(name, path, since=0, frames=3)
    return shmstream.load_recording(path)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_the_record_command_stops_cleanly_on_a_signal(make_name, tmp_path, sig):
    name = make_name()
    h = shmstream.create(name, shape=SHAPE, dtype=np.float32, history=64)
    out = tmp_path / "rec"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "shmstream",
            "record",
            name,
            "-o",
            str(out),
            "--backlog",
            "--interval",
            "0.05",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        publish(h, range(1, 11))
        # the recorder has synced all ten frames to disk: it is recording
        support.wait_until(lambda: _synced_frames(out) == 10, what="ten frames on disk")
        proc.send_signal(sig)
        stdout, stderr = proc.communicate(timeout=support.WAIT)
        assert proc.returncode == 0, stderr
        assert "recorded 10 frames" in stdout and "stopped by signal" in stdout
        rec = shmstream.load_recording(out)
        assert rec.complete and rec.counts.tolist() == list(range(1, 11))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        h.close()


def _synced_frames(path) -> int:
    try:
        return int(np.load(path / "frames.npy", mmap_mode="r").shape[0])
    except (OSError, ValueError, EOFError):
        return -1


def test_a_disk_error_in_the_writing_thread_stops_the_recording_with_that_error(
    make_name, tmp_path, monkeypatch
):
    from shmstream import recording

    def full_disk(self, batch):
        raise OSError(28, "No space left on device")

    name = make_name()
    h = shmstream.create(name, shape=SHAPE, dtype=np.float32, history=16)
    try:
        publish(h, [1, 2, 3])
        monkeypatch.setattr(recording.RecordingWriter, "append_batch", full_disk)
        with pytest.raises(OSError, match="No space left"):
            shmstream.record(name, tmp_path / "rec", since=0, seconds=support.WAIT)
        monkeypatch.undo()
        rec = shmstream.load_recording(tmp_path / "rec")  # closed: headers valid, empty
        assert len(rec) == 0 and rec.complete
    finally:
        h.close()


def test_a_recorder_started_before_its_stream_waits_for_it(make_name, tmp_path):
    # A recorder is usually started before the camera: record --wait looks
    # for the name until it exists, then records as usual.
    name, out = make_name(), tmp_path / "rec"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "shmstream",
            "record",
            name,
            "-o",
            str(out),
            "--frames",
            "3",
            "--wait",
            "60",
            "--quiet",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        h = shmstream.create(name, shape=SHAPE, dtype=np.float32)
        try:
            k = 0

            def recorder_done() -> bool:
                nonlocal k
                k += 1
                h.write(np.full(SHAPE, k, np.float32))  # until the recorder has its 3
                return proc.poll() is not None

            support.wait_until(recorder_done, what="the waiting recorder to record 3 frames")
        finally:
            h.close()
        assert proc.returncode == 0, proc.stderr.read()
        assert len(shmstream.load_recording(out)) == 3
    finally:
        proc.kill()
        proc.wait()


def test_a_recorder_without_wait_refuses_a_missing_stream_and_with_wait_gives_up(
    make_name, tmp_path
):
    with pytest.raises(FileNotFoundError, match="create"):
        shmstream.record(make_name(), tmp_path / "a", frames=1)
    with pytest.raises(FileNotFoundError, match="create"):
        shmstream.record(make_name(), tmp_path / "b", frames=1, wait=0.2)
    with pytest.raises(ValueError, match="wait"):
        shmstream.record(make_name(), tmp_path / "c", frames=1, wait=-1)
