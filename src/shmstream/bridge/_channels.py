"""Channels across the bridge: every message, in order, exactly once while
both bridges live; nothing dropped when one of them dies.

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

Importer: the bridge is the mirror channel's producer. A Zenoh callback only
queues batches (it never blocks Zenoh); a worker thread sends each record
into the mirror (waiting while the mirror ring is full or its consumer is
away), records the delivered position in the status stream, and acknowledges
it. It sends the acknowledgement again every ``HEARTBEAT_S`` so that a
restarted exporter finds it. When the source producer closes (or dies), the
importer closes the mirror's producer end after the last message: the far
consumer gets ``ChannelClosedError``, as it would locally.

One channel has one consumer: an exporter serves one importing bridge at a
time; a second one is refused (logged) until the first is gone.

What a peer says is input (docs/bridge.md, "Failures and bad input"). The
exporter binds to an importer only on an ack of its channel's generation
from a bridge that holds a live import token for the channel (Zenoh
liveliness; a made-up id holds none), and rebinds only when that token is
gone (the importer's session closed or its lease ran out); an ack never
counts above what this exporter has sent, so no ack can release a message
that was not put on the wire. The importer takes the source generation from
the export's metadata only, closes its mirror only on an end of stream that
the exporter confirms when asked (``verify``), decodes every batch under a
guard (bad ones are counted), and queues at most ``queue_bytes``: what a
full queue drops is counted in ``dropped_samples`` and sent again by the
exporter on request (the ack's RESEND flag).
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import shmstream
from shmstream.channels.ends import DLPackDtype
from ..errors import ShmstreamValueError
from . import _thread, _wire
from ._status import STATUS_SUFFIX, MirrorSide, StatusWriter, is_mirror

log = logging.getLogger("shmstream.bridge")

HEARTBEAT_S = 0.5
DRAIN_MAX = 256
ACK_WAIT_S = 0.002  # exporter: wait this long for an ack before looking for new data again
IDLE_S = 0.1
TX_BATCH = 64  # importer: publish the mirror's head every 64 messages and after each batch
#: importer: what one queued sample costs beyond its bytes (so a flood of
#: empty samples is bounded too)
QUEUE_ITEM_COST = 256
#: importer: a gap in the positions is waited out this long (asking the
#: exporter to send again) before it is counted as lost
RESYNC_S = 2.0
#: at most one RESEND request (importer) and resend (exporter) this often
RESEND_EVERY_S = 0.05
#: exporter: importers whose refusal is logged (a flood of made-up ids is not)
REFUSED_LOGGED = 16


def channel_generation(name: str) -> int:
    return _wire.generation_id(shmstream.stat(name)["instance_id"])


class ChannelExport:
    kind = "channel"

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
            self._token: Any = None
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
        self.messages_sent = 0
        self._thread = _thread.start(self._run, f"export {name}")

    def announce(self) -> None:
        """Declare the liveliness token: importers now find this export."""
        self._token = self._session.liveliness().declare_token(self._live_key)

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
        self.messages_sent += len(records)

    def _put_batch(self, payload: bytes, end: int, n: int, flags: int) -> None:
        self._pub.put(payload, attachment=_wire.pack_batch_head(self._generation, end, n, flags))

    def _put_status(self, alive: bool, end: int | None = None) -> None:
        # A new dict (the metadata queryable reads self.meta from Zenoh's
        # threads); "end": where the source ended, for an importer to confirm
        # an end of stream with (ChannelImport.verify).
        meta = {k: v for k, v in self.meta.items() if k != "end"}
        meta["producer_alive"] = alive
        if end is not None:
            meta["end"] = end
        self.meta = meta
        self._session.put(
            self._status_key,
            _wire.dumps({"producer_alive": alive}),
            congestion_control=self._zenoh.CongestionControl.BLOCK,
        )

    # -- the bridge's periodic check ---------------------------------------------------

    def source_changed(self) -> bool:
        try:
            info = shmstream.stat(self.name)
        except (FileNotFoundError, ValueError, shmstream.CorruptStreamError):
            return True
        return info.get("kind") != "channel" or info["instance_id"] != self._instance

    def poll(self) -> None:
        pass  # producer liveness is the channel's own end of stream (see _run)

    def close(self) -> None:
        self._stop.set()
        with self._cond:
            self._cond.notify()
        self._thread.join(5)
        for obj in (self._token, self._pub):
            try:
                if obj is not None:
                    obj.undeclare()
            except Exception:  # noqa: BLE001
                pass
        self.rx.close()


class ChannelImport(MirrorSide):
    label = "mirror channel"
    kind = "channel"

    def __init__(
        self,
        session: Any,
        zenoh: Any,
        keys: Any,
        ns: str,
        local: str,
        meta: dict,
        bridge_id: str,
        verify: Callable[[], dict | None],
    ) -> None:
        """``meta``: the export's metadata, checked (_wire.check_meta);
        ``verify()``: the metadata as the bound exporter says it now (None if
        it does not answer), asked before an end of stream closes the mirror."""
        self.local = local
        self.remote = meta["name"]
        self._capacity = meta["capacity"]
        self.tx: Any = _open_mirror_channel(local, self.remote, self._capacity)
        self.tx.batch = TX_BATCH
        try:
            self.status = StatusWriter(local, "channel")
        except BaseException:
            self.tx.close()
            raise
        prev = self.status.previous
        self._generation = meta["generation"]  # only the export's metadata sets it
        self._old_generations: set[int] = set()  # batches of these are stale, not bad
        self._next_generation: int | None = None  # from source_up, applied by the worker
        self._delivered = (
            prev["delivered"] if prev and prev["generation"] == self._generation else 0
        )
        self.status.set(generation=self._generation, delivered=self._delivered)
        self._max_message = self.tx.max_message_bytes
        self._bridge_id = bridge_id
        self._verify = verify
        self._zenoh, self._session = zenoh, session
        self._queue: collections.deque = collections.deque()
        self._queued = 0  # bytes in _queue, with QUEUE_ITEM_COST per sample
        # Past what one exporter can have in flight: its ring, once more when
        # it sends again, and a batch over (record headers add < 1/8).
        self._queue_bytes = 3 * self.tx.capacity + 2 * _wire.BATCH_BYTES
        # The queue dropped samples: ask the exporter to send again (each
        # heartbeat while the queue is empty) until an ask saw no new drop.
        self._resync = False
        self._drops = 0  # samples the queue dropped
        self._drops_asked = -1  # _drops at the last RESEND request
        self._gap_since: float | None = None  # when the current gap was first seen
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._ack_now = threading.Event()
        self.messages_delivered = 0
        self._ack_key = keys.ack(self.remote, ns)
        self._ack_pub = session.declare_publisher(
            self._ack_key, congestion_control=zenoh.CongestionControl.BLOCK
        )
        self._token = session.liveliness().declare_token(keys.importer(ns, bridge_id, self.remote))
        self._subs = [
            session.declare_subscriber(keys.data(self.remote, ns), self._on_sample),
            session.declare_subscriber(keys.status(self.remote, ns), self._on_status),
        ]
        self._thread = _thread.start(self._run, f"import {local}", self._failed)
        self.source_up(meta)

    def source_up(self, meta: dict) -> bool:
        """The exporter is (again) there: tell it where we are at once."""
        if meta["capacity"] > self.tx.capacity:
            log.error(
                "channel %r now has a ring of %d bytes, larger than its mirror %r (%d); "
                "import it under another prefix",
                self.remote,
                meta["capacity"],
                self.local,
                self.tx.capacity,
            )
            return False
        self.status.set(exporter_alive=1, producer_alive=int(meta["producer_alive"]))
        with self._cond:
            if meta["generation"] != self._generation:
                self._next_generation = meta["generation"]  # the channel was made again
            self._cond.notify()
        self._ack_now.set()
        return True

    def source_down(self) -> None:
        self.status.set(exporter_alive=0)

    # -- zenoh callbacks: queue only, never block ---------------------------------------

    def _on_sample(self, sample: Any) -> None:
        cost = len(sample.payload) + QUEUE_ITEM_COST
        with self._cond:
            if self._queued + cost > self._queue_bytes:
                self._resync = True
                self._drops += 1
                drop = True
            else:
                drop = False
                att = sample.attachment
                self._queue.append(
                    (None if att is None else att.to_bytes(), sample.payload.to_bytes())
                )
                self._queued += cost
                self._cond.notify()
        if drop:
            self._dropped(f"the import queue holds {self._queue_bytes} bytes already")

    # -- the worker (the only user of self.tx) ---------------------------------------

    def _run(self) -> None:
        next_beat = last_resend = 0.0
        while not self._stop.is_set():
            with self._cond:
                if not self._queue and self._next_generation is None:
                    self._cond.wait(max(0.0, next_beat - time.monotonic()))
                item = self._queue.popleft() if self._queue else None
                if item is not None:
                    self._queued -= len(item[1]) + QUEUE_ITEM_COST
                new_generation, self._next_generation = self._next_generation, None
            if new_generation is not None and new_generation != self._generation:
                self._old_generations.add(self._generation)
                self._generation, self._delivered = new_generation, 0
                self._gap_since = None
                self.status.set(generation=new_generation, delivered=0, eof=0)
            resend = False
            if item is not None:
                resend = self._deliver(*item)
                if resend:  # a batch past a gap was skipped: it must come again
                    with self._cond:
                        self._resync = True
                        self._drops += 1
            now = time.monotonic()
            if self._resync and not self._queue and now - last_resend >= HEARTBEAT_S:
                # What was dropped may have been the last batch or the end
                # of stream: no gap would show it. Ask, until a heartbeat
                # after an ask finds nothing dropped since.
                with self._cond:
                    if self._drops == self._drops_asked:
                        self._resync = False
                    else:
                        resend, self._drops_asked = True, self._drops
            if resend and now - last_resend < RESEND_EVERY_S:
                resend = False  # the exporter is sending again already
            if resend:
                last_resend = now
            if resend or item is not None or self._ack_now.is_set() or now >= next_beat:
                self._ack_now.clear()
                flags = _wire.RESEND if resend else 0
                self._ack_pub.put(
                    _wire.pack_ack(self._generation, self._delivered, self._bridge_id, flags)
                )
                next_beat = now + HEARTBEAT_S

    def _deliver(self, attachment: bytes | None, payload: bytes) -> bool:
        """Send a batch's new records into the mirror. True if the exporter
        should send again what follows the delivered position (a gap after
        the queue dropped samples)."""
        try:
            head, records = _wire.decode_batch(attachment, payload, self._max_message)
        except Exception as exc:  # noqa: BLE001 - another host's bytes: anything is bad input
            self._bad(f"{type(exc).__name__}: {exc}")
            return False
        if head.generation != self._generation:
            if head.generation not in self._old_generations:
                self._bad(f"batch of generation {head.generation:#x}, not the export's")
            return False
        for end, type_id, obj, nbytes, meta_len in records:
            if end <= self._delivered:
                continue  # delivered before (a restarted exporter sends it again)
            start = end - _wire.record_span(meta_len, nbytes)
            if self._delivered and start > self._delivered:
                # Dropped here (a full queue), or released by the exporter
                # for another importer: ask for it again; count it as lost
                # once the exporter did not send it within RESYNC_S.
                now = time.monotonic()
                if self._gap_since is None:
                    self._gap_since = now
                if now - self._gap_since < RESYNC_S:
                    return True
                self.status.add("lost_messages")
                log.error(
                    "mirror channel %r: messages between ring positions %d and %d never arrived",
                    self.local,
                    self._delivered,
                    start,
                )
            self._gap_since = None  # past the gap: filled, or counted lost
            if self.tx.closed:  # reopened after an end of stream: a new producer upstream
                self.tx = shmstream.open_channel(self.local, role="producer", batch=TX_BATCH)
                self.status.set(eof=0)
            if isinstance(obj, DLPackDtype):
                # An array of a dtype NumPy has no name for (bfloat16): the
                # mirror re-sends ndarrays, so this one message is dropped
                # (counted), not its batch.
                self._bad(f"array message of {obj.name}, which the bridge does not carry")
                self._delivered = end
                continue
            if not self._send(obj, type_id):
                return False
            self._delivered = end
            self.messages_delivered += 1
        if not self.tx.closed:
            self.tx.flush()
        if head.flags & _wire.EOF and head.end <= self._delivered and not self.tx.closed:
            if self._confirmed_eof(head.end):
                # eof first: a consumer that sees ChannelClosedError finds it set
                self.status.set(eof=1)
                self.tx.close()  # the far consumer gets everything, then ChannelClosedError
            else:
                self._bad("an end of stream that the exporter does not confirm")
        self.status.set(delivered=self._delivered)
        return False

    def _confirmed_eof(self, end: int) -> bool:
        """Ask the exporter: has the source producer closed, at ``end``?"""
        meta = self._verify()
        return (
            meta is not None
            and meta["generation"] == self._generation
            and not meta["producer_alive"]
            and meta.get("end") == end
        )

    def _send(self, obj: Any, type_id: int) -> bool:
        """Send one message into the mirror; while its consumer is away, keep
        trying (a new consumer takes over the ring). False if stopping."""
        while not self._stop.is_set():
            try:
                self.tx.send(obj, type_id, timeout=IDLE_S)
                return True
            except TimeoutError:
                continue
            except shmstream.errors.ChannelBrokenError:
                self._stop.wait(IDLE_S)
        return False

    def close(self, unlink: bool = False) -> None:
        self._stop.set()
        with self._cond:
            self._cond.notify()
        self._thread.join(5)
        for obj in (*self._subs, self._token, self._ack_pub):
            try:
                obj.undeclare()
            except Exception:  # noqa: BLE001
                pass
        if not self.tx.closed:
            self.tx.close()
        if unlink:
            shmstream.unlink_channel(self.local)
        self.status.close(unlink)


def _open_mirror_channel(local: str, remote: str, capacity: int) -> Any:
    try:
        return shmstream.channel(local, capacity, role="producer")
    except FileExistsError:
        pass
    try:
        tx = shmstream.open_channel(local, role="producer")
    except ValueError:
        raise ShmstreamValueError(
            f"cannot import channel {remote!r} as {local!r}: that name is a stream or shared "
            "array here; choose another local prefix"
        ) from None
    except shmstream.errors.ChannelBusyError:
        raise shmstream.errors.ChannelBusyError(
            f"cannot import channel {remote!r} as {local!r}: that channel has a live producer "
            "already; the bridge must be the mirror's producer"
        ) from None
    if tx.capacity < capacity:
        tx.close()
        raise ShmstreamValueError(
            f"cannot import channel {remote!r} as {local!r}: a channel of that name exists "
            f"with a ring of {tx.capacity} bytes, smaller than the source's {capacity}; "
            f"remove it with shmstream.unlink_channel({local!r}) or choose another local prefix"
        )
    if not is_mirror(local, "channel"):
        tx.close()
        raise ShmstreamValueError(
            f"cannot import channel {remote!r} as {local!r}: a channel of that name exists "
            f"here and is not a bridge mirror (it has no status stream "
            f"{local + STATUS_SUFFIX!r}); an import never writes into a local channel: choose "
            "another local prefix"
        )
    return tx
