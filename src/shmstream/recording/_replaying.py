"""Replay: a recording published into a live stream at its recorded pace
(or another), frame by frame (``shmstream replay``; docs/history.md)."""

from __future__ import annotations

import dataclasses
import math
import numbers
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from ..common import _checks
from ..errors import (
    NoCpuMirrorError,
    ShmstreamTypeError,
    ShmstreamValueError,
)
from ..streams import create as _create
from ..streams import open as _open
from ._stopping import CHUNK_S, Stopped, signals_stop
from .files import Recording, load_recording

__all__ = ["ReplayStats", "replay"]


@dataclasses.dataclass
class ReplayStats:
    """What :func:`replay` did."""

    name: str
    path: str
    frames: int = 0  # frames published
    seconds: float = 0.0
    created: bool = False  # the stream was created by the replay (it stays)
    stopped_by: str = ""  # "end", "stop", "signal" or "interrupt"

    @property
    def rate(self) -> float:
        return self.frames / self.seconds if self.seconds > 0 else 0.0


def replay(
    path: Any,
    name: str,
    *,
    rate: float | None = None,
    renumber: bool = False,
    restamp: bool = False,
    history: int | None = None,
    stop: threading.Event | None = None,
    progress: Callable[[ReplayStats], None] | None = None,
    progress_interval: float = 1.0,
    handle_signals: bool = False,
) -> ReplayStats:
    """Publish the recording at ``path`` into stream ``name``, with each
    frame's frame id, count and write time.

    Pacing: ``rate=None`` as recorded (the write times' spacing), a number
    of frames per second, or ``math.inf`` as fast as possible. A missing
    stream is created with the recording's shape, dtype and history (or
    ``history``) and left in place afterwards (``stats.created``). An
    existing one must have the same shape and dtype and a count below the
    first recorded one; ``renumber=True`` publishes with the stream's own
    counts instead (frame ids and times kept). ``restamp=True`` stamps the
    publication time instead of the recorded one. Stops early on ``stop``
    or (``handle_signals``) SIGINT/SIGTERM, also in the middle of a long
    pause between two recorded frames. A frames.npy truncated while it
    is replayed is a :class:`CorruptStreamError` (nothing of the cut part
    is published)."""
    _checks.check_name(name)
    path = _checks.check_path("path", path)
    pace = _check_rate(rate)  # the arguments before the files
    renumber, restamp = (
        _checks.check_bool("renumber", renumber),
        _checks.check_bool("restamp", restamp),
    )
    handle_signals = _checks.check_bool("handle_signals", handle_signals)
    rec = load_recording(path)
    handle, created = _target(rec, name, history)
    stats = ReplayStats(name, str(path), created=created)
    try:
        _check_counts(rec, handle, renumber)
        times = rec.write_times_ns
        frame = np.empty(rec.shape, rec.dtype)  # each frame copied and checked, then written
        start = time.perf_counter()
        next_report = time.monotonic() + progress_interval
        try:
            with signals_stop(handle_signals):
                for i in range(len(rec)):
                    due = _due(pace, i, times)
                    if not _wait_until(start, due, stop):
                        stats.stopped_by = "stop"
                        break
                    rec.frame(i, out=frame)  # CorruptStreamError if frames.npy was cut
                    handle.write(
                        frame,
                        frame_id=int(rec.frame_ids[i]),
                        count=None if renumber else int(rec.counts[i]),
                        write_time_ns=None if restamp else int(times[i]) or None,
                    )
                    stats.frames += 1
                    if progress is not None and time.monotonic() >= next_report:
                        stats.seconds = time.perf_counter() - start
                        progress(stats)
                        next_report = time.monotonic() + progress_interval
                else:
                    stats.stopped_by = "end"
        except Stopped:
            stats.stopped_by = "signal"
        except KeyboardInterrupt:
            stats.stopped_by = "interrupt"
            raise
        finally:
            stats.seconds = time.perf_counter() - start
    finally:
        handle.close()
    return stats


def _check_rate(rate: Any) -> float | None:
    if rate is None:
        return None
    rule = "rate must be > 0 frames per second (math.inf: as fast as possible, None: as recorded)"
    if isinstance(rate, (bool, np.bool_)) or not isinstance(rate, numbers.Real):
        raise ShmstreamTypeError(f"{rule}, not {type(rate).__name__} {rate!r}")
    if not float(rate) > 0:  # NaN too
        raise ShmstreamValueError(f"{rule}, got {rate!r}")
    return float(rate)


def _wait_until(start: float, due: float | None, stop: threading.Event | None) -> bool:
    """Sleep until ``start + due`` (perf_counter seconds; None: not at all)
    in steps of at most CHUNK_S, so that ``stop`` (and a signal's handler)
    is seen within a step however far the recorded times jump. False if
    ``stop`` was set."""
    while True:
        if stop is not None and stop.is_set():
            return False
        delay = 0.0 if due is None else start + due - time.perf_counter()
        if delay <= 0:
            return True
        step = min(delay, CHUNK_S)
        if stop is not None:
            stop.wait(step)
        else:
            time.sleep(step)


def _due(pace: float | None, i: int, times: np.ndarray) -> float | None:
    """Seconds after the start at which frame i is due (None: at once)."""
    if pace is None:
        return (int(times[i]) - int(times[0])) / 1e9 if len(times) else None
    return None if math.isinf(pace) else i / pace


def _target(rec: Recording, name: str, history: int | None) -> tuple[Any, bool]:
    """The stream to replay into: opened (checked to match) or created."""
    try:
        handle = _open(name, gpu_device=False)
    except FileNotFoundError:
        # stream.json's history is someone else's word: a stream made for
        # the replay keeps no more frames than the recording holds
        depth = min(rec.history, len(rec)) if history is None else history
        return _create(name, shape=rec.shape, dtype=rec.dtype, history=depth), True
    except NoCpuMirrorError:
        handle = None
    if handle is None or handle.gpu_enabled:
        if handle is not None:
            handle.close()
        raise ShmstreamValueError(
            f"cannot replay into GPU stream {name!r}: a GPU write cannot carry the recorded "
            "counts and write times; replay into a CPU stream"
        )
    if handle.shape != rec.shape or handle.dtype != rec.dtype:
        handle.close()
        raise ShmstreamValueError(
            f"recording {str(rec.path)!r} holds {rec.dtype} frames of shape {rec.shape}, but "
            f"stream {name!r} holds {handle.dtype} frames of shape {handle.shape}; replay into "
            "a stream of the same shape and dtype, or a new name"
        )
    return handle, False


def _check_counts(rec: Recording, handle: Any, renumber: bool) -> None:
    if renumber or not len(rec):
        return
    first, now = int(rec.counts[0]), handle.count
    if now >= first:
        raise ShmstreamValueError(
            f"stream {handle.name!r} is at count {now}, not below the recording's first count "
            f"{first}: the recorded counts cannot be published (a stream's counts only grow); "
            "replay into a new stream, or renumber (renumber=True, --renumber) to publish "
            "with the stream's own counts"
        )
