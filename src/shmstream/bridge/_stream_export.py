"""Streams across the bridge, the exporting side: latest-value semantics.

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
frame once when the stream went quiet, as above. It lives here, beside the
export, because the two share the export's lock and its last frame sent.

The importing side, which runs on the other host, is _stream_import.py.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

import shmstream
from ..common import _kinds
from ..errors import HandleClosedError
from . import _thread, _wire
from ._export import Export
from ._session import undeclare_all

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


def stream_meta(h: Any, name: str) -> dict[str, Any]:
    """What an importer needs to create the mirror of ``name`` (the export's
    name: "milk:NAME" for milk's stream NAME) before the first frame."""
    cfg = h.to_config()
    meta = {
        "kind": "stream",
        "name": name,
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


class StreamExport(Export):
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
        # a stream, or (no stream of that name) milk's stream "milk:NAME"
        self.h = _kinds.open_reader(name, lambda n: shmstream.open(n, readonly=True))
        self.source_kind = getattr(self.h, "kind", "stream")  # "milk" for milk's streams
        try:
            self.h.spin_us = spin_us
            self.meta = stream_meta(self.h, name)
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
            self._token = None
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

    def poll(self) -> None:
        alive = self.h.producer_alive()
        if alive != self._producer_alive:
            self._producer_alive = alive
            self.meta["producer_alive"] = alive
            self._put_producer_alive(alive)

    def close(self) -> None:
        self._closed = True
        self._stop.set()
        self._matched.set()
        self._thread.join(5)
        undeclare_all((self._token, self._listener, self._latest, self._pub))
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
