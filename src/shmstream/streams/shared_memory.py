"""Named latest-value streams: the handle and ``create``, which makes one
(the pyshmem-compatible surface; ``open``, ``unlink`` and the temporary
``stream`` are in ``_lifecycle``).

A stream is one shared-memory segment (``/dev/shm/shmstream-<readable>-<hash>``)
holding a header and N payload slots (2 by default) of a fixed shape and
dtype. Writers publish under a cross-process lock, filling the slot
after the published one; readers take consistent snapshots of the published
slot without the lock (per-slot seqlocks) and fall back to it after a few
torn tries. All of that lives in the C core; the Python side checks
arguments (``_checks``), keeps per-handle bookkeeping (missed writes,
re-entrant lock depth: ``_lockstate``) and turns the core's answers into the
exceptions a Python user expects. Reading, locking and writing, and waiting
live in the mixins ``_reading``, ``_writing`` and ``_waiting``. GPU streams
(``shmstream.gpu``) subclass the handle and register with ``_gpu``.

Hot path: :meth:`SharedMemory.write`, :meth:`SharedMemory.read` and
``read_new`` are a few attribute checks and one native call that checks the
array against the dtype and shape bound at open and copies (plus
``np.empty`` for a read without ``out=``); an argument that is not a
C-contiguous ndarray of the stream's dtype and shape takes the checked path.

Differences from pyshmem 1.4.0 (a strict superset otherwise):

* ``read_new`` is level-triggered against the last publication this handle
  saw (its last read, its own last write, or the count at open), so a write
  that lands just before the call is returned instead of waited past.
* ``notify`` is stored in the header and reported by ``stat``, ``to_config``
  and ``describe``, but every stream wakes sleeping readers: a writer makes a
  futex syscall only when a reader is actually asleep, so the option costs
  nothing and is kept only as recorded intent.
* The write lock is re-entrant per thread *per stream generation in a
  process*, as in pyshmem: two handles on one stream in one thread share it.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from types import TracebackType
from typing import Any

import numpy as np

from .. import _native
from ..common import _checks, _dtypes, _space
from ..common._checks import spin_ns
from ..errors import (
    HandleClosedError,
    LockHeldError,
    ShmstreamPermissionError,
    ShmstreamTypeError,
    ShmstreamValueError,
    StaleStreamError,
)
from ._checks import check_config, check_create_flags, check_history, check_slots
from ._gpu import GPU
from ._history import History
from ._lockstate import HANDLES, lock_state_for
from ._reading import Reading
from ._status import Status
from ._waiting import Waiting
from ._writing import Writing

__all__ = ["SharedMemory", "create"]

# Hot-path globals bound once.
_get_ident = threading.get_ident

#: The keys of a stream's configuration (to_config, create_from_config).
CONFIG_KEYS = ("name", "shape", "dtype", "gpu_device", "cpu_mirror", "notify", "slots", "history")


class SharedMemory(Reading, Writing, Waiting, History, Status):
    """A handle on a named stream, made by :func:`create` or :func:`open`.

    Public attributes: ``name``, ``shape`` (tuple), ``dtype`` (``np.dtype``),
    ``size`` (payload bytes), ``gpu_device`` (None), ``gpu_enabled``,
    ``cpu_mirror``, ``owner`` (this handle created the stream) and
    ``readonly``. ``close()`` drops this process's mapping; ``unlink()``
    destroys the name.
    """

    def __init__(  # *args/**kwargs: SharedMemory(name=..., shape=...) gets the next step
        self,
        segment: Any = None,
        *args: Any,
        owner: bool = False,
        readonly: bool = False,
        **kwargs: Any,
    ) -> None:
        if not isinstance(segment, _native.Segment) or args or kwargs:
            raise ShmstreamTypeError(
                "SharedMemory handles are made by shmstream.create() or "
                "shmstream.open(), not by calling the class"
            )
        dtype = _dtypes.of_segment(segment)
        shape = tuple(int(d) for d in segment.shape)
        self.name = segment.name
        self.shape = shape
        self.dtype = dtype
        self.size = int(segment.payload_bytes)
        flags = int(segment.flags)
        self.gpu_enabled = bool(flags & _native.FLAG_GPU)
        self.gpu_device = None
        self.cpu_mirror = not self.gpu_enabled or bool(flags & _native.FLAG_CPU_MIRROR)
        self.owner = bool(owner)
        self.readonly = bool(readonly)
        self._flags = flags
        self._segname = segment.segname
        self._instance_id = segment.instance_id
        self._creator_pid = int(segment.creator_pid)
        self._creator_ticks = int(segment.creator_start_ticks)
        # Hot-path state. _seg is None once closed; _wseg is None when
        # closed or read-only, so write() tests one attribute.
        self._seg = segment
        self._wseg = None if readonly else segment
        self._lk = lock_state_for(self._segname, self._instance_id)
        self._held = 0  # lock levels taken through this handle
        self._writing = False  # a write_view of this handle is open
        self._views = {}  # slot -> payload view, on demand
        self._ro_views = {}  # slot -> read-only view
        # read_new waits for a count above max(_last_read, _wrote): the last
        # publication this handle read (the count at open before any read)
        # or wrote itself.
        self._last_read = int(segment.count)
        self._wrote = 0
        self._missed = 0
        self._total_missed = 0
        self._spin = -1  # native default (SHMSTREAM_SPIN_US or built in)
        # The hot path (write, read, read_new) hands an ndarray of exactly
        # this dtype and shape to one native call that checks and copies.
        segment.bind_array(dtype, list(shape))
        self._auto_unlink = False
        HANDLES.add(self)

    # -- construction (module functions create/open are the public doors) --

    @classmethod
    def create_from_config(cls, config: dict[str, Any]) -> SharedMemory:
        """Create a stream from a :meth:`to_config` dict (or a hand-written
        one with ``name`` and ``shape``; ``dtype`` defaults to float32).
        A missing ``name`` or ``shape``, or a key :meth:`to_config` does not
        write, is a ValueError naming it."""
        config = check_config(config, CONFIG_KEYS, ("name", "shape"))
        return create(
            config["name"],
            shape=config["shape"],
            dtype=config.get("dtype", "float32"),
            gpu_device=config.get("gpu_device"),
            cpu_mirror=config.get("cpu_mirror"),
            notify=config.get("notify", False),
            slots=config.get("slots"),
            history=config.get("history", 0),
        )

    # -- errors --

    def _closed_error(self, operation: str) -> RuntimeError:
        return HandleClosedError(
            f"cannot {operation} closed shared memory {self.name!r}; "
            f"reopen it with shmstream.open({self.name!r})"
        )

    def _check_open(self, operation: str) -> _native.Segment:
        seg = self._seg
        if seg is None:
            raise self._closed_error(operation)
        return seg

    def _check_writable(self, operation: str) -> _native.Segment:
        seg = self._seg
        if seg is None:
            raise self._closed_error(operation)
        if self.readonly:
            raise ShmstreamPermissionError(
                f"cannot {operation} read-only shared memory {self.name!r}; "
                f"open it with shmstream.open({self.name!r}) to write"
            )
        return seg

    def _holds_lock(self) -> bool:
        owner = self._lk.owner
        return owner is not None and owner == _get_ident()

    # -- identity and metadata --

    @property
    def instance_id(self) -> str:
        """32 hex characters naming this generation of the stream; a stream
        created again under the same name gets a new one."""
        return self._instance_id

    @property
    def notify(self) -> bool:
        """The ``notify`` intent recorded at create. Readers are woken on
        every stream regardless (see the module notes)."""
        return bool(self._flags & _native.FLAG_NOTIFY)

    @property
    def segment(self) -> str:
        """The POSIX shared-memory name behind this stream."""
        return self._segname

    @property
    def closed(self) -> bool:
        return self._seg is None

    @property
    def slots(self) -> int:
        """Payload slots (a writer fills one while readers copy another)."""
        return int(self._check_open("read slots of").slot_count)

    @property
    def spin_us(self) -> float | None:
        """How long blocking reads spin before sleeping, in microseconds.
        None uses the default (``SHMSTREAM_SPIN_US`` or the built-in one)."""
        return None if self._spin < 0 else self._spin / 1000

    @spin_us.setter
    def spin_us(self, value: float | None) -> None:
        self._spin = spin_ns(value)

    def __repr__(self) -> str:
        return (
            f"SharedMemory(name={self.name!r}, shape={self.shape!r}, "
            f"dtype={str(self.dtype)!r}, gpu_device={self.gpu_device!r})"
        )

    def to_config(self) -> dict[str, Any]:
        """The stream's configuration, for :meth:`create_from_config`."""
        return {
            "name": self.name,
            "shape": list(self.shape),
            "dtype": _dtypes.config_text(self.dtype),
            "gpu_device": self.gpu_device,
            "cpu_mirror": self.cpu_mirror,
            "notify": self.notify,
            # Only when not the default, so pyshmem-shaped configs stay as they were.
            **(
                {"slots": self._seg.slot_count}
                if self._seg is not None
                and self._seg.slot_count != _native.DEFAULT_SLOTS
                and not self._seg.history
                else {}
            ),
            **(
                {"history": self._seg.history}
                if self._seg is not None and self._seg.history
                else {}
            ),
        }

    # -- lifetime --

    def close(self, *, timeout: float = 5.0) -> None:
        """Drop this handle's mapping (idempotent); the stream stays. Reads
        blocked on this handle in other threads raise RuntimeError at once.
        ``timeout`` is accepted for pyshmem compatibility."""
        seg = self._seg
        if seg is None:
            return
        state = self._lk
        if state.owner is not None and self._held:
            if state.owner != _get_ident():
                raise LockHeldError(
                    f"cannot close shared memory {self.name!r} while another thread owns its lock"
                )
            if self._writing:
                self._writing = False
                seg.write_abort()
            state.depth -= self._held
            self._held = 0
            if state.depth <= 0:
                state.depth = 0
                state.owner = None
                seg.unlock()
        self._seg = None
        self._wseg = None
        self._views = {}
        self._ro_views = {}
        seg.cancel()  # wakes this handle's blocked readers with RuntimeError

    def unlink(self) -> None:
        """Destroy the stream (this handle is closed first). Raises
        StaleStreamError if the name now belongs to a newer generation."""
        if self.readonly:
            raise ShmstreamPermissionError(
                f"cannot unlink read-only shared memory {self.name!r}; "
                f"use shmstream.unlink({self.name!r})"
            )
        self.close()
        try:
            current = _native.Segment.peek(self._segname)
        except FileNotFoundError:
            return
        except Exception:  # noqa: BLE001 - corrupt or unfinished: remove it
            current = None
        if current is not None and current.instance_id != self._instance_id:
            raise StaleStreamError(
                f"stream {self.name!r} has been replaced by a newer generation; "
                "this handle no longer owns the name"
            )
        _native.unlink_segname(self._segname)

    def delete(self) -> None:
        """Alias of :meth:`unlink`."""
        self.unlink()

    def __enter__(self) -> SharedMemory:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._auto_unlink:
            self.unlink()
        else:
            self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - __del__ must not raise
            pass


