"""Helpers shared by the benchmark parts: peers, statistics, tables, results,
persistent spawn workers, and shared-memory hygiene for the raw baseline.

Nothing here runs inside a timed loop.
"""
from __future__ import annotations

import contextlib
import datetime as _dt
import importlib
import importlib.metadata
import json
import multiprocessing as mp
import os
import platform
import statistics
import sys
import time
import traceback
from typing import Any, Callable, Iterator, Sequence

NA_HINT = "n/a (pip install shmstream[bench])"


class BenchError(RuntimeError):
    """A measurement failed its own checks (sequence mismatch, torn frame in
    shmstream, missed-counter mismatch, a worker died or timed out)."""


# ---------------------------------------------------------------- peers


def peer_version(dist: str) -> str | None:
    """The installed version of a distribution, or None if it is missing."""
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def try_import(module: str) -> tuple[Any | None, str | None]:
    """(module, None) or (None, reason) without raising."""
    try:
        return importlib.import_module(module), None
    except Exception as exc:  # noqa: BLE001 - any import failure means "n/a"
        return None, f"{type(exc).__name__}: {exc}"


# ----------------------------------------------------------- statistics


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values)) if values else float("nan")


def fmt_hz(hz: float, unit: str = "Hz") -> str:
    """152.3 kHz, 947.0 Hz, 55.7 k/s (unit="/s")."""
    if hz != hz:  # nan
        return "-"
    sep = "" if unit.startswith("/") else " "
    if hz >= 1e6:
        return f"{hz / 1e6:.2f} M{unit}"
    if hz >= 1e3:
        return f"{hz / 1e3:.1f} k{unit}"
    return f"{hz:.1f}{sep}{unit}"


def fmt_ratio(ours: float, theirs: float) -> str:
    if not (ours == ours and theirs == theirs) or theirs <= 0:
        return "-"
    return f"x{ours / theirs:.2f}"


def fmt_us(ns: float) -> str:
    if ns != ns:
        return "-"
    us = ns / 1e3
    return f"{us:.1f}" if us < 100 else f"{us:.0f}"


def fmt_bytes(n: int) -> str:
    if n >= 1 << 20 and n % (1 << 20) == 0:
        return f"{n >> 20} MiB"
    if (1 << 10) <= n < (1 << 20) and n % (1 << 10) == 0:
        return f"{n >> 10} KiB"
    if n >= 10**9:
        return f"{n / 1e9:g} GB"
    if n >= 10**6:
        return f"{n / 1e6:g} MB"
    if n >= 10**3:
        return f"{n / 1e3:g} kB"
    return f"{n} B"


# ---------------------------------------------------------------- tables


def render_table(headers: list[str], rows: list[list[str]], title: str = "",
                 left: int = 1) -> str:
    """A Markdown pipe table, columns padded so it also reads as plain text.
    The first ``left`` columns are left-aligned, the rest right-aligned."""
    widths = [len(h) for h in headers]
    for row in rows:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))

    def line(cells: list[str]) -> str:
        out = []
        for i, cell in enumerate(cells):
            out.append(cell.ljust(widths[i]) if i < left else cell.rjust(widths[i]))
        return "| " + " | ".join(out) + " |"

    parts = []
    if title:
        parts.append(title)
        parts.append("")
    parts.append(line(headers))
    parts.append("|" + "|".join(
        ("-" * (w + 2)) if i < left else ("-" * (w + 1) + ":") for i, w in enumerate(widths)
    ) + "|")
    parts.extend(line(r) for r in rows)
    return "\n".join(parts)


