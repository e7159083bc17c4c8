"""Arrays: a NumPy array shared by name (``shmstream.share``) and the
direct reader of arrays on disk (``shmstream.direct_mmap``)."""

from . import _registry  # noqa: F401  (its registry entry)
from .direct import DirectArray, direct_mmap
from .shared_array import SharedArray, SharedRecArray, share

__all__ = ["DirectArray", "SharedArray", "SharedRecArray", "direct_mmap", "share"]
