"""The interface of a stream-benchmark peer, the records its methods return,
the constants of the benchmark's protocols and the run's names.

A peer is one implementation (shmstream, pyshmem, ...). For each scenario it
builds the timed loop and hands it to the scenario, which does the rest:

- round trip in one process: ``roundtrip()`` -> ``RoundTrip``;
- ping-pong: ``requester()`` in this process -> ``Requester``, and
  ``respond()`` in a worker process (it runs until it acks ``STOP``);
- fan-out: ``fan_writer()`` here -> ``FanWriter``, ``fan_reader()`` in each
  of two worker processes -> ``FanReader``.

Variants name the rows a peer has in each scenario; a peer without rows in
a scenario leaves its variants empty. The loops a peer builds are the timed
code itself, written out for that peer (no call per iteration that the
other peers do not pay); everything around them is the scenario's.
"""

from __future__ import annotations

import importlib
import os
import time
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._common import BenchError, call_quietly, peer_version
from ..peers._iceoryx2 import remove as iceoryx2_remove
from ..peers._iceoryx2 import run_files as iceoryx2_files
from ..peers._rawshm import raw_unlink

STOP = (1 << 64) - 1  # sequence number that ends a responder / reader
ABORT = STOP - 1  # fan-out control word: the writer failed
WAIT_S = 10.0  # a single wait longer than this is a hang, not a measurement
ACK = 64  # bytes of a ping-pong ack

# ping-pong variants shared by every peer: how the responder reads a request
COPY, ZERO_COPY = "copy", "zero-copy"


def _nothing() -> None:
    pass


@dataclass
class RoundTrip:
    """One round-trip row: ``loop(n)`` writes and reads back n times,
    ``check()`` raises BenchError if the data read back is wrong,
    ``close()`` releases what the row made."""

    loop: Callable[[int], Any]
    check: Callable[[], None]
    close: Callable[[], None]


@dataclass
class Requester:
    """The requester of one ping-pong row. ``rt(seq, n, lat)`` makes n round
    trips numbered seq+1.. (each stamps its seq into the first and last 8
    bytes of the request, publishes it, waits for the ack, stores the
    round trip's ns in ``lat[i]`` and checks the ack's seq) and returns the
    last seq. ``kwargs`` (and ``fds``, passed as descriptors) go to the
    peer's ``respond``; ``connect()`` runs once the responder is ready."""

    rt: Callable[[int, int, array], int]
    kwargs: dict[str, Any]
    close: Callable[[], None]
    connect: Callable[[], None] = _nothing
    fds: list[int] = field(default_factory=list)


@dataclass
class FanWriter:
    """The writer of one fan-out row: ``publish(seq)`` writes a frame whose
    every 8-byte word is seq; ``kwargs`` go to the readers' ``fan_reader``;
    ``connect()`` runs once the readers are ready."""

    publish: Callable[[int], None]
    kwargs: dict[str, Any]
    close: Callable[[], None]
    connect: Callable[[], None] = _nothing


@dataclass
class FanReader:
    """A fan-out reader: ``get()`` copies a frame newer than the last one
    into the scenario's buffer and returns True, or returns False after about
    50 ms without one. ``missed()``, where the library counts them, is the
    number of frames it says this reader missed since its first frame."""

    get: Callable[[], bool]
    close: Callable[[], None]
    missed: Callable[[], int] | None = None


