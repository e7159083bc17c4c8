"""What record and replay share: how long one wait lasts before their stop
conditions are checked again, and SIGINT/SIGTERM as a clean stop."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from typing import Any

#: How long one wait for frames lasts before the stop conditions are
#: checked again.
CHUNK_S = 0.25


class Stopped(Exception):
    """Raised by the SIGINT/SIGTERM handler of a recording or replay."""


@contextlib.contextmanager
def signals_stop(enabled: bool) -> Iterator[None]:
    """While enabled: SIGINT and SIGTERM end the loop cleanly (the native
    waits return to Python every 100 ms, where the handler raises)."""
    if not enabled:
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        raise Stopped(signal.Signals(signum).name)

    saved = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, old in saved.items():
            signal.signal(s, old)
