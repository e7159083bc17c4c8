"""Channels across the bridge, the importing side (the protocol, both sides:
_channel_protocol.py).

Importer: the bridge is the mirror channel's producer. A Zenoh callback only
queues batches (it never blocks Zenoh); a worker thread sends each record
into the mirror (waiting while the mirror ring is full or its consumer is
away), records the delivered position in the status stream, and acknowledges
it. It sends the acknowledgement again every ``HEARTBEAT_S`` so that a
restarted exporter finds it. When the source producer closes (or dies), the
importer closes the mirror's producer end after the last message: the far
consumer gets ``ChannelClosedError``, as it would locally.
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
from ._channel_protocol import IDLE_S, RESEND_EVERY_S
from ._session import undeclare_all
from ._status import STATUS_SUFFIX, MirrorSide, StatusWriter, is_mirror

log = logging.getLogger("shmstream.bridge")

HEARTBEAT_S = 0.5
TX_BATCH = 64  # importer: publish the mirror's head every 64 messages and after each batch
#: importer: what one queued sample costs beyond its bytes (so a flood of
#: empty samples is bounded too)
QUEUE_ITEM_COST = 256
#: importer: a gap in the positions is waited out this long (asking the
#: exporter to send again) before it is counted as lost
RESYNC_S = 2.0


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
        undeclare_all((*self._subs, self._token, self._ack_pub))
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
