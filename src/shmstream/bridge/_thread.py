"""The bridge's worker threads: daemons whose unexpected errors are logged
(a thread has no caller to raise to) instead of vanishing silently."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

log = logging.getLogger("shmstream.bridge")


def start(
    target: Callable[[], None], name: str, on_error: Callable[[], None] | None = None
) -> threading.Thread:
    """Run ``target`` in a daemon thread; an exception it raises is logged
    and ``on_error`` called (it says so where readers look)."""

    def run() -> None:
        try:
            target()
        except Exception:
            log.exception("%s: stopped by an unexpected error", name)
            if on_error is not None:
                try:
                    on_error()
                except Exception:  # already failing; logged above
                    log.exception("%s: could not record the failure", name)

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    return thread
