"""A recording directory is someone else's input (issue 32, docs/history.md):
frames.npy truncated while it is read is a CorruptStreamError in the
reader and in ``replay`` (never a SIGBUS), ``replay`` stops on ``stop`` in
the middle of a long recorded pause, and what stream.json says is checked
against the files (the history it gives does not size the replay's stream).

Recordings are written with RecordingWriter (what ``record`` uses), in
tmp_path; a truncation is a real ``os.truncate`` of the file. The readers
that meet a truncation run in a spawned child, so that a SIGBUS would show
as that child's death, not end the test run."""

from __future__ import annotations

import json
import math
import os
import threading
from pathlib import Path

import numpy as np
import pytest

import shmstream
from shmstream.recording import RecordingWriter

SHAPE = (64, 256)  # 64 KiB of float32 a frame: many pages to cut
T0 = 1_700_000_000_000_000_000


def write_recording(path: Path, n: int = 32, times: list[int] | None = None, **info) -> Path:
    frames = np.stack([np.full(SHAPE, k + 1, np.float32) for k in range(n)])
    with RecordingWriter(
        path, shape=SHAPE, dtype=np.float32, description={"name": "cam", **info}
    ) as w:
        w.append(
            frames,
            np.arange(1, n + 1),
            np.arange(n),
            times if times is not None else [T0 + k * 1_000_000 for k in range(n)],
        )
    return path


def header_bytes(path: Path) -> int:
    with open(path / "frames.npy", "rb") as f:
        if np.lib.format.read_magic(f) == (1, 0):
            np.lib.format.read_array_header_1_0(f)
        else:
            np.lib.format.read_array_header_2_0(f)
        return f.tell()


# ---- frames.npy cut while mapped --------------------------------------------------------


def _read_after_cut(path: str) -> list[str]:
    """Open the recording, cut frames.npy to its header, then read it every
    way a user does; the exception each way raised."""
    rec = shmstream.load_recording(path)
    assert rec.frame(31)[0, 0] == 32  # mapped and read before the cut
    os.truncate(os.path.join(path, "frames.npy"), header_bytes(Path(path)))
    got = []
    for read in (
        lambda: rec.frame(20),
        lambda: [p.payload.sum() for p in rec],
        rec.check,
    ):
        try:
            read()
            got.append("nothing")
        except shmstream.CorruptStreamError as exc:
            assert "truncated" in str(exc) and "frames.npy" in str(exc)
            got.append("CorruptStreamError")
    return got


def test_frames_cut_under_an_open_reader_are_a_corrupt_stream_error(tmp_path, spawn):
    path = write_recording(tmp_path / "rec")
    assert spawn(_read_after_cut, str(path)).result() == ["CorruptStreamError"] * 3


def _replay_with_a_cut(path: str, name: str) -> tuple[str, int, list[float]]:
    """Replay, cutting frames.npy once the first frame is published."""

    def cut(stats) -> None:
        if stats.frames == 1:
            os.truncate(os.path.join(path, "frames.npy"), header_bytes(Path(path)))

    try:
        shmstream.replay(path, name, rate=math.inf, progress=cut, progress_interval=0)
        outcome = "finished"
    except shmstream.CorruptStreamError:
        outcome = "CorruptStreamError"
    with shmstream.open(name) as h:
        count = h.count
        published = [float(f[0, 0]) for f in h.read_since(0, timeout=0).frames]
    return outcome, count, published


def test_replay_of_frames_cut_under_it_stops_with_a_corrupt_stream_error(tmp_path, spawn, name):
    path = write_recording(tmp_path / "rec", history=32)
    outcome, count, published = spawn(_replay_with_a_cut, str(path), name).result()
    assert outcome == "CorruptStreamError"
    assert count == 1 and published == [1.0]  # nothing of the cut part was published


def test_a_file_shorter_than_its_header_says_is_refused_at_load(tmp_path, name):
    path = write_recording(tmp_path / "rec")
    os.truncate(path / "frames.npy", header_bytes(path) + 1000)
    with pytest.raises(shmstream.CorruptStreamError, match=r"frames\.npy is shorter"):
        shmstream.load_recording(path)
    path = write_recording(tmp_path / "rec2")
    with open(path / "counts.npy", "r+b") as f:
        f.truncate(os.path.getsize(path / "counts.npy") - 8)
    with pytest.raises(shmstream.CorruptStreamError, match=r"counts\.npy is shorter"):
        shmstream.replay(path, name, rate=math.inf)


# ---- replay's pauses --------------------------------------------------------------------


