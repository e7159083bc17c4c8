"""The bridge process: one Zenoh session, the exports and the imports.

Threads: Zenoh calls back on its own threads; those callbacks only answer
queries, hand acks to channel exports, and queue liveliness events. One
control thread handles the events (import on a new export, mark a source
gone or back) and scans the local streams and channels every
``scan_interval`` seconds (export what newly matches, re-export a stream made
again, report a dead local producer). Each export and each channel import
has its own thread; stream imports write from the Zenoh callback.

This module holds the lifecycle, the waits and the control thread; what a
bridge does to export is _export_side.py, to import _import_side.py, and
its arguments and shared tables _state.py.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
import weakref
from typing import Any

from ..errors import AlreadyStartedError, ShmstreamTimeoutError, WaitCancelledError
from . import _auth, _keys, _thread
from ._export_side import ExportSide
from ._import_side import QUERY_TIMEOUT_S, ImportSide
from ._remote_exports import why_nobody_answered
from ._session import at_exit, close_session, open_session, peer_count, undeclare_all

log = logging.getLogger("shmstream.bridge")

#: Started bridges not closed yet: closed at the interpreter's exit.
_started: weakref.WeakSet[Bridge] = weakref.WeakSet()


@at_exit
def _close_started() -> None:
    """A script that ends (or raises) with a bridge started must exit: its
    bridges are closed before the interpreter waits for Zenoh's threads."""
    for bridge in list(_started):
        try:
            bridge.close()
        except Exception:
            log.exception("bridge %s: closing at exit failed", bridge.id)


