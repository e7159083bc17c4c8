"""Waiting for new publications: ``read_new``, ``read_after``,
``wait_for_count`` and their publication and asyncio forms. A mixin of
:class:`shmstream.SharedMemory`; the wait itself is the core's (spin, then
futex; docs/ABI.md, "Wait"), in chunks the binding bounds so that Ctrl-C is
honoured.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import TYPE_CHECKING, Any

import numpy as np

from ..common import _checks
from ..common._checks import spin_ns
from ._checks import check_after
from .publication import Publication

# How often read_new_async's worker thread looks up from the native wait to
# see whether its task was cancelled.
_ASYNC_CHUNK_S = 0.25

# Hot-path globals bound once.
_empty = np.empty


def remaining(deadline: float | None) -> float | None:
    """Seconds left until a time.monotonic() deadline (0 at the latest); None: no deadline."""
    return None if deadline is None else max(0.0, deadline - time.monotonic())


if TYPE_CHECKING:
    from .. import _native
    from ._handle import HandleState as _Handle
else:
    _Handle = object  # the protocol is for mypy only


class Waiting(_Handle):
    """Blocking read methods of a stream handle."""

    __slots__ = ()

    def _fail_if_invalid(self, seg: _native.Segment) -> None:
        """Before a wait: raise InconsistentStreamError at once if the
        published frame is aborted, or its writer died mid-write (a wait
        for the count would otherwise sit out its whole timeout)."""
        if seg.state or seg.write_in_flight:
            # A trylock in the core takes a dead writer's lock over (which
            # repairs the stream) and raises; a live writer keeps it.
            seg.check_writer()

    def _wait_read(
        self,
        after: int,
        timeout: float | None,
        out: Any,
        spin_us: float | None,
        operation: str,
    ) -> tuple[np.ndarray, int, int, int]:
        seg = self._seg
        if seg is None:
            raise self._closed_error(operation)
        self._fail_if_invalid(seg)
        dst = _empty(self.shape, self.dtype) if out is None else self._check_out(out)
        spin = self._spin if spin_us is None else spin_ns(spin_us)
        count, frame_id, wt = seg.read_new(dst, after, timeout, spin)
        return dst, count, frame_id, wt

    def read_new(
        self,
        *,
        timeout: float | None = None,
        safe: bool = True,
        poll_interval: float = 1e-5,
        out: np.ndarray | None = None,
        spin_us: float | None = None,
    ) -> Any:
        """Block until there is a publication newer than the last one this
        handle saw (its last read, its own last write, or the count at open),
        then return it like :meth:`read`. A write that landed before the call
        is not missed. TimeoutError after ``timeout`` seconds; RuntimeError
        if the handle is closed meanwhile. ``spin_us`` overrides how long to
        spin before sleeping."""
        seg = self._seg
        if seg is None or safe is not True:
            return self._read_new_slow(timeout, safe, out, spin_us)
        if out is None:
            out = _empty(self.shape, self.dtype)
        last = self._last_read
        wrote = self._wrote
        # One native call checks out and spin_us and waits; None back (not
        # the stream's kind of array, a spin_us to check, a failed last
        # write) takes the checked path, which raises what is wrong.
        count = seg.get_new(out, last if last > wrote else wrote, timeout, spin_us, self._spin)
        if count is None:
            return self._read_new_slow(timeout, safe, out, spin_us)
        self._record(count)
        return out

    def _read_new_slow(
        self, timeout: float | None, safe: bool, out: Any, spin_us: float | None
    ) -> Any:
        return self._read_above(self._seen, timeout, safe, out, spin_us, False)

    def _read_above(
        self,
        after: int,
        timeout: float | None,
        safe: bool,
        out: Any,
        spin_us: float | None,
        publication: bool,
    ) -> Any:
        """The checked body of read_new / read_after and their publication
        forms: wait for a count above ``after``, read, book the read."""
        if not _checks.check_bool("safe", safe):
            self.wait_for_count(after=after, timeout=timeout, spin_us=spin_us)
            if publication:
                return self.read_publication(safe=False)
            return self.read(safe=False, out=out)
        operation = "read a publication from" if publication else "read from"
        dst, count, frame_id, wt = self._wait_read(after, timeout, out, spin_us, operation)
        missed = self._record(count)
        if publication:
            return Publication(dst, count, frame_id, wt / 1e9, missed)
        return dst

    def read_new_publication(
        self,
        *,
        timeout: float | None = None,
        safe: bool = True,
        poll_interval: float = 1e-5,
        out: np.ndarray | None = None,
        spin_us: float | None = None,
    ) -> Publication:
        """:meth:`read_new` returning a :class:`Publication`."""
        if not _checks.check_bool("safe", safe):
            self._check_open("read a publication from")
        return self._read_above(self._seen, timeout, safe, out, spin_us, True)

    def read_after(
        self,
        after: int,
        *,
        timeout: float | None = None,
        safe: bool = True,
        poll_interval: float = 1e-5,
        out: np.ndarray | None = None,
        spin_us: float | None = None,
    ) -> Any:
        """Wait until the count is above ``after``, then return the payload
        like :meth:`read` (level-triggered; updates ``last_read_count``)."""
        self._check_open("read from")
        baseline = check_after(after)
        return self._read_above(baseline, timeout, safe, out, spin_us, False)

    def read_after_publication(
        self,
        after: int,
        *,
        timeout: float | None = None,
        safe: bool = True,
        poll_interval: float = 1e-5,
        out: np.ndarray | None = None,
        spin_us: float | None = None,
    ) -> Publication:
        """:meth:`read_after` returning a :class:`Publication`."""
        self._check_open("read a publication from")
        baseline = check_after(after)
        return self._read_above(baseline, timeout, safe, out, spin_us, True)

    def wait_for_count(
        self,
        *,
        after: int,
        timeout: float | None = None,
        poll_interval: float = 1e-5,
        spin_us: float | None = None,
    ) -> int:
        """Return the count once it is above ``after`` (level-triggered: a
        write before the call counts). TimeoutError after ``timeout``."""
        seg = self._check_open("wait for a write on")
        baseline = check_after(after)
        _checks.check_timeout(timeout)
        self._fail_if_invalid(seg)
        spin = self._spin if spin_us is None else spin_ns(spin_us)
        return int(seg.wait_count(baseline, timeout, spin))

    async def read_new_async(
        self,
        *,
        timeout: float | None = None,
        safe: bool = True,
        poll_interval: float = 1e-5,
        out: np.ndarray | None = None,
        spin_us: float | None = None,
    ) -> Any:
        """:meth:`read_new` for asyncio: the wait runs in the loop's default
        executor, so the event loop keeps running. Cancelling the task stops
        the worker within a fraction of a second; ``close()`` wakes it."""
        seg = self._seg
        if seg is None:
            raise self._closed_error("read from")
        if not _checks.check_bool("safe", safe):
            await self._wait_async(seg, self._seen, timeout, None, spin_us)
            return self.read(safe=False, out=out)
        self._fail_if_invalid(seg)
        dst = _empty(self.shape, self.dtype) if out is None else self._check_out(out)
        count = await self._wait_async(seg, self._seen, timeout, dst, spin_us)
        self._record(count)
        return dst

    async def _wait_async(
        self,
        seg: _native.Segment,
        after: int,
        timeout: float | None,
        dst: np.ndarray | None,
        spin_us: float | None,
    ) -> int:
        spin = self._spin if spin_us is None else spin_ns(spin_us)
        timeout = _checks.check_timeout(timeout)
        stop = threading.Event()
        loop = asyncio.get_running_loop()
        future = loop.run_in_executor(None, _blocking_wait, seg, dst, after, timeout, spin, stop)
        try:
            return await future
        except asyncio.CancelledError:
            stop.set()
            raise


def _blocking_wait(
    seg: _native.Segment,
    dst: np.ndarray | None,
    after: int,
    timeout: float | None,
    spin: int,
    stop: threading.Event,
) -> int:
    """read_new_async's worker: the native wait in chunks, so a cancelled
    task frees its executor thread soon."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        left = remaining(deadline)
        chunk = _ASYNC_CHUNK_S if left is None else min(left, _ASYNC_CHUNK_S)
        try:
            if dst is None:
                return int(seg.wait_count(after, chunk, spin))
            return int(seg.read_new(dst, after, chunk, spin)[0])
        except TimeoutError:
            if stop.is_set() or (deadline is not None and time.monotonic() >= deadline):
                raise
        spin = 0  # spin only before the first sleep
