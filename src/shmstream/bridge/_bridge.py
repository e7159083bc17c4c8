"""The bridge process: one Zenoh session, the exports and the imports.

Threads: Zenoh calls back on its own threads; those callbacks only answer
queries, hand acks to channel exports, and queue liveliness events. One
control thread handles the events (import on a new export, mark a source
gone or back) and scans the local streams and channels every
``scan_interval`` seconds (export what newly matches, re-export a stream made
again, report a dead local producer). Each export and each channel import
has its own thread; stream imports write from the Zenoh callback.
"""

from __future__ import annotations

import logging
import queue
import socket
import threading
import time
from collections.abc import Iterable, Sequence
from typing import Any

import shmstream
from shmstream.registry import list_channels
from ..errors import (
    AlreadyStartedError,
    NoPeerError,
    ShmstreamTimeoutError,
    ShmstreamTypeError,
    ShmstreamValueError,
    WaitCancelledError,
)
from . import _auth, _keys, _thread, _wire
from ._channels import ChannelExport, ChannelImport
from ._session import close_session, import_zenoh, make_config, open_session, peer_count
from ._status import is_status_name, status_name
from ._streams import StreamExport, StreamImport, StreamPublisher

log = logging.getLogger("shmstream.bridge")

#: How long a bridge waits for a metadata reply from another bridge.
QUERY_TIMEOUT_S = 5.0

#: How long an export spins for the next local write before it sleeps on
#: the futex. Short on purpose: past the first 5 us shmstream's spin calls
#: sched_yield, which on a busy host gives the core away for a whole time
#: slice; behind a writer that never pauses the export then reads ~100
#: frames/s instead of thousands (measured; BENCHMARKS.md, bridge).
DEFAULT_SPIN_US = 5.0


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


class _Remote:
    """One import: a remote export, the bridges that currently offer it."""

    def __init__(self, ns_chunk: str, kind: str, name: str, local: str) -> None:
        self.ns_chunk, self.kind, self.name, self.local = ns_chunk, kind, name, local
        self.live: set[str] = set()
        self.up = False  # the mirror follows the current exporter
        self.mirror: StreamImport | ChannelImport | None = None