class Bridge(ExportSide, ImportSide):
    """Export local streams and channels to Zenoh and import remote ones.

    ``exports``: names or globs of local streams and channels to offer.
    ``imports``: names or globs of remote exports to mirror here, from
    namespaces matching ``remote_namespace`` (a glob, default any), as
    ``local_prefix + name`` (``{namespace}`` in the prefix is replaced by the
    exporter's namespace). ``namespace`` (default: the host name) and
    ``key_prefix`` (default ``shmstream``) make the keys
    ``<key_prefix>/<namespace>/<name>``. ``config`` is a Zenoh configuration
    file; ``listen`` / ``connect`` are Zenoh endpoints such as
    ``tcp/192.168.1.5:7447``. Without them the bridge listens on nothing
    (see docs/bridge.md). A bridge that listens or connects authenticates
    its peers: ``password_file`` (a private file of ``user:password``
    lines: the first is this bridge's, every line may connect) and/or
    ``tls_cert``, ``tls_key``, ``tls_ca`` (mutual TLS), or a ``config``
    that sets either; otherwise InsecureBridgeError, unless
    ``insecure=True`` (then anyone who reaches it is let in, and it says
    so in the log and in ``mirror_status``). ``spin_us``: how long an
    export waits spinning for the next local write before it sleeps
    (default 5 µs; ``None`` for shmstream's default). ``start()`` opens the session and raises at once
    for a conflicting import; ``close()`` ends everything (the mirrors stay
    unless ``unlink_on_close``). Also a context manager. A writer in the
    bridge's own process can write an exported stream through
    ``publisher(name)``, which puts each frame from the writing thread.
    ``max_mirrors`` / ``max_mirror_bytes`` cap how many mirrors imports make
    here and the bytes they hold together (payload and slots of a stream,
    the ring of a channel; default 64 and 1 GiB): an import past a cap is
    refused with a log line (docs/bridge.md, "Failures and bad input").
    """

    # ---------------------------------------------------------------- lifecycle

    def start(self, timeout: float = QUERY_TIMEOUT_S) -> Bridge:
        if self._session is not None:
            raise AlreadyStartedError("this bridge is already started")
        if self.auth == "none" and _auth.reaches_out(self._config):
            _auth.warn_insecure("the bridge", self._config)
        self._session = open_session(self._config)
        _started.add(self)
        try:
            self.id = str(self._session.zid())
            s, k = self._session, self.keys
            self._decls = [
                s.declare_queryable(k.meta_all(), self._on_meta_query),
                s.declare_subscriber(f"{k.prefix}/@ack/{k.ns}/**", self._on_ack),
                s.liveliness().declare_subscriber(
                    f"{k.prefix}/@imp/{k.ns}/**", self._on_importer_token, history=True
                ),
                s.liveliness().declare_subscriber(
                    k.live_all(), self._on_export_token, history=True
                ),
            ]
            self._starting = True
            # What other bridges export now: same-namespace duplicates are
            # refused, and matching imports are made here, raising on conflict.
            for reply in s.liveliness().get(k.live_all(), timeout=timeout):
                if reply.ok is not None:
                    self._token(str(reply.ok.key_expr), True)
            self._scan(strict=True)
            connect = _auth.endpoints(self._config, ("connect",))
            if connect and peer_count(s) == 0:  # Zenoh keeps trying; say why none yet
                log.warning("bridge %s: %s", self.id, why_nobody_answered(connect, timeout))
            self._starting = False
            self._thread = _thread.start(self._control, "bridge control")
        except BaseException:
            self.close()
            raise
        log.info(
            "bridge %s: namespace %r, key prefix %r, peers authenticated by %s, exporting %s, "
            "importing %s",
            self.id,
            self.namespace,
            self.keys.prefix,
            self.auth,
            list(self.export_patterns),
            list(self.import_patterns),
        )
        return self

    def close(self) -> None:
        """Stop exporting and importing and close the Zenoh session. Mirrors
        stay (their readers keep the last frame) unless ``unlink_on_close``."""
        _started.discard(self)
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(10)
        for ex in list(self._exports.values()):
            ex.close()
        self._exports.clear()
        for r in list(self._remotes.values()):
            if r.mirror is not None:
                r.mirror.close(self.unlink_on_close)
                r.mirror = None
        undeclare_all(self._decls)
        self._decls = []
        if self._session is not None:
            close_session(self._session)
        self._notify()

    def __enter__(self) -> Bridge:
        if self._session is None:
            self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def run(self) -> None:
        """Block until :meth:`close` is called from another thread (or Ctrl-C)."""
        self._stop.wait()

    # ---------------------------------------------------------------- inspection

    @property
    def peers(self) -> int:
        """Zenoh peers and routers the bridge is connected to now (0 before
        ``start``): 0 with ``connect`` endpoints means nothing answers
        there yet (the bridge keeps trying)."""
        return peer_count(self._session) if self._session is not None else 0

    @property
    def imported(self) -> dict[str, dict[str, str]]:
        """Local name -> {namespace, kind, name} of every mirror made."""
        return {
            r.local: {"namespace": _keys.decode(r.ns_chunk), "kind": r.kind, "name": r.name}
            for r in self._remotes.values()
            if r.mirror is not None
        }

    def wait_for_import(self, local_name: str, timeout: float | None = None) -> None:
        """Return once the mirror ``local_name`` is made and its exporter
        reachable; TimeoutError otherwise."""
        self._wait(lambda: self._import_ready(local_name), timeout, f"the import of {local_name!r}")

    def wait_for_export(self, name: str, timeout: float | None = None) -> None:
        self._wait(lambda: name in self._exports, timeout, f"the export of {name!r}")

    def _import_ready(self, local: str) -> bool:
        r = self._locals.get(local)
        return r is not None and r.mirror is not None and bool(r.live)

    def _wait(self, ready: Any, timeout: float | None, what: str) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._changed:
            while not ready():
                if self._stop.is_set():
                    raise WaitCancelledError(f"the bridge was closed while waiting for {what}")
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise ShmstreamTimeoutError(f"timed out after {timeout} s waiting for {what}")
                self._changed.wait(0.25 if left is None else min(left, 0.25))

    # ------------------------------------------------------------ control thread

    def _control(self) -> None:
        next_scan = time.monotonic() + self.scan_interval
        while not self._stop.is_set():
            try:
                key, alive = self._events.get(timeout=max(0.0, next_scan - time.monotonic()))
            except queue.Empty:
                pass
            else:
                try:
                    self._token(key, alive)
                except Exception as exc:  # noqa: BLE001 - one bad export must not stop the bridge
                    log.error("%s", exc)
            if time.monotonic() >= next_scan:
                try:
                    self._scan(strict=False)
                except Exception:
                    log.exception("scan of the local streams failed")
                next_scan = time.monotonic() + self.scan_interval

    def _scan(self, strict: bool) -> None:
        """Retry imports that failed; export what newly matches; drop exports
        whose source is gone or made again (re-exported on the next scan);
        report producer deaths."""
        if not self._starting:
            self._retry_imports()
        self._scan_exports(strict)
