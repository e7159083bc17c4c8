"""The import side of a bridge: mirror what other bridges export.

Other bridges' liveliness tokens arrive as events for the control thread
(``_token``), which makes or resumes a mirror (``_source_up``) after asking
the exporter for its metadata (``_query_meta``), within the caps on how
many mirrors and bytes imports may make here; an import that failed is
retried at later scans, backing off. The mirrors themselves are
_stream_import.py and _channel_import.py.
"""

from __future__ import annotations

import functools
import logging
import time
from typing import Any

from ..errors import ShmstreamValueError
from . import _auth, _keys, _wire
from ._channel_import import ChannelImport
from ._state import BridgeState, Remote
from ._stream_import import StreamImport

log = logging.getLogger("shmstream.bridge")

#: How long a bridge waits for a metadata reply from another bridge.
QUERY_TIMEOUT_S = 5.0

#: An import that failed is tried again at scans after scan_interval,
#: doubling up to this (a rogue exporter's many names, each without an
#: answer, must not keep the control thread in metadata queries).
MAX_RETRY_S = 60.0


class ImportSide(BridgeState):
    """What a bridge does to import (a base of Bridge)."""

    def _on_export_token(self, sample: Any) -> None:
        """A Zenoh callback: queue the event for the control thread."""
        self._events.put((str(sample.key_expr), sample.kind == self._zenoh.SampleKind.PUT))

    # ------------------------------------------------------------ control thread

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
            r = self._remotes[ident] = self._locals[local] = Remote(ns_chunk, kind, name, local)
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
        self._log_once(local, why)

    def _source_up(self, r: Remote, ns: str) -> None:
        """Make or resume the mirror of a live export; on failure r.up stays
        False and a later scan tries again (backing off)."""
        self._try_source_up(r, ns)
        if r.up:
            r.failures = 0
        else:
            r.failures += 1
            delay = min(MAX_RETRY_S, self.scan_interval * 2.0 ** min(r.failures - 1, 16))
            r.retry_at = time.monotonic() + delay

    def _try_source_up(self, r: Remote, ns: str) -> None:
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

    def _query_meta(self, r: Remote, quiet: bool = False) -> dict | None:
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
                self._log_once(r.local, why)
                return None
        if not quiet:
            log.warning("no metadata for %r from namespace %r", r.name, _keys.decode(r.ns_chunk))
        return None

    def _retry_imports(self) -> None:
        """Try again the imports that failed, once their back-off is over."""
        for r in list(self._remotes.values()):
            if r.live and not r.up and time.monotonic() >= r.retry_at:
                self._source_up(r, _keys.decode(r.ns_chunk))
