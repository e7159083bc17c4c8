"""The live view: a local web page that shows every segment live and a
stream's picture (docs/view.md). ``shmstream.view()`` and the
``shmstream view`` command are :func:`view`.

``view()`` serves it until Ctrl-C; ``view(block=False)`` returns a
:class:`Viewer` serving from a background thread (``.url``, ``.close()``).
It serves only whoever has the URL it prints: the URL carries a random
token, and the Host and Origin of each request are checked (``_access``).
Needs the ``view`` extra (``pip install ".[view]"`` from a checkout,
``pip install "shmstream[view]"`` once released: Starlette, uvicorn,
websockets); ``import shmstream`` never imports them.
"""

from __future__ import annotations

import errno
import math
import os
import secrets
import socket
import threading
import urllib.parse
from typing import Any

from ..common import _checks
from ..errors import MissingExtraError, ShmstreamOSError, ShmstreamValueError

__all__ = ["DEFAULT_FPS", "DEFAULT_MAX_SIDE", "Viewer", "view"]

#: Pictures a second sent to one page, at most (the page may draw fewer).
#: Above the 30 a moving picture needs, so that a late timer or a dropped
#: picture leaves the page at 30 or more (with a cap of exactly 30 it
#: counted 29.8-29.9 a second).
DEFAULT_FPS = 40.0
#: An image side longer than this is strided down before it is sent.
DEFAULT_MAX_SIDE = 1024
VIEW_HINT = (
    'shmstream view needs the "view" extra: pip install ".[view]" from a checkout, '
    'pip install "shmstream[view]" once released'
)
#: Picture sockets (pages) served at once, at most, by default.
DEFAULT_MAX_SOCKETS = 16
#: The largest message a page sends (settings, acks are a few dozen bytes).
WS_MAX_BYTES = 64 << 10


def _bind(host: str, port: int) -> socket.socket:
    try:
        return socket.create_server((host, port))
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise ShmstreamOSError(
                errno.EADDRINUSE,
                f"port {port} on {host} is in use; give another with --port (port=), "
                "or --port 0 for a free one",
            ) from None
        if isinstance(exc, socket.gaierror):
            raise ShmstreamOSError(
                errno.EADDRNOTAVAIL, f"cannot listen on host {host!r}: {exc.strerror}"
            ) from None
        raise ShmstreamOSError(
            exc.errno or 0, f"cannot listen on {host}:{port}: {exc.strerror or exc}"
        ) from None


