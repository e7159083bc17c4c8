"""shmstream: NumPy arrays between processes through named shared memory.

The stream API is a superset of pyshmem 1.4.0's: ``shmstream.create`` /
``shmstream.open`` give a :class:`SharedMemory` handle with consistent
snapshot reads, blocking ``read_new``, a robust cross-process write lock and
publication counters. Importing shmstream never imports torch.
"""

from importlib.metadata import PackageNotFoundError as _PackageNotFoundError
from importlib.metadata import version as _version
from typing import Any as _Any

from . import (
    _native,  # noqa: F401  (loads the core; its errors come from .errors)
    loader,  # noqa: F401  (its registry entry; never imports torch)
    milk,  # noqa: F401  (its registry entry: milk's streams in list, stat, view)
)
from .arrays import DirectArray, SharedArray, SharedRecArray, direct_mmap, share
from .channels import ChannelConsumer, ChannelProducer, channel, open_channel, unlink_channel
from .errors import *  # noqa: F403  (every public exception; errors.__all__)
from .errors import __all__ as _error_names
from .gpu import GPU_SUPPORTED_DTYPES, gpu_available
from .recording import Recording, RecordStats, ReplayStats, load_recording, record, replay
from .registry import list_channels, list_streams, purge, stat
from .streams import (
    FrameBatch,
    Publication,
    SharedMemory,
    create,
    open,
    stream,
    unlink,
    unlink_quiet,
)
from .streams._locked_many import locked_many

try:
    __version__ = _version("shmstream")
except _PackageNotFoundError:  # source tree imported without installation
    __version__ = "0+unknown"

__all__ = [
    "FrameBatch",
    "GPU_SUPPORTED_DTYPES",
    "Publication",
    "SharedMemory",
    "__version__",
    "create",
    "gpu_available",
    "list_streams",
    "locked_many",
    "open",
    "purge",
    "stat",
    "stream",
    "unlink",
    "unlink_quiet",
]


def view(name: str | None = None, **kwargs: _Any) -> _Any:
    """Serve the live web view (``shmstream.viewer.view``; docs/view.md):
    every segment, and the picture of stream ``name`` or of a
    ``recording=`` directory. Needs the ``view`` extra (``pip install
    ".[view]"`` from a checkout, ``pip install "shmstream[view]"`` once
    released)."""
    from .viewer import view as _serve

    return _serve(name, **kwargs)


__all__ += _error_names  # noqa: PLE0605 - errors.__all__, a list of names
__all__ += [
    "Recording",
    "RecordStats",
    "ReplayStats",
    "load_recording",
    "record",
    "replay",
    "ChannelConsumer",
    "ChannelProducer",
    "channel",
    "list_channels",
    "open_channel",
    "unlink_channel",
    "DirectArray",
    "direct_mmap",
    "SharedArray",
    "SharedRecArray",
    "share",
    "view",
]
