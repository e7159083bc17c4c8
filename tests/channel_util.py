"""Helpers of the channel tests (names, spawn, leftover checks and the C
compile recipe are the suite's own: conftest.py and support.py)."""

from __future__ import annotations

import numpy as np

import support

SPAWN = support.SPAWN


def pattern(i: int, size: int) -> bytes:
    """Message i of a test stream: byte j is (i + j) & 255 (the C examples' pattern)."""
    return ((np.arange(size, dtype=np.int64) + i) & 255).astype(np.uint8).tobytes()
