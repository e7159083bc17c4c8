"""``shmstream view`` serves only its user (docs/view.md, "Security"): a
request or picture socket without the token of the printed URL, with a
wrong one, with a Host that is not the server's address or an Origin that
is not its page, is refused with 403; another local user who finds the
port reads nothing; the page's cookie carries the token for the page's own
requests; the number of picture sockets is capped, and a recording is
loaded once for every page.

The server runs in this process (``Viewer().start()``); requests are made
with urllib and the websockets client, as a script or a hostile page
would. The browser tests (tests/viewer/test_view.py) show that a real page still
works through the token URL."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import struct
import urllib.error
import urllib.request
from typing import Any

import numpy as np
import pytest

import shmstream
from shmstream import recording as recording_module
from shmstream.recording import RecordingWriter

from view_util import page, socket_url

pytest.importorskip("starlette", reason="the 'view' extra is not installed")
pytest.importorskip("uvicorn", reason="the 'view' extra is not installed")
websockets = pytest.importorskip("websockets", reason="the 'view' extra is not installed")

from shmstream.viewer import Viewer  # noqa: E402 - after the extra's skip

OTHER_UID = 65534  # nobody, as in tests/common/test_owner.py
WAIT = 30.0


@pytest.fixture
def viewer():
    v = Viewer().start()
    yield v
    v.close()


def get(url: str, headers: dict[str, str] | None = None) -> tuple[int, bytes, Any]:
    """(status, body, response headers) of a GET, 4xx included."""
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=WAIT) as r:
            return r.status, r.read(), r.headers
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(), exc.headers


def socket_status(url: str, **connect: Any) -> Any:
    """The first picture message's header on ``url``, or the HTTP status
    the handshake was refused with."""

    async def run() -> Any:
        try:
            async with websockets.connect(url, open_timeout=WAIT, **connect) as ws:
                raw = await asyncio.wait_for(ws.recv(), WAIT)
        except websockets.exceptions.InvalidStatus as exc:
            return exc.response.status_code
        (length,) = struct.unpack("<I", raw[:4])
        return json.loads(raw[4 : 4 + length])

    return asyncio.run(run())


# ---- the token ------------------------------------------------------------------------


def test_every_route_without_the_token_or_with_a_wrong_one_is_refused(viewer, name):
    assert len(viewer.token) == 43 and viewer.token in viewer.url  # 32 random bytes
    base = viewer.url.split("?")[0]
    wrong = viewer.token[:-1] + ("A" if viewer.token[-1] != "A" else "B")
    for path in ("", "api/segments", "api/info", f"api/stat?name={name}", "anything"):
        for query in ("", "?token=", f"?token={wrong}"):
            url = base + path + (query if "?" not in path else query.replace("?", "&"))
            status, body, _ = get(url)
            assert status == 403, (url, status)
            assert b"token" in body  # says what to do: open the printed URL
    with shmstream.create(name, shape=(4, 4), dtype=np.uint8) as s:
        s.write(np.ones((4, 4), np.uint8))
        assert socket_status(base.replace("http", "ws") + f"ws?stream={name}") == 403
        assert socket_status(base.replace("http", "ws") + f"ws?token={wrong}&stream={name}") == 403
        # and with it, the same requests are served
        status, body, _ = get(page(viewer, "api/segments"))
        assert status == 200 and name in [r["name"] for r in json.loads(body)["rows"]]
        assert socket_status(socket_url(viewer, stream=name))["kind"] == "image"
    assert viewer.gate.refused >= 17


def test_the_page_sets_a_strict_http_only_cookie_that_carries_the_token(viewer, name):
    status, body, headers = get(viewer.url)
    assert status == 200 and b"<canvas" in body
    cookie = headers["Set-Cookie"]
    assert cookie.startswith(f"shmstream-view-{viewer.port}={viewer.token};")
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
    base = viewer.url.split("?")[0]
    jar = {"Cookie": f"shmstream-view-{viewer.port}={viewer.token}"}
    assert get(base + "api/info", jar)[0] == 200  # what the page's own requests carry
    assert get(base + "api/info", {"Cookie": f"shmstream-view-{viewer.port}=x"})[0] == 403
    ws = base.replace("http", "ws") + f"ws?stream={name}"
    assert socket_status(ws, additional_headers=jar)["state"] == "missing"


def test_a_second_viewer_has_a_token_of_its_own(viewer):
    with Viewer().start() as other:
        assert other.token != viewer.token
        assert get(page(viewer, "api/info"))[0] == 200
        base = other.url.split("?")[0]
        assert get(base + f"api/info?token={viewer.token}")[0] == 403


# ---- Host and Origin ------------------------------------------------------------------


@pytest.mark.parametrize(
    "host",
    ["evil.example", "evil.example:{port}", "127.0.0.1.evil.example:{port}", "", "localhost.:1:2"],
)
def test_a_foreign_host_is_refused_even_with_the_token(viewer, host):
    status, body, _ = get(page(viewer, "api/segments"), {"Host": host.format(port=viewer.port)})
    assert status == 403 and b"Host" in body
    # a socket to this server whose URL names another host (as after DNS rebinding)
    ws = socket_url(viewer, stream="any").replace("127.0.0.1", "evil.example")
    with socket.create_connection(("127.0.0.1", viewer.port)) as sock:
        assert socket_status(ws, sock=sock) == 403


def test_the_names_of_this_machine_are_let_in_on_any_port(viewer):
    # an SSH tunnel to another local port keeps working
    for host in ("127.0.0.1:{port}", "localhost:{port}", "localhost:8123", "[::1]:{port}"):
        status, _, _ = get(page(viewer, "api/info"), {"Host": host.format(port=viewer.port)})
        assert status == 200, host


def test_a_socket_from_a_foreign_origin_is_refused(viewer, name):
    with shmstream.create(name, shape=(4, 4), dtype=np.uint8) as s:
        s.write(np.ones((4, 4), np.uint8))
        ws = socket_url(viewer, stream=name)
        for origin in (
            "http://evil.example",
            f"http://evil.example:{viewer.port}",
            "http://127.0.0.1:1",  # another local server's page
            "null",
        ):
            assert socket_status(ws, origin=origin) == 403, origin
        own = f"http://127.0.0.1:{viewer.port}"
        assert socket_status(ws, origin=own)["kind"] == "image"
    status, body, _ = get(page(viewer, "api/info"), {"Origin": "http://evil.example"})
    assert status == 403 and b"Origin" in body


# ---- another local user ---------------------------------------------------------------


def _as_other_user_read(port: int) -> list[int]:
    """Drop to uid 65534, then ask the viewer on ``port`` for the table as
    another local user can: no token, a guessed one, a forged Host/Origin."""

    def ask(query: str, headers: dict[str, str]) -> int:
        url = f"http://127.0.0.1:{port}/api/segments{query}"
        try:
            with urllib.request.urlopen(urllib.request.Request(url, headers=headers)) as r:
                return r.status
        except urllib.error.HTTPError as exc:
            return exc.code

    ask("", {})  # the modules urllib imports lazily, loaded while /root is readable
    os.setgid(OTHER_UID)
    os.setuid(OTHER_UID)
    assert os.getuid() == OTHER_UID
    return [
        ask(query, headers)
        for query, headers in (
            ("", {}),
            ("?token=guess", {}),
            ("", {"Host": "evil.example", "Origin": "http://evil.example"}),
        )
    ]


@pytest.mark.skipif(os.geteuid() != 0, reason="acting as a second local user (setuid) needs root")
def test_another_local_user_cannot_read_the_table(viewer, name, spawn):
    with shmstream.create(name, shape=(4, 4), dtype=np.uint8):
        assert spawn(_as_other_user_read, viewer.port).result() == [403, 403, 403]
        status, body, _ = get(page(viewer, "api/segments"))  # its user can
        assert status == 200 and name in body.decode()


# ---- caps -----------------------------------------------------------------------------


def test_the_picture_sockets_are_capped_and_a_freed_place_is_taken_again(name):
    with Viewer(max_sockets=2).start() as v, shmstream.create(name, shape=(4, 4), dtype=np.uint8):
        url = socket_url(v, stream=name)

        async def run() -> tuple[dict, dict]:
            async def first(ws) -> dict:
                raw = await asyncio.wait_for(ws.recv(), WAIT)
                (length,) = struct.unpack("<I", raw[:4])
                return json.loads(raw[4 : 4 + length])

            async with websockets.connect(url) as a, websockets.connect(url) as b:
                await first(a), await first(b)  # both served
                assert v.app.sockets == 2
                async with websockets.connect(url) as c:
                    refused = await first(c)
                    with pytest.raises(websockets.exceptions.ConnectionClosed) as closed:
                        await asyncio.wait_for(c.recv(), WAIT)
                    assert closed.value.rcvd.code == 1013
            # a and b closed: their places are free again
            loop = asyncio.get_running_loop()
            deadline = loop.time() + WAIT
            while v.app.sockets:  # the server's own counter: it saw both closes
                assert loop.time() < deadline, f"{v.app.sockets} sockets still counted"
                await asyncio.sleep(0.01)
            async with websockets.connect(url) as d:
                again = await first(d)
            return refused, again

        refused, again = asyncio.run(run())
        assert refused["state"] == "busy" and "2 pictures at once" in refused["text"]
        assert again["kind"] == "image"


def test_the_table_is_built_once_for_many_requests_at_once(viewer, monkeypatch):
    from concurrent.futures import ThreadPoolExecutor

    from shmstream.viewer import _app

    monkeypatch.setattr(_app, "TABLE_MIN_S", 3600.0)  # one table serves every request below
    built = []
    real = viewer.app.table.rows

    def counting() -> dict:
        built.append(1)
        return real()

    monkeypatch.setattr(viewer.app.table, "rows", counting)
    url = page(viewer, "api/segments")
    with ThreadPoolExecutor(8) as pool:
        statuses = list(pool.map(lambda _: get(url)[0], range(16)))
    assert statuses == [200] * 16 and len(built) == 1


def test_a_recording_is_loaded_once_for_every_page(tmp_path, monkeypatch):
    path = tmp_path / "rec"
    with RecordingWriter(path, shape=(8, 8), dtype=np.uint8, description={"name": "cam"}) as w:
        w.append(np.zeros((3, 8, 8), np.uint8), [1, 2, 3], [0, 1, 2], [1, 2, 3])
    loads = []
    real_init = recording_module.Recording.__init__

    def counting_init(self, *args, **kwargs):
        loads.append(args)
        real_init(self, *args, **kwargs)

    monkeypatch.setattr(recording_module.Recording, "__init__", counting_init)
    with Viewer(recording=path).start() as v:
        assert len(loads) == 1
        url = socket_url(v, recording=0)

        async def run() -> list[dict]:
            socks = [await websockets.connect(url) for _ in range(5)]
            try:
                got = []
                for ws in socks:
                    raw = await asyncio.wait_for(ws.recv(), WAIT)
                    (length,) = struct.unpack("<I", raw[:4])
                    got.append(json.loads(raw[4 : 4 + length]))
                return got
            finally:
                for ws in socks:
                    await ws.close()

        got = asyncio.run(run())
    assert [h["kind"] for h in got] == ["image"] * 5
    assert len(loads) == 1  # five pages, one load


def test_settings_sent_without_pause_get_no_more_pictures_than_the_fps_cap(name):
    """A page that changes its settings in a loop used to get a picture per
    change (a change bypassed the pacing). At fps=0.01 the second picture is
    100 s away: none may come while 50 changes are sent and acknowledged."""
    with (
        Viewer(fps=0.01).start() as v,
        shmstream.create(name, shape=(4, 4), dtype=np.uint8) as s,
    ):
        s.write(np.ones((4, 4), np.uint8))
        url = socket_url(v, stream=name)

        async def run() -> list[bytes]:
            async with websockets.connect(url) as ws:
                got = [await asyncio.wait_for(ws.recv(), WAIT)]  # the first is at once
                for k in range(50):
                    await ws.send(json.dumps({"settings": {"contrast": "fixed", "hi": k + 1}}))
                    await ws.send('{"ack": 1}')
                try:
                    got.append(await asyncio.wait_for(ws.recv(), 1.0))
                except asyncio.TimeoutError:
                    pass  # nothing more before the next period: paced
                return got

        assert len(asyncio.run(run())) == 1