class Viewer:
    """A running view server. ``url`` is the page (with the stream or
    recording given at start already selected, and the token that lets
    it in); ``token`` is that token; ``close()`` stops it.

    A stream ``name`` that does not exist yet is waited for (the page says
    so); a recording directory is loaded here, once, for every page.
    ``max_sockets`` pages are served pictures at once, at most."""

    def __init__(
        self,
        name: str | None = None,
        *,
        recording: str | os.PathLike[str] | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        fps: float = DEFAULT_FPS,
        max_side: int = DEFAULT_MAX_SIDE,
        max_sockets: int = DEFAULT_MAX_SOCKETS,
    ) -> None:
        try:
            import uvicorn

            from ._access import Gate
            from ._app import ViewApp
        except ImportError as exc:
            raise MissingExtraError(f"{VIEW_HINT} ({exc})", name="starlette") from None
        if (
            isinstance(fps, bool)
            or not isinstance(fps, (int, float))
            or not (math.isfinite(fps) and 0 < fps <= 1000)
        ):
            raise ShmstreamValueError(f"fps must be a number in (0, 1000], not {fps!r}")
        if isinstance(max_side, bool) or not isinstance(max_side, int) or max_side < 16:
            raise ShmstreamValueError(f"max_side must be an int >= 16, not {max_side!r}")
        if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
            raise ShmstreamValueError(f"port must be an int in [0, 65535], not {port!r}")
        if isinstance(max_sockets, bool) or not isinstance(max_sockets, int) or max_sockets < 1:
            raise ShmstreamValueError(f"max_sockets must be an int >= 1, not {max_sockets!r}")
        recordings = []
        if recording is not None:
            from ..recording.files import load_recording

            # a bad directory fails here, with the reason; every page shares it
            recordings.append(load_recording(recording))
        #: True when ``name`` did not exist at start (the page waits for it).
        self.waiting = False
        if name is not None:
            from ..registry import stat

            try:
                stat(name)  # a bad or corrupt name fails here, saying what to do
            except FileNotFoundError:
                self.waiting = True
        self._sock = _bind(host, port)
        self.host = host
        self.port = int(self._sock.getsockname()[1])
        self.token = secrets.token_urlsafe(32)
        shown = f"[{host}]" if ":" in host else host
        query: dict[str, str] = {"token": self.token}
        if name is not None:
            query["stream"] = name
        elif recordings:
            query["recording"] = "0"
        self.url = f"http://{shown}:{self.port}/?{urllib.parse.urlencode(query)}"
        self.app = ViewApp(
            stream=name,
            recordings=recordings,
            fps=float(fps),
            max_side=max_side,
            max_sockets=max_sockets,
        )
        self.gate = Gate(self.app.app, token=self.token, host=host, port=self.port)
        config = uvicorn.Config(
            self.gate,
            log_level="warning",
            lifespan="off",
            timeout_graceful_shutdown=1,
            ws_max_size=WS_MAX_BYTES,
            # HTTP connections and sockets together, beyond which uvicorn answers 503
            limit_concurrency=4 * max_sockets + 16,
        )
        self._server = uvicorn.Server(config)
        self._thread: threading.Thread | None = None

    def serve_forever(self) -> None:
        """Serve in this thread until Ctrl-C (KeyboardInterrupt) or :meth:`close`."""
        try:
            self._server.run(sockets=[self._sock])
        finally:
            self._sock.close()

    def start(self) -> Viewer:
        """Serve from a background thread; returns once it accepts connections."""
        self._thread = threading.Thread(
            target=self.serve_forever, name="shmstream-view", daemon=True
        )
        self._thread.start()
        return self

    def close(self) -> None:
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

    def __enter__(self) -> Viewer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def view(
    name: str | None = None,
    *,
    recording: str | os.PathLike[str] | None = None,
    host: str = "127.0.0.1",
    port: int = 0,
    fps: float = DEFAULT_FPS,
    max_side: int = DEFAULT_MAX_SIDE,
    max_sockets: int = DEFAULT_MAX_SOCKETS,
    block: bool = True,
    open_browser: bool = False,
) -> Viewer:
    """Serve the live view on ``host``:``port`` (0: a free port) and print
    its URL, which carries the token that lets a browser in. ``name``
    selects a stream (waited for if it does not exist yet) and
    ``recording`` a recording directory to play back; the page lists every
    segment either way. At
    most ``fps`` pictures a second go to each page, sides longer than
    ``max_side`` are strided down, at most ``max_sockets`` pages get
    pictures at once. ``block=False`` returns the running
    :class:`Viewer` at once; otherwise serves until Ctrl-C."""
    block = _checks.check_bool("block", block)
    open_browser = _checks.check_bool("open_browser", open_browser)
    viewer = Viewer(
        name,
        recording=recording,
        host=host,
        port=port,
        fps=fps,
        max_side=max_side,
        max_sockets=max_sockets,
    )
    print(f"shmstream view: {viewer.url}  (Ctrl-C to stop)", flush=True)
    if viewer.waiting:
        print(f"shmstream view: no stream {name!r} yet; the page waits for it", flush=True)
    if open_browser:
        import webbrowser

        webbrowser.open(viewer.url)
    if not block:
        return viewer.start()
    try:
        viewer.serve_forever()
    except KeyboardInterrupt:
        pass
    return viewer