class Bridge:
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
    """

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
        self.spin_us = spin_us
        self.remote_namespace = remote_namespace
        self.local_prefix = local_prefix
        self.scan_interval = float(scan_interval)
        self.unlink_on_close = bool(unlink_on_close)
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
        self._remotes: dict[tuple[str, str, str], _Remote] = {}
        self._locals: dict[str, _Remote] = {}
        self._foreign: dict[str, set[str]] = {}  # name -> other bridges exporting it here
        self._failed: dict[str, str] = {}  # name -> why (logged once)
        self._events: queue.Queue = queue.Queue()
        self._changed = threading.Condition()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._decls: list[Any] = []
        self._starting = False

    # ---------------------------------------------------------------- lifecycle

    def start(self, timeout: float = QUERY_TIMEOUT_S) -> Bridge:
        if self._session is not None:
            raise AlreadyStartedError("this bridge is already started")
        if self.auth == "none" and _auth.reaches_out(self._config):
            _auth.warn_insecure("the bridge", self._config)
        self._session = open_session(self._config)
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
        for d in self._decls:
            try:
                d.undeclare()
            except Exception:  # noqa: BLE001
                pass
        self._decls = []
        if self._session is not None:
            close_session(self._session)
        with self._changed:
            self._changed.notify_all()

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
    def exported(self) -> list[str]:
        """Names of the local streams and channels exported now."""
        return sorted(self._exports)

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

    def publisher(self, name: str) -> StreamPublisher:
        """A writer of the exported stream ``name`` for this process: its
        ``write(value, frame_id=None)`` writes the stream and puts the frame
        to Zenoh from the calling thread, which saves the export thread's
        wake-up per frame (docs/bridge.md, "Writing through the bridge").
        Close it (or use ``with``) when done writing."""
        ex = self._exports.get(name)
        if not isinstance(ex, StreamExport):
            raise ShmstreamValueError(
                f"this bridge exports no stream {name!r} (it exports {self.exported}); a "
                "publisher writes a stream the bridge exports: name it in exports= and, if it "
                "is made after start(), call wait_for_export(name) first"
            )
        return ex.publisher()

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

    def _notify(self) -> None:
        with self._changed:
            self._changed.notify_all()

    # ---------------------------------------------------------- zenoh callbacks

    def _on_meta_query(self, query: Any) -> None:
        key = str(query.key_expr)
        head = f"{self.keys.prefix}/@meta/{self.keys.ns}/"
        try:
            name = _keys.decode(key[len(head) :])
        except UnicodeDecodeError:
            return
        ex = self._exports.get(name)
        if ex is not None:
            query.reply(key, _wire.dumps(ex.meta))

    def _on_ack(self, sample: Any) -> None:
        head = f"{self.keys.prefix}/@ack/{self.keys.ns}/"
        try:
            name = _keys.decode(str(sample.key_expr)[len(head) :])
            delivered, importer = _wire.unpack_ack(sample.payload.to_bytes())
        except (UnicodeDecodeError, _wire.BadSample) as exc:
            log.warning("ignored a bad channel ack on %s: %s", sample.key_expr, exc)
            return
        ex = self._exports.get(name)
        if isinstance(ex, ChannelExport):
            ex.on_ack(delivered, importer)

    def _on_importer_token(self, sample: Any) -> None:
        parsed = self.keys.parse_importer(str(sample.key_expr))
        if parsed is None or sample.kind != self._zenoh.SampleKind.DELETE:
            return
        ex = self._exports.get(parsed[1])
        if isinstance(ex, ChannelExport):
            ex.importer_gone(parsed[0])

    def _on_export_token(self, sample: Any) -> None:
        self._events.put((str(sample.key_expr), sample.kind == self._zenoh.SampleKind.PUT))

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

    def _token(self, key: str, alive: bool) -> None:
        parsed = self.keys.parse_live(key)
        if parsed is None:
            return
        ns_chunk, bridge_id, kind, name = parsed
        if bridge_id == self.id:
            return
        if ns_chunk == self.keys.ns:  # same namespace, same data key: one exporter only
            owners = self._foreign.setdefault(name, set())
            (owners.add if alive else owners.discard)(bridge_id)
        try:
            ns = _keys.decode(ns_chunk)
        except UnicodeDecodeError:
            return
        if not self.import_patterns or not _keys.matches(ns, self.remote_namespace):
            return
        if not any(_keys.matches(name, p) for p in self.import_patterns):
            return
        ident = (ns_chunk, kind, name)
        r = self._remotes.get(ident)
        if r is None:
            if not alive:
                return
            local = self.local_prefix.replace("{namespace}", ns) + name
            other = self._locals.get(local)
            if other is not None:
                self._refuse(
                    local,
                    f"cannot import {kind} {name!r} of namespace {ns!r} as "
                    f"{local!r}: that name already mirrors {other.name!r} of namespace "
                    f"{_keys.decode(other.ns_chunk)!r}; put '{{namespace}}' in the local "
                    "prefix",
                )
                return
            r = self._remotes[ident] = self._locals[local] = _Remote(ns_chunk, kind, name, local)
        if alive:
            if not r.live:
                r.up = False
            r.live.add(bridge_id)
            if not r.up:
                self._source_up(r, ns)
        else:
            r.live.discard(bridge_id)
            if not r.live:
                r.up = False
                if r.mirror is not None:
                    log.warning(
                        "the exporter of %r (namespace %r) is gone; mirror %r keeps %s",
                        name,
                        ns,
                        r.local,
                        "its last frame"
                        if kind == "stream"
                        else "what it has received (its consumer reads on)",
                    )
                    r.mirror.source_down()
        self._notify()

    def _refuse(self, local: str, why: str) -> None:
        if self._starting:
            raise ShmstreamValueError(why)
        if self._failed.get(local) != why:
            self._failed[local] = why
            log.error("%s", why)

    def _source_up(self, r: _Remote, ns: str) -> None:
        """Make or resume the mirror of a live export; on failure r.up stays
        False and the next scan tries again."""
        meta = self._query_meta(r)
        if meta is None:
            return
        if meta.get("kind") != r.kind:
            self._refuse(
                r.local,
                f"export {r.name!r} of namespace {ns!r} answered as a "
                f"{meta.get('kind')!r}, not a {r.kind}",
            )
            return
        if r.mirror is not None:
            r.up = r.mirror.source_up(meta)
            if r.up:
                log.info(
                    "the exporter of %r (namespace %r) is there; mirror %r follows it",
                    r.name,
                    ns,
                    r.local,
                )
            return
        try:
            if r.kind == "stream":
                r.mirror = StreamImport(self._session, self.keys, r.ns_chunk, r.local, meta)
            else:
                r.mirror = ChannelImport(
                    self._session, self._zenoh, self.keys, r.ns_chunk, r.local, meta, self.id
                )
        except (ValueError, TypeError, OSError, RuntimeError) as exc:
            self._refuse(r.local, str(exc))
            return
        r.mirror.status.set(auth=_auth.AUTH_CODES[self.auth])  # mirror_status "auth"
        r.up = True
        self._failed.pop(r.local, None)
        log.info("importing %s %r of namespace %r as %r", r.kind, r.name, ns, r.local)

    def _query_meta(self, r: _Remote) -> dict | None:
        key = self.keys.meta(r.name, r.ns_chunk)
        for reply in self._session.get(key, timeout=QUERY_TIMEOUT_S):
            if reply.ok is not None:
                try:
                    meta = _wire.loads(reply.ok.payload.to_bytes())
                    if meta.get("name") != r.name:
                        raise _wire.BadSample("metadata for another name")
                    return meta
                except _wire.BadSample as exc:
                    log.warning("bad metadata for %r: %s", r.name, exc)
        log.warning("no metadata for %r from namespace %r", r.name, _keys.decode(r.ns_chunk))
        return None

    def _scan(self, strict: bool) -> None:
        """Retry imports that failed; export what newly matches; drop exports
        whose source is gone or made again (re-exported on the next scan);
        report producer deaths."""
        if not self._starting:
            for r in list(self._remotes.values()):
                if r.live and not r.up:
                    self._source_up(r, _keys.decode(r.ns_chunk))
        for name, ex in list(self._exports.items()):
            if ex.source_changed():
                log.info("local %s %r is gone or was made again; export closed", ex.kind, name)
                del self._exports[name]
                ex.close()
            else:
                ex.poll()
        if not self.export_patterns:
            return
        streams, channels = shmstream.list_streams(), list_channels()
        stream_set = set(streams)
        mirrors = {r.local for r in self._remotes.values()}
        for kind, names in (("stream", streams), ("channel", channels)):
            for name in names:
                if name in self._exports:
                    continue
                exact = name in self.export_patterns
                if not exact:
                    if not any(_keys.matches(name, p) for p in self.export_patterns):
                        continue
                    # Globs skip status streams and mirrors: re-exporting
                    # them would loop between two bridges.
                    if is_status_name(name) or status_name(name) in stream_set or name in mirrors:
                        continue
                self._export(kind, name, strict and exact)
        self._notify()

    def _export(self, kind: str, name: str, strict: bool) -> None:
        others = self._foreign.get(name)
        try:
            if others:
                raise ShmstreamValueError(
                    f"cannot export {kind} {name!r}: bridge {sorted(others)[0]} already exports "
                    f"that name in namespace {self.namespace!r}; give this bridge another "
                    "--namespace"
                )
            cls = StreamExport if kind == "stream" else ChannelExport
            ex = cls(self._session, self._zenoh, self.keys, self.id, name, self.spin_us)
            self._exports[name] = ex  # the metadata queryable answers from here
            ex.announce()
        except FileNotFoundError:
            return  # removed between the listing and the open
        except (ValueError, OSError, RuntimeError) as exc:
            if strict:
                raise
            if self._failed.get(name) != str(exc):
                self._failed[name] = str(exc)
                log.error("%s", exc)
            return
        self._failed.pop(name, None)
        log.info("exporting %s %r as %s", kind, name, self.keys.data(name))


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
            where = ", ".join(connect) if connect else "multicast scouting"
            raise NoPeerError(
                f"nobody answered within {timeout:g} s ({where}): no Zenoh peer or router is "
                "reachable, or none let us in; is a bridge running there, the port open, and "
                "are the password file or TLS certificates the bridge's? (see docs/bridge.md)"
            )
    finally:
        close_session(session)
    return sorted(found, key=lambda e: (e["namespace"], e["name"], e["kind"], e["bridge"]))