def test_replay_stops_on_stop_in_a_pause_of_years(tmp_path, name):
    ten_years = 10 * 365 * 86_400 * 10**9
    path = write_recording(tmp_path / "rec", n=2, times=[T0, T0 + ten_years])
    stop, first = threading.Event(), threading.Event()
    result: dict = {}

    def progress(stats) -> None:
        first.set()  # the first frame is published; the next is due in ten years

    def run() -> None:
        result["stats"] = shmstream.replay(
            path, name, stop=stop, progress=progress, progress_interval=0
        )

    t = threading.Thread(target=run, daemon=True)
    t.start()
    assert first.wait(30)
    stop.set()
    t.join(30)
    assert not t.is_alive(), "replay slept through stop"
    stats = result["stats"]
    assert (stats.frames, stats.stopped_by) == (1, "stop")


# ---- stream.json against the files ------------------------------------------------------


def test_the_history_stream_json_gives_does_not_size_the_replay(tmp_path, make_name):
    path = write_recording(tmp_path / "rec", n=4, history=10**7)  # 64 KiB frames: 640 GB asked
    capped, asked = make_name(), make_name()
    stats = shmstream.replay(path, capped, rate=math.inf)
    assert stats.created and shmstream.stat(capped)["history"] == 4  # no more than it holds
    shmstream.replay(path, asked, rate=math.inf, history=16)  # unless asked
    assert shmstream.stat(asked)["history"] == 16


def _edit(path: Path, **changes) -> None:
    info = json.loads((path / "stream.json").read_text())
    (path / "stream.json").write_text(json.dumps({**info, **changes}))


@pytest.mark.parametrize(
    "changes,match",
    [
        ({"history": -1}, "'history' must be an integer >= 0"),
        ({"history": "deep"}, "'history' must be an integer >= 0"),
        ({"history": True}, "'history' must be an integer >= 0"),
        ({"history": 2**64}, "'history' must be an integer >= 0"),
        ({"shape": "64x256"}, "'shape' must be a list"),
        ({"shape": [64, -256]}, "'shape' must be a list"),
        ({"shape": [1] * 65}, "'shape' must be a list"),
        ({"dtype": "no such dtype"}, "'dtype' 'no such dtype' is not a dtype"),
        ({"dtype": 7}, "'dtype' must be a dtype's text"),
        ({"name": ["cam"]}, "'name' must be a string"),
        ({"complete": "yes"}, "'complete' must be true or false"),
        ({"frames": 33}, "says 33 frames, the files hold 32"),
        ({"frames": -3}, "'frames' must be an integer >= 0"),
        ({"dtype": "float64"}, "is inconsistent: frames.npy holds float32"),
    ],
)
def test_a_stream_json_that_disagrees_with_the_files_is_a_clear_error(
    tmp_path, make_name, changes, match
):
    path = write_recording(tmp_path / "rec")
    _edit(path, **changes)
    with pytest.raises(ValueError, match=match) as caught:
        shmstream.load_recording(path)
    assert str(path) in str(caught.value)  # names the recording (and stream.json where it is bad)
    with pytest.raises(ValueError, match=match):
        shmstream.replay(path, make_name(), rate=math.inf)


def test_a_recording_killed_before_its_last_sync_still_loads(tmp_path):
    path = write_recording(tmp_path / "rec")
    _edit(path, complete=False, frames=30)  # the description lags the files
    rec = shmstream.load_recording(path)
    assert len(rec) == 32 and not rec.complete


def _view_with_a_cut(path: str) -> list[str]:
    """Serve the recording, take a picture, cut frames.npy, ask for another
    frame: the states the page is sent."""
    import asyncio
    import struct

    import websockets

    from shmstream.viewer import Viewer

    with Viewer(recording=path).start() as v:
        url = v.url.replace("http://", "ws://", 1).replace("/?", "/ws?", 1)

        async def run() -> list[str]:
            states: list[str] = []
            async with websockets.connect(url) as ws:
                await ws.send('{"settings": {"playing": false, "index": 0}}')
                while not states or states[-1] != "corrupt":
                    raw = await asyncio.wait_for(ws.recv(), 30)
                    (length,) = struct.unpack("<I", raw[:4])
                    header = json.loads(raw[4 : 4 + length])
                    states.append(header.get("state", header["kind"]))
                    await ws.send('{"ack": 1}')
                    if len(states) == 1:
                        os.truncate(os.path.join(path, "frames.npy"), header_bytes(Path(path)))
                        await ws.send('{"settings": {"index": 20}}')  # a frame now cut
            return states

        return asyncio.run(run())


def test_the_viewer_says_a_recording_cut_under_it_is_corrupt(tmp_path, spawn):
    pytest.importorskip("starlette", reason="the 'view' extra is not installed")
    pytest.importorskip("websockets", reason="the 'view' extra is not installed")
    path = write_recording(tmp_path / "rec")
    states = spawn(_view_with_a_cut, str(path)).result()
    assert states[0] == "image" and states[-1] == "corrupt"
