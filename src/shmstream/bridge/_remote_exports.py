"""``remote_exports``: what the bridges reachable from here export, read
from their liveliness tokens by a short-lived session of its own.

Separate from the Bridge: it makes no bridge, exports and imports nothing
(``shmstream list --remote``).
"""

from __future__ import annotations

import math
import socket
from collections.abc import Sequence
from typing import Any

from ..common import _checks
from ..errors import NoPeerError, ShmstreamValueError
from . import _auth, _keys
from ._session import close_session, make_config, open_session, peer_count


def remote_exports(
    *,
    config: Any = None,
    listen: Sequence[str] = (),
    connect: Sequence[str] = (),
    key_prefix: str = _keys.DEFAULT_PREFIX,
    timeout: float = 2.0,
    password_file: Any = None,
    tls_cert: Any = None,
    tls_key: Any = None,
    tls_ca: Any = None,
    insecure: bool = False,
) -> list[dict[str, str]]:
    """What bridges reachable with this configuration export now (from their
    Zenoh liveliness tokens): a sorted list of ``{namespace, kind, name,
    key, bridge}``; empty when the bridges reached export nothing.
    NoPeerError when no Zenoh peer or router answered within ``timeout``
    (nothing is reachable with these endpoints, or none let us in).
    Authentication as for :class:`Bridge`: InsecureBridgeError without it
    unless ``insecure=True``."""
    seconds = _checks.check_timeout(timeout)
    if seconds is None or math.isinf(seconds):
        raise ShmstreamValueError(
            f"timeout must be a finite number of seconds (how long to wait for answers), "
            f"got {timeout!r}"
        )
    timeout = seconds
    keys = _keys.Keys(key_prefix, "-")
    cfg = make_config(
        config,
        listen,
        connect,
        password_file=password_file,
        tls_cert=tls_cert,
        tls_key=tls_key,
        tls_ca=tls_ca,
    )
    auth = _auth.require(cfg, insecure, "remote_exports (shmstream list --remote)")
    if auth == "none" and _auth.reaches_out(cfg):
        _auth.warn_insecure("shmstream list --remote", cfg)
    session = open_session(cfg)
    try:
        found = []
        for reply in session.liveliness().get(keys.live_all(), timeout=timeout):
            if reply.ok is None:
                continue
            parsed = keys.parse_live(str(reply.ok.key_expr))
            if parsed is None:
                continue
            ns_chunk, bridge_id, kind, name = parsed
            found.append(
                {
                    "namespace": _keys.decode(ns_chunk),
                    "kind": kind,
                    "name": name,
                    "key": keys.data(name, ns_chunk),
                    "bridge": bridge_id,
                }
            )
        if not found and peer_count(session) == 0:
            raise NoPeerError(why_nobody_answered(connect, timeout))
    finally:
        close_session(session)
    return sorted(found, key=lambda e: (e["namespace"], e["name"], e["kind"], e["bridge"]))


def why_nobody_answered(connect: Sequence[str], timeout: float) -> str:
    """Why no peer answered: nothing listens at the endpoints (unreachable),
    or something accepts connections there but its Zenoh did not let this
    session in (our credentials refused). A plain TCP connect tells them
    apart; UDP endpoints (quic/, udp/) and scouting cannot be probed."""
    if not connect:
        return (
            f"nobody answered within {timeout:g} s (multicast scouting): no Zenoh peer or "
            "router was found; give the bridge's address (connect=, --connect)"
        )
    listening: list[str] = []
    silent: list[str] = []
    for endpoint in connect:
        why = _tcp_probe(endpoint)
        (silent if why else listening).append(f"{endpoint} ({why})" if why else endpoint)
    if listening:
        return (
            f"nobody let us in within {timeout:g} s: {', '.join(listening)} accepts "
            "connections, but its Zenoh did not accept this session: it refused our "
            "credentials (a password not in its password file, a certificate its CA did not "
            "sign, TLS on one side only), or it is no bridge (see docs/bridge.md, 'Who can "
            "connect')"
        )
    return (
        f"nobody answered within {timeout:g} s: nothing accepts connections at "
        f"{', '.join(silent)}; is a bridge running there, and the port open?"
    )


def _tcp_probe(endpoint: str) -> str:
    """'' if a TCP connection to ``endpoint`` (tcp/, tls/, ws/) is accepted,
    else why not; an endpoint of another protocol is not probed."""
    proto, _, rest = endpoint.partition("/")
    if proto.lower() not in ("tcp", "tls", "ws"):
        return "not probed: not a TCP endpoint"
    address = rest.split("#", 1)[0].split("?", 1)[0]
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=1.0):
            return ""
    except (OSError, ValueError) as exc:
        return getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
