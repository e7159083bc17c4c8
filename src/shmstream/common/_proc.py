"""Is a process alive? By pid and start time, so a reused pid does not make a
dead creator look alive, and a zombie (killed, not yet reaped) counts as
dead. One implementation, in the C core (src/core/proc.c)."""

from __future__ import annotations

from .. import _native


def alive(pid: int, ticks: int = 0) -> bool:
    """True if ``pid`` runs and, when ``ticks`` is known, started at ``ticks``."""
    if pid <= 0 or pid > 0x7FFFFFFF:
        return False
    return bool(_native.proc_alive(pid, ticks))
