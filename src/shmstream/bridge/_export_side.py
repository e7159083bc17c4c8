"""The export side of a bridge: offer local streams and channels.

A scan (control thread) exports what newly matches the export patterns and
drops exports whose source is gone or made again; Zenoh callbacks answer
metadata queries, hand channel acks to their export and follow which
bridges hold an import token for a channel (only those can bind it). The
exports themselves are _stream_export.py and _channel_export.py.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

import shmstream
from shmstream.common import _kinds
from shmstream.registry import list_channels
from ..errors import ShmstreamValueError
from . import _keys, _wire
from ._channel_export import ChannelExport
from ._state import BridgeState
from ._status import is_status_name, status_name
from ._stream_export import StreamExport, StreamPublisher

log = logging.getLogger("shmstream.bridge")


class ExportSide(BridgeState):
    """What a bridge does to export (a base of Bridge)."""

    @property
    def exported(self) -> list[str]:
        """Names of the local streams and channels exported now."""
        return sorted(self._exports)

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

    # ------------------------------------------------------------ control thread

    def _scan_exports(self, strict: bool) -> None:
        """Drop exports whose source is gone or made again (re-exported on
        the next scan), report producer deaths, export what newly matches."""
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
        streams += [r.name for _, r in _kinds.outside_survey()[0]]  # milk:NAME, milk's streams
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
            self._log_once(name, str(exc))
            return
        self._failed.pop(name, None)
        log.info("exporting %s %r as %s", kind, name, self.keys.data(name))
