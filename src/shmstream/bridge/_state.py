"""The state of a bridge that both of its sides share: its arguments,
checked, with their defaults and caps, and the tables the export side and
the import side both read (an import's record, ``Remote``, among them).

Separate from _bridge.py so that the sides (_export_side.py,
_import_side.py) can be classes of their own that know what they share,
and the bridge's lifecycle reads without the argument checks.
"""

from __future__ import annotations

import logging
import queue
import socket
import threading
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from ..common import _checks
from ..errors import ShmstreamTypeError, ShmstreamValueError
from . import _auth, _keys
from ._session import import_zenoh, make_config

if TYPE_CHECKING:
    from ._channel_export import ChannelExport
    from ._channel_import import ChannelImport
    from ._stream_export import StreamExport
    from ._stream_import import StreamImport

log = logging.getLogger("shmstream.bridge")

#: How long an export spins for the next local write before it sleeps on
#: the futex. Short on purpose: past the first 5 us shmstream's spin calls
#: sched_yield, which on a busy host gives the core away for a whole time
#: slice; behind a writer that never pauses the export then reads ~100
#: frames/s instead of thousands (measured; BENCHMARKS.md, bridge).
DEFAULT_SPIN_US = 5.0

#: Default caps on what imports may make here (Bridge(max_mirrors=...,
#: max_mirror_bytes=...)): an exporter announces names of its choosing.
DEFAULT_MAX_MIRRORS = 64
DEFAULT_MAX_MIRROR_BYTES = 1 << 30


def _patterns(what: str, value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        value = (value,)
    try:
        items = tuple(value)
    except TypeError:
        raise ShmstreamTypeError(
            f"{what} must be a name, a glob or a list of them, not {type(value).__name__}"
        ) from None
    for p in items:
        if not isinstance(p, str) or not p:
            raise ShmstreamTypeError(f"{what} must hold non-empty strings, not {p!r}")
    return items


class Remote:
    """One import: a remote export, the bridges that currently offer it."""

    def __init__(self, ns_chunk: str, kind: str, name: str, local: str) -> None:
        self.ns_chunk, self.kind, self.name, self.local = ns_chunk, kind, name, local
        self.live: set[str] = set()
        self.up = False  # the mirror follows the current exporter
        self.mirror: StreamImport | ChannelImport | None = None
        self.nbytes = 0  # what the mirror holds (counted against max_mirror_bytes)
        self.failures = 0  # failed tries since the last success
        self.retry_at = 0.0  # monotonic time of the next try at a scan


class BridgeState:
    """The arguments of :class:`~shmstream.bridge.Bridge` (its docstring
    says what each means), checked, and the tables both sides use."""

    def __init__(
        self,
        exports: str | Iterable[str] = (),
        imports: str | Iterable[str] = (),
        *,
        namespace: str | None = None,
        remote_namespace: str = "*",
        local_prefix: str = "",
        key_prefix: str = _keys.DEFAULT_PREFIX,
        config: Any = None,
        listen: Sequence[str] = (),
        connect: Sequence[str] = (),
        scan_interval: float = 0.5,
        unlink_on_close: bool = False,
        spin_us: float | None = DEFAULT_SPIN_US,
        password_file: Any = None,
        tls_cert: Any = None,
        tls_key: Any = None,
        tls_ca: Any = None,
        insecure: bool = False,
        max_mirrors: int = DEFAULT_MAX_MIRRORS,
        max_mirror_bytes: int = DEFAULT_MAX_MIRROR_BYTES,
    ) -> None:
        self.export_patterns = _patterns("exports", exports)
        self.import_patterns = _patterns("imports", imports)
        self.namespace = socket.gethostname() if namespace is None else namespace
        self.keys = _keys.Keys(key_prefix, self.namespace)  # validates both
        if not isinstance(remote_namespace, str) or not remote_namespace:
            raise ShmstreamTypeError("remote_namespace must be a non-empty str (a glob)")
        if not isinstance(local_prefix, str):
            raise ShmstreamTypeError("local_prefix must be a str")
        if not scan_interval > 0:
            raise ShmstreamValueError("scan_interval must be positive")
        if spin_us is not None and not spin_us >= 0:
            raise ShmstreamValueError("spin_us must be >= 0 or None")
        for what, cap in (("max_mirrors", max_mirrors), ("max_mirror_bytes", max_mirror_bytes)):
            if not isinstance(cap, int) or isinstance(cap, bool):
                raise ShmstreamTypeError(f"{what} must be an int, not {type(cap).__name__}")
            if cap < 0:
                raise ShmstreamValueError(f"{what} must be >= 0 (0: import nothing)")
        self.max_mirrors = max_mirrors
        self.max_mirror_bytes = max_mirror_bytes
        self.spin_us = spin_us
        self.remote_namespace = remote_namespace
        self.local_prefix = local_prefix
        self.scan_interval = float(scan_interval)
        self.unlink_on_close = _checks.check_bool("unlink_on_close", unlink_on_close)
        self._config = make_config(  # ModuleNotFoundError without zenoh
            config,
            listen,
            connect,
            password_file=password_file,
            tls_cert=tls_cert,
            tls_key=tls_key,
            tls_ca=tls_ca,
        )
        #: How peers are authenticated: "none", "tls", "password" or "tls+password".
        self.auth = _auth.require(self._config, insecure, "the bridge")
        self._zenoh = import_zenoh()
        self._session: Any = None
        self.id = ""
        self._exports: dict[str, StreamExport | ChannelExport] = {}
        self._remotes: dict[tuple[str, str, str], Remote] = {}
        self._locals: dict[str, Remote] = {}
        self._foreign: dict[str, set[str]] = {}  # name -> other bridges exporting it here
        # channel name -> bridges holding an import token for it (Zenoh
        # liveliness): only those can bind a channel export (_channel_export).
        self._importers: dict[str, set[str]] = {}
        self._importers_lock = threading.Lock()
        self._failed: dict[str, str] = {}  # name -> why (logged once)
        self._bad_acks = 0
        self._events: queue.Queue = queue.Queue()
        self._changed = threading.Condition()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._decls: list[Any] = []
        self._starting = False

    def _notify(self) -> None:
        with self._changed:
            self._changed.notify_all()

    def _log_once(self, key: str, why: str) -> None:
        """Log why ``key`` (a name to export or a mirror to make) failed,
        once while the reason stays the same (a scan retries it often)."""
        if self._failed.get(key) != why:
            self._failed[key] = why
            log.error("%s", why)