def progress(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


# --------------------------------------------------------------- results


class Results:
    """Raw measurements plus metadata; written as JSON with ``--json``."""

    def __init__(self, part: str, argv: Sequence[str]) -> None:
        self.meta: dict[str, Any] = {
            "part": part,
            "command": "python -m shmstream.bench " + " ".join([part, *argv]),
            "date_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "python": sys.version.split()[0],
            "platform": platform.platform(),
            "machine": platform.machine(),
            "cpu_count": os.cpu_count(),
            "loadavg_start": _loadavg(),
            "versions": {
                d: peer_version(d)
                for d in ("shmstream", "pyshmem", "iceoryx2", "numpy")
            },
        }
        self.records: list[dict[str, Any]] = []
        self.errors: list[str] = []
        self.tables: list[str] = []

    def add(self, **record: Any) -> None:
        self.records.append(record)

    def error(self, message: str) -> None:
        self.errors.append(message)
        print(f"[bench] ERROR: {message}", file=sys.stderr, flush=True)

    def dump(self, path: str) -> None:
        self.meta["loadavg_end"] = _loadavg()
        doc = {
            "meta": self.meta,
            "records": self.records,
            "errors": self.errors,
            "tables": self.tables,
        }
        with open(path, "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=1, default=str)
            f.write("\n")


def _loadavg() -> list[float] | None:
    try:
        return list(os.getloadavg())
    except OSError:
        return None


# ------------------------------------------------------- spawn workers


def _worker_main(conn: Any, module: str) -> None:
    """Body of a persistent worker: run tasks named by the parent until told
    to stop. A task gets ``ready`` (a callable that tells the parent it is set
    up) and returns a picklable result. A task sent with file descriptors
    (``Worker.start(..., fds=[...])``) gets its copies as ``fds=``."""
    import signal
    from multiprocessing import reduction

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C
    mod = importlib.import_module(module)
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return
        if msg is None:
            return
        task, kwargs, nfds = msg
        if nfds:
            kwargs["fds"] = [reduction.recv_handle(conn) for _ in range(nfds)]
        try:
            result = getattr(mod, task)(lambda: conn.send(("ready", None)), **kwargs)
            conn.send(("done", result))
        except BaseException as exc:  # noqa: BLE001 - reported to the parent
            detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
            conn.send(("error", f"{task}: {detail}"))


class Worker:
    """A spawned process that runs task functions of ``module`` on request,
    so process start-up is paid once per benchmark run, not per measurement."""

    def __init__(self, module: str, ctx: Any | None = None) -> None:
        ctx = ctx or mp.get_context("spawn")
        self._conn: Any
        self._conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker_main, args=(child, module), daemon=True)
        self.proc.start()
        child.close()

    def start(self, task: str, fds: Sequence[int] = (), **kwargs: Any) -> None:
        """Run ``task(ready, **kwargs)`` in the worker. ``fds`` are passed
        over the worker's socket (SCM_RIGHTS); the caller may close its
        copies as soon as this returns."""
        from multiprocessing import reduction

        self._conn.send((task, kwargs, len(fds)))
        for fd in fds:
            reduction.send_handle(self._conn, fd, self.proc.pid)

    def expect(self, kind: str, timeout: float = 60.0) -> Any:
        deadline = time.monotonic() + timeout
        while not self._conn.poll(0.05):
            if not self.proc.is_alive():
                raise BenchError(f"worker {self.proc.pid} died (exit code {self.proc.exitcode})")
            if time.monotonic() > deadline:
                raise BenchError(f"worker {self.proc.pid} sent nothing for {timeout:.0f} s")
        try:
            got, payload = self._conn.recv()
        except (EOFError, OSError):
            self.proc.join(timeout=1)
            raise BenchError(
                f"worker {self.proc.pid} died (exit code {self.proc.exitcode})"
            ) from None
        if got == "error":
            raise BenchError(str(payload))
        if got != kind:
            raise BenchError(f"worker sent {got!r}, expected {kind!r}")
        return payload

    def close(self) -> None:
        try:
            self._conn.send(None)
        except (OSError, ValueError):
            pass
        self.proc.join(timeout=5)
        if self.proc.is_alive():
            self.proc.terminate()
            self.proc.join(timeout=5)
        self._conn.close()


# ----------------------------------------- multiprocessing.shared_memory


@contextlib.contextmanager
def no_resource_tracker() -> Iterator[None]:
    """Keep ``multiprocessing.resource_tracker`` out of the raw baseline: it
    would unlink segments other processes still use and print leak warnings.
    (Python 3.13 has ``track=False``; this works on every version.)"""
    from multiprocessing import resource_tracker

    saved = resource_tracker.register, resource_tracker.unregister
    resource_tracker.register = lambda *a, **k: None  # type: ignore[assignment]
    resource_tracker.unregister = lambda *a, **k: None  # type: ignore[assignment]
    try:
        yield
    finally:
        resource_tracker.register, resource_tracker.unregister = saved


def raw_shm(name: str, size: int = 0, create: bool = False) -> Any:
    from multiprocessing import shared_memory

    with no_resource_tracker():
        return shared_memory.SharedMemory(name=name, create=create, size=size)


def raw_unlink(name: str) -> None:
    from multiprocessing import shared_memory

    with no_resource_tracker():
        try:
            seg = shared_memory.SharedMemory(name=name)
        except FileNotFoundError:
            return
        seg.close()
        seg.unlink()


def call_quietly(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
    with contextlib.suppress(Exception):
        fn(*args, **kwargs)
