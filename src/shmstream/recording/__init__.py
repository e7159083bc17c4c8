"""Recording: a stream's frames on disk (``files.py``: the format, its
writer and reader) and the loops that record a live stream or replay a
recording into one (``live.py``). ``shmstream.recording`` was one module
before; its names are still here."""

from .files import *  # noqa: F403  (the format's public names; files.__all__)
from .files import __all__ as _files_all
from .live import RecordStats, ReplayStats, record, replay

__all__ = [*_files_all, "RecordStats", "ReplayStats", "record", "replay"]  # noqa: PLE0604
