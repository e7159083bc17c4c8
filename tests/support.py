"""Helpers shared by the test modules (imported as ``support``; pytest puts
this folder on ``sys.path`` and spawned children inherit it).

Every cross-process step synchronises on multiprocessing Events, Barriers,
Queues or on the stream's own counters. Nothing here sleeps to "give the
other side time": a test that only passes when the scheduler is kind is a
broken test (CI runs on two noisy cores).
"""

from __future__ import annotations

import contextlib
import functools
import mmap
import multiprocessing as mp
import os
import struct
import subprocess
import sys
import textwrap
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

import numpy as np

#: Generous limit for every wait on another process.
WAIT = 30.0
#: Capacity of the ``channel_pair`` fixture's channel (conftest.py).
CHANNEL_PAIR_CAPACITY = 4096

SHM_DIR = "/dev/shm"
SEGMENT_PREFIX = "shmstream-"

SPAWN = mp.get_context("spawn")


class ChildFailed(AssertionError):
    """A child process raised; the message carries its traceback."""


def _trampoline(results: Any, target: Callable, args: tuple) -> None:
    try:
        value = target(*args)
    except BaseException:  # noqa: BLE001 - report everything, including assertion errors
        results.put(("error", traceback.format_exc()))
        raise SystemExit(1) from None
    results.put(("ok", value))


