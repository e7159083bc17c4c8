"""``multiprocessing.shared_memory`` without its resource tracker, for the
hand-written baselines (the stream benchmark's seqlock peer and control
words, the arrays benchmark's stdlib peer): the tracker would unlink
segments other processes still use and print leak warnings."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def no_resource_tracker() -> Iterator[None]:
    """Keep ``multiprocessing.resource_tracker`` out of the segments made or
    opened inside. (Python 3.13 has ``track=False``; this works on every
    version.)"""
    from multiprocessing import resource_tracker

    saved = resource_tracker.register, resource_tracker.unregister
    resource_tracker.register = lambda *a, **k: None  # type: ignore[assignment]
    resource_tracker.unregister = lambda *a, **k: None  # type: ignore[assignment]
    try:
        yield
    finally:
        resource_tracker.register, resource_tracker.unregister = saved


def raw_shm(name: str, size: int = 0, create: bool = False) -> Any:
    """Create (``create=True``, ``size`` bytes) or open the segment ``name``."""
    from multiprocessing import shared_memory

    with no_resource_tracker():
        return shared_memory.SharedMemory(name=name, create=create, size=size)


def raw_unlink(name: str) -> None:
    """Remove the segment ``name`` if it exists."""
    from multiprocessing import shared_memory

    with no_resource_tracker():
        try:
            seg = shared_memory.SharedMemory(name=name)
        except FileNotFoundError:
            return
        seg.close()
        seg.unlink()
