"""Opening a Zenoh session: the one place that imports zenoh.

Without ``--config`` the bridge starts from these defaults, so that it
listens on no address unless told to (``--listen``) and finds peers only
where told to (``--connect``): peer mode, multicast scouting off, no listen
endpoint, a 3 s lease (a dead host is noticed within ~3 s) and connection
retries every 0.25..1 s (a restarted peer is found again within a second).
With ``--config FILE`` the file is Zenoh's own configuration, taken as it
is (TLS, access control, scouting, routers...); ``--listen`` / ``--connect``
then replace its endpoint lists. Either way Zenoh's shared-memory transport
is off, and a password file or TLS certificates (_auth.py) are added last.
"""

from __future__ import annotations

import atexit
import json
import os
import threading
from collections.abc import Sequence
from typing import Any

from ..errors import (
    MissingExtraError,
    ShmstreamFileNotFoundError,
    ShmstreamOSError,
    ShmstreamTypeError,
    ShmstreamValueError,
)
from . import _auth

ZENOH_HINT = (
    'the shmstream bridge needs Eclipse Zenoh: pip install ".[zenoh]" from a '
    'checkout of shmstream, or pip install "shmstream[zenoh]"'
)

DEFAULTS = {
    "mode": '"peer"',
    "scouting/multicast/enabled": "false",
    "listen/endpoints": "[]",
    "transport/link/tx/lease": "3000",
    "connect/retry": '{"period_init_ms": 250, "period_max_ms": 1000, "period_increase_factor": 2}',
}

#: Set over a configuration file too. Zenoh's own shared-memory transport
#: only helps peers on one host, where shmstream already is the transport,
#: and it leaves a pool file (/dev/shm/<digits>.zenoh) that nothing of ours
#: can see or purge: Zenoh unlinks it when the session object is freed, which
#: a killed bridge never does, and a closed one only once nothing refers to
#: its session any more.
ALWAYS = {"transport/shared_memory/enabled": "false"}

_open_sessions: dict[int, Any] = {}  # id -> session not closed yet (strong refs)
_lock = threading.Lock()


def import_zenoh() -> Any:
    """The zenoh module, or ModuleNotFoundError saying how to install it."""
    try:
        import zenoh
    except ImportError as exc:
        raise MissingExtraError(f"{ZENOH_HINT} ({exc})", name="zenoh") from None
    return zenoh


def zenoh_available() -> bool:
    try:
        import_zenoh()
    except ModuleNotFoundError:
        return False
    return True


def make_config(
    config: str | os.PathLike | None = None,
    listen: Sequence[str] = (),
    connect: Sequence[str] = (),
    *,
    password_file: str | os.PathLike | None = None,
    tls_cert: str | os.PathLike | None = None,
    tls_key: str | os.PathLike | None = None,
    tls_ca: str | os.PathLike | None = None,
) -> Any:
    """A zenoh.Config from a file or the defaults above, plus endpoints,
    plus authentication by a password file and/or mutual TLS (_auth.apply).
    It does not refuse a configuration without authentication: Bridge and
    remote_exports do (_auth.require)."""
    zenoh = import_zenoh()
    for what, eps in (("listen", listen), ("connect", connect)):
        if isinstance(eps, str) or not all(isinstance(e, str) and e for e in eps):
            raise ShmstreamTypeError(
                f"{what} must be a list of endpoint strings like 'tcp/127.0.0.1:7447'"
            )
    if config is not None:
        path = os.fspath(config)
        if not os.path.isfile(path):
            raise ShmstreamFileNotFoundError(f"Zenoh configuration file {path!r} does not exist")
        try:
            cfg = zenoh.Config.from_file(path)
        except zenoh.ZError as exc:
            raise ShmstreamValueError(
                f"Zenoh cannot read its configuration {path!r}: {exc}"
            ) from None
    else:
        cfg = zenoh.Config()
        for key, value in DEFAULTS.items():
            cfg.insert_json5(key, value)
    try:
        for key, value in ALWAYS.items():
            cfg.insert_json5(key, value)
        if listen:
            cfg.insert_json5("listen/endpoints", json.dumps(list(listen)))
        if connect:
            cfg.insert_json5("connect/endpoints", json.dumps(list(connect)))
    except zenoh.ZError as exc:
        raise ShmstreamValueError(
            f"bad Zenoh endpoint in {list(listen) + list(connect)}: {exc}"
        ) from None
    try:
        _auth.apply(cfg, password_file, tls_cert, tls_key, tls_ca)
    except zenoh.ZError as exc:
        raise ShmstreamValueError(f"Zenoh refused the authentication settings: {exc}") from None
    return cfg


def open_session(cfg: Any) -> Any:
    """zenoh.open(cfg), closed at interpreter exit if its owner forgot (a
    session with Python callbacks that is still open hangs the exit)."""
    zenoh = import_zenoh()
    _auth.check_own_tls(cfg)
    try:
        session = zenoh.open(cfg)
    except zenoh.ZError as exc:
        raise ShmstreamOSError(f"cannot open the Zenoh session: {exc}") from None
    with _lock:
        _open_sessions[id(session)] = session
    return session


def peer_count(session: Any) -> int:
    """Zenoh peers and routers this session is connected to now."""
    info = session.info
    return len(list(info.peers_zid())) + len(list(info.routers_zid()))


def close_session(session: Any) -> None:
    with _lock:
        _open_sessions.pop(id(session), None)
    try:
        session.close()
    except Exception:  # noqa: BLE001 - closing twice or at shutdown
        pass


def undeclare_all(objs: Any) -> None:
    """Undeclare each Zenoh declaration of ``objs`` (None: not declared);
    one whose session is closed already is passed over."""
    for obj in objs:
        try:
            if obj is not None:
                obj.undeclare()
        except Exception:  # noqa: BLE001 - session already closed
            pass


def at_exit(func: Any) -> Any:
    """Run ``func`` when the interpreter exits, before it waits for the
    threads that are not daemons: Zenoh's callback threads end only when
    their session closes, so a session still open then (a script that
    raised with a bridge started) would hang the exit for ever, and
    ``atexit`` runs too late (after that wait). concurrent.futures uses the
    same hook."""
    register = getattr(threading, "_register_atexit", None)
    if register is None:  # not CPython: atexit, the best there is
        atexit.register(func)
    else:
        register(func)
    return func


@at_exit
def _close_all() -> None:
    for session in list(_open_sessions.values()):
        close_session(session)
