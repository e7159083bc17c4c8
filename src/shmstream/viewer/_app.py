"""The web application (Starlette, served by uvicorn): the page, the
table as JSON, one segment's details, and a WebSocket per picture.

The picture socket is paced by the server and by the page: at most
``fps`` messages a second (a change of settings waits for the next period
too), a new one only when the frame changed (or a setting did), and at
most ``WINDOW`` messages the page has not yet drawn (it acknowledges
each), so a slow browser or link slows the view, never the stream. Reads
and rendering run in a worker thread, off the event loop.

What one user of the server can cost it is capped: ``max_sockets``
picture sockets at once (one more is told so and closed), the table built
at most every ``TABLE_MIN_S`` whoever asks, and the recordings given at
start loaded once for every socket. Who may use it at all is
``_access.Gate``'s job.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from ..errors import ShmstreamError
from ..recording.files import Recording
from ._render import Settings, pack
from ._sources import LiveStream, RecordingSource, message
from ._table import Table, details

#: Pictures sent that the page has not acknowledged yet, at most.
WINDOW = 2
#: Picture sockets served at once, at most, by default (a page has one).
MAX_SOCKETS = 16
#: Seconds a table built for one request serves the others.
TABLE_MIN_S = 0.25
PAGE = Path(__file__).with_name("index.html")
log = logging.getLogger("shmstream.view")


def _json(obj: Any, status: int = 200) -> Response:
    # ensure_ascii: a name with undecodable bytes (lone surrogates) stays valid JSON
    return Response(
        json.dumps(obj, default=str, allow_nan=False),
        status_code=status,
        media_type="application/json",
    )


class ViewApp:
    """The routes and what they share: the recordings given at start
    (loaded once), the caps, the table's rate memory."""

    def __init__(
        self,
        *,
        stream: str | None,
        recordings: list[Recording],
        fps: float,
        max_side: int,
        max_sockets: int = MAX_SOCKETS,
    ) -> None:
        self.stream = stream
        self.recordings = recordings
        self.fps = fps
        self.max_side = max_side
        self.max_sockets = max_sockets
        self.sockets = 0  # picture sockets served now
        self.table = Table()
        self._table_lock: asyncio.Lock | None = None
        self._rows: tuple[float, Any] | None = None  # (monotonic, rows)
        self.app = Starlette(
            routes=[
                Route("/", self.page),
                Route("/api/info", self.info),
                Route("/api/segments", self.segments),
                Route("/api/stat", self.stat),
                WebSocketRoute("/ws", self.picture),
            ]
        )

    async def page(self, request: Request) -> Response:
        return Response(
            PAGE.read_bytes(),
            media_type="text/html; charset=utf-8",
            headers={"Cache-Control": "no-store"},
        )

    async def info(self, request: Request) -> Response:
        return _json(
            {
                "stream": self.stream,
                "fps": self.fps,
                "recordings": [
                    {"id": i, "path": str(r.path)} for i, r in enumerate(self.recordings)
                ],
            }
        )

    async def segments(self, request: Request) -> Response:
        # one table for every page that asks within TABLE_MIN_S: many pages
        # (or many requests) cost one survey, not one each
        if self._table_lock is None:
            self._table_lock = asyncio.Lock()
        async with self._table_lock:
            if self._rows is None or time.monotonic() - self._rows[0] >= TABLE_MIN_S:
                rows = await asyncio.to_thread(self.table.rows)
                self._rows = (time.monotonic(), rows)
            rows = self._rows[1]
        return _json(rows)

    async def stat(self, request: Request) -> Response:
        name = request.query_params.get("name", "")
        try:
            return _json(await asyncio.to_thread(details, name))
        except (ShmstreamError, OSError, ValueError, TypeError) as exc:
            return _json({"error": str(exc), "type": type(exc).__name__}, 404)

    async def picture(self, ws: WebSocket) -> None:
        await ws.accept()
        if self.sockets >= self.max_sockets:
            with contextlib.suppress(WebSocketDisconnect, RuntimeError):
                await ws.send_bytes(
                    pack(
                        *message(
                            f"this view already serves {self.max_sockets} pictures at once "
                            "(its cap); close another page and reload",
                            state="busy",
                        )
                    )
                )
                await ws.close(code=1013)  # try again later
            return
        self.sockets += 1
        try:
            await self._serve(ws)
        finally:
            self.sockets -= 1

    async def _serve(self, ws: WebSocket) -> None:
        query = ws.query_params
        source: LiveStream | RecordingSource | None = None
        try:
            if "recording" in query:
                index = int(query["recording"])
                if not 0 <= index < len(self.recordings):
                    raise IndexError(f"no recording {index} (this view has {len(self.recordings)})")
                source = RecordingSource(self.recordings[index])
            else:
                source = LiveStream(query.get("stream", ""))
        except (ShmstreamError, OSError, ValueError, IndexError) as exc:
            with contextlib.suppress(WebSocketDisconnect, RuntimeError):
                await ws.send_bytes(pack(*message(f"cannot show it: {exc}", state="error")))
                await ws.close()
            return
        session = _Session(ws, source, Settings(max_side=self.max_side), self.fps)
        try:
            await session.run()
        finally:
            source.close()


