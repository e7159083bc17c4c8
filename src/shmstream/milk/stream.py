"""The handle of a milk/CACAO ImageStreamIO stream (docs/milk.md).

A milk stream is a file in milk's directory (:func:`~shmstream.milk.layout.shm_dir`)
that milk's library and shmstream both open. Reads copy the frame between
two looks at milk's write flag and frame counter (cnt0) and retry a copy
that overlapped a write; ``read_new`` waits on a semaphore this process
claims in the stream's reader PID table, as milk's readers do, and
``write`` follows milk's publish sequence so CACAO processes blocked in
their semaphore wait wake up. All of it is one native call (shmstream._milk).
"""

from __future__ import annotations

import errno
import math
import os
import time
from typing import Any

import numpy as np

from .. import _milk
from ..common import _dtypes, _proc
from ..common._checks import spin_ns
from ..errors import (
    HandleClosedError,
    ShmstreamFileExistsError,
    ShmstreamTypeError,
    ShmstreamValueError,
)
from ..streams.publication import Publication
from . import _errors
from ._checks import check_create
from ._history import MilkHistory
from ._keywords import MilkKeywords
from ._unlink import unlink
from ._views import MilkReadView
from .dtypes import code_of
from .layout import Layout, instance_id, path_of, shm_dir, unix_ns

#: How long a read waits, by default, for a writer that holds the write
#: flag before it gives up with InconsistentStreamError.
BUSY_TIMEOUT = 0.1


