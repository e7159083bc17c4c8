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

import functools
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

#: Default caps on what imports may make here (Bridge(max_mirrors=...,
#: max_mirror_bytes=...)): an exporter announces names of its choosing.
DEFAULT_MAX_MIRRORS = 64
DEFAULT_MAX_MIRROR_BYTES = 1 << 30
#: An import that failed is tried again at scans after scan_interval,
#: doubling up to this (a rogue exporter's many names, each without an
#: answer, must not keep the control thread in metadata queries).
MAX_RETRY_S = 60.0


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
        self.nbytes = 0  # what the mirror holds (counted against max_mirror_bytes)
        self.failures = 0  # failed tries since the last success
        self.retry_at = 0.0  # monotonic time of the next try at a scan


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
    ``max_mirrors`` / ``max_mirror_bytes`` cap how many mirrors imports make
    here and the bytes they hold together (payload and slots of a stream,
    the ring of a channel; default 64 and 1 GiB): an import past a cap is
    refused with a log line (docs/bridge.md, "Failures and bad input").
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
        # channel name -> bridges holding an import token for it (Zenoh
        # liveliness): only those can bind a channel export (_channels).
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
            ack = _wire.unpack_ack(sample.payload.to_bytes())
        except (UnicodeDecodeError, _wire.BadSample) as exc:
            self._bad_acks += 1
            if self._bad_acks <= 10 or self._bad_acks % 1000 == 0:
                log.warning(
                    "ignored bad channel ack #%d on %s: %s", self._bad_acks, sample.key_expr, exc
                )
            return
        ex = self._exports.get(name)
        if isinstance(ex, ChannelExport):
            ex.on_ack(ack)

    def _on_importer_token(self, sample: Any) -> None:
        parsed = self.keys.parse_importer(str(sample.key_expr))
        if parsed is None:
            return
        importer, name = parsed
        alive = sample.kind != self._zenoh.SampleKind.DELETE
        with self._importers_lock:
            ids = self._importers.setdefault(name, set())
            (ids.add if alive else ids.discard)(importer)
            if not ids:
                del self._importers[name]
        ex = self._exports.get(name)
        if not alive and isinstance(ex, ChannelExport):
            ex.importer_gone(importer)

    def _importer_live(self, name: str, importer: str) -> bool:
        with self._importers_lock:
            return importer in self._importers.get(name, ())

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
                    name in self.import_patterns,
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
            r.live = r.live | {bridge_id}  # a new set: import threads read it (_query_meta)
            if not r.up:
                self._source_up(r, ns)
        else:
            r.live = r.live - {bridge_id}
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

    def _refuse(self, local: str, exact: bool, why: str) -> None:
        """An import that cannot be made: raised from start() for an import
        named exactly (the user's own conflict), else logged once (a glob
        import must not end the bridge for what one exporter announced)."""
        if self._starting and exact:
            raise ShmstreamValueError(why)
        if self._failed.get(local) != why:
            self._failed[local] = why
            log.error("%s", why)

    def _source_up(self, r: _Remote, ns: str) -> None:
        """Make or resume the mirror of a live export; on failure r.up stays
        False and a later scan tries again (backing off)."""
        self._try_source_up(r, ns)
        if r.up:
            r.failures = 0
        else:
            r.failures += 1
            delay = min(MAX_RETRY_S, self.scan_interval * 2.0 ** min(r.failures - 1, 16))
            r.retry_at = time.monotonic() + delay

    def _try_source_up(self, r: _Remote, ns: str) -> None:
        exact = r.name in self.import_patterns
        what = f"cannot import {r.kind} {r.name!r} of namespace {ns!r} as {r.local!r}"
        mirrors = [m for m in self._remotes.values() if m.mirror is not None]
        if r.mirror is None and len(mirrors) >= self.max_mirrors:
            self._refuse(  # before asking anything: a cap costs no query
                r.local,
                exact,
                f"{what}: this bridge has made {len(mirrors)} mirrors, its cap "
                "(max_mirrors, --max-mirrors)",
            )
            return
        meta = self._query_meta(r)
        if meta is None:
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
        held = sum(m.nbytes for m in mirrors)
        if held + meta["nbytes"] > self.max_mirror_bytes:
            self._refuse(
                r.local,
                exact,
                f"{what}: its mirror would hold {meta['nbytes']} bytes, and the mirrors made "
                f"hold {held} of the {self.max_mirror_bytes} allowed (max_mirror_bytes, "
                "--max-mirror-bytes)",
            )
            return
        verify = functools.partial(self._query_meta, r, quiet=True)
        try:
            if r.kind == "stream":
                r.mirror = StreamImport(self._session, self.keys, r.ns_chunk, r.local, meta, verify)
            else:
                r.mirror = ChannelImport(
                    self._session,
                    self._zenoh,
                    self.keys,
                    r.ns_chunk,
                    r.local,
                    meta,
                    self.id,
                    verify,
                )
        except (ValueError, TypeError, OSError, RuntimeError) as exc:
            self._refuse(r.local, exact, str(exc))
            return
        except Exception as exc:  # noqa: BLE001 - what an exporter announced: this import alone
            self._refuse(r.local, False, f"{what}: {type(exc).__name__}: {exc}")
            return
        r.nbytes = meta["nbytes"]
        r.mirror.status.set(auth=_auth.AUTH_CODES[self.auth])  # mirror_status "auth"
        r.up = True
        self._failed.pop(r.local, None)
        log.info("importing %s %r of namespace %r as %r", r.kind, r.name, ns, r.local)

    def _query_meta(self, r: _Remote, quiet: bool = False) -> dict | None:
        """The export's metadata, checked as a whole (_wire.check_meta), from
        a bridge that holds a live token of this export (Zenoh's replier id;
        a reply from anyone else is ignored). None if none answers with good
        metadata (bad metadata is logged once)."""
        key = self.keys.meta(r.name, r.ns_chunk)
        live = r.live  # replaced, never changed in place (_token)
        for reply in self._session.get(key, timeout=QUERY_TIMEOUT_S):
            if reply.ok is None:
                continue
            replier = reply.replier_id
            if replier is None or str(replier.zid) not in live:
                log.warning(
                    "ignored metadata for %r from %s, which holds no export token for it",
                    r.name,
                    None if replier is None else replier.zid,
                )
                continue
            try:
                return _wire.check_meta(_wire.loads(reply.ok.payload.to_bytes()), r.name, r.kind)
            except _wire.BadSample as exc:
                why = (
                    f"refused {r.kind} {r.name!r} of namespace {_keys.decode(r.ns_chunk)!r}: "
                    f"its exporter announced bad metadata ({exc})"
                )
                if self._failed.get(r.local) != why:
                    self._failed[r.local] = why
                    log.error("%s", why)
                return None
        if not quiet:
            log.warning("no metadata for %r from namespace %r", r.name, _keys.decode(r.ns_chunk))
        return None

    def _scan(self, strict: bool) -> None:
        """Retry imports that failed; export what newly matches; drop exports
        whose source is gone or made again (re-exported on the next scan);
        report producer deaths."""
        if not self._starting:
            for r in list(self._remotes.values()):
                if r.live and not r.up and time.monotonic() >= r.retry_at:
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
            ex: StreamExport | ChannelExport
            if kind == "stream":
                ex = StreamExport(
                    self._session, self._zenoh, self.keys, self.id, name, self.spin_us
                )
            else:
                ex = ChannelExport(
                    self._session,
                    self._zenoh,
                    self.keys,
                    self.id,
                    name,
                    self.spin_us,
                    functools.partial(self._importer_live, name),
                )
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
