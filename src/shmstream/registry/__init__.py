"""One registry of what shmstream keeps in /dev/shm, over every kind
(``_survey.py``: find and list segments; ``_stat.py``: stat;
``_remove.py``: remove by any listed name; ``_purge.py``: purge). Each
kind's folder owns its entry in the kinds' table (``common/_kinds.py``);
the registry imports none of them."""

from ._purge import (
    UNFINISHED_ORPHAN_S,
    PurgeResult,
    purge,
)
from ._remove import remove
from ._stat import readable, stat
from ._survey import (
    FILE_PREFIX,
    KINDS,
    Entry,
    Skipped,
    entry,
    list_channels,
    list_streams,
    printable,
    scan,
    segment_files,
    survey,
)

__all__ = [
    "Entry",
    "FILE_PREFIX",
    "UNFINISHED_ORPHAN_S",
    "entry",
    "readable",
    "segment_files",
    "KINDS",
    "PurgeResult",
    "Skipped",
    "list_channels",
    "list_streams",
    "printable",
    "purge",
    "remove",
    "scan",
    "stat",
    "survey",
]
