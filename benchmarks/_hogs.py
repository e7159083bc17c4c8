"""The loaded regime: one CPU-bound process per online CPU ("hogs") beside
a benchmark, so that it measures how the library behaves when no core is
spare (docs/waiting.md: its waits must not spin a core away from a peer)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator

_HOG = "import sys\nsys.stdout.write('go\\n')\nsys.stdout.flush()\nwhile True:\n    pass\n"


@contextlib.contextmanager
def hogs(n: int | None = None) -> Iterator[int]:
    """Run ``n`` (default: one per CPU) busy loops until the block ends;
    yields how many run. Each has started spinning before the block begins."""
    if n is None:
        n = os.cpu_count() or 1
    procs = [
        subprocess.Popen([sys.executable, "-c", _HOG], stdout=subprocess.PIPE) for _ in range(n)
    ]
    try:
        for p in procs:
            if p.stdout is None or p.stdout.readline() != b"go\n":
                raise RuntimeError("a hog process did not start")
        yield n
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()
