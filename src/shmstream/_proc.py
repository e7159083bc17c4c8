"""Is a process alive? Checked by pid and start time, so a reused pid does
not make a dead creator look alive."""
from __future__ import annotations

import os


def start_ticks(pid: int) -> int:
    """The process's start time in clock ticks since boot (/proc/<pid>/stat
    field 22), or 0 if it is unknown."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return 0
    # comm may contain spaces and ')': fields resume after the last ')'.
    fields = data[data.rfind(b")") + 2 :].split()
    try:
        return int(fields[19])
    except (IndexError, ValueError):
        return 0


def alive(pid: int, ticks: int = 0) -> bool:
    """True if ``pid`` runs and, when ``ticks`` is known, started at ``ticks``."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # exists, owned by someone else
    if ticks:
        now = start_ticks(pid)
        if now and now != ticks:
            return False
    return True
