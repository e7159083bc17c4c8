"""One registry of what shmstream keeps in /dev/shm, over every kind
(``_survey.py``: find, list, stat and remove segments; ``_purge.py``:
purge). Each kind's folder owns its entry in the kinds' table
(``common/_kinds.py``); the registry imports none of them."""

from ._purge import (
    UNFINISHED_ORPHAN_S,
    PurgeReport,
    PurgeResult,
    purge,
    purge_abandoned,
    purge_entries,
    purge_report,
)
from ._survey import (
    FILE_PREFIX,
    KINDS,
    Entry,
    Skipped,
    entry,
    list_channels,
    list_streams,
    printable,
    readable,
    remove,
    scan,
    segment_files,
    stat,
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
    "PurgeReport",
    "PurgeResult",
    "Skipped",
    "list_channels",
    "list_streams",
    "printable",
    "purge",
    "purge_abandoned",
    "purge_entries",
    "purge_report",
    "remove",
    "scan",
    "stat",
    "survey",
]
