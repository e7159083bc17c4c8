"""A progress line while a command creates a large segment.

A create reserves every page of the segment (posix_fallocate) and maps it
with every page faulted in (MAP_POPULATE), in one native call (the core's
ss_segment_create): about 0.25 s per GiB to reserve and 0.4 to 4 more to
map on the 2-core VM of BENCHMARKS.md ("Creating large segments"). Nothing in that
call reports progress, and nothing needs to: both steps can be watched from
outside it, so the protocol stays in the core, unchanged. A thread reads
the segment file's allocated blocks (what posix_fallocate has reserved)
and this process's resident bytes of its mapping (/proc/self/smaps: what
MAP_POPULATE has faulted in), and prints them.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Iterator

from .. import _native
from ..common._space import SHM_DIR
from ._common import fmt_bytes, status_line

#: Segments from this size on get a progress line (a quarter of a second
#: and more to create); smaller ones are created silently.
THRESHOLD = 256 << 20


def _mapped_bytes(path: str) -> int:
    """Resident bytes of this process's mappings of ``path`` (0 if none)."""
    total, inside = 0, False
    try:
        with open("/proc/self/smaps", encoding="utf-8", errors="replace") as f:
            for line in f:
                head = line.split(None, 1)[0] if line.strip() else ""
                if not head.endswith(":"):  # a mapping's first line: address range ... path
                    inside = line.rstrip("\n").removesuffix(" (deleted)").endswith(path)
                elif inside and head == "Rss:":
                    total += int(line.split()[1]) * 1024
    except OSError:
        return 0
    return total


class _Watcher:
    def __init__(self, name: str, what: str, tty: bool, interval: float) -> None:
        self.path = os.path.join(SHM_DIR, _native.segment_name(name).lstrip("/"))
        self.name, self.what, self.tty, self.interval = name, what, tty, interval
        self.done = threading.Event()
        self.shown = self.ended = False
        self.size = 0
        self.start = time.monotonic()
        self.thread = threading.Thread(
            target=self._run, name="shmstream-create-progress", daemon=True
        )

    def _line(self, reserved: int, mapped: int) -> str:
        pct = 100.0 / self.size
        return (
            f"creating {self.what} {self.name!r}: {fmt_bytes(self.size)} in {SHM_DIR}, "
            f"reserved {reserved * pct:3.0f}%, mapped {mapped * pct:3.0f}%, "
            f"{time.monotonic() - self.start:.0f} s"
        )

    def _run(self) -> None:
        while not self.done.wait(self.interval if self.shown else 0.05):
            try:
                st = os.stat(self.path)
            except OSError:
                continue  # not made yet (or removed: the command says why)
            if st.st_size < THRESHOLD:
                if st.st_size:
                    return  # a small segment: no line
                continue
            self.size = st.st_size
            reserved = min(st.st_blocks * 512, self.size)
            mapped = min(_mapped_bytes(self.path), self.size)
            status_line(self._line(reserved, mapped), self.tty)
            self.shown = True
            if mapped >= self.size:  # created: the call goes on with its own work
                self._last_line()
                return

    def _last_line(self) -> None:
        seconds = time.monotonic() - self.start
        if self.tty:
            sys.stdout.write("\n")
        print(
            f"created {self.what} {self.name!r}: {fmt_bytes(self.size)} in "
            f"{seconds:.1f} s ({seconds / (self.size / (1 << 30)):.1f} s per GiB)",
            flush=True,
        )
        self.ended = True

    def finish(self) -> None:
        """The call returned (or raised): a line that is still open ends
        here, with the time so far if the segment was made."""
        self.done.set()
        self.thread.join()
        if self.ended:
            return
        try:
            self.size = os.stat(self.path).st_size
        except OSError:  # not made (refused, failed): the command says why
            if self.shown and self.tty:
                sys.stdout.write("\n")
            return
        if self.size >= THRESHOLD:  # made faster than the first look
            self._last_line()


@contextlib.contextmanager
def create_progress(name: str, what: str = "stream", *, tty: bool | None = None) -> Iterator[None]:
    """Around a call that may create the segment of ``name`` in this
    process: a progress line once it proves to be THRESHOLD or larger,
    rewritten in place on a terminal (every second otherwise), and a last
    line with the time it took. A segment that exists already is not
    watched (the call opens it)."""
    tty = sys.stdout.isatty() if tty is None else tty
    watcher = _Watcher(name, what, tty, 0.5 if tty else 1.0)
    if os.path.exists(watcher.path):
        yield
        return
    watcher.thread.start()
    try:
        yield
    finally:
        watcher.finish()
