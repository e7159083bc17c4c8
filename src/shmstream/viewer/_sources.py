"""What a picture is made from: a live stream (read through the public,
lock-free read path: zero-copy views, history reads) or a recording
directory. Each source's :meth:`picture` returns the next message for the
page, or None when there is nothing new; it never raises for what the
user pointed it at (a missing, removed, corrupt or undrawable stream is a
``kind: "message"`` the page shows) and it is called from one worker
thread at a time.
"""

from __future__ import annotations

import collections
import time
from typing import Any

import numpy as np

from .. import registry
from ..common import _kinds
from ..errors import (
    CorruptStreamError,
    FrameOverwrittenError,
    InconsistentStreamError,
    ShmstreamError,
)
from ..recording.files import Recording
from ..streams import open as open_stream
from ._render import Settings, render, select, why_not_drawn

#: Seconds between attempts to open a stream that is missing or corrupt,
#: and between checks that an open one still exists under its name.
RECHECK_S = 1.0
#: Tries of a zero-copy read that a fast writer lapped, before this frame is skipped.
VIEW_TRIES = 3

Message = tuple[dict[str, Any], bytes]


def message(text: str, **extra: Any) -> Message:
    return {"kind": "message", "text": text, **extra}, b""


class RateMeter:
    """Publications a second over the last second or so, from the count."""

    def __init__(self) -> None:
        self._samples: collections.deque[tuple[float, int]] = collections.deque()

    def update(self, count: int) -> float:
        now = time.monotonic()
        samples = self._samples
        samples.append((now, count))
        while len(samples) > 2 and now - samples[1][0] >= 1.0:
            samples.popleft()
        (t0, c0), (t1, c1) = samples[0], samples[-1]
        return (c1 - c0) / (t1 - t0) if t1 > t0 else 0.0