class MilkStream(MilkHistory, MilkKeywords):
    """An open milk stream: ``read``, ``read_new``, ``read_publication``,
    ``write``, ``count``, ``missed_writes``, ``shape``, ``dtype``, keywords.

    Made by :func:`shmstream.milk.open` and :func:`shmstream.milk.create`.
    ``shape`` is NumPy's (C order): milk's ``size[]`` reversed, so milk's
    x axis (size[0]) is the last one.
    """

    #: The registry's kind name (``shmstream list`` and ``stat``).
    kind = "milk"
    #: milk keeps one frame, written in place; never a GPU stream here.
    slots = 1
    gpu_enabled = False

    def __init__(self, native: Any, name: str, path: str, busy_timeout: float) -> None:
        self._native = native
        self.name = name
        self.path = path
        self.layout = Layout.from_dict(native.layout())
        self._busy = float(busy_timeout)
        self._busy_ns = int(self._busy * 1e9)
        self._spin = -1  # spin_us None: the wait policy's cap
        # what read_new checks before its native call, copied once
        self._shape, self._dtype = self.layout.shape, self.layout.dtype
        self._nbytes = self.layout.frame_bytes
        self._last = native.count()
        self._missed = 0
        self._pix: np.ndarray | None = None  # the read-only view of the pixels
        ino, created, _creator = native.identity()
        #: Which file this handle maps (its inode and milk's creationtime),
        #: as ``shmstream.stat("milk:NAME")["instance_id"]`` says.
        self.instance_id = instance_id(ino, created)

    # -- description -------------------------------------------------------

    @property
    def shape(self) -> tuple[int, ...]:
        return self.layout.shape

    @property
    def dtype(self) -> np.dtype:
        return self.layout.dtype

    @property
    def nbytes(self) -> int:
        return self.layout.frame_bytes

    @property
    def size(self) -> int:
        """Bytes of one frame (the stream API's ``size``)."""
        return self.layout.frame_bytes

    @property
    def history(self) -> int:
        """Frames :meth:`read_since` can return from milk's circular buffer:
        ``cb_size - 1`` (0 without one)."""
        return self.layout.cbsize - 1 if self.layout.cbsize >= 2 else 0

    def creator_alive(self) -> bool:
        """Whether the stream's CREATOR (milk's creatorPID), not its writer,
        still runs, judged by pid alone (milk records no start time)."""
        return _proc.alive(int(self._live().identity()[2]))

    producer_alive = creator_alive  # a stream's name, for the tools and the bridge

    def to_config(self) -> dict[str, Any]:
        """The stream's configuration as a shmstream stream's (what a bridge
        mirror is made from)."""
        return {
            "name": self.name,
            "shape": list(self.shape),
            "dtype": _dtypes.config_text(self.dtype),
            "notify": True,
        }

    @property
    def count(self) -> int:
        """milk's frame counter cnt0: writes published so far."""
        return int(self._live().count())

    @property
    def missed_writes(self) -> int:
        """Writes published after one this handle read and before the next
        one it read (``read_new`` and ``read`` both count)."""
        return self._missed

    @property
    def total_missed_writes(self) -> int:
        """:attr:`missed_writes` under the stream API's other name."""
        return self._missed

    @property
    def age(self) -> float:
        """Seconds since milk's writetime of the last frame; ``inf`` before
        the first (read from the file, as ``stat`` does)."""
        self._live()
        ns = int(_milk.peek(self.path)["writetime_ns"])
        return math.inf if not ns else max(0.0, time.time() - unix_ns(ns) / 1e9)

    @property
    def writing(self) -> bool:
        """milk's write flag: a writer is between ``write = 1`` and ``write = 0``."""
        return bool(self._live().writing())

    @property
    def semaphore(self) -> int | None:
        """The index this process claimed in the reader PID table, or None."""
        i = self._live().claimed()
        return None if i < 0 else int(i)

    @property
    def closed(self) -> bool:
        return bool(self._native.closed)

    @property
    def spin_us(self) -> float | None:
        """The most ``read_new`` (``read_new_view``, ``iter_since``) spins on
        cnt0 before it sleeps on its semaphore, in µs (docs/waiting.md picks
        the budget under it); None: ``SHMSTREAM_SPIN_US`` or the policy's cap."""
        return None if self._spin < 0 else self._spin / 1000

    @spin_us.setter
    def spin_us(self, value: float | None) -> None:
        self._spin = spin_ns(value)

    @property
    def spin_policy(self) -> dict:
        """This handle's wait policy state (docs/waiting.md), as a stream's."""
        return dict(self._live().spin_policy())

    # -- reading -----------------------------------------------------------

    def _out(self, out: np.ndarray | None) -> np.ndarray:
        if out is None:
            return np.empty(self._shape, self._dtype)
        if not isinstance(out, np.ndarray):
            raise ShmstreamTypeError(f"out must be a NumPy array, not {type(out).__name__}")
        if out.dtype != self._dtype or out.nbytes != self._nbytes or not out.flags.c_contiguous:
            raise ShmstreamValueError(
                f"out must be a C-contiguous {self.dtype} array of shape {self.shape}"
            )
        return out

    def _seen(self, cnt0: int) -> int:
        missed = max(0, cnt0 - self._last - 1) if cnt0 > self._last else 0
        self._missed += missed
        self._last = max(self._last, cnt0)
        return missed

    def _publication(self, arr: np.ndarray, info: tuple[int, int, int, int]) -> Publication:
        cnt0, cnt1, wtime, _atime = info
        missed = self._seen(cnt0)
        return Publication(arr, cnt0, cnt1, wtime / 1e9, missed)

    def read(self, out: np.ndarray | None = None) -> np.ndarray:
        """A copy of the current frame, never torn by a writer that raises
        milk's write flag (docs/milk.md, "Reading")."""
        arr = self._out(out)
        info = self._live().read_into(arr, self._busy)
        self._seen(info[0])
        return arr

    def read_publication(self, out: np.ndarray | None = None) -> Publication:
        """Like :meth:`read`, with milk's cnt0 as ``count``, cnt1 as
        ``frame_id`` and writetime (milk's clock, CLOCK_TAI) as ``write_time``."""
        arr = self._out(out)
        return self._publication(arr, self._live().read_into(arr, self._busy))

    def _pixels(self) -> np.ndarray:
        if self._pix is None:
            self._pix = self._live().pixels().view(self.dtype).reshape(self.shape)
        return self._pix

    def _wait_newer(self, timeout: float | None, after: int | None = None) -> None:
        """Wait until cnt0 exceeds ``after`` (None: the last count this handle saw)."""
        self._no_semaphores()
        self._live().wait_newer(self._last if after is None else after, timeout, self._spin)

    def _no_semaphores(self) -> None:
        if self.layout.nsem == 0:
            raise ShmstreamValueError(
                f"milk stream '{self.name}' has no semaphores to wait on (created with nsem=0); "
                "poll with read() and count, or create it with nsem >= 1"
            )

    def read_view(self, *, timeout: float | None = None) -> MilkReadView:
        """``with s.read_view() as pub:`` a zero-copy :class:`Publication` of
        the current frame: ``pub.payload`` is a read-only view of the
        stream's pixels, valid inside the block only; the exit raises
        FrameOverwrittenError if a writer touched the frame meanwhile.
        ``timeout`` is accepted for the stream API's sake (a read never waits
        for a frame; it waits up to ``busy_timeout`` for a writer's flag)."""
        return MilkReadView(self, False, timeout)

    def read_new_view(self, *, timeout: float | None = None) -> MilkReadView:
        """:meth:`read_view` of the first frame newer than what this handle
        last saw (the rule of :meth:`read_new`); TimeoutError if none comes
        within ``timeout`` seconds."""
        return MilkReadView(self, True, timeout)

    def read_new(self, timeout: float | None = None, out: np.ndarray | None = None) -> np.ndarray:
        """The first frame newer than the last one this handle saw (its last
        read or write, or the count at open); waits on this process's
        semaphore (claimed on first use) at most ``timeout`` seconds
        (None: for ever). TimeoutError when none comes."""
        arr = self._out(out)
        self._no_semaphores()
        # The hot loop: one native call spins, waits and copies with the GIL
        # released once; after the wake only this bookkeeping runs (_seen inline).
        last = self._last
        cnt0 = self._live().read_new_into(arr, last, timeout, self._busy_ns, self._spin)
        if cnt0 > last:
            if cnt0 > last + 1:
                self._missed += cnt0 - last - 1
            self._last = cnt0
        return arr

    def read_new_publication(
        self, timeout: float | None = None, out: np.ndarray | None = None
    ) -> Publication:
        arr = self._out(out)
        self._no_semaphores()
        info = self._live().read_new_info(arr, self._last, timeout, self._busy_ns, self._spin)
        return self._publication(arr, info)

    def claim(self, preferred: int | None = None) -> int:
        """Claim a semaphore in the reader PID table now (``read_new`` does it
        on first use): this process's entry, ``preferred`` if free, else the
        first free one; a dead reader's entry is free."""
        return int(self._live().claim(-1 if preferred is None else int(preferred)))

    def release(self) -> None:
        """Give the claimed semaphore back (close does too)."""
        self._live().release()

    # -- writing -------------------------------------------------------------

    def write(self, array: Any, atime: float | None = None) -> None:
        """Publish a frame as milk's writers do: write flag, pixels, circular
        buffer, times, cnt0 + 1, flag down, then post every semaphore.
        ``atime`` (seconds, milk's clock) is the acquisition time; None: now."""
        if not hasattr(array, "__len__") and not hasattr(array, "__array__"):
            raise ShmstreamTypeError(f"write takes an array, not {type(array).__name__}")
        arr = np.asarray(array)
        if arr.shape != self.shape:
            raise ShmstreamValueError(f"frame of shape {arr.shape}; the stream's is {self.shape}")
        if arr.dtype != self.dtype:
            raise ShmstreamValueError(f"frame of dtype {arr.dtype}; the stream's is {self.dtype}")
        arr = np.ascontiguousarray(arr)
        self._live().write(arr, -1 if atime is None else int(atime * 1e9))
        self._last = max(self._last, self._native.count())

    # -- lifetime ------------------------------------------------------------

    def _live(self) -> Any:
        if self._native.closed:
            raise HandleClosedError(
                f"milk stream '{self.name}' is closed; open it again with shmstream.milk.open"
            )
        return self._native

    def close(self) -> None:
        """Release the semaphore claim and unmap; idempotent. A view from
        :meth:`read_view` still held keeps the mapping until it is dropped."""
        self._pix = None
        self._native.close()

    def unlink(self) -> None:
        """Remove the stream's file (handles keep their mapping)."""
        unlink(self.name, os.path.dirname(self.path))

    def __enter__(self) -> MilkStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"count={self.count}"
        return f"<MilkStream '{self.name}' {self.shape} {self.dtype} {state} at {self.path}>"