class Child:
    """A spawned process running ``target(*args)``; ``result()`` returns
    what the target returned or raises ChildFailed with its traceback."""

    def __init__(self, target: Callable, args: tuple) -> None:
        self.results = SPAWN.Queue()
        self.process = SPAWN.Process(
            target=_trampoline, args=(self.results, target, args), daemon=True
        )
        self.process.start()

    @property
    def pid(self) -> int:
        return self.process.pid

    def result(self, timeout: float = WAIT) -> Any:
        try:
            status, value = self.results.get(timeout=timeout)
        except Exception as exc:  # queue.Empty
            raise ChildFailed(
                f"child {self.pid} returned nothing within {timeout} s "
                f"(alive={self.process.is_alive()}, exitcode={self.process.exitcode})"
            ) from exc
        self.process.join(timeout)
        if status == "error":
            raise ChildFailed(f"child {self.pid} failed:\n{value}")
        return value

    def join(self, timeout: float = WAIT) -> int:
        """Wait for the child to end; return its exit code."""
        self.process.join(timeout)
        assert self.process.exitcode is not None, (
            f"child {self.pid} still running after {timeout} s"
        )
        return self.process.exitcode

    def wait_event(self, event: Any, timeout: float = WAIT) -> None:
        """Wait for ``event``, which this child sets; if the child ends
        first, raise with its traceback instead of waiting out the timeout."""
        deadline = time.monotonic() + timeout
        while not event.wait(0.05):
            if not self.process.is_alive() and not event.is_set():
                self.result(timeout=1.0)  # raises ChildFailed with the traceback
                raise ChildFailed(
                    f"child {self.pid} ended (exit code "
                    f"{self.process.exitcode}) without setting the event"
                )
            if time.monotonic() > deadline:
                raise AssertionError(f"child {self.pid} did not set the event in {timeout} s")

    def kill(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join(WAIT)


def wait_until(predicate: Callable[[], Any], timeout: float = WAIT, what: str = "") -> Any:
    """Poll ``predicate`` until it is truthy: for conditions that have no
    event to wait on (e.g. a header word another thread changes)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what or predicate}")
        os.sched_yield()
        time.sleep(0.0005)  # a poll interval, not a synchronisation


@contextlib.contextmanager
def lock_held_by_another_thread(handle):
    """``handle``'s lock held by another thread of this process for the
    whole with-block: taken before the block runs, released after it."""
    held, done = threading.Event(), threading.Event()

    def holder() -> None:
        with handle.locked():
            held.set()
            done.wait(WAIT)

    t = threading.Thread(target=holder)
    t.start()
    try:
        assert held.wait(WAIT), "the holder thread never took the lock"
        yield
    finally:
        done.set()
        t.join(WAIT)


def frame(value, shape=(3, 3), dtype=np.float32):
    """One frame of the handle tests' ``shm`` stream (conftest.py), all ``value``."""
    return np.full(shape, value, dtype=dtype)


# ---- raw segment access (the ABI tests and corrupt-header tests) ----------


def fnv1a64(data: bytes, h: int = 0xCBF29CE484222325) -> int:
    for b in data:
        h ^= b
        h = (h * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def segment_name(name: str) -> str:
    """The /dev/shm file name of stream ``name`` as docs/ABI.md defines it
    (independent re-implementation, no leading '/')."""
    raw = name.encode("utf-8")
    keep = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-"
    readable = "".join(chr(b) if b in keep else "_" for b in raw[:32])
    return f"{SEGMENT_PREFIX}{readable}-{fnv1a64(raw):016x}"


def segment_path(name: str) -> str:
    return os.path.join(SHM_DIR, segment_name(name))


def field(name: str) -> tuple[int, int]:
    from shmstream import _testhooks  # the suite's hooks: built from a checkout

    return tuple(_testhooks.layout()[name])


def read_u(path: str, offset: int, size: int) -> int:
    with open(path, "rb") as f:
        f.seek(offset)
        data = f.read(size)
    return int.from_bytes(data, "little")


def patch_bytes(path: str, offset: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(data)


def patch_identity(path: str, offset: int, data: bytes) -> None:
    """Patch a checksummed identity field and store the matching checksum:
    a segment that passes validation but says something else (or something
    impossible)."""
    patch_bytes(path, offset, data)
    checksum = field("checksum")[0]
    with open(path, "rb") as f:
        head = f.read(checksum)
    patch_bytes(path, checksum, fnv1a64(head[8:]).to_bytes(8, "little"))


class HeaderWords:
    """A live read-only mapping of a segment header, to watch counters such
    as ``waiters`` that the public API does not expose."""

    def __init__(self, name: str) -> None:
        fd = os.open(segment_path(name), os.O_RDONLY)
        try:
            self._map = mmap.mmap(fd, 4096, prot=mmap.PROT_READ)
        finally:
            os.close(fd)

    def u32(self, fieldname: str) -> int:
        offset, _ = field(fieldname)
        return struct.unpack_from("<I", self._map, offset)[0]

    def u64(self, fieldname: str) -> int:
        offset, _ = field(fieldname)
        return struct.unpack_from("<Q", self._map, offset)[0]

    def close(self) -> None:
        self._map.close()


def sleepers(words: HeaderWords) -> int:
    """Readers asleep (or about to be) on a stream: its sleeper bits plus
    the slot-less ``waiters`` count (docs/ABI.md, "Wait")."""
    return bin(words.u64("sleepers")).count("1") + words.u32("waiters")


def wait_for_waiter(name: str, timeout: float = WAIT) -> None:
    """Return once a reader sleeps (or is about to) in a wait on ``name``."""
    words = HeaderWords(name)
    try:
        wait_until(lambda: sleepers(words) > 0, timeout, f"a reader waiting on {name!r}")
    finally:
        words.close()


# ---- a private /dev/shm (purge, full-disk tests) ----------------------------


@functools.cache
def private_shm_available() -> str | None:
    """None if tests can run a child with a private tmpfs on /dev/shm, else
    the reason they cannot."""
    if os.geteuid() != 0:
        return "needs root to mount a private tmpfs on /dev/shm"
    try:
        probe = subprocess.run(
            [
                "unshare",
                "-m",
                "--propagation",
                "private",
                "sh",
                "-c",
                "mount -t tmpfs -o size=1m tmpfs /dev/shm",
            ],
            capture_output=True,
            timeout=30,
            check=False,
        )
    except (FileNotFoundError, subprocess.TimeoutExpired) as exc:
        return f"unshare is unavailable: {exc}"
    if probe.returncode != 0:
        return f"cannot mount a private /dev/shm: {probe.stderr.decode(errors='replace').strip()}"
    return None


def run_in_private_shm(
    script: str | None = None,
    size: str = "16m",
    timeout: float = 120,
    *,
    path: str | None = None,
    cwd: Any = None,
    env: dict[str, str] | None = None,
):
    """Run python ``script`` (or the file ``path``, whose ``__main__``
    spawned children can import) in a new mount namespace whose /dev/shm is
    a fresh, private tmpfs of ``size``."""
    args = [path] if path is not None else ["-c", textwrap.dedent(script or "")]
    return subprocess.run(
        [
            "unshare",
            "-m",
            "--propagation",
            "private",
            "sh",
            "-c",
            f'mount -t tmpfs -o size={size},mode=1777 tmpfs /dev/shm && exec "$0" "$@"',
            sys.executable,
            *args,
        ],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def purge_sees_only(monkeypatch, names) -> None:
    """Let ``shmstream.purge`` see only the objects of these user names in
    the real /dev/shm: others share it (the suite's other workers, other
    users), and a test's purge must neither remove nor report theirs. A
    loader pool's slot files are the exception: that kind sweeps every dead
    pool itself, so a test purging loader pools is marked ``serial``."""
    from shmstream.registry import _purge

    real, mine = _purge.survey, set(names)

    def survey(kinds=None):
        entries, _skipped = real(kinds)
        return [e for e in entries if e.name in mine], []

    monkeypatch.setattr(_purge, "survey", survey)


# ---- the C compile recipe (examples, the fake CUDA driver, harnesses) -------

#: tests/, where the helper modules are (children that import them put it on sys.path)
TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(TESTS_DIR)


def c_compiler() -> str | None:
    import shutil

    return shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")


def compile_c(
    out: str,
    sources: list[str],
    *,
    with_core: bool = True,
    shared: bool = False,
    flags: tuple[str, ...] = (),
) -> str:
    """Build a C program (or, ``shared``, a shared library) from ``sources``
    (paths relative to the repository root or absolute), linked with the C
    core's sources unless ``with_core`` is False, as strictly as the core
    builds itself (-Wall -Werror). ``flags`` go after the defaults (later
    -O wins; -I, -fsanitize=...). Skips the test when there is no compiler;
    a compile error fails it with the compiler's message."""
    import glob

    import pytest

    cc = c_compiler()
    if cc is None:
        pytest.skip("no C compiler on PATH")
    core = sorted(glob.glob(os.path.join(ROOT, "src", "core", "*.c"))) if with_core else []
    paths = [s if os.path.isabs(s) else os.path.join(ROOT, s) for s in sources]
    cmd = [
        cc,
        "-std=gnu11",
        "-O2",
        "-Wall",
        "-Werror",
        "-I",
        os.path.join(ROOT, "include"),
        *(["-shared", "-fPIC"] if shared else []),
        *flags,
        *paths,
        *core,
        "-o",
        out,
        "-lpthread",
        "-ldl",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise AssertionError(f"compiling {sources} failed:\n{proc.stderr}")
    return out


def run_c_program(tmp_path: Any, source: str, *args: str) -> list[str]:
    """Compile ``source``, a C program using the core, in ``tmp_path`` and
    run it with ``args``; its standard output, line by line (a non-zero
    exit fails)."""
    src = os.path.join(str(tmp_path), "program.c")
    with open(src, "w") as f:
        f.write(source)
    exe = compile_c(os.path.join(str(tmp_path), "program"), [src])
    proc = subprocess.run([exe, *args], capture_output=True, text=True, timeout=WAIT, check=True)
    return proc.stdout.splitlines()