class Peer:
    """One implementation. Subclasses set the class attributes and
    implement the scenarios they have variants in."""

    name = ""  # its key in --peers and in the records
    module = ""  # imported to tell whether it is installed here
    install_hint: str | None = None  # a missing peer's cells; None: the reason
    roundtrip_variants: tuple[str, ...] = ()
    pingpong_variants: dict[str, str] = {}  # variant -> how the responder reads
    wakeup_variants: dict[str, str] = {}  # 64 B rows that measure the wake-up
    fanout_variants: tuple[str, ...] = ()
    counts_missed = False  # fan-out: the library counts the frames a reader missed

    def __init__(self) -> None:
        self._mod: Any = None

    @property
    def mod(self) -> Any:
        """The peer's module, imported on first use."""
        if self._mod is None:
            self._mod = importlib.import_module(self.module)
        return self._mod

    def unusable(self, mod: Any) -> str | None:
        """Why the imported module cannot be measured, or None."""
        return None

    def label(self) -> str:
        """The name in the tables: the distribution and its version."""
        return f"{self.name} {peer_version(self.name) or ''}".strip()

    # parent side: make what the row needs (named through ``names``, so a
    # failed run still removes it) and return the loop
    def roundtrip(self, variant: str, shape: tuple[int, ...], names: Names) -> RoundTrip:
        raise NotImplementedError

    def requester(self, variant: str, payload: int, names: Names) -> Requester:
        raise NotImplementedError

    def fan_writer(self, variant: str, payload: int, names: Names) -> FanWriter:
        raise NotImplementedError

    # worker side
    def respond(self, ready: Callable[[], None], variant: str, payload: int, **kwargs: Any) -> int:
        """Ack every request with its seq until STOP; check that requests
        arrive in order with intact first and last words; return how many
        were handled (STOP not counted)."""
        raise NotImplementedError

    def fan_reader(self, payload: int, buf: Any, **kwargs: Any) -> FanReader:
        """Attach to the writer's ``kwargs`` and read frames into ``buf``."""
        raise NotImplementedError


def ping_buffers(payload: int) -> tuple[np.ndarray, np.ndarray, int, np.ndarray, np.ndarray]:
    """A ping-pong end's buffers: (msg, msg as uint64, index of its last
    uint64, ack, ack as uint64). The requester builds its requests in msg,
    the responder copies them there; seq numbers go in msg's first and last
    words and in the ack's first."""
    msg = np.zeros(payload, np.uint8)
    ack = np.zeros(ACK, np.uint8)
    return msg, msg.view(np.uint64), payload // 8 - 1, ack, ack.view(np.uint64)


def loop_check(
    name: str, loop: Callable[[int], Any], out: np.ndarray, src: np.ndarray
) -> Callable[[], None]:
    """A round-trip row's ``check`` for a loop that reads into ``out``: one
    more round trip into a cleared ``out`` must bring ``src`` back."""

    def check() -> None:
        out[...] = 0
        loop(1)
        if not np.array_equal(out, src):
            raise BenchError(f"{name}: round trip returned different data")

    return check


def check_request(s: int, expected: int, tail: int) -> None:
    """The responders' check, called when a request looks wrong."""
    if s != expected or tail != s:
        raise BenchError(f"request seq {s} (tail {tail}), expected {expected}")


def wait_deadline(deadline: float, what: str, seconds: float = WAIT_S) -> float:
    """For a busy-wait that starts with ``deadline = 0.0`` and calls this
    every so many spins (never on the fast path): the first call starts the
    clock, a call after ``seconds`` raises BenchError(what)."""
    now = time.monotonic()
    if not deadline:
        return now + seconds
    if now > deadline:
        raise BenchError(what)
    return deadline


# ======================================================= name hygiene


class Names:
    """Unique names for this run, and the record needed to remove them."""

    def __init__(self) -> None:
        self.prefix = f"shmsbench-{os.getpid()}"
        self.n = 0
        self.streams: list[tuple[Any, str]] = []  # (package, name)
        self.raw: list[str] = []
        # iceoryx2 is pointed at its own file prefix and root dir so that
        # everything it creates can be removed by prefix at the end.
        self.iox_prefix, self.iox_root = iceoryx2_files(os.getpid())

    def new(self, tag: str) -> str:
        self.n += 1
        return f"{self.prefix}-{tag}-{self.n}"

    def stream(self, pkg: Any, tag: str) -> str:
        name = self.new(tag)
        self.streams.append((pkg, name))
        return name

    def raw_name(self, tag: str) -> str:
        name = f"shmsb{os.getpid()}_{tag}{self.n + 1}"
        self.n += 1
        self.raw.append(name)
        return name

    def cleanup(self) -> None:
        for pkg, name in self.streams:
            call_quietly(pkg.unlink, name)
        for name in self.raw:
            call_quietly(raw_unlink, name)
        iceoryx2_remove(self.iox_prefix, self.iox_root)
