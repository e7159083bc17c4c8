"""Who the view server answers: only its user (docs/view.md, "Security").

Every HTTP request and WebSocket goes through :class:`Gate`, an ASGI
middleware in front of the routes, which refuses with 403 and a short text:

* **the token**: a random secret (``secrets.token_urlsafe``) in the URL the
  server prints, as Jupyter does. It comes in the query (``?token=``) or in
  the cookie the server sets when the page is loaded with it (HttpOnly,
  SameSite=Strict, named after the port), so the page's own requests and
  WebSockets carry it without the page's script ever seeing it. Compared in
  constant time. Another local user can reach the port but not the token;
  a web page elsewhere gets no cookie (SameSite) and cannot read the URL.
* **the Host header** names this server (``localhost``, ``127.0.0.1``,
  ``::1`` or the address given to ``--host``; any IP address when it
  listens on all of them): a page on a name that an attacker points at
  127.0.0.1 (DNS rebinding) is refused. The port is not compared, so an
  SSH tunnel to another local port works.
* **the Origin header**, when there is one (a browser always sends it on a
  WebSocket), is this server's own origin: another site's page, or a page
  of another local server, cannot open a picture socket (WebSockets are not
  covered by the browser's same-origin policy).
"""

from __future__ import annotations

import hmac
import ipaddress
import socket
import urllib.parse
from typing import Any

from starlette.requests import cookie_parser

#: Names a browser on this machine (or at the end of an SSH tunnel) uses.
LOCAL_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
WILDCARDS = frozenset({"", "0.0.0.0", "::"})


def cookie_name(port: int) -> str:
    """The token's cookie: one per server (cookies are shared across ports)."""
    return f"shmstream-view-{port}"


def _hostname(host: str) -> str:
    """The name in a Host header value (``name:port``, ``[v6]:port``)."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1 : host.find("]")] if "]" in host else ""
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


class Gate:
    """The ASGI middleware that lets in only requests with the token, a
    Host that names this server and (if any) an Origin of this server."""

    def __init__(self, app: Any, *, token: str, host: str, port: int) -> None:
        self.app = app
        self.token = token.encode()
        self.cookie = cookie_name(port)
        bound = host.strip("[]").lower()
        self.names = set(LOCAL_NAMES) | {bound}
        self.any_ip = bound in WILDCARDS
        if self.any_ip:
            self.names.add(socket.gethostname().lower())
        #: Requests refused so far (the tests and docs/view.md read it).
        self.refused = 0

    def refusal(self, scope: dict[str, Any]) -> tuple[str, bool]:
        """(why the request is refused, or "", and whether its token came
        in the query string)."""
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        host = headers.get("host", "")
        name = _hostname(host).rstrip(".")
        if not (name in self.names or (self.any_ip and _is_ip(name))):
            return f"refused: Host {host!r} is not this server's address", False
        origin = headers.get("origin")
        if origin is not None and origin.lower() != f"http://{host}".lower():
            return f"refused: Origin {origin!r} is not this server's page", False
        query = urllib.parse.parse_qs(scope.get("query_string", b"").decode("latin-1"))
        given = query.get("token", [""])[-1]
        from_query = bool(given)
        if not given:
            given = cookie_parser(headers.get("cookie", "")).get(self.cookie, "")
        if not hmac.compare_digest(given.encode("utf-8", "replace"), self.token):
            why = "a wrong token" if given else "no token"
            return (
                f"refused: {why}; open the URL that 'shmstream view' printed "
                "(it carries ?token=...)",
                False,
            )
        return "", from_query

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        why, from_query = self.refusal(scope)
        if why:
            self.refused += 1
            if scope["type"] == "websocket":
                # closing before accepting: the server answers the handshake with 403
                await receive()  # websocket.connect
                await send({"type": "websocket.close", "code": 1008, "reason": why[:120]})
                return
            body = why.encode() + b"\n"
            await send(
                {
                    "type": "http.response.start",
                    "status": 403,
                    "headers": [
                        (b"content-type", b"text/plain; charset=utf-8"),
                        (b"content-length", str(len(body)).encode()),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": body})
            return
        if scope["type"] == "http" and from_query:
            send = self._setting_cookie(send)
        await self.app(scope, receive, send)

    def _setting_cookie(self, send: Any) -> Any:
        """``send`` that adds the token's cookie to the response, so the
        page's own requests carry it without the page's script knowing it."""
        cookie = f"{self.cookie}={self.token.decode()}; Path=/; HttpOnly; SameSite=Strict"

        async def sending(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                message = {
                    **message,
                    "headers": [*message.get("headers", []), (b"set-cookie", cookie.encode())],
                }
            await send(message)

        return sending
