"""Record a live stream to disk and replay a recording into a stream
(``shmstream record`` / ``shmstream replay``; docs/history.md).

:func:`record` follows a stream with :meth:`SharedMemory.read_since`: on a
stream made with ``history=N`` it gets every frame as long as it stays
within N of the writer, and counts exactly what it misses otherwise; on
any other stream it gets the newest frame each time and counts the rest
as missed. :func:`replay` publishes a recording with its frame ids, counts
and write times, paced as recorded, at a fixed rate, or as fast as
possible, so record -> replay -> record gives the same frames and metadata.

GPU streams are recorded through their CPU mirror (``cpu_mirror=True``);
one without a mirror is refused with ValueError, and so is a replay into a
GPU stream (a GPU write cannot carry recorded counts and times).
"""

from __future__ import annotations

import dataclasses
import errno
import math
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from ..common import _checks, _kinds
from ..errors import (
    NoCpuMirrorError,
    ShmstreamFileNotFoundError,
)
from ..streams import open as _open
from ._replaying import ReplayStats, replay
from ._stopping import CHUNK_S, Stopped, signals_stop
from .files import RecordingWriter

__all__ = ["RecordStats", "ReplayStats", "record", "replay"]

#: Frames are read in chunks of about this many bytes (at most history + 1
#: frames), which the disk thread writes while the next one is read: small
#: enough to stay in a core's cache between the copy and the file write.
_CHUNK_BYTES = 1 << 20
#: Default memory between the reader and the disk: what absorbs a disk
#: that stalls for longer than the stream's history lasts.
DEFAULT_BUFFER_BYTES = 256 << 20


@dataclasses.dataclass
class RecordStats:
    """What :func:`record` did (also passed to its ``progress`` callback)."""

    name: str
    path: str
    frames: int = 0  # frames written to the recording
    missed: int = 0  # publications after the start that are not in it
    seconds: float = 0.0  # since the recording started
    last_count: int = 0  # the stream's count of the last frame considered
    stopped_by: str = ""  # "frames", "seconds", "stop", "signal" or "interrupt"

    @property
    def rate(self) -> float:
        """Frames recorded per second."""
        return self.frames / self.seconds if self.seconds > 0 else 0.0


class _Spool:
    """Frames on their way from the reader (the caller's thread, which must
    keep up with the stream's history) to the disk (a thread of its own,
    which may stall): chunks of frames handed over through a queue, at most
    ``max_chunks`` of them in memory. The heavy parts of both sides (the
    native copy, the file writes) release the GIL, so they overlap."""

    def __init__(
        self,
        writer: RecordingWriter,
        shape: tuple[int, ...],
        dtype: np.dtype,
        chunk_frames: int,
        max_chunks: int,
        sync_interval: float,
    ) -> None:
        self._writer = writer
        self._shape = (chunk_frames, *shape)
        self._dtype = dtype
        self._made, self._max = 0, max(1, max_chunks)
        # last in, first out: while the disk keeps up, the chunk the reader
        # gets is the one just written out, still in the cache
        self._free: queue.LifoQueue[np.ndarray] = queue.LifoQueue()
        self._full: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._interval = sync_interval
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="shmstream-record-disk", daemon=True)
        self._thread.start()

    def chunk(self, timeout: float) -> np.ndarray | None:
        """A chunk to read into; None if all are waiting for the disk."""
        try:
            return self._free.get_nowait()
        except queue.Empty:
            pass
        if self._made < self._max:
            self._made += 1
            return np.empty(self._shape, self._dtype)
        try:
            return self._free.get(timeout=timeout)
        except queue.Empty:
            return None

    def give_back(self, chunk: np.ndarray) -> None:
        self._free.put(chunk)

    def check(self) -> None:
        """Raise what stopped the disk thread (a full disk...), if anything."""
        if self.error is not None:
            raise self.error

    def write(self, chunk: np.ndarray, batch: Any) -> None:
        self.check()
        self._full.put((chunk, batch))

    def _run(self) -> None:
        next_sync = time.monotonic() + self._interval
        while True:
            try:
                wait = None if math.isinf(next_sync) else max(0.0, next_sync - time.monotonic())
                item = self._full.get(timeout=wait)
            except queue.Empty:
                item = ()  # time to sync, even if nothing came
            if item is None:
                return
            try:
                if item and self.error is None:
                    self._writer.append_batch(item[1])
                if time.monotonic() >= next_sync and self.error is None:
                    self._writer.sync()
                    next_sync = time.monotonic() + self._interval
            except BaseException as exc:  # noqa: BLE001 - the reader raises it
                self.error = exc
            finally:
                if item:
                    self._free.put(item[0])
            if self.error is not None:
                next_sync = math.inf  # nothing more is written; keep handing chunks back

    def close(self) -> None:
        """Write everything queued, then stop the disk thread."""
        self._full.put(None)
        self._thread.join()
        if self.error is not None:
            raise self.error


def _open_for_reading(
    name: str, wait: float | None = 0.0, stop: threading.Event | None = None
) -> Any:
    """Open ``name`` read-only, waiting up to ``wait`` seconds (None: for
    ever) for it to be created: a recorder is usually started before the
    camera. The name has no wake-up of its own to wait on, so it is looked
    for every 50 ms at first, then every 250 ms."""
    deadline = None if wait is None else time.monotonic() + wait
    pause = 0.05
    while True:
        try:
            return _open_cpu(name)
        except FileNotFoundError:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                if not wait:
                    raise
                exc = ShmstreamFileNotFoundError(
                    f"stream {name!r} does not exist: record waited {wait:g} s for it to be "
                    f"created; create it with shmstream.create({name!r}, ...), or wait longer"
                )
                exc.errno = errno.ENOENT
                raise exc from None
            nap = pause if left is None else min(pause, left)
            if stop is not None and stop.wait(nap):
                raise
            if stop is None:
                time.sleep(nap)
            pause = min(0.25, pause * 2)


