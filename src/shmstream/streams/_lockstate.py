"""Which thread of this process holds a stream's lock, and how deeply: the
re-entrancy that the robust mutex in shared memory does not keep. Shared by
every handle of one stream generation in the process (pyshmem's rule), and
forgotten in a fork child, whose only thread holds none of the parent's
locks.
"""

from __future__ import annotations

import os
import threading
import weakref
from typing import Any


class LockState:
    """Which thread of this process holds a stream's lock, and how deeply.

    The native lock is a robust pthread mutex owned per thread; re-entrancy
    is tracked here. One state per stream generation per process, shared by
    every handle on it, so two handles in one thread nest like one.
    """

    __slots__ = ("owner", "depth", "__weakref__")

    def __init__(self) -> None:
        self.owner: int | None = None
        self.depth = 0


_LOCK_STATES: weakref.WeakValueDictionary[tuple[str, str], LockState] = (
    weakref.WeakValueDictionary()
)
_LOCK_STATES_GUARD = threading.Lock()
#: Every open handle, so that a fork child can reset their lock bookkeeping.
HANDLES: weakref.WeakSet[Any] = weakref.WeakSet()


def lock_state_for(segname: str, instance_id: str) -> LockState:
    key = (segname, instance_id)
    with _LOCK_STATES_GUARD:
        state = _LOCK_STATES.get(key)
        if state is None:
            state = LockState()
            _LOCK_STATES[key] = state
        return state


def _after_fork_in_child() -> None:
    # The child's only thread holds none of the parent's locks (the mutex in
    # shared memory belongs to the parent's thread), so it starts unlocked.
    global _LOCK_STATES_GUARD
    _LOCK_STATES_GUARD = threading.Lock()
    for state in list(_LOCK_STATES.values()):
        state.owner = None
        state.depth = 0
    for handle in list(HANDLES):
        handle._held = 0
        handle._writing = False


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
