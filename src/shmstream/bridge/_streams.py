"""Streams across the bridge: latest-value semantics at both ends.

Exporter: one thread per stream reads each new publication in place
(``read_new_view``), copies it out and puts it with congestion control DROP
(a slow link loses frames, never stalls the exporter; small frames
"express"), carrying count,
frame_id, write time, the layout digest and the source generation. When the
stream goes quiet, the last frame is sent once more with BLOCK, so a frame
the network dropped at the end of a burst still reaches the mirror. The
latest frame is also served to queries on the data key (an importer fetches
it when it starts).

Publisher (``Bridge.publisher(name)``): a writer in the bridge's own
process writes through it, and the frame is put from the writing thread
right after the write, so no export thread has to wake for it. While one is
open the export thread stops waiting on the stream's futex; every IDLE_S it
exports a frame that another writer made meanwhile, and re-sends the last
frame once when the stream went quiet, as above.

Importer: writes each frame into the mirror with the source's count (plus a
fixed offset when the mirror's count is already past the source's, e.g. after
the source was re-created), frame id and write time, so the mirror's readers
see the network's losses as ``missed_writes``. Duplicates (the re-sent last
frame, the fetched latest frame) are dropped by count; bad samples are
counted in the status stream and dropped.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

import shmstream
from ..errors import HandleClosedError, ShmstreamValueError
from . import _thread, _wire
from ._status import STATUS_SUFFIX, MirrorSide, StatusWriter, is_mirror

log = logging.getLogger("shmstream.bridge")

#: How long the exporter waits for a new frame before it re-sends the last
#: one (once) and checks whether it should stop.
IDLE_S = 0.25
#: Frames up to this size go out "express" (Zenoh sends them at once instead
#: of batching): lower latency for small frames; larger ones gain nothing
#: from it and lose throughput (64 KiB frames: ~4x fewer per second, measured).
EXPRESS_MAX_BYTES = 16 << 10

#: After a frame was overwritten while copied in place, the exporter reads
#: this many frames with a consistent copy before it tries in place again.
RETRY_VIEW_AFTER = 256

#: Importer: a frame whose count is at most this far below the last one
#: mirrored is a re-send or a late frame and is dropped; one further below
#: (or more than MAX_JUMP above) means the counts jumped, and the mirror's
#: count goes on rising by one step of at most MAX_JUMP: no single frame,
#: forged or not, can freeze the mirror or wrap its count.
DUP_WINDOW = 1 << 16
MAX_JUMP = 1 << 32
MAX_MIRROR_COUNT = (1 << 63) - 1


def stream_meta(h: Any) -> dict[str, Any]:
    """What an importer needs to create the mirror before the first frame."""
    cfg = h.to_config()
    meta = {
        "kind": "stream",
        "name": h.name,
        "shape": list(cfg["shape"]),
        "dtype": cfg["dtype"],
        "notify": bool(cfg.get("notify", False)),
        "layout": _wire.layout_id(cfg["shape"], cfg["dtype"]),
        "generation": _wire.generation_id(h.instance_id),
        "producer_alive": h.producer_alive(),
    }
    if "slots" in cfg:
        meta["slots"] = int(cfg["slots"])
    return meta


def _write_time_ns(seconds: float) -> int:
    # seconds may be a NumPy float, whose round() need not give an int.
    return int(round(seconds * 1e9))  # noqa: RUF046


class StreamExport:
    kind = "stream"

    def __init__(
        self,
        session: Any,
        zenoh: Any,
        keys: Any,
        bridge_id: str,
        name: str,
        spin_us: float | None = None,
    ) -> None:
        self.name = name
        self.h = shmstream.open(name, readonly=True)
        try:
            self.h.spin_us = spin_us
            self.meta = stream_meta(self.h)
            self._instance = self.h.instance_id
            self._layout = self.meta["layout"]
            self._generation = self.meta["generation"]
            self._producer_alive = self.meta["producer_alive"]
            self._key = keys.data(name)
            self._stop = threading.Event()
            self._matched = threading.Event()
            self._zenoh = zenoh
            self._session = session
            self._pub = session.declare_publisher(
                self._key,
                congestion_control=zenoh.CongestionControl.DROP,
                express=self.h.size <= EXPRESS_MAX_BYTES,
            )
            self._status_key = keys.status(name)
            self._latest = session.declare_queryable(self._key, self._on_latest_query)
            self._listener = self._pub.declare_matching_listener(self._on_matching)
            if self._pub.matching_status:
                self._matched.set()
            self._live_key = keys.live(bridge_id, "stream", name)
            self._token: Any = None
        except BaseException:
            self.h.close()
            raise
        # Written by the export thread and by every publisher's writing
        # thread: changed only under _lock (a read of one of them alone is
        # one load, and needs no lock).
        self._lock = threading.Lock()
        self.frames_sent = 0
        self._sent_count = 0  # count of the newest frame put (by either path)
        self._unsettled: tuple[bytes, bytes] | None = None  # newest frame, not yet re-sent
        self._publishers = 0
        self._closed = False
        self._thread = _thread.start(self._run, f"export {name}")

    def announce(self) -> None:
        """Declare the liveliness token: importers now find this export."""
        self._token = self._session.liveliness().declare_token(self._live_key)

    # -- zenoh callbacks (zenoh threads) ---------------------------------------

    def _on_matching(self, status: Any) -> None:
        if status.matching:
            self._matched.set()
        else:
            self._matched.clear()

    def _on_latest_query(self, query: Any) -> None:
        try:
            pub = self.h.read_publication()
        except Exception:  # noqa: BLE001 - never written, invalid, closed: no reply
            return
        if pub.count == 0:
            return
        head = _wire.pack_frame_head(
            pub.count, pub.frame_id, _write_time_ns(pub.write_time), self._layout, self._generation
        )
        query.reply(self._key, np.ascontiguousarray(pub.payload).tobytes(), attachment=head)

    # -- the export thread -------------------------------------------------------

    def _send(self, data: bytes, count: int, frame_id: int, write_time: float) -> None:
        """Put one frame (export thread or a publisher's writing thread)."""
        head = _wire.pack_frame_head(
            count, frame_id, _write_time_ns(write_time), self._layout, self._generation
        )
        self._pub.put(data, attachment=head)
        with self._lock:
            self.frames_sent += 1
            if count >= self._sent_count:  # an older frame sent late is not the one to settle
                self._sent_count = count
                self._unsettled = (data, head)

    def _settle(self) -> None:
        """The stream went quiet: send the last frame once more, reliably (a
        frame the network dropped at the end of a burst still arrives)."""
        with self._lock:
            unsettled, self._unsettled = self._unsettled, None
        if unsettled is not None:
            self._session.put(
                self._key,
                unsettled[0],
                attachment=unsettled[1],
                congestion_control=self._zenoh.CongestionControl.BLOCK,
            )

    @staticmethod
    def _copy_latest(h: Any) -> tuple[bytes, Any]:
        """The latest frame of ``h`` and its publication, copied out of the
        slot in place; a copy that a writer lapped is taken again with the
        consistent copy."""
        try:
            with h.read_view() as pub:
                return pub.payload.tobytes(), pub  # the one copy out of shared memory
        except shmstream.FrameOverwrittenError:
            buf = np.empty(h.shape, h.dtype)
            pub = h.read_publication(out=buf)
            return buf.tobytes(), pub

    def _run(self) -> None:
        h = self.h
        buf = np.empty(h.shape, h.dtype)
        lapped = 0  # frames to read with a copy before trying in place again
        while not self._stop.is_set():
            if not self._matched.is_set():
                self._matched.wait(IDLE_S)
                continue
            if self._publishers:
                self._follow_publishers()
                continue
            try:
                if lapped:
                    # The writer laps our in-place copies: a consistent copy
                    # (seqlock, then the lock) cannot livelock behind it.
                    pub = h.read_new_publication(timeout=IDLE_S, out=buf)
                    data = buf.tobytes()
                    lapped -= 1
                else:
                    try:
                        with h.read_new_view(timeout=IDLE_S) as pub:
                            data = pub.payload.tobytes()  # the one copy out of shared memory
                    except shmstream.FrameOverwrittenError:
                        lapped = RETRY_VIEW_AFTER
                        continue
            except TimeoutError:
                lapped = 0
                self._settle()
                continue
            except shmstream.InconsistentStreamError:
                self._stop.wait(0.01)  # no consistent frame until the next write
                continue
            except shmstream.HandleClosedError:  # closed under the read: done
                if h.closed:
                    return
                raise
            self._send(data, pub.count, pub.frame_id, pub.write_time)

    def _follow_publishers(self) -> None:
        """One IDLE_S step while a publisher puts the frames: export a frame
        another writer made (not sent by anyone yet), else settle a quiet
        stream."""
        sent = self._sent_count
        if self._stop.wait(IDLE_S):
            return
        try:
            if self.h.count > self._sent_count:
                data, pub = self._copy_latest(self.h)
                if pub.count > self._sent_count:
                    self._send(data, pub.count, pub.frame_id, pub.write_time)
            elif self._sent_count == sent:
                self._settle()
        except shmstream.InconsistentStreamError:
            pass  # no consistent frame until the next write
        except shmstream.HandleClosedError:
            if not self.h.closed:
                raise

    # -- publishers (the writer's thread) -------------------------------------------

    def publisher(self) -> StreamPublisher:
        return StreamPublisher(self)

    def add_publisher(self) -> None:
        """A publisher now puts the frames (the export thread follows)."""
        with self._lock:
            self._publishers += 1

    def remove_publisher(self) -> None:
        """A publisher stopped: send its last frame once more, reliably, and
        let the export thread carry the stream again once none is left."""
        with self._lock:
            self._publishers -= 1
        if not self._closed:
            self._settle()

    def check_open(self) -> None:
        if self._closed:
            raise HandleClosedError(
                f"the export of {self.name!r} is closed (the bridge closed, or the stream was "
                "made again); get a new publisher from the bridge"
            )

    def publish_written(self, h: Any) -> None:
        """Put the frame that ``h`` (a publisher's handle) has just written
        (the publisher checked ``check_open`` before writing it)."""
        data, pub = self._copy_latest(h)
        self._send(data, pub.count, pub.frame_id, pub.write_time)

    # -- the bridge's periodic check (control thread) ----------------------------

    def source_changed(self) -> bool:
        """True if the name now holds another stream (or nothing)."""
        try:
            info = shmstream.stat(self.name)
        except (FileNotFoundError, ValueError, shmstream.CorruptStreamError):
            return True
        return info.get("kind") != "stream" or info["instance_id"] != self._instance

    def poll(self) -> None:
        alive = self.h.producer_alive()
        if alive != self._producer_alive:
            self._producer_alive = alive
            self.meta["producer_alive"] = alive
            self._session.put(
                self._status_key,
                _wire.dumps({"producer_alive": alive}),
                congestion_control=self._zenoh.CongestionControl.BLOCK,
            )

    def close(self) -> None:
        self._closed = True
        self._stop.set()
        self._matched.set()
        self._thread.join(5)
        for obj in (self._token, self._listener, self._latest, self._pub):
            try:
                if obj is not None:
                    obj.undeclare()
            except Exception:  # noqa: BLE001 - session already closed
                pass
        self.h.close()


class StreamPublisher:
    """Writes a stream that a bridge in this process exports, and puts each
    frame to Zenoh from the writing thread (``Bridge.publisher(name)``).

    ``write(value, frame_id=None)`` is the stream's ``write`` (local readers
    see the frame as always) followed by the put: the frame leaves without
    waking the bridge's export thread. What is put is the stream's latest
    publication, read back consistently, so its count, frame id and write
    time always belong to its bytes (if another process wrote in between,
    that newer frame is the one sent). ``close()`` (or the ``with`` block's
    end) sends the last frame once more with congestion control BLOCK and
    hands the stream back to the export thread."""

    def __init__(self, export: StreamExport) -> None:
        self._export = export
        self.name = export.name
        self.h = shmstream.open(export.name)
        export.add_publisher()
        self._open = True
        self.frames_put = 0  # frames this publisher put

    def write(self, value: Any, *, frame_id: int | None = None) -> None:
        if not self._open:
            raise HandleClosedError(f"write to a closed publisher of {self.name!r}")
        self._export.check_open()  # before the write: nothing half done
        self.h.write(value, frame_id=frame_id)
        self._export.publish_written(self.h)
        self.frames_put += 1

    def close(self) -> None:
        """Stop writing through this publisher. Its last frame is sent once
        more, reliably (a frame the network dropped at the end of a burst
        still arrives), and the export thread carries the stream again."""
        if self._open:
            self._open = False
            self.h.close()
            self._export.remove_publisher()

    def __enter__(self) -> StreamPublisher:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class StreamImport(MirrorSide):
    label = "mirror"
    kind = "stream"

    def __init__(
        self,
        session: Any,
        keys: Any,
        ns: str,
        local: str,
        meta: dict,
        verify: Callable[[], dict | None],
    ) -> None:
        """``meta``: the export's metadata, checked (_wire.check_meta);
        ``verify()``: the metadata as the bound exporter says it now (None if
        it does not answer), asked when frames of another generation come."""
        self.local = local
        self.remote = meta["name"]
        self._layout = meta["layout"]
        self.h = _open_mirror(local, meta, self._layout)
        try:
            self.status = StatusWriter(local, "stream")
        except BaseException:
            self.h.close()
            raise
        self._nbytes = self.h.size
        self._dtype, self._shape = self.h.dtype, self.h.shape
        self._lock = threading.Lock()
        self._verify = verify
        self._unconfirmed: dict[int, int] = {}  # generation -> frames dropped, not yet judged
        self._verifying = False
        self._jumps = 0  # count jumps seen (logged, a few)
        self._old_generations: set[int] = set()  # frames of these are stale, not bad
        self._offset: int | None  # mirror count - source count; None: set by the next frame
        prev = self.status.previous
        if prev is not None and prev["generation"] == meta["generation"]:
            # A restarted importer: continue where the mirror is.
            self._generation = prev["generation"]
            self._offset = prev["count_offset"]
            self._last = max(0, self.h.count - self._offset)
        else:
            self._adopt(meta["generation"])
        self.frames_written = 0
        self._key = keys.data(self.remote, ns)
        self._session = session
        self._subs = [
            session.declare_subscriber(self._key, self._on_sample),
            session.declare_subscriber(keys.status(self.remote, ns), self._on_status),
        ]
        self.source_up(meta)

    def _adopt(self, generation: int) -> None:
        """Follow source generation ``generation`` (from the export's
        metadata only): its counts restart, the mirror's must not (the next
        frame sets the offset)."""
        self._generation, self._offset, self._last = generation, None, 0
        self._unconfirmed.pop(generation, None)
        self.status.set(generation=generation)

    def source_up(self, meta: dict) -> bool:
        """The exporter is (again) there: check it still matches, mark it
        alive and fetch its latest frame. False if it no longer matches."""
        if meta["layout"] != self._layout:
            log.error(
                "export %r now has shape %s dtype %s, which its mirror %r cannot hold; "
                "its frames are dropped (import it under another prefix)",
                self.remote,
                meta["shape"],
                meta["dtype"],
                self.local,
            )
            return False
        with self._lock:
            if meta["generation"] != self._generation:
                self._old_generations.add(self._generation)
                self._adopt(meta["generation"])
        self.status.set(exporter_alive=1, producer_alive=int(meta["producer_alive"]))
        self._session.get(self._key, self._on_reply)
        return True

    def source_down(self) -> None:
        self.status.set(exporter_alive=0)

    # -- zenoh callbacks ------------------------------------------------------------

    def _on_reply(self, reply: Any) -> None:
        sample = reply.ok
        if sample is not None:
            self._on_sample(sample)

    def _on_sample(self, sample: Any) -> None:
        att = sample.attachment
        try:
            count, frame_id, write_time_ns, layout, generation = _wire.unpack_frame_head(
                None if att is None else att.to_bytes()
            )
            if layout != self._layout:
                raise _wire.BadSample("frame of another shape or dtype than its mirror")
            if len(sample.payload) != self._nbytes:
                raise _wire.BadSample(
                    f"frame of {len(sample.payload)} bytes, mirror holds {self._nbytes}"
                )
        except _wire.BadSample as exc:
            self._bad(exc)
            return
        with self._lock:
            h = self.h
            if h.closed:
                return
            if generation != self._generation:
                self._other_generation(generation)
                return
            last = self._last
            if last - DUP_WINDOW < count <= last:
                return  # already mirrored: a re-send, the fetched latest frame, a late one
            current = h.count
            target = count + (self._offset or 0)
            if self._offset is None or not current < target <= current + MAX_JUMP:
                # The generation's first frame, a writer of the mirror beside
                # us, or counts that jumped (forged, or a source we lost for
                # long): the mirror's count rises by one step of at most MAX_JUMP.
                if self._offset is not None and (count < last or target > current + MAX_JUMP):
                    self._jumps += 1
                    if self._jumps <= 10 or self._jumps % 1000 == 0:
                        log.warning(
                            "mirror %r: source count jumped from %d to %d (#%d); the mirror "
                            "counts on from %d",
                            self.local,
                            last,
                            count,
                            self._jumps,
                            current,
                        )
                target = min(max(count, current + 1), current + MAX_JUMP)
                self._offset = target - count
                self.status.set(count_offset=self._offset)
            if target > MAX_MIRROR_COUNT:
                self._bad(f"frame count {count} would take the mirror's count past 2**63")
                return
            if self._nbytes:
                value = np.frombuffer(sample.payload.to_bytes(), self._dtype).reshape(self._shape)
            else:  # a frame of no bytes (e.g. dtype([])): nothing to view
                value = np.empty(self._shape, self._dtype)
            h.write(
                value,
                frame_id=frame_id,
                count=target,
                write_time_ns=write_time_ns or None,
            )
            self._last = count
            self.frames_written += 1

    def _other_generation(self, generation: int) -> None:
        """A frame of a generation the export's metadata did not give (under
        self._lock): stale (an earlier source), a source made again whose
        exporter the control thread has not asked yet, or forged. Ask the
        exporter in a thread of its own (never block Zenoh)."""
        if generation in self._old_generations:
            return
        if generation not in self._unconfirmed and len(self._unconfirmed) >= 8:
            self._bad(f"frame of generation {generation:#x}, not the export's")
            return
        self._unconfirmed[generation] = self._unconfirmed.get(generation, 0) + 1
        if not self._verifying:
            self._verifying = True
            _thread.start(self._check_generations, f"verify {self.local}")

    def _check_generations(self) -> None:
        meta = None
        try:
            meta = self._verify()
        finally:
            with self._lock:
                self._verifying = False
                judged, self._unconfirmed = self._unconfirmed, {}
                confirmed = None  # the generation the exporter confirms
                if (
                    meta is not None
                    and meta["layout"] == self._layout
                    and meta["generation"] in judged
                    and not self.h.closed
                ):
                    confirmed = meta["generation"]
                    self._old_generations.add(self._generation)
                    self._adopt(confirmed)
                    judged.pop(confirmed)
        for generation, n in judged.items():
            self._bad(
                f"frame of generation {generation:#x}, which its exporter does not confirm", n
            )
        if confirmed is not None:
            self._session.get(self._key, self._on_reply)  # its latest frame

    def close(self, unlink: bool = False) -> None:
        for sub in self._subs:
            try:
                sub.undeclare()
            except Exception:  # noqa: BLE001
                pass
        with self._lock:
            if unlink:
                shmstream.unlink(self.local)
            self.h.close()
        self.status.close(unlink)


def _open_mirror(local: str, meta: dict, layout: int) -> Any:
    """Create the mirror from the export's description, or open the existing
    stream of that name if it has the same shape and dtype."""
    config = {
        "name": local,
        "shape": meta["shape"],
        "dtype": meta["dtype"],
        "notify": meta["notify"],
    }
    if "slots" in meta:
        config["slots"] = meta["slots"]
    try:
        return shmstream.SharedMemory.create_from_config(config)
    except FileExistsError:
        pass
    try:
        h = shmstream.open(local)
    except ValueError:
        raise ShmstreamValueError(
            f"cannot import {meta['name']!r} as {local!r}: that name is a channel or shared "
            "array here; choose another local prefix"
        ) from None
    cfg = h.to_config()
    if _wire.layout_id(cfg["shape"], cfg["dtype"]) != layout:
        h.close()
        raise ShmstreamValueError(
            f"cannot import {meta['name']!r} as {local!r}: a stream of that name exists with "
            f"shape {tuple(cfg['shape'])} dtype {cfg['dtype']}, the export has shape "
            f"{tuple(meta['shape'])} dtype {meta['dtype']}; remove it with "
            f"shmstream.unlink({local!r}) or choose another local prefix"
        )
    if not is_mirror(local, "stream"):
        h.close()
        raise ShmstreamValueError(
            f"cannot import {meta['name']!r} as {local!r}: a stream of that name exists here "
            f"and is not a bridge mirror (it has no status stream {local + STATUS_SUFFIX!r}); "
            "an import never writes into a local stream: choose another local prefix"
        )
    return h
