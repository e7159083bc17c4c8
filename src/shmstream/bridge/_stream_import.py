"""Streams across the bridge, the importing side: the mirror.

Importer: writes each frame into the mirror with the source's count (plus a
fixed offset when the mirror's count is already past the source's, e.g. after
the source was re-created), frame id and write time, so the mirror's readers
see the network's losses as ``missed_writes``. Duplicates (the re-sent last
frame, the fetched latest frame) are dropped by count; bad samples are
counted in the status stream and dropped.

How a frame's count maps to the mirror's is _count_window.py.

Separate from _stream_export.py: the two sides run on different hosts and
share only the wire format (_wire.py) and the metadata (``stream_meta``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

import shmstream
from ..errors import ShmstreamValueError
from . import _thread, _wire
from ._count_window import MAX_MIRROR_COUNT, mirror_count
from ._session import undeclare_all
from ._status import STATUS_SUFFIX, MirrorSide, StatusWriter, is_mirror

log = logging.getLogger("shmstream.bridge")


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
            last, current = self._last, h.count
            target, offset, jumped = mirror_count(count, last, current, self._offset)
            if target is None:
                return  # already mirrored
            if jumped:
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
            if offset is not None and offset != self._offset:
                self._offset = offset
                self.status.set(count_offset=offset)
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
        undeclare_all(self._subs)
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
