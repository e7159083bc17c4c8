"""Streams: one latest-value array under a name (``shmstream.create`` /
``shmstream.open``), its handle and the jobs the handle hands out (reading,
waiting, history, locking, status)."""

from . import _registry  # noqa: F401  (its registry entry: shmstream.registry reads the kinds' table)
from ._lifecycle import open, stream, unlink, unlink_quiet
from .publication import FrameBatch, Publication
from .shared_memory import SharedMemory, create

__all__ = [
    "FrameBatch",
    "Publication",
    "SharedMemory",
    "create",
    "open",
    "stream",
    "unlink",
    "unlink_quiet",
]