# ---- module functions ------------------------------------------------------


def create(
    name: str,
    *,
    shape: Sequence[int] | int,
    dtype: Any = np.float32,
    size: int | None = None,
    gpu_device: str | int | None = None,
    cpu_mirror: bool | None = None,
    auto_unlink: bool = False,
    notify: bool = False,
    mode: int = 0o600,
    slots: int | None = None,
    history: int = 0,
) -> SharedMemory:
    """Create a stream named ``name`` holding arrays of ``shape`` and
    ``dtype`` (any fixed-size NumPy dtype, structured ones included), zeroed.

    ``size`` is an optional check of the payload bytes. ``auto_unlink=True``
    makes the handle's ``with`` block destroy the stream on exit. ``notify``
    is recorded for ``stat``/``to_config`` (readers are always woken).
    ``mode`` sets the permission bits (0o600 by default). ``slots`` payload
    slots (default 2) let a writer fill one while readers copy the last
    published one, so a writer that never pauses does not tear every read;
    ``slots=1`` halves the memory and makes readers fall back to the lock
    more often under such a writer. ``history=N`` keeps the last N
    publications for readers that must see every frame (``read_since``;
    docs/history.md): N + 1 slots, ``slots`` left out. Raises
    FileExistsError if the name exists (use :func:`open`).
    """
    _checks.check_name(name)
    dims = _checks.check_shape(shape)
    dt = _checks.check_dtype(dtype)
    if dt.subdtype is not None:  # '(2,)f4' -> base dtype, longer shape
        dims = _checks.check_ndim(dims + tuple(dt.shape))
        dt = dt.base
    expected = math.prod(dims) * dt.itemsize
    if size is not None and _checks.check_int("size", size, minimum=0) != expected:
        raise ShmstreamValueError(
            f"size does not match shape and dtype: expected {expected}, got {size}"
        )
    if expected >= 2**62:
        raise ShmstreamValueError(f"a payload of {expected} bytes is too large")
    mode = _checks.check_mode(mode)
    auto_unlink, notify, cpu_mirror = check_create_flags(auto_unlink, notify, cpu_mirror)
    history = check_history(history, slots, gpu_device is not None)
    slots = check_slots(_native.DEFAULT_SLOTS if slots is None else slots)
    if gpu_device is not None:  # CUDA streams: shmstream.gpu (registered)
        if slots not in (_native.DEFAULT_SLOTS, GPU.slots):
            raise ShmstreamValueError(
                f"a GPU stream has {GPU.slots} slots (its device double "
                f"buffer), got slots={slots!r}"
            )
        assert GPU.create is not None, "shmstream.gpu is imported with shmstream"
        handle = GPU.create(name, dims, dt, gpu_device, cpu_mirror, notify, mode)
        handle._auto_unlink = auto_unlink
        return handle
    flags = _native.FLAG_NOTIFY if notify else 0
    try:
        with _space.room_for(
            name,
            "stream",
            _space.segment_bytes(expected, slots, history),
            f"{history + 1 if history else slots} slot(s) of {expected} bytes, each rounded "
            f"up to a page, {'their records, ' if history else ''}and a 4096-byte header",
        ):
            segment = _native.Segment.create(
                name,
                _native.KIND_STREAM,
                list(dims),
                dt.itemsize,
                _dtypes.encode(dt),
                flags,
                mode,
                0,
                slots,
                history,
            )
    except FileExistsError:
        raise _checks.duplicate_name_error(name) from None
    handle = SharedMemory(segment, owner=True)
    handle._auto_unlink = auto_unlink
    return handle
