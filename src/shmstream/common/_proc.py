"""Is a process alive? By pid and start time, so a reused pid does not make a
dead creator look alive, and a zombie (killed, not yet reaped) counts as
dead. One implementation, in the C core (src/core/proc.c)."""

from __future__ import annotations

from .. import _native


def start_ticks(pid: int) -> int:
    """The process's start time in clock ticks since boot (/proc/<pid>/stat
    field 22), or 0 if it is unknown."""
    return int(_native.proc_start_ticks(pid))


def alive(pid: int, ticks: int = 0) -> bool:
    """True if ``pid`` runs and, when ``ticks`` is known, started at ``ticks``."""
    if pid <= 0 or pid > 0x7FFFFFFF:
        return False
    return bool(_native.proc_alive(pid, ticks))