class _Session:
    """One page's picture socket: what it asked for, and the pacing."""

    def __init__(
        self, ws: WebSocket, source: LiveStream | RecordingSource, settings: Settings, fps: float
    ) -> None:
        self.ws = ws
        self.source = source
        self.settings = settings
        self.period = 1.0 / fps
        self.seek: int | None = None  # a live stream: the kept frame shown (its count)
        self.index: int | None = None  # a recording: the frame asked for
        self.playing = True
        self.force = True
        self.unacked = 0
        self.failed: str | None = None  # the last picture's failure, logged once
        self.wake = asyncio.Event()

    async def run(self) -> None:
        receiver = asyncio.ensure_future(self._receive())
        try:
            await self._send()
        except (WebSocketDisconnect, RuntimeError, OSError):
            pass  # the page went away
        finally:
            receiver.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await receiver

    async def _receive(self) -> None:
        while True:
            try:
                text = await self.ws.receive_text()
            except (WebSocketDisconnect, RuntimeError, KeyError):
                self.unacked = -1  # tells the sender to stop
                self.wake.set()
                return
            try:
                msg = json.loads(text)
            except ValueError:
                continue
            if not isinstance(msg, dict):
                continue
            if msg.get("ack"):
                self.unacked = max(0, self.unacked - 1)
            if "settings" in msg and isinstance(msg["settings"], dict):
                self._apply(msg["settings"])
            self.wake.set()

    def _apply(self, given: dict[str, Any]) -> None:
        self.settings.update(given)
        if "seek" in given:
            seek = given["seek"]
            self.seek = seek if isinstance(seek, int) and not isinstance(seek, bool) else None
        if "index" in given:
            index = given["index"]
            self.index = index if isinstance(index, int) and not isinstance(index, bool) else None
        if isinstance(given.get("playing"), bool):
            self.playing = given["playing"]
        self.force = True

    async def _wait(self, deadline: float) -> None:
        # a change of settings (force) waits for the period too: a page that
        # sends settings without pause gets fps pictures a second, no more
        loop = asyncio.get_running_loop()
        while self.unacked >= WINDOW or loop.time() < deadline:
            self.wake.clear()
            timeout = None if self.unacked >= WINDOW else max(0.0, deadline - loop.time())
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.wake.wait(), timeout)
            if self.unacked < 0:
                raise WebSocketDisconnect()

    async def _send(self) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time()
        while True:
            await self._wait(deadline)
            now = loop.time()
            # fixed steps keep the average at fps through a late wake-up
            # (up to two periods are caught up); after a longer stall, no burst
            deadline = max(deadline + self.period, now - 2 * self.period)
            force, self.force = self.force, False
            try:
                msg = await asyncio.to_thread(self._picture, force)
                self.failed = None
            except Exception as exc:  # logged: a bug must not end the page's view
                text = f"{type(exc).__name__}: {exc}"
                msg = None
                if text != self.failed or force:  # once, not at every period
                    if text != self.failed:
                        log.exception("shmstream view: a picture failed")
                    self.failed = text
                    msg = message(f"this picture failed ({text}); the view goes on", state="error")
            if msg is not None:
                header, payload = msg
                await self.ws.send_bytes(pack(header, payload))
                self.unacked += 1

    def _picture(self, force: bool) -> Any:
        if isinstance(self.source, RecordingSource):
            index, self.index = self.index, None  # a jump, taken once; playing goes on from it
            return self.source.picture(self.settings, index, self.playing, force)
        return self.source.picture(self.settings, self.seek, force)
