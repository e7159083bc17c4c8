"""Persistent spawned worker processes for the benchmarks: a process is
started once per run and then runs task functions on request, so process
start-up is never part of a measurement."""

from __future__ import annotations

import importlib
import multiprocessing as mp
import time
import traceback
from collections.abc import Callable, Sequence
from typing import Any

from ._common import BenchError


def _worker_main(conn: Any) -> None:
    """Body of a persistent worker: run the tasks the parent names until told
    to stop. A task is a module-level function; it gets ``ready`` (a callable
    that tells the parent it is set up) and returns a picklable result. A
    task sent with file descriptors (``Worker.start(..., fds=[...])``) gets
    its copies as ``fds=``."""
    import signal
    from multiprocessing import reduction

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return
        if msg is None:
            return
        module, name, kwargs, nfds = msg
        if nfds:
            kwargs["fds"] = [reduction.recv_handle(conn) for _ in range(nfds)]
        try:
            task = getattr(importlib.import_module(module), name)
            result = task(lambda: conn.send(("ready", None)), **kwargs)
            conn.send(("done", result))
        except BaseException as exc:  # noqa: BLE001 - reported to the parent
            detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
            conn.send(("error", f"{name}: {detail}"))


def import_modules(ready: Callable[[], None], modules: list[str]) -> None:
    """A task that imports ``modules``, so their import is not timed later."""
    for m in modules:
        importlib.import_module(m)


class Worker:
    """A spawned process that runs task functions on request."""

    def __init__(self, ctx: Any | None = None) -> None:
        ctx = ctx or mp.get_context("spawn")
        self._conn: Any
        self._conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker_main, args=(child,), daemon=True)
        self.proc.start()
        child.close()

    def start(self, task: Callable[..., Any], fds: Sequence[int] = (), **kwargs: Any) -> None:
        """Run ``task(ready, **kwargs)`` in the worker (a module-level
        function, found there by its module and name). ``fds`` are passed
        over the worker's socket (SCM_RIGHTS); the caller may close its
        copies as soon as this returns."""
        from multiprocessing import reduction

        self._conn.send((task.__module__, task.__name__, kwargs, len(fds)))
        for fd in fds:
            reduction.send_handle(self._conn, fd, self.proc.pid)

    def expect(self, kind: str, timeout: float = 60.0) -> Any:
        """The worker's next message, which must be ``kind`` ("ready" or
        "done"); BenchError if the task failed, the worker died, or nothing
        came within ``timeout`` seconds."""
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