def _open_cpu(name: str) -> Any:
    try:  # a stream, or (no stream of that name) milk's stream "milk:NAME"
        return _kinds.open_reader(name, lambda n: _open(n, readonly=True, gpu_device=False))
    except NoCpuMirrorError:
        raise NoCpuMirrorError(
            f"cannot record GPU stream {name!r}: it has no CPU mirror, and recording reads "
            "frames on the CPU; create it with cpu_mirror=True"
        ) from None


def record(
    name: str,
    path: Any,
    *,
    frames: int | None = None,
    seconds: float | None = None,
    since: int | None = None,
    overwrite: bool = False,
    progress: Callable[[RecordStats], None] | None = None,
    progress_interval: float = 1.0,
    stop: threading.Event | None = None,
    handle_signals: bool = False,
    buffer_bytes: int = DEFAULT_BUFFER_BYTES,
    wait: float | None = 0.0,
) -> RecordStats:
    """Record stream ``name`` into the directory ``path`` (a recording:
    see :mod:`shmstream.recording`): every publication after count
    ``since`` (None: from now; 0: from the oldest its history holds) until
    ``frames`` frames are
    recorded, ``seconds`` have passed, ``stop`` is set, or (with
    ``handle_signals``, main thread only) SIGINT or SIGTERM arrives. The
    file is closed cleanly in every case, a KeyboardInterrupt included
    (re-raised after). ``progress(stats)`` is called about every
    ``progress_interval`` seconds (the files are synced as often). A thread
    writes the files while the caller's thread reads the stream, with up to
    ``buffer_bytes`` of frames between them, so a disk that stalls for
    longer than the history lasts costs no frames until that buffer is
    full. ``wait`` seconds (None: for ever) the recorder waits for a
    stream that does not exist yet to be created (0, the default: it must
    exist). Returns the :class:`RecordStats`."""
    _checks.check_name(name)
    path = _checks.check_path("path", path)
    limit = None if frames is None else _checks.check_int("frames", frames, minimum=1)
    duration = _checks.check_timeout(seconds, "seconds")
    start_count = None if since is None else _checks.check_u64("since", since)
    buffer_bytes = _checks.check_int("buffer_bytes", buffer_bytes, minimum=1)
    wait_s = _checks.check_timeout(wait, "wait")
    overwrite = _checks.check_bool("overwrite", overwrite)
    handle_signals = _checks.check_bool("handle_signals", handle_signals)
    handle = _open_for_reading(name, wait_s, stop)
    try:
        frame_bytes = max(1, handle.size)
        cap = max(1, min(handle.history + 1, _CHUNK_BYTES // frame_bytes))
        description = {
            "name": name,
            "history": handle.history,
            "slots": handle.slots,
            "gpu": handle.gpu_enabled,
            "shmstream_version": _version(),
        }
        writer = RecordingWriter(
            path,
            shape=handle.shape,
            dtype=handle.dtype,
            description=description,
            overwrite=overwrite,
        )
        stats = RecordStats(name, str(path))
        after = stats.last_count = handle.count if start_count is None else start_count
        start = time.monotonic()
        next_report = start + progress_interval
        spool = _Spool(
            writer,
            handle.shape,
            handle.dtype,
            cap,
            buffer_bytes // (cap * frame_bytes),
            progress_interval,
        )
        try:
            with signals_stop(handle_signals):
                while not stats.stopped_by:
                    now = time.monotonic()
                    wait = CHUNK_S
                    if duration is not None:
                        wait = min(wait, max(0.0, start + duration - now))
                    want = cap if limit is None else min(cap, limit - stats.frames)
                    chunk = spool.chunk(wait)  # None: the disk is a buffer behind
                    batch = None
                    if chunk is not None:
                        try:
                            batch = handle.read_since(
                                after, max_frames=want, timeout=wait, out=chunk
                            )
                        except TimeoutError:
                            spool.give_back(chunk)
                    if chunk is not None and batch is not None:
                        spool.write(chunk, batch)
                        after = stats.last_count = batch.last_count
                        stats.frames += len(batch)
                        stats.missed += batch.missed
                    spool.check()
                    now = time.monotonic()
                    stats.seconds = now - start
                    if limit is not None and stats.frames >= limit:
                        stats.stopped_by = "frames"
                    elif duration is not None and now >= start + duration:
                        stats.stopped_by = "seconds"
                    elif stop is not None and stop.is_set():
                        stats.stopped_by = "stop"
                    if now >= next_report:
                        next_report = now + progress_interval
                        if progress is not None:
                            progress(stats)
        except Stopped:
            stats.stopped_by = "signal"
        except KeyboardInterrupt:
            stats.stopped_by = "interrupt"
            raise
        finally:
            stats.seconds = time.monotonic() - start
            try:
                spool.close()
            finally:
                writer.close()
    finally:
        handle.close()
    return stats


def _version() -> str:
    """This shmstream's version, for stream.json (as the package reports it)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("shmstream")
    except PackageNotFoundError:
        return "0+unknown"
