"""``locked_many``: several streams' locks at once, in an order that cannot
deadlock."""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Sequence
from typing import Any

from ..common import _checks
from ..errors import ShmstreamValueError
from ._checks import check_lockables, check_positive_seconds
from ._waiting import remaining
from .shared_memory import SharedMemory

__all__ = ["locked_many"]


class _LockedMany:
    """Returned by :func:`locked_many`."""

    __slots__ = ("_streams", "_timeout", "_poll_interval", "_exit")

    def __init__(self, streams: Sequence[Any], timeout: float | None, poll_interval: float) -> None:
        self._streams = streams
        self._timeout = timeout
        self._poll_interval = poll_interval
        self._exit: Any = None

    def __enter__(self) -> tuple[Any, ...]:
        from contextlib import ExitStack

        handles = check_lockables(self._streams)
        ordered = sorted(handles, key=_handle_name)
        for previous, current in itertools.pairwise(ordered):
            if previous.name == current.name:
                raise ShmstreamValueError("locked_many() requires unique stream names")
        timeout = self._timeout
        timeout = _checks.check_timeout(timeout)
        poll_interval = check_positive_seconds("poll_interval", self._poll_interval)
        if not math.isfinite(poll_interval):
            raise ShmstreamValueError("poll_interval must be positive")
        deadline = None if timeout is None or math.isinf(timeout) else time.monotonic() + timeout
        if all(type(handle) is SharedMemory for handle in ordered):
            acquired: list[SharedMemory] = []
            self._exit = acquired
            try:
                for handle in ordered:
                    handle.acquire(timeout=remaining(deadline), poll_interval=poll_interval)
                    acquired.append(handle)
            except BaseException:
                _release_in_reverse(acquired)
                raise
            return handles
        with ExitStack() as stack:
            for handle in ordered:
                stack.enter_context(
                    handle.locked(timeout=remaining(deadline), poll_interval=poll_interval)
                )
            self._exit = stack.pop_all()
        return handles

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> Any:
        if isinstance(self._exit, list):
            _release_in_reverse(self._exit)
            return None
        return self._exit.__exit__(exc_type, exc, tb)


def _handle_name(handle: Any) -> str:
    return str(handle.name)


def _release_in_reverse(handles: list[SharedMemory]) -> None:
    while handles:
        handle = handles.pop()
        try:
            handle.release()
        except BaseException:
            _release_in_reverse(handles)
            raise


def locked_many(
    streams: Sequence[Any], *, timeout: float | None = None, poll_interval: float = 1e-3
) -> _LockedMany:
    """``with locked_many([a, b]) as (a, b):`` holds every stream's lock.

    Locks are taken in name order (so two callers cannot deadlock) under one
    deadline, and released in reverse; the handles come back in the caller's
    order. A repeated name is a ValueError. Any object with ``name`` and
    ``locked(timeout=, poll_interval=)`` works."""
    return _LockedMany(streams, timeout, poll_interval)
