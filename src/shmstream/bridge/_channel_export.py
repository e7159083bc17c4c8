"""Channels across the bridge, the exporting side (the protocol, both sides:
_channel_protocol.py).

Exporter: the bridge is the local channel's consumer. It reads messages in
place (``drain_zero_copy``) and keeps each one *unreleased* until the
importing bridge acknowledges that it is in the mirror ring. So the bytes in
flight never exceed the source ring (a slow link or a slow far consumer
fills the ring, and the local producer's ``send`` waits, bounded by its own
timeout); and if the exporting bridge dies, a restarted one takes over the
consumer end, receives the unacknowledged messages again (the ring's
at-least-once rule for a dead consumer) and the importer drops those it
already delivered by their ring position. Messages go out in batches
(``_wire``) with Zenoh's BLOCK congestion control on a reliable link.

An exporter serves one importing bridge at a time, bound only on an ack of
its channel's generation from a bridge that holds a live import token.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import shmstream
from . import _thread, _wire
from ._channel_protocol import IDLE_S, RESEND_EVERY_S
from ._export import Export
from ._session import undeclare_all

log = logging.getLogger("shmstream.bridge")

DRAIN_MAX = 256
ACK_WAIT_S = 0.002  # exporter: wait this long for an ack before looking for new data again
#: exporter: importers whose refusal is logged (a flood of made-up ids is not)
REFUSED_LOGGED = 16


class ChannelExport(Export):
    kind = source_kind = "channel"

    def __init__(
        self,
        session: Any,
        zenoh: Any,
        keys: Any,
        bridge_id: str,
        name: str,
        spin_us: float | None = None,
        importer_live: Callable[[str], bool] = lambda _: True,
    ) -> None:
        self.name = name
        self._importer_live = importer_live  # does this bridge hold an import token?
        try:
            self.rx: Any = shmstream.open_channel(name, role="consumer")
        except shmstream.errors.ChannelBusyError as exc:
            raise shmstream.errors.ChannelBusyError(
                f"cannot export channel {name!r}: {exc}; the bridge must be the channel's "
                "consumer (one channel has one consumer)"
            ) from None
        try:
            if spin_us is not None:
                self.rx.spin_ns = int(spin_us * 1000)
            self._instance = shmstream.stat(name)["instance_id"]
            self._generation = _wire.generation_id(self._instance)
            self._pos = self.rx.stat()["tail"]  # ring position of the next message
            self.meta = {
                "kind": "channel",
                "name": name,
                "capacity": self.rx.capacity,
                "generation": self._generation,
                "producer_alive": True,
            }
            self._zenoh, self._session = zenoh, session
            self._key = keys.data(name)
            self._status_key = keys.status(name)
            self._pub = session.declare_publisher(
                self._key, congestion_control=zenoh.CongestionControl.BLOCK
            )
            self._live_key = keys.live(bridge_id, "channel", name)
            self._token = None
        except BaseException:
            self.rx.close()
            raise
        self._cond = threading.Condition()
        self._bound: str | None = None  # the importing bridge served
        self._acked = 0  # its delivered position
        self._sent_max = self._pos  # end of the furthest message put on the wire
        self._resend = False
        self._last_resend = 0.0
        self._refused: set[str] = set()
        self._stop = threading.Event()
        self._eof = False
        self._thread = _thread.start(self._run, f"export {name}")

    # -- called by the bridge from zenoh callbacks --------------------------------

    def on_ack(self, ack: _wire.Ack) -> None:
        importer = ack.importer
        if ack.generation != self._generation:
            return  # an importer still following an earlier channel of this name
        with self._cond:
            # Never above what was put on the wire: a message counts as
            # delivered only once it was sent (a restarted exporter sends
            # again what the importer already has; it drops those).
            delivered = min(ack.delivered, self._sent_max)
            if self._bound is None:
                if not self._importer_live(importer):
                    if importer not in self._refused and len(self._refused) < REFUSED_LOGGED:
                        self._refused.add(importer)
                        log.warning(
                            "channel %r: ignored acks from bridge %s, which holds no import "
                            "token for it (a bridge that is starting sends one at once)",
                            self.name,
                            importer,
                        )
                    return
                self._refused.discard(importer)
                self._bound, self._acked, self._resend = importer, delivered, True
                log.info("channel %r: serving importing bridge %s", self.name, importer)
            elif importer != self._bound:
                if importer not in self._refused and len(self._refused) < REFUSED_LOGGED:
                    self._refused.add(importer)
                    log.error(
                        "channel %r: bridge %s also imports it, but a channel has one "
                        "consumer; bridge %s is served",
                        self.name,
                        importer,
                        self._bound,
                    )
                return
            elif ack.flags & _wire.RESEND:
                # The importer dropped samples: send again past its ack (at
                # most every RESEND_EVERY_S, so acks cannot multiply traffic).
                now = time.monotonic()
                if now - self._last_resend >= RESEND_EVERY_S:
                    self._resend, self._last_resend = True, now
            self._acked = max(self._acked, delivered)
            self._cond.notify()

    def importer_gone(self, importer: str) -> None:
        with self._cond:
            self._refused.discard(importer)
            if importer == self._bound:
                log.info("channel %r: importing bridge %s is gone", self.name, importer)
                self._bound = None
                self._cond.notify()

    # -- the export thread (the only user of self.rx) ------------------------------

    def _run(self) -> None:
        held: collections.deque = collections.deque()  # (end, message), oldest first
        sent_end = 0
        eof_sent = False
        rx = self.rx
        while not self._stop.is_set():
            with self._cond:
                bound, acked, resend = self._bound, self._acked, self._resend
                self._resend = False
            while held and held[0][0] <= acked:
                held.popleft()[1].release()
            if bound is None:
                with self._cond:
                    self._cond.wait(IDLE_S)
                continue
            if resend:  # a new importer, or it asks: everything it has not got
                sent_end = acked
                eof_sent = False
                unsent = [r for r in held if r[0] > sent_end]
                if unsent:
                    self._send(unsent)
                    sent_end = unsent[-1][0]
            try:
                msgs = rx.drain_zero_copy(DRAIN_MAX, timeout=0 if held else IDLE_S)
            except EOFError:  # ChannelClosedError: the producer left, all received
                msgs = []
                if not self._eof:
                    self._eof = True
                    self._put_status(False, end=self._pos)
            except shmstream.HandleClosedError:  # closed under the drain
                if rx.closed:
                    break
                raise
            if msgs:
                if self._eof:
                    self._eof = False  # a new producer took over
                    eof_sent = False
                    self._put_status(True)
                fresh = []
                pos = self._pos
                for m in msgs:
                    pos += _wire.record_span(len(m.meta), m.nbytes)
                    if pos <= acked:
                        m.release()  # delivered before this exporter started
                    else:
                        fresh.append((pos, m))
                self._pos = pos
                held.extend(fresh)
                if fresh:
                    self._send(fresh)
                    sent_end = fresh[-1][0]
                continue
            if self._eof and not eof_sent:
                self._put_batch(b"", self._pos, 0, _wire.EOF)
                eof_sent = True
            if held or self._eof:
                with self._cond:  # nothing new: wait for an ack (or a new importer)
                    if self._acked == acked and self._bound == bound and not self._resend:
                        self._cond.wait(ACK_WAIT_S if held else IDLE_S)
        # Unacknowledged messages stay unreleased: close() detaches first, so
        # the next consumer of the channel receives them again.

    def _send(self, records: list) -> None:
        with self._cond:  # acks may count up to here once it is on the wire
            self._sent_max = max(self._sent_max, records[-1][0])
        out = bytearray()
        first = 0
        for i, (end, m) in enumerate(records):
            if i > first and len(out) + m.nbytes > _wire.BATCH_BYTES:
                self._put_batch(bytes(out), records[i - 1][0], i - first, 0)
                out, first = bytearray(), i
            data = m.data
            _wire.pack_records(out, [(end, m.type_id, m.meta, data)])
            data.release()
        self._put_batch(bytes(out), records[-1][0], len(records) - first, 0)

    def _put_batch(self, payload: bytes, end: int, n: int, flags: int) -> None:
        self._pub.put(payload, attachment=_wire.pack_batch_head(self._generation, end, n, flags))

    def _put_status(self, alive: bool, end: int | None = None) -> None:
        # A new dict (the metadata queryable reads self.meta from Zenoh's
        # threads); "end": where the source ended, for an importer to confirm
        # an end of stream with (ChannelImport._confirmed_eof).
        meta = {k: v for k, v in self.meta.items() if k != "end"}
        meta["producer_alive"] = alive
        if end is not None:
            meta["end"] = end
        self.meta = meta
        self._put_producer_alive(alive)

    def close(self) -> None:
        self._stop.set()
        with self._cond:
            self._cond.notify()
        self._thread.join(5)
        undeclare_all((self._token, self._pub))
        self.rx.close()