class LiveStream:
    """The newest frame of the stream ``name``, or one of its kept frames
    (``seek``, a count) on a stream with history."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._handle: Any = None
        self._why: Message | None = None  # why there is no picture now
        self._next_check = 0.0
        self._sent: Any = None  # (count, seek) last drawn, or the text of the last message
        self._rate = RateMeter()

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None

    def _attach(self) -> None:
        """Open the stream if it is not (retried every RECHECK_S), or see that
        the open one was removed; ``self._why`` says why there is no picture."""
        now = time.monotonic()
        if now < self._next_check:
            return
        self._next_check = now + RECHECK_S
        if self._handle is not None:
            # the same stream still under its name: not removed, nor replaced by
            # a new one of the same name (which the next check opens)
            try:
                same = registry.stat(self.name).get("instance_id") == self._handle.instance_id
            except CorruptStreamError as exc:
                self.close()
                self._why = message(f"{self.name!r} became corrupt: {exc}", state="corrupt")
                return
            except (ShmstreamError, OSError):
                same = False
            if not same:
                self.close()
                self._why = message(
                    f"stream {self.name!r} was removed or replaced; waiting "
                    "for it to be created again",
                    state="removed",
                )
            return
        self._why = self._open()

    def _open(self) -> Message | None:
        try:
            info = registry.stat(self.name)
            outside = _kinds.entry_of(info["kind"])  # milk's streams open through their kind
            if outside is not None and outside.open_reader is not None:
                self._handle = outside.open_reader(self.name)
            elif info["kind"] not in ("stream", "gpu-stream"):
                return message(
                    f"{self.name!r} is a {info['kind']}: only streams have a "
                    "picture; the table shows its counters",
                    state="no-picture",
                )
            elif not info.get("cpu_mirror", True):
                return message(
                    f"{self.name!r} is a GPU stream without a CPU mirror: its "
                    "frames live on the GPU only (create it with cpu_mirror=True "
                    "to see them here)",
                    state="no-picture",
                )
            else:
                self._handle = open_stream(self.name, readonly=True)
        except FileNotFoundError:
            return message(
                f"no stream named {self.name!r}; waiting for it to be created (shmstream.create)",
                state="missing",
            )
        except CorruptStreamError as exc:
            return message(f"{self.name!r} is corrupt: {exc}", state="corrupt")
        except (ShmstreamError, OSError) as exc:
            return message(f"cannot open {self.name!r}: {exc}", state="error")
        why = why_not_drawn(tuple(self._handle.shape), self._handle.dtype)
        return None if why is None else message(why, state="no-picture", **self._about())

    def _about(self) -> dict[str, Any]:
        h = self._handle
        return {
            "name": self.name,
            "shape": list(h.shape),
            "dtype": str(h.dtype),
            "history": int(getattr(h, "history", 0)),
        }

    def picture(self, settings: Settings, seek: int | None, force: bool) -> Message | None:
        """The next message for the page: a picture of the newest frame (or
        of kept frame ``seek``), a message saying why there is none, or None
        when nothing changed since the last one (``force``: send anyway)."""
        self._attach()
        if self._why is not None:
            if force or self._sent != self._why[0]["text"]:
                self._sent = self._why[0]["text"]
                return self._why
            return None
        h = self._handle
        try:
            count = h.count
            rate = self._rate.update(count)
            if not force and self._sent == (count, seek):
                return None
            if seek is not None and seek < count:
                part, info, meta = self._kept(seek, settings)
            else:
                part, info, meta = self._newest(settings)
            if part is None:
                return None
            header, payload = render(part, settings)
        except CorruptStreamError as exc:
            self.close()
            self._why = message(f"{self.name!r} became corrupt: {exc}", state="corrupt")
            return self._why
        except (InconsistentStreamError, TimeoutError):  # an aborted write, a write in progress
            return None
        self._sent = (count, seek)
        header.update(self._about(), **info, **meta, rate=rate, newest=count)
        return header, payload

    def _newest(self, settings: Settings) -> tuple[Any, dict[str, Any], dict[str, Any]]:
        for _ in range(VIEW_TRIES):
            try:
                with self._handle.read_view() as pub:
                    part, info = select(pub.payload, settings)
                return (
                    part,
                    info,
                    {"count": pub.count, "frame_id": pub.frame_id, "write_time": pub.write_time},
                )
            except FrameOverwrittenError:
                continue  # a writer lapped this view: take the newer one
        return None, {}, {}

    def _kept(self, seek: int, settings: Settings) -> tuple[Any, dict[str, Any], dict[str, Any]]:
        """The kept frame of count ``seek`` (or the oldest kept after it)."""
        batch = self._handle.read_since(max(seek - 1, 0), max_frames=1, timeout=0)
        if not len(batch):
            return None, {}, {}
        part, info = select(batch.frames[0], settings)
        return (
            part,
            info,
            {
                "count": int(batch.counts[0]),
                "frame_id": int(batch.frame_ids[0]),
                "write_time": int(batch.write_times_ns[0]) / 1e9,
                "seek": seek,
            },
        )


class RecordingSource:
    """A recording played back to one page: frame ``index`` of it, advancing
    at the recorded pace while ``playing``. The :class:`Recording` is the
    viewer's, loaded once and shared by every page (it is read only)."""

    def __init__(self, recording: Recording) -> None:
        self.recording = recording
        self.path = str(recording.path)
        self._sent: int | None = None
        self._index = 0
        self._played_from: tuple[float, int] | None = None  # (monotonic, index) at play
        rec = self.recording
        self._why = why_not_drawn(rec.shape, rec.dtype)
        self._state = "no-picture"

    def close(self) -> None:
        pass

    def _position(self, index: int | None, playing: bool) -> int:
        n = len(self.recording)
        if index is not None:
            self._index = min(max(index, 0), max(n - 1, 0))
            self._played_from = None
        if playing and n:
            if self._played_from is None:
                self._played_from = (time.monotonic(), self._index)
            t0, i0 = self._played_from
            times = self.recording.write_times_ns
            target = int(times[i0]) + int((time.monotonic() - t0) * 1e9)
            i = int(np.searchsorted(times, target, side="right")) - 1
            if i >= n - 1:  # the end: start over
                self._played_from = (time.monotonic(), 0)
                i = n - 1
            self._index = max(i, i0)
        else:
            self._played_from = None
        return self._index

    def picture(
        self, settings: Settings, index: int | None, playing: bool, force: bool
    ) -> Message | None:
        rec = self.recording
        about = {
            "name": rec.name,
            "recording": self.path,
            "shape": list(rec.shape),
            "dtype": str(rec.dtype),
            "frames": len(rec),
        }
        if self._why is not None or not len(rec):
            return (
                message(
                    self._why or f"recording {self.path!r} holds no frame",
                    state=self._state,
                    **about,
                )
                if force
                else None
            )
        i = self._position(index, playing)
        if not force and self._sent == i:
            return None
        part, info = select(rec.frames[i], settings)
        try:
            rec.check()  # frames.npy cut under the copy: what select read is zeros
        except CorruptStreamError as exc:
            self._why, self._state = str(exc), "corrupt"  # for good: the file is cut
            return message(self._why, state=self._state, **about)
        header, payload = render(part, settings)
        self._sent = i
        header.update(
            about,
            **info,
            index=i,
            count=int(rec.counts[i]),
            frame_id=int(rec.frame_ids[i]),
            write_time=int(rec.write_times_ns[i]) / 1e9,
            playing=playing,
        )
        return header, payload
