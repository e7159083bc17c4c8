"""``shmstream view`` given bad input: a name that does not exist, a port
in use, frames that are no image (a structured dtype, 4-D), a huge 3-D
stream, junk on the picture socket. Each gets a clear error or a sensible
display, and the server goes on serving.

The protocol tests talk to the server directly (websockets, urllib); the
display tests drive headless Chromium (view_util)."""

from __future__ import annotations

import asyncio
import errno
import json
import socket
import struct
import urllib.error
import urllib.request

import numpy as np
import pytest

import shmstream
from shmstream import cli
from shmstream.viewer import DEFAULT_FPS

from view_util import (
    page,
    socket_url,
    start_cli,
    stop_cli,
    text,
    wait_for,
    wait_for_count,
)

pytest.importorskip("starlette", reason="the 'view' extra is not installed")
pytest.importorskip("uvicorn", reason="the 'view' extra is not installed")
websockets = pytest.importorskip("websockets", reason="the 'view' extra is not installed")

from shmstream.viewer import Viewer  # noqa: E402 - after the extra's skip


@pytest.fixture
def viewer():
    v = Viewer().start()
    yield v
    v.close()


def get_json(url: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def messages(url: str, sends: list[str], n: int = 1, until=None) -> list[dict]:
    """The headers of the messages on the picture socket ``url`` after
    sending ``sends``: the first ``n``, or up to the first that ``until``
    accepts; each is acknowledged as the page does."""

    async def run() -> list[dict]:
        async with websockets.connect(url) as ws:
            for s in sends:
                await ws.send(s)
            got: list[dict] = []
            while (until is None and len(got) < n) or (until and not (got and until(got[-1]))):
                raw = await asyncio.wait_for(ws.recv(), 30)
                (length,) = struct.unpack("<I", raw[:4])
                got.append(json.loads(raw[4 : 4 + length]))
                try:
                    await ws.send('{"ack": 1}')
                except websockets.exceptions.ConnectionClosed:  # the server said all it will
                    break
            return got

    return asyncio.run(run())


# ---- errors at start ------------------------------------------------------------------


def _first_picture_after_create(url: str, name: str) -> list[dict]:
    """On the picture socket ``url``: the message that ``name`` is missing,
    then (after this creates and writes it) its first picture."""

    async def run() -> list[dict]:
        async with websockets.connect(url) as ws:
            seen: list[dict] = []
            stream = None
            try:
                while not seen or seen[-1]["kind"] != "image":
                    raw = await asyncio.wait_for(ws.recv(), 30)
                    (length,) = struct.unpack("<I", raw[:4])
                    seen.append(json.loads(raw[4 : 4 + length]))
                    await ws.send('{"ack": 1}')
                    if seen[-1].get("state") == "missing" and stream is None:
                        stream = shmstream.create(name, shape=(4, 4), dtype=np.uint8)
                        stream.write(np.full((4, 4), 9, np.uint8))
            finally:
                if stream is not None:
                    stream.close()
            return seen

    return asyncio.run(run())


def test_the_command_waits_for_a_stream_that_does_not_exist_yet(name):
    proc, url = start_cli(name)  # the command, as a user runs it (issue 37, bug 9)
    try:
        assert f"no stream {name!r} yet; the page waits for it" in proc.stdout.readline()
        ws = url.replace("http://", "ws://", 1).replace("/?", "/ws?", 1)
        seen = _first_picture_after_create(ws, name)
        assert seen[0]["state"] == "missing" and "waiting for it" in seen[0]["text"]
        assert seen[-1]["kind"] == "image" and seen[-1]["max"] == 9
    finally:
        err = stop_cli(proc)
    assert "Traceback" not in err, err


def test_view_without_blocking_waits_for_a_stream_that_does_not_exist_yet(make_name, capsys):
    name = make_name()
    v = shmstream.view(name, block=False)
    try:
        assert v.waiting and "the page waits for it" in capsys.readouterr().out
        seen = _first_picture_after_create(socket_url(v, stream=name), name)
        assert seen[-1]["kind"] == "image" and seen[-1]["count"] == 1
    finally:
        v.close()
    with pytest.raises(ValueError, match="name"):  # a bad name is still refused at once
        Viewer("")


def test_a_port_in_use_is_a_clear_error(capsys):
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        assert cli.main(["view", "--port", str(port)]) == 1
        err = capsys.readouterr().err
        assert f"port {port} on 127.0.0.1 is in use" in err and "--port 0" in err
        with pytest.raises(shmstream.ShmstreamOSError) as info:
            Viewer(port=port)
        assert info.value.errno == errno.EADDRINUSE


def test_bad_options_are_refused_before_anything_starts(capsys):
    assert cli.main(["view", "--fps", "0"]) == 2
    assert cli.main(["view", "--port", "-1"]) == 2
    capsys.readouterr()
    with pytest.raises(ValueError, match="fps"):
        Viewer(fps=float("nan"))
    with pytest.raises(ValueError, match="port"):
        Viewer(port=70000)


def test_a_directory_that_is_no_recording_is_a_clear_error(tmp_path, capsys):
    assert cli.main(["view", str(tmp_path)]) == 1
    assert "is not a shmstream recording" in capsys.readouterr().err


# ---- the protocol under junk ----------------------------------------------------------


def test_junk_on_the_picture_socket_is_ignored(viewer, name):
    with shmstream.create(name, shape=(4, 6), dtype=np.float32) as s:
        s.write(np.arange(24, dtype=np.float32).reshape(4, 6))
        ws = socket_url(viewer, stream=name)
        junk = [
            "not json",
            "[1, 2]",
            '{"settings": 5}',
            '{"settings": {"plane": "x", "lo": "NaN", "axis": 7, "contrast": 3}}',
            '{"settings": {"seek": 99999, "index": true}}',
            '{"settings": {"contrast": "fixed", "lo": 0, "hi": 23}}',
        ]
        got = messages(ws, junk, until=lambda h: h.get("hi") == 23)
        assert got[-1]["kind"] == "image" and got[-1]["count"] == 1
        assert (got[-1]["width"], got[-1]["height"]) == (6, 4)


def test_a_missing_stream_or_recording_on_the_socket_is_a_message(viewer, name):
    [got] = messages(socket_url(viewer, stream=name), [], 1)
    assert got["kind"] == "message" and got["state"] == "missing"
    assert "waiting for it to be created" in got["text"]
    [got] = messages(socket_url(viewer, recording=7), [], 1)
    assert got["kind"] == "message" and "cannot show it" in got["text"]
    status, body = get_json(page(viewer, "api/stat", name=name))
    assert status == 404 and "does not exist" in body["error"]
    status, body = get_json(page(viewer, "api/segments"))
    assert status == 200 and isinstance(body["rows"], list)


def test_frames_that_are_no_image_are_said_so(viewer, make_name):
    structured, four_d = make_name(), make_name()
    with (
        shmstream.create(structured, shape=(3,), dtype=[("x", "<f4"), ("n", "<i2")]),
        shmstream.create(four_d, shape=(2, 2, 2, 2), dtype=np.uint8),
    ):
        [got] = messages(socket_url(viewer, stream=structured), [], 1)
        assert got["state"] == "no-picture" and "is not drawn" in got["text"]
        [got] = messages(socket_url(viewer, stream=four_d), [], 1)
        assert got["state"] == "no-picture" and "4-D" in got["text"]


def test_lines_values_and_complex_frames_are_drawn(viewer, make_name):
    line, scalar, waves = make_name(), make_name(), make_name()
    with (
        shmstream.create(line, shape=(100_000,), dtype=np.float64) as a,
        shmstream.create(scalar, shape=(), dtype=np.int32) as b,
        shmstream.create(waves, shape=(8, 8), dtype=np.complex64) as c,
    ):
        a.write(np.sin(np.arange(100_000) / 1000))
        b.write(np.int32(7))
        c.write(np.full((8, 8), 3 + 4j, np.complex64))
        [got] = messages(socket_url(viewer, stream=line), [], 1)
        assert got["kind"] == "line" and got["n"] <= 4096 and got["step"] > 1
        [got] = messages(socket_url(viewer, stream=scalar), [], 1)
        assert got["kind"] == "line" and got["n"] == 1 and got["max"] == 7
        [got] = messages(socket_url(viewer, stream=waves), [], 1)
        assert got["kind"] == "image" and got["max"] == pytest.approx(5.0)  # |3 + 4j|


def test_nearly_flat_frames_are_drawn_without_a_failure(viewer, make_name, caplog):
    """Issue 37, bug 3: a range of one ulp is too narrow for 64 histogram
    bins (np.histogram refused it and every picture failed)."""
    ulp, ring, huge = make_name(), make_name(), make_name()
    with (
        shmstream.create(ulp, shape=(8, 8), dtype=np.float32) as a,
        shmstream.create(ring, shape=(8, 8), dtype=np.complex64) as b,
        shmstream.create(huge, shape=(2, 2), dtype=np.float64) as c,
    ):
        frame = np.ones((8, 8), np.float32)
        frame[3, 3] = np.nextafter(np.float32(1), np.float32(2))
        a.write(frame)
        b.write(np.exp(1j * np.linspace(0, 6, 64)).astype(np.complex64).reshape(8, 8))
        c.write(np.array([[1e308, -1e308], [1e20, 1e20]]))
        for stream in (ulp, ring, huge):
            [got] = messages(socket_url(viewer, stream=stream), [], 1)
            assert got["kind"] == "image", got.get("text")
            assert sum(got["hist"]) == got["width"] * got["height"]
    assert not [r for r in caplog.records if "picture failed" in r.getMessage()]


def test_nan_and_infinite_values_leave_a_valid_picture(viewer, make_name):
    some, only = make_name(), make_name()
    with (
        shmstream.create(some, shape=(4, 4), dtype=np.float32) as a,
        shmstream.create(only, shape=(4, 4), dtype=np.float32) as b,
    ):
        frame = np.arange(16, dtype=np.float32).reshape(4, 4)
        frame[0, :3] = [np.nan, np.inf, -np.inf]
        a.write(frame)
        b.write(np.full((4, 4), np.nan, np.float32))
        [got] = messages(socket_url(viewer, stream=some), [], 1)  # the header is strict JSON
        assert got["kind"] == "image" and (got["min"], got["max"]) == (3.0, 15.0)
        [got] = messages(socket_url(viewer, stream=only), [], 1)
        assert got["kind"] == "image" and got["min"] is None and got["hist"] == []


def test_shmstream_view_serves_from_a_thread_and_stops(name, capsys):
    with shmstream.create(name, shape=(2, 2)):
        v = shmstream.view(name, block=False)
        try:
            assert capsys.readouterr().out.startswith(f"shmstream view: {v.url}")
            assert get_json(page(v, "api/info")) == (
                200,
                {"stream": name, "fps": DEFAULT_FPS, "recordings": []},
            )
        finally:
            v.close()
        with pytest.raises(urllib.error.URLError):
            urllib.request.urlopen(page(v), timeout=5)


# ---- in the browser ---------------------------------------------------------------------


def test_the_page_waits_for_a_missing_stream_and_shows_it_once_created(browser, viewer, name):
    browser.get(page(viewer, stream=name))
    wait_for(
        browser,
        lambda d: d.find_element("id", "state").get_attribute("data-state") == "missing",
        "that the stream is missing",
    )
    assert "waiting for it to be created" in text(browser, "message")
    with shmstream.create(name, shape=(16, 16), dtype=np.uint8) as s:
        s.write(np.arange(256, dtype=np.uint8).reshape(16, 16))
        wait_for_count(browser, 1)


def test_a_huge_3d_stream_is_shown_one_strided_plane_at_a_time(browser, viewer, name):
    planes, h, w = 6, 2600, 2000  # 31 MB a frame: the page gets under 1 MB of it
    with shmstream.create(name, shape=(planes, h, w), dtype=np.uint8) as s:
        frame = np.zeros((planes, h, w), np.uint8)
        for k in range(planes):
            frame[k, :, : (k + 1) * w // planes] = 255  # plane k: its left (k+1)/6 bright
        s.write(frame)
        browser.get(page(viewer, stream=name))
        wait_for_count(browser, 1)
        size = browser.execute_script(
            "const c = document.getElementById('picture'); return [c.width, c.height]"
        )
        assert max(size) <= 1024 and size[1] == -(-h // 3), size  # every 3rd pixel
        assert text(browser, "plane-text") == "0 of 6"
        browser.execute_script(
            "const e = document.getElementById('plane'); e.value = 4;"
            "e.dispatchEvent(new Event('input'));"
        )
        wait_for(browser, lambda d: text(d, "plane-text") == "4 of 6", "plane 4")
        wait_for(
            browser,
            lambda d: (
                d.execute_script(
                    "const c = document.getElementById('picture').getContext('2d');"
                    "return c.getImageData(Math.floor(c.canvas.width * 0.7), 10, 1, 1).data[0]"
                )
                > 200
            ),
            "plane 4's bright left five sixths",
        )
        status, body = get_json(page(viewer, "api/segments"))
        assert status == 200 and name in [r["name"] for r in body["rows"]]


def test_a_stream_replaced_under_its_name_is_shown_anew(viewer, name):
    ws = socket_url(viewer, stream=name)

    async def run() -> list[dict]:
        async with websockets.connect(ws) as sock:
            seen: list[dict] = []
            old = shmstream.create(name, shape=(4, 4), dtype=np.uint8)
            old.write(np.ones((4, 4), np.uint8))
            try:
                while True:
                    raw = await asyncio.wait_for(sock.recv(), 30)
                    (length,) = struct.unpack("<I", raw[:4])
                    seen.append(json.loads(raw[4 : 4 + length]))
                    await sock.send('{"ack": 1}')
                    if seen[-1].get("shape") == [4, 4] and old is not None:
                        old.close()
                        shmstream.unlink(name)  # and a new stream of that name
                        new = shmstream.create(name, shape=(8, 8), dtype=np.uint8)
                        new.write(np.ones((8, 8), np.uint8))
                        old = None
                    if seen[-1].get("shape") == [8, 8]:
                        new.close()
                        return seen
            finally:
                if old is not None:
                    old.close()

    seen = asyncio.run(run())
    assert [h.get("state") for h in seen if h["kind"] == "message"][-1] == "removed"
    assert seen[-1]["kind"] == "image" and seen[-1]["count"] == 1


def test_the_install_hint_gives_the_checkout_and_the_released_form():
    import subprocess
    import sys

    from shmstream.viewer import VIEW_HINT

    out = subprocess.run(
        [sys.executable, "-m", "shmstream", "view", "--help"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    for said in (" ".join(out.split()), VIEW_HINT):  # help text is wrapped
        assert 'pip install ".[view]" from a checkout' in said
        assert 'pip install "shmstream[view]"' in said


def test_max_sockets_reaches_the_server_from_the_command_line(monkeypatch):
    import shmstream.viewer

    got = {}
    monkeypatch.setattr(shmstream.viewer, "view", lambda *a, **kw: got.update(kw))
    assert cli.main(["view", "--max-sockets", "3"]) == 0
    assert got["max_sockets"] == 3
    assert cli.main(["view", "--max-sockets", "0"]) == 2
    v = shmstream.viewer.Viewer(max_sockets=3)  # and the server is built with it
    try:
        assert v.app.max_sockets == 3
    finally:
        v.close()
