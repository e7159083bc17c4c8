"""What a read returns: a payload and the metadata of the same write."""
from __future__ import annotations

import dataclasses
from typing import Any

from . import _native

#: The published frame's state (docs/ABI.md, publish line ``state``).
STATE_NAMES = {
    _native.STATE_VALID: "valid",
    _native.STATE_ABORTED: "aborted",
    _native.STATE_ABANDONED: "abandoned",
}


@dataclasses.dataclass(frozen=True)
class Publication:
    """A payload snapshot and the metadata published with it.

    ``payload``, ``count``, ``frame_id`` and ``write_time`` come from the same
    write. ``missed_publications`` counts the writes skipped since this
    handle's previous read, like :attr:`SharedMemory.missed_writes`.
    ``read_publication(safe=False)`` returns a live view of shared memory as
    ``payload``; it must not outlive the lock scope.
    """

    payload: Any
    count: int
    frame_id: int
    write_time: float
    missed_publications: int
    #: "valid" for every read but :meth:`SharedMemory.read_last_complete`,
    #: where "aborted" or "abandoned" says that a later write failed and this
    #: is the last complete publication before it.
    state: str = "valid"


