"""The bridge's worker threads: daemons whose unexpected errors are logged
(a thread has no caller to raise to) instead of vanishing silently."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

log = logging.getLogger("shmstream.bridge")


def start(target: Callable[[], None], name: str) -> threading.Thread:
    def run() -> None:
        try:
            target()
        except Exception:
            log.exception("%s: stopped by an unexpected error", name)

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    return thread