def open(name: str, *, dir: str | None = None, busy_timeout: float = BUSY_TIMEOUT) -> MilkStream:
    """Open milk stream ``name`` (the file ``<dir>/<name>.im.shm``; ``dir``
    defaults to milk's: :func:`shm_dir`)."""
    path = path_of(name, dir)
    try:
        native = _milk.Stream.open(path)
    except OSError as exc:  # with the next step: missing directory, permissions...
        told = _errors.on_open(exc, name, path, dir)
        if told is None:
            raise
        raise told from None
    return MilkStream(native, name, path, busy_timeout)


def create(
    name: str,
    shape: int | tuple[int, ...],
    dtype: Any = np.float32,
    *,
    dir: str | None = None,
    nsem: int = 10,
    nkw: int = 16,
    cb_size: int = 0,
    mode: int = 0o600,
    busy_timeout: float = BUSY_TIMEOUT,
) -> MilkStream:
    """Create milk stream ``name`` that milk's library opens: 1 to 3 axes
    (NumPy's order), a dtype milk has (:data:`~shmstream.milk.dtypes.CODE_TO_DTYPE`),
    ``nsem`` reader semaphores (milk's default 10), ``nkw`` keyword slots,
    ``cb_size`` frames of milk's fast circular buffer (0: none). The file is
    created ``mode`` (0600: only this user; milk itself makes 0666)."""
    shp, nsem, nkw, cb_size, mode = check_create(shape, nsem, nkw, cb_size, mode)
    code = code_of(dtype)
    path = path_of(name, dir)
    try:
        native = _milk.Stream.create(path, name, list(shp[::-1]), code, nsem, nkw, cb_size, mode)
    except ShmstreamFileExistsError:
        raise ShmstreamFileExistsError(
            errno.EEXIST,
            f"milk stream '{name}' exists ({path}); open it with shmstream.milk.open, "
            "or unlink it first",
        ) from None
    except OSError as exc:
        told = _errors.on_create(exc, name, path, dir)
        if told is None:
            raise
        raise told from None
    return MilkStream(native, name, path, busy_timeout)


__all__ = ["BUSY_TIMEOUT", "MilkStream", "create", "open", "shm_dir", "unlink"]
