"""Named latest-value streams: the pyshmem-compatible surface.

A stream is one shared-memory segment (``/dev/shm/shmstream-<readable>-<hash>``)
holding a header and N payload slots (2 by default) of a fixed shape and
dtype. Writers publish under a robust cross-process lock, filling the slot
after the published one; readers take consistent snapshots of the published
slot without the lock (per-slot seqlocks) and fall back to it after a few
torn tries. All of that lives in the C core; this module checks arguments, keeps
per-handle bookkeeping (missed writes, re-entrant lock depth) and turns the
core's answers into the exceptions a Python user expects.

Hot path: :meth:`SharedMemory.write` and :meth:`SharedMemory.read` are a few
attribute checks and one native call (plus ``np.empty`` for a read without
``out=``). Everything they need is computed when the handle is made.

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

import asyncio
import dataclasses
import math
import operator
import os
import threading
import time
import weakref
from types import TracebackType
from typing import Any, Iterator, Sequence

import numpy as np

from . import _dtypes, _gpu, _native, _proc
from .errors import CorruptStreamError, FrameOverwrittenError, StaleStreamError

__all__ = [
    "GPU_SUPPORTED_DTYPES",
    "Publication",
    "SharedMemory",
    "create",
    "gpu_available",
    "list_streams",
    "locked_many",
    "open",
    "purge",
    "stat",
    "stream",
    "unlink",
    "unlink_quiet",
]

GPU_SUPPORTED_DTYPES = _gpu.GPU_SUPPORTED_DTYPES
gpu_available = _gpu.gpu_available

_SHM_DIR = "/dev/shm"
_FILE_PREFIX = _native.SEGMENT_PREFIX.lstrip("/")
_MAX_FRAME_ID = 2**64 - 1
_STATE_NAMES = {
    _native.STATE_VALID: "valid",
    _native.STATE_ABORTED: "aborted",
    _native.STATE_ABANDONED: "abandoned",
}
_KIND_NAMES = {
    _native.KIND_STREAM: "stream",
    _native.KIND_CHANNEL: "channel",
    _native.KIND_ARRAY: "array",
}
# How often read_new_async's worker thread looks up from the native wait to
# see whether its task was cancelled.
_ASYNC_CHUNK_S = 0.25

# Hot-path globals bound once.
_ndarray = np.ndarray
_empty = np.empty
_get_ident = threading.get_ident


@dataclasses.dataclass(frozen=True)
class Publication:
    """A payload snapshot and the metadata published with it.

    ``payload``, ``count``, ``frame_id`` and ``write_time`` come from the same
    write. ``missed_publications`` counts the writes skipped since this
    handle's previous read, like :attr:`SharedMemory.missed_writes`.
    ``read_publication(safe=False)`` returns a live view of shared memory as
    ``payload``; it must not outlive the lock scope.
    """

    payload: Any
    count: int
    frame_id: int
    write_time: float
    missed_publications: int
    #: "valid" for every read but :meth:`SharedMemory.read_last_complete`,
    #: where "aborted" or "abandoned" says that a later write failed and this
    #: is the last complete publication before it.
    state: str = "valid"


# ---- argument checks -------------------------------------------------------


def _check_name(name: Any) -> str:
    if not isinstance(name, str):
        raise TypeError(f"stream name must be a str, not {type(name).__name__}")
    if not name:
        raise ValueError("stream name must be a non-empty string")
    if "\x00" in name:
        raise ValueError(f"stream name {name!r} contains a NUL character")
    try:
        size = len(name.encode("utf-8"))
    except UnicodeEncodeError:
        raise ValueError(
            f"stream name {name!r} cannot be encoded as UTF-8 (lone surrogate)"
        ) from None
    if size > _native.MAX_NAME_BYTES:
        raise ValueError(
            f"stream name is too long: {size} UTF-8 bytes, at most "
            f"{_native.MAX_NAME_BYTES} allowed"
        )
    return name


def _check_dim(dim: Any) -> int:
    if isinstance(dim, (bool, np.bool_)):
        raise TypeError(f"shape dimensions must be integers, not {dim!r}")
    try:
        value = operator.index(dim)
    except TypeError:
        raise TypeError(
            f"shape dimensions must be integers, not {type(dim).__name__} {dim!r}"
        ) from None
    if value < 0:
        raise ValueError(f"shape dimensions must be non-negative, got {value}")
    return value


def _check_shape(shape: Any) -> tuple[int, ...]:
    if isinstance(shape, (str, bytes, bool, np.bool_)):
        raise TypeError(f"shape must be a tuple of integers, not {shape!r}")
    if isinstance(shape, (int, np.integer)):
        return (_check_dim(shape),)
    try:
        dims = tuple(_check_dim(d) for d in shape)
    except TypeError as exc:
        if "shape dimensions" in str(exc):
            raise
        raise TypeError(
            f"shape must be a tuple of integers, not {type(shape).__name__}"
        ) from None
    return dims


def _check_dtype(dtype: Any) -> np.dtype:
    if isinstance(dtype, str) and dtype[:1] in "[(":
        try:  # the description text that to_config()/stat() give back
            return _dtypes.normalize(_dtypes.decode(dtype))
        except (ValueError, SyntaxError, TypeError):
            pass
    return _dtypes.normalize(dtype)


def _check_u64(what: str, value: Any, minimum: int = 0) -> int:
    """An integer in [minimum, 2**64): the type of every shared counter."""
    try:
        checked = operator.index(value)
    except TypeError:
        raise TypeError(f"{what} must be an integer, not {type(value).__name__}") from None
    if not minimum <= checked <= _MAX_FRAME_ID:
        raise ValueError(f"{what} must be in [{minimum}, 2**64), got {checked}")
    return checked


def _check_frame_id(frame_id: Any) -> int:
    return _check_u64("frame_id", frame_id)


def _check_after(after: Any) -> int:
    try:
        value = int(operator.index(after))
    except TypeError:
        try:
            value = int(after)
        except (TypeError, ValueError, OverflowError):
            raise ValueError("after must be an integer") from None
    if value < 0:
        raise ValueError("after must be non-negative")
    return value


def _spin_ns(spin_us: Any) -> int:
    if spin_us is None:
        return -1
    value = float(spin_us)
    if not value >= 0:
        raise ValueError(f"spin_us must be >= 0 or None, got {spin_us!r}")
    return int(value * 1000)


def _dtype_text(dt: np.dtype) -> str:
    """pyshmem-style dtype text ('float32') that gives ``dt`` back through
    ``create(dtype=...)``; the exact description where the short name would
    lose something (byte order, structure)."""
    text = _dtypes.plain_name(dt)
    try:
        if _check_dtype(text) == dt:
            return text
    except (TypeError, ValueError):
        pass
    return _dtypes.encode(dt) if dt.names is not None else dt.str


def _missing_name_error(name: str) -> FileNotFoundError:
    exc = FileNotFoundError(
        f"shared memory {name!r} does not exist; "
        f"create it with shmstream.create({name!r}, ...) first"
    )
    exc.errno = 2  # ENOENT
    return exc


def _duplicate_name_error(name: str) -> FileExistsError:
    exc = FileExistsError(
        f"shared memory {name!r} already exists; "
        f"use shmstream.open({name!r}) to attach to it"
    )
    exc.errno = 17  # EEXIST
    return exc


def _remaining(deadline: float | None) -> float | None:
    return None if deadline is None else max(0.0, deadline - time.monotonic())


# ---- the per-process lock state -------------------------------------------


class _LockState:
    """Which thread of this process holds a stream's lock, and how deeply.

    The native lock is a robust pthread mutex owned per thread; re-entrancy
    is tracked here. One state per stream generation per process, shared by
    every handle on it, so two handles in one thread nest like one.
    """

    __slots__ = ("owner", "depth", "__weakref__")

    def __init__(self) -> None:
        self.owner: int | None = None
        self.depth = 0


_LOCK_STATES: "weakref.WeakValueDictionary[tuple[str, str], _LockState]" = (
    weakref.WeakValueDictionary()
)
_LOCK_STATES_GUARD = threading.Lock()
_HANDLES: "weakref.WeakSet[SharedMemory]" = weakref.WeakSet()


def _lock_state_for(segname: str, instance_id: str) -> _LockState:
    key = (segname, instance_id)
    with _LOCK_STATES_GUARD:
        state = _LOCK_STATES.get(key)
        if state is None:
            state = _LockState()
            _LOCK_STATES[key] = state
        return state


def _after_fork_in_child() -> None:
    # The child's only thread holds none of the parent's locks (the mutex in
    # shared memory belongs to the parent's thread), so it starts unlocked.
    global _LOCK_STATES_GUARD
    _LOCK_STATES_GUARD = threading.Lock()
    for state in list(_LOCK_STATES.values()):
        state.owner = None
        state.depth = 0
    for handle in list(_HANDLES):
        handle._held = 0
        handle._writing = False


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


# ---- context managers ------------------------------------------------------


class _LockScope:
    """Returned by :meth:`SharedMemory.locked` (a class, not a generator:
    it is entered on every frame of a pipeline)."""

    __slots__ = ("_handle", "_timeout")

    def __init__(self, handle: SharedMemory, timeout: float | None) -> None:
        self._handle = handle
        self._timeout = timeout

    def __enter__(self) -> SharedMemory:
        self._handle.acquire(timeout=self._timeout)
        return self._handle

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self._handle.release()


class _ReadView:
    """Returned by :meth:`SharedMemory.read_view` and
    :meth:`SharedMemory.read_new_view`."""

    __slots__ = ("_handle", "_new", "_timeout", "_spin", "_slot", "_slot_seq")

    def __init__(self, handle: SharedMemory, new: bool, timeout: float | None,
                 spin: int) -> None:
        self._handle = handle
        self._new = new
        self._timeout = timeout
        self._spin = spin
        self._slot = -1
        self._slot_seq = 0

    def __enter__(self) -> Publication:
        handle = self._handle
        seg = handle._check_open("read a view of")
        after = handle._seen if self._new else 0
        self._slot, self._slot_seq, count, frame_id, wt = seg.view(
            after, self._new, self._timeout, self._spin, handle._holds_lock()
        )
        missed = handle._record(count)
        return Publication(handle._readonly_view(seg, self._slot), count, frame_id, wt / 1e9, missed)

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        seg = self._handle._seg
        if exc_type is None and seg is not None and not seg.view_valid(self._slot, self._slot_seq):
            raise FrameOverwrittenError(
                f"the frame of {self._handle.name!r} was overwritten while its view was in "
                "use (a writer lapped the reader); copy what you need inside the block, "
                "create the stream with more slots, or use read() for a copy"
            )


class _WriteView:
    """Returned by :meth:`SharedMemory.write_view_locked` and, with
    ``take_lock``, by :meth:`SharedMemory.write_view`."""

    __slots__ = ("_handle", "_frame_id", "_timeout", "_take_lock")

    def __init__(
        self,
        handle: SharedMemory,
        frame_id: int | None,
        timeout: float | None,
        take_lock: bool,
    ) -> None:
        self._handle = handle
        self._frame_id = frame_id
        self._timeout = timeout
        self._take_lock = take_lock

    def __enter__(self) -> Any:
        handle = self._handle
        if not self._take_lock:
            return handle._begin_write_view(self._frame_id, "write_view_locked()")
        handle._check_writable("write to")
        handle.acquire(timeout=self._timeout)
        try:
            return handle._begin_write_view(self._frame_id, "write_view()")
        except BaseException:
            handle.release()
            raise

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        handle = self._handle
        try:
            if exc_type is None:
                handle._commit_write_view(self._frame_id)
            else:
                handle._abort_write_view()
        finally:
            if self._take_lock:
                handle.release()


# ---- the handle ------------------------------------------------------------


class SharedMemory:
    """A handle on a named stream, made by :func:`create` or :func:`open`.

    Public attributes: ``name``, ``shape`` (tuple), ``dtype`` (``np.dtype``),
    ``size`` (payload bytes), ``gpu_device`` (None), ``gpu_enabled``,
    ``cpu_mirror``, ``owner`` (this handle created the stream) and
    ``readonly``. ``close()`` drops this process's mapping; ``unlink()``
    destroys the name.
    """

    def __init__(
        self, segment: Any, *, owner: bool = False, readonly: bool = False
    ) -> None:
        if not isinstance(segment, _native.Segment):
            raise TypeError(
                "SharedMemory handles are made by shmstream.create() or "
                "shmstream.open(), not by calling the class"
            )
        dtype = _dtypes.decode(segment.dtype)
        shape = tuple(int(d) for d in segment.shape)
        self.name: str = segment.name
        self.shape: tuple[int, ...] = shape
        self.dtype: np.dtype = dtype
        self.size: int = int(segment.payload_bytes)
        flags = int(segment.flags)
        self.gpu_enabled: bool = bool(flags & _native.FLAG_GPU)
        self.gpu_device: str | None = None
        self.cpu_mirror: bool = (
            not self.gpu_enabled or bool(flags & _native.FLAG_CPU_MIRROR)
        )
        self.owner: bool = bool(owner)
        self.readonly: bool = bool(readonly)
        self._flags = flags
        self._segname: str = segment.segname
        self._instance_id: str = segment.instance_id
        self._creator_pid: int = int(segment.creator_pid)
        self._creator_ticks: int = int(segment.creator_start_ticks)
        # Hot-path state. _seg is None once closed; _wseg is None when
        # closed or read-only, so write() tests one attribute.
        self._seg: _native.Segment | None = segment
        self._wseg: _native.Segment | None = None if readonly else segment
        self._lk = _lock_state_for(self._segname, self._instance_id)
        self._held = 0  # lock levels taken through this handle
        self._writing = False  # a write_view of this handle is open
        self._views: dict[int, np.ndarray] = {}  # slot -> payload view, on demand
        self._ro_views: dict[int, np.ndarray] = {}  # slot -> read-only view
        # read_new waits for a count above max(_last_read, _wrote): the last
        # publication this handle read (the count at open before any read)
        # or wrote itself.
        self._last_read = int(segment.count)
        self._wrote = 0
        self._missed = 0
        self._total_missed = 0
        self._spin: int = -1  # native default (SHMSTREAM_SPIN_US or built in)
        self._auto_unlink = False
        _HANDLES.add(self)

    # -- construction (module functions create/open are the public doors) --

    @classmethod
    def _create(
        cls,
        name: str,
        *,
        shape: Any,
        dtype: Any = np.float32,
        size: int | None = None,
        gpu_device: Any = None,
        cpu_mirror: bool | None = None,
        notify: bool = False,
        mode: int = 0o600,
        slots: int = _native.DEFAULT_SLOTS,
    ) -> SharedMemory:
        _check_name(name)
        dims = _check_shape(shape)
        dt = _check_dtype(dtype)
        if dt.subdtype is not None:  # 'f4,(2,)' -> base dtype, longer shape
            dims = dims + tuple(dt.shape)
            dt = dt.base
        if len(dims) > _native.MAX_NDIM:
            raise ValueError(
                f"shape {dims} has {len(dims)} dimensions; at most "
                f"{_native.MAX_NDIM} are supported"
            )
        expected = math.prod(dims) * dt.itemsize
        if size is not None:
            if isinstance(size, bool) or int(size) != expected:
                raise ValueError(
                    "size does not match shape and dtype: "
                    f"expected {expected}, got {size}"
                )
        if expected >= 2**62:
            raise ValueError(f"a payload of {expected} bytes is too large")
        if not isinstance(mode, int) or not 0 < mode <= 0o777:
            raise ValueError(f"mode must be permission bits like 0o600, got {mode!r}")
        if isinstance(slots, bool) or not isinstance(slots, int) or not (
            1 <= slots <= _native.MAX_SLOTS
        ):
            raise ValueError(f"slots must be an int from 1 to {_native.MAX_SLOTS}, got {slots!r}")
        if gpu_device is not None:  # GPU hook: CUDA streams live in _gpu
            if slots not in (_native.DEFAULT_SLOTS, _gpu.DEVICE_SLOTS):
                raise ValueError(
                    f"a GPU stream has {_gpu.DEVICE_SLOTS} slots (its device double "
                    f"buffer), got slots={slots!r}"
                )
            return _gpu.create(name, dims, dt, gpu_device, cpu_mirror, notify, mode)
        flags = _native.FLAG_NOTIFY if notify else 0
        try:
            segment = _native.Segment.create(
                name, _native.KIND_STREAM, list(dims), dt.itemsize,
                _dtypes.encode(dt), flags, mode, 0, slots,
            )
        except FileExistsError:
            raise _duplicate_name_error(name) from None
        return cls(segment, owner=True)

    @classmethod
    def _open(
        cls, name: str, *, gpu_device: Any = None, readonly: bool = False
    ) -> SharedMemory:
        _check_name(name)
        try:
            segment = _native.Segment.open(name, _native.KIND_STREAM, bool(readonly))
        except FileNotFoundError:
            raise _missing_name_error(name) from None
        if int(segment.flags) & _native.FLAG_GPU:  # GPU hook: CUDA streams live in _gpu
            return _gpu.open(segment, name, gpu_device, bool(readonly))
        return cls(segment, readonly=bool(readonly))

    @classmethod
    def create_from_config(cls, config: dict[str, Any]) -> SharedMemory:
        """Create a stream from a :meth:`to_config` dict (or a hand-written
        one with ``name`` and ``shape``; ``dtype`` defaults to float32)."""
        return create(
            config["name"],
            shape=config["shape"],
            dtype=config.get("dtype", "float32"),
            gpu_device=config.get("gpu_device"),
            cpu_mirror=config.get("cpu_mirror"),
            notify=config.get("notify", False),
            slots=config.get("slots", _native.DEFAULT_SLOTS),
        )

    # -- errors --

    def _closed_error(self, operation: str) -> RuntimeError:
        return RuntimeError(
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
            raise PermissionError(
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
    def spin_us(self) -> float | None:
        """How long blocking reads spin before sleeping, in microseconds.
        None uses the default (``SHMSTREAM_SPIN_US`` or the built-in one)."""
        return None if self._spin < 0 else self._spin / 1000

    @spin_us.setter
    def spin_us(self, value: float | None) -> None:
        self._spin = _spin_ns(value)

    def __repr__(self) -> str:
        return (
            f"SharedMemory(name={self.name!r}, shape={self.shape!r}, "
            f"dtype={str(self.dtype)!r}, gpu_device={self.gpu_device!r})"
        )

    @property
    def count(self) -> int:
        """Completed writes since the stream was created."""
        seg = self._seg
        if seg is None:
            raise self._closed_error("read count from")
        return seg.count

    @property
    def last_read_count(self) -> int:
        """The count of the publication this handle read last (or the count
        when it was opened)."""
        self._check_open("read last_read_count from")
        return self._last_read

    @property
    def missed_writes(self) -> int:
        """Writes skipped between this handle's last two reads."""
        self._check_open("read missed_writes from")
        return self._missed

    @property
    def total_missed_writes(self) -> int:
        """All writes this handle's reads have skipped."""
        self._check_open("read total_missed_writes from")
        return self._total_missed

    @property
    def write_time(self) -> float:
        """UNIX time of the last completed write (0.0 before the first)."""
        seg = self._check_open("read write_time from")
        return seg.write_time_ns / 1e9

    @property
    def write_sequence(self) -> int:
        """The seqlock word: odd while a write is in progress."""
        seg = self._check_open("read write_sequence from")
        return seg.seq

    @property
    def frame_id(self) -> int:
        """The frame id of the last write (0 until a write sets one)."""
        seg = self._check_open("read frame_id from")
        return seg.frame_id

    @property
    def creator_pid(self) -> int:
        self._check_open("read creator_pid from")
        return self._creator_pid

    @property
    def age(self) -> float:
        """Seconds since the last completed write; ``inf`` before the first."""
        seg = self._check_open("read age from")
        ns = seg.write_time_ns
        if ns == 0:
            return math.inf
        return max(0.0, time.time() - ns / 1e9)

    def is_stale(self, max_age: float) -> bool:
        """True if the last write is older than ``max_age`` seconds (always
        True before the first write)."""
        if not max_age > 0:
            raise ValueError("max_age must be positive")
        return self.age > float(max_age)

    def producer_alive(self) -> bool:
        """Whether the process that created the stream still runs (checked
        by pid and start time, so a reused pid does not count)."""
        self._check_open("check producer liveness for")
        return _proc.alive(self._creator_pid, self._creator_ticks)

    def describe(self) -> str:
        """A human-readable, multi-line summary of the stream."""
        seg = self._check_open("describe")
        owner_pid = seg.owner_pid
        lines = [
            f"name:         {self.name}",
            f"shape:        {self.shape}",
            f"dtype:        {self.dtype}",
            f"size:         {self.size} bytes",
            f"gpu_enabled:  {self.gpu_enabled}",
            f"gpu_device:   {self.gpu_device}",
            f"cpu_mirror:   {self.cpu_mirror}",
            f"count:        {seg.count}",
            f"write_time:   {seg.write_time_ns / 1e9}",
            f"write_seq:    {seg.seq}",
            f"owner:        {self.owner}",
            f"readonly:     {self.readonly}",
            f"creator_pid:  {self._creator_pid}",
            f"producer:     {'alive' if self.producer_alive() else 'dead'}",
            f"age:          {self.age:.3f} s",
            f"notify:       {self.notify}",
            f"frame_id:     {seg.frame_id}",
            f"state:        {_STATE_NAMES.get(seg.state, seg.state)}",
            f"lock_owner:   {owner_pid if owner_pid else None}",
            f"instance_id:  {self._instance_id}",
            f"segment:      {self._segname}",
        ]
        return "\n".join(lines)

    def to_config(self) -> dict[str, Any]:
        """The stream's configuration, for :meth:`create_from_config`."""
        return {
            "name": self.name,
            "shape": list(self.shape),
            "dtype": _dtype_text(self.dtype),
            "gpu_device": self.gpu_device,
            "cpu_mirror": self.cpu_mirror,
            "notify": self.notify,
            # Only when not the default, so pyshmem-shaped configs stay as they were.
            **({"slots": self._seg.slot_count}
               if self._seg is not None and self._seg.slot_count != _native.DEFAULT_SLOTS
               else {}),
        }

    # -- locking --

    def acquire(self, *, timeout: float | None = None, poll_interval: float = 1e-3) -> None:
        """Take the cross-process write lock; re-entrant per thread (each
        acquire needs a release). A lock whose owner died is handed over at
        once. Raises TimeoutError if ``timeout`` seconds pass first.
        ``poll_interval`` is accepted for pyshmem compatibility; the wait
        sleeps in the kernel instead of polling."""
        seg = self._check_writable("acquire the write lock for")
        state = self._lk
        me = _get_ident()
        if state.owner == me:
            state.depth += 1
            self._held += 1
            return
        seg.lock(timeout)  # True when taken over from a dead owner
        state.owner = me
        state.depth = 1
        self._held += 1

    def release(self) -> None:
        """Release one level of this thread's hold on the lock."""
        seg = self._check_open("release")
        state = self._lk
        if state.owner is None:
            raise RuntimeError(
                f"cannot release an unlocked shared memory lock ({self.name!r})"
            )
        if state.owner != _get_ident():
            raise RuntimeError(
                f"cannot release a lock owned by another thread ({self.name!r})"
            )
        state.depth -= 1
        if self._held:
            self._held -= 1
        if state.depth == 0:
            state.owner = None
            seg.unlock()

    def locked(self, *, timeout: float | None = None, poll_interval: float = 1e-3) -> _LockScope:
        """``with shm.locked():`` holds the write lock for the block."""
        return _LockScope(self, timeout)

    # -- writing --

    def _coerce(self, value: Any) -> np.ndarray:
        # The slow path of write(): pyshmem's policy, np.asarray(value, dtype).
        try:
            array = np.asarray(value, dtype=self.dtype)
        except (TypeError, ValueError) as exc:
            raise ValueError(
                f"cannot write {type(value).__name__} to stream {self.name!r}: "
                f"expected an array of shape {self.shape} and dtype {self.dtype} "
                f"({exc})"
            ) from None
        if array.shape != self.shape:
            raise ValueError(
                f"expected shape {self.shape}, got {tuple(array.shape)} "
                f"(stream {self.name!r} holds {self.dtype} arrays of shape "
                f"{self.shape})"
            )
        return np.ascontiguousarray(array)

    def write(
        self,
        value: Any,
        *,
        frame_id: int | None = None,
        count: int | None = None,
        write_time_ns: int | None = None,
    ) -> None:
        """Publish a copy of ``value`` (converted like ``np.asarray(value,
        dtype)``; its shape must match). ``frame_id`` (any uint64) is stored
        with the write; omitted, the previous one is kept.

        For a mirror of another stream or a replay: ``count`` publishes the
        write as that count (it must exceed the current one; readers count
        the gap as missed writes) and ``write_time_ns`` (ns since the epoch)
        replaces the clock's time."""
        if count is not None or write_time_ns is not None:
            self._write_with_metadata(value, frame_id, count, write_time_ns)
            return
        seg = self._wseg
        if seg is None:
            seg = self._check_writable("write to")  # raises: closed or read-only
        if value.__class__ is not _ndarray or value.shape != self.shape or (
            value.dtype is not self.dtype and value.dtype != self.dtype
        ):
            value = self._coerce(value)
        if frame_id is not None:
            frame_id = _check_frame_id(frame_id)
        owner = self._lk.owner
        try:
            self._wrote = seg.write(
                value, frame_id, owner is not None and owner == _get_ident()
            )
        except ValueError:
            if value.flags.c_contiguous:
                raise
            self._wrote = seg.write(
                np.ascontiguousarray(value), frame_id,
                owner is not None and owner == _get_ident(),
            )

    def _write_with_metadata(
        self, value: Any, frame_id: int | None, count: int | None, write_time_ns: int | None
    ) -> None:
        seg = self._check_writable("write to")
        value = self._coerce(value)
        if frame_id is not None:
            frame_id = _check_frame_id(frame_id)
        count = 0 if count is None else _check_u64("count", count, minimum=1)
        write_time_ns = (
            0 if write_time_ns is None else _check_u64("write_time_ns", write_time_ns, minimum=1)
        )
        self._wrote = seg.write(
            value, frame_id, self._holds_lock(), None, count, write_time_ns
        )

    def write_locked(self, value: Any, *, frame_id: int | None = None) -> None:
        """:meth:`write` for a caller that already holds the lock."""
        seg = self._check_writable("write to")
        if not self._holds_lock():
            raise RuntimeError(
                "write_locked() requires an active 'with shm.locked()' block"
            )
        value = self._coerce(value)
        if frame_id is not None:
            frame_id = _check_frame_id(frame_id)
        self._wrote = seg.write(value, frame_id, True)

    def _payload_view(self, seg: Any, slot: int | None = None) -> np.ndarray:
        """A view of one payload slot (the published one by default)."""
        if slot is None:
            slot = seg.published_slot
        view = self._views.get(slot)
        if view is None:
            raw = seg.payload(slot)
            view = raw.view(self.dtype).reshape(self.shape) if self.size else (
                np.empty(self.shape, self.dtype)
            )
            self._views[slot] = view
        return view

    def _readonly_view(self, seg: Any, slot: int) -> np.ndarray:
        view = self._ro_views.get(slot)
        if view is None:
            view = self._payload_view(seg, slot).view()
            view.flags.writeable = False
            self._ro_views[slot] = view
        return view

    def read_view(self, *, timeout: float | None = None) -> _ReadView:
        """``with shm.read_view() as pub:`` a zero-copy :class:`Publication`
        of the latest frame: ``pub.payload`` is a read-only view of the shared
        slot, valid inside the block only. No lock is held; the writer fills
        the other slot meanwhile. On exit, FrameOverwrittenError if the
        writer lapped the view (``slots - 1`` newer writes during the block,
        or any write with ``slots=1``)."""
        return _ReadView(self, False, timeout, self._spin)

    def read_new_view(self, *, timeout: float | None = None) -> _ReadView:
        """:meth:`read_view` of the first publication newer than what this
        handle last saw (the rule of :meth:`read_new`); TimeoutError if none
        arrives within ``timeout`` seconds."""
        return _ReadView(self, True, timeout, self._spin)

    def write_view(self, *, timeout: float | None = None, frame_id: int | None = None) -> _WriteView:
        """``with shm.write_view() as a:`` fills the shared payload in place
        and publishes it on exit, holding the lock for the block. If the
        block raises, the stream is left invalid (readers get
        InconsistentStreamError until the next good write)."""
        self._check_writable("write to")
        if frame_id is not None:
            frame_id = _check_frame_id(frame_id)
        return _WriteView(self, frame_id, timeout, True)

    def write_view_locked(self, *, frame_id: int | None = None) -> _WriteView:
        """:meth:`write_view` for a caller that already holds the lock."""
        if frame_id is not None:
            frame_id = _check_frame_id(frame_id)
        return _WriteView(self, frame_id, None, False)

    def _begin_write_view(self, frame_id: int | None, what: str) -> np.ndarray:
        seg = self._check_writable("write to")
        if not self._holds_lock():
            raise RuntimeError(f"{what} requires an active 'with shm.locked()' block")
        if self._writing:
            raise RuntimeError(
                f"a write_view of {self.name!r} is already open on this handle"
            )
        published = self._payload_view(seg)
        view = self._payload_view(seg, seg.write_begin())
        if view is not published:
            # The writer fills the slot after the published one (readers copy
            # the published one meanwhile); start it from the current frame
            # so in-place updates see what readers see, as with one slot.
            np.copyto(view, published)
        self._writing = True
        return view

    def _commit_write_view(self, frame_id: int | None) -> None:
        seg = self._seg
        if seg is None or not self._writing:
            return
        self._writing = False
        self._wrote = seg.write_end(frame_id)

    def _abort_write_view(self) -> None:
        seg = self._seg
        if seg is None or not self._writing:
            return
        self._writing = False
        seg.write_abort()

    def clear(self) -> None:
        """Zero the payload; counts as a write."""
        seg = self._check_writable("clear")
        self._wrote = seg.clear(self._holds_lock(), None)

    def pinned_buffer(self) -> Any:
        """GPU streams only (not available in this build)."""
        self._check_writable("allocate a pinned write buffer for")
        raise RuntimeError("pinned_buffer() requires a GPU-attached stream handle")

    # -- reading --

    def _record(self, count: int) -> int:
        """Book a read of publication ``count``; returns the writes missed."""
        missed = count - self._last_read - 1
        self._last_read = count
        if missed > 0:
            self._missed = missed
            self._total_missed += missed
            return missed
        self._missed = 0
        return 0

    @property
    def _seen(self) -> int:
        # The count read_new waits to pass.
        last, wrote = self._last_read, self._wrote
        return last if last > wrote else wrote

    def _check_out(self, out: Any) -> np.ndarray:
        if not isinstance(out, _ndarray):
            raise TypeError(
                f"out must be a numpy.ndarray of shape {self.shape} and dtype "
                f"{self.dtype}, not {type(out).__name__}"
            )
        if out.shape != self.shape or out.dtype != self.dtype:
            raise ValueError(
                f"out has shape {out.shape} and dtype {out.dtype}; stream "
                f"{self.name!r} needs shape {self.shape} and dtype {self.dtype}"
            )
        if not out.flags.c_contiguous or not out.flags.writeable:
            raise ValueError("out must be a C-contiguous, writable array")
        return out

    def read(
        self,
        *,
        safe: bool = True,
        poll_interval: float = 1e-6,
        out: np.ndarray | None = None,
        timeout: float | None = None,
    ) -> Any:
        """A consistent copy of the latest payload (never torn).

        ``out=`` fills a C-contiguous array of the stream's shape and dtype
        and returns it (nothing is allocated). ``timeout`` bounds the wait
        for a write in progress (TimeoutError). ``safe=False`` returns the
        live shared array; it needs the lock (``with shm.locked():``).
        """
        seg = self._seg
        if seg is None or not safe:
            return self._read_unsafe(safe, out)
        if out is None:
            out = _empty(self.shape, self.dtype)
        elif out.__class__ is not _ndarray or out.shape != self.shape or out.dtype != self.dtype:
            out = self._check_out(out)
        owner = self._lk.owner
        count = seg.read(out, timeout, owner is not None and owner == _get_ident())[0]
        # _record, inlined
        missed = count - self._last_read - 1
        self._last_read = count
        if missed > 0:
            self._missed = missed
            self._total_missed += missed
        else:
            self._missed = 0
        return out

    def _read_unsafe(self, safe: bool, out: Any) -> Any:
        seg = self._check_open("read from")
        if safe:  # pragma: no cover - read() only calls here when unsafe
            raise AssertionError
        self._check_writable("take an unsafe shared view from")
        if out is not None:
            raise ValueError(
                "out is supported only for safe reads; pass safe=True with out="
            )
        if not self._holds_lock():
            raise RuntimeError("safe=False requires an active 'with shm.locked()' block")
        self._record(seg.count)
        return self._payload_view(seg)

    def read_publication(
        self,
        *,
        safe: bool = True,
        poll_interval: float = 1e-6,
        out: np.ndarray | None = None,
        timeout: float | None = None,
    ) -> Publication:
        """Like :meth:`read`, with the count, frame id and write time of the
        same write, as a :class:`Publication`."""
        seg = self._check_open("read a publication from")
        if not safe:
            self._check_writable("take an unsafe publication view from")
            if out is not None:
                raise ValueError(
                    "out is supported only for safe reads; pass safe=True with out="
                )
            if not self._holds_lock():
                raise RuntimeError(
                    "safe=False requires an active 'with shm.locked()' block"
                )
            count, frame_id, wt = seg.publication()
            missed = self._record(count)
            return Publication(self._payload_view(seg), count, frame_id, wt / 1e9, missed)
        out = _empty(self.shape, self.dtype) if out is None else self._check_out(out)
        count, frame_id, wt = seg.read(out, timeout, self._holds_lock())
        missed = self._record(count)
        return Publication(out, count, frame_id, wt / 1e9, missed)

    def read_last_complete(
        self, *, out: np.ndarray | None = None, timeout: float | None = None
    ) -> Publication:
        """The last complete publication, even while the stream reports a
        failed write (an exception inside ``write_view``, or a writer that
        died mid-write): for monitors that must show the last good frame.
        ``pub.state`` is "valid" if no write failed since, else "aborted" or
        "abandoned" (this frame is the one before the failed write). It
        takes the stream lock when a write failed. A stream with
        ``slots=1`` has no such frame after a failure: InconsistentStreamError."""
        seg = self._check_open("read from")
        out = _empty(self.shape, self.dtype) if out is None else self._check_out(out)
        count, frame_id, wt, state = seg.read_last_complete(out, timeout, self._holds_lock())
        missed = self._record(count)
        return Publication(out, count, frame_id, wt / 1e9, missed, _STATE_NAMES.get(state, "?"))

    def _fail_if_invalid(self, seg: Any) -> None:
        """Before a wait: raise InconsistentStreamError at once if the
        published frame is aborted, or its writer died mid-write (a wait
        for the count would otherwise sit out its whole timeout)."""
        if seg.state or seg.write_in_flight:
            # A trylock in the core takes a dead writer's lock over (which
            # repairs the stream) and raises; a live writer keeps it.
            seg.check_writer()

    def _wait_read(
        self,
        after: int,
        timeout: float | None,
        out: Any,
        spin_us: float | None,
        operation: str,
    ) -> tuple[np.ndarray, int, int, int]:
        seg = self._seg
        if seg is None:
            raise self._closed_error(operation)
        self._fail_if_invalid(seg)
        dst = _empty(self.shape, self.dtype) if out is None else self._check_out(out)
        spin = self._spin if spin_us is None else _spin_ns(spin_us)
        count, frame_id, wt = seg.read_new(dst, after, timeout, spin)
        return dst, count, frame_id, wt

    def read_new(
        self,
        *,
        timeout: float | None = None,
        safe: bool = True,
        poll_interval: float = 1e-5,
        out: np.ndarray | None = None,
        spin_us: float | None = None,
    ) -> Any:
        """Block until there is a publication newer than the last one this
        handle saw (its last read, its own last write, or the count at open),
        then return it like :meth:`read`. A write that landed before the call
        is not missed. TimeoutError after ``timeout`` seconds; RuntimeError
        if the handle is closed meanwhile. ``spin_us`` overrides how long to
        spin before sleeping."""
        seg = self._seg
        if seg is None or not safe or spin_us is not None or seg.state:
            return self._read_new_slow(timeout, safe, out, spin_us)
        if out is None:
            out = _empty(self.shape, self.dtype)
        elif out.__class__ is not _ndarray or out.shape != self.shape or out.dtype != self.dtype:
            out = self._check_out(out)
        last = self._last_read
        wrote = self._wrote
        count = seg.read_new(out, last if last > wrote else wrote, timeout, self._spin)[0]
        missed = count - last - 1
        self._last_read = count
        if missed > 0:
            self._missed = missed
            self._total_missed += missed
        else:
            self._missed = 0
        return out

    def _read_new_slow(
        self, timeout: float | None, safe: bool, out: Any, spin_us: float | None
    ) -> Any:
        if not safe:
            self.wait_for_count(after=self._seen, timeout=timeout, spin_us=spin_us)
            return self.read(safe=False, out=out)
        dst, count, _, _ = self._wait_read(self._seen, timeout, out, spin_us, "read from")
        self._record(count)
        return dst

    def read_new_publication(
        self,
        *,
        timeout: float | None = None,
        safe: bool = True,
        poll_interval: float = 1e-5,
        out: np.ndarray | None = None,
        spin_us: float | None = None,
    ) -> Publication:
        """:meth:`read_new` returning a :class:`Publication`."""
        if not safe:
            self._check_open("read a publication from")
            self.wait_for_count(after=self._seen, timeout=timeout, spin_us=spin_us)
            return self.read_publication(safe=False)
        dst, count, frame_id, wt = self._wait_read(
            self._seen, timeout, out, spin_us, "read a publication from"
        )
        missed = self._record(count)
        return Publication(dst, count, frame_id, wt / 1e9, missed)

    def read_after(
        self,
        after: int,
        *,
        timeout: float | None = None,
        safe: bool = True,
        poll_interval: float = 1e-5,
        out: np.ndarray | None = None,
        spin_us: float | None = None,
    ) -> Any:
        """Wait until the count is above ``after``, then return the payload
        like :meth:`read` (level-triggered; updates ``last_read_count``)."""
        self._check_open("read from")
        baseline = _check_after(after)
        if not safe:
            self.wait_for_count(after=baseline, timeout=timeout, spin_us=spin_us)
            return self.read(safe=False, out=out)
        dst, count, _, _ = self._wait_read(baseline, timeout, out, spin_us, "read from")
        self._record(count)
        return dst

    def read_after_publication(
        self,
        after: int,
        *,
        timeout: float | None = None,
        safe: bool = True,
        poll_interval: float = 1e-5,
        out: np.ndarray | None = None,
        spin_us: float | None = None,
    ) -> Publication:
        """:meth:`read_after` returning a :class:`Publication`."""
        self._check_open("read a publication from")
        baseline = _check_after(after)
        if not safe:
            self.wait_for_count(after=baseline, timeout=timeout, spin_us=spin_us)
            return self.read_publication(safe=False)
        dst, count, frame_id, wt = self._wait_read(
            baseline, timeout, out, spin_us, "read a publication from"
        )
        missed = self._record(count)
        return Publication(dst, count, frame_id, wt / 1e9, missed)

    def wait_for_count(
        self,
        *,
        after: int,
        timeout: float | None = None,
        poll_interval: float = 1e-5,
        spin_us: float | None = None,
    ) -> int:
        """Return the count once it is above ``after`` (level-triggered: a
        write before the call counts). TimeoutError after ``timeout``."""
        seg = self._check_open("wait for a write on")
        baseline = _check_after(after)
        if timeout is not None and timeout < 0:
            raise ValueError("timeout must be non-negative")
        self._fail_if_invalid(seg)
        spin = self._spin if spin_us is None else _spin_ns(spin_us)
        return int(seg.wait_count(baseline, timeout, spin))

    async def read_new_async(
        self,
        *,
        timeout: float | None = None,
        safe: bool = True,
        poll_interval: float = 1e-5,
        out: np.ndarray | None = None,
        spin_us: float | None = None,
    ) -> Any:
        """:meth:`read_new` for asyncio: the wait runs in the loop's default
        executor, so the event loop keeps running. Cancelling the task stops
        the worker within a fraction of a second; ``close()`` wakes it."""
        seg = self._seg
        if seg is None:
            raise self._closed_error("read from")
        if not safe:
            await self._wait_async(seg, self._seen, timeout, None, spin_us)
            return self.read(safe=False, out=out)
        self._fail_if_invalid(seg)
        dst = _empty(self.shape, self.dtype) if out is None else self._check_out(out)
        count = await self._wait_async(seg, self._seen, timeout, dst, spin_us)
        self._record(count)
        return dst

    async def _wait_async(
        self, seg: Any, after: int, timeout: float | None, dst: Any, spin_us: float | None
    ) -> int:
        spin = self._spin if spin_us is None else _spin_ns(spin_us)
        if timeout is not None and not timeout >= 0:
            raise ValueError("timeout must be >= 0 or None")
        stop = threading.Event()
        loop = asyncio.get_running_loop()
        future = loop.run_in_executor(
            None, _blocking_wait, seg, dst, after, timeout, spin, stop
        )
        try:
            return await future
        except asyncio.CancelledError:
            stop.set()
            raise

    # -- DLPack --

    def __dlpack_device__(self) -> tuple[int, int]:
        self._check_open("read the DLPack device of")
        return (1, 0)  # kDLCPU

    def __dlpack__(self, *, stream: Any = None, **kwargs: Any) -> Any:
        """A DLPack capsule of a consistent snapshot (like :meth:`read`), not
        a live view: later writes do not change it."""
        self._check_open("export DLPack from")
        snapshot = self.read()
        try:
            return snapshot.__dlpack__(**kwargs)
        except TypeError:
            return snapshot.__dlpack__()

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
                raise RuntimeError(
                    f"cannot close shared memory {self.name!r} while another "
                    "thread owns its lock"
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
            raise PermissionError(
                f"cannot unlink read-only shared memory {self.name!r}; "
                f"use shmstream.unlink({self.name!r})"
            )
        self.close()
        try:
            current = _native.Segment.peek(self._segname)
        except FileNotFoundError:
            return
        except Exception:
            current = None  # corrupt or unfinished: remove it
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
        except Exception:
            pass


def _blocking_wait(
    seg: Any, dst: Any, after: int, timeout: float | None, spin: int, stop: threading.Event
) -> int:
    """read_new_async's worker: the native wait in chunks, so a cancelled
    task frees its executor thread soon."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        left = _remaining(deadline)
        chunk = _ASYNC_CHUNK_S if left is None else min(left, _ASYNC_CHUNK_S)
        try:
            if dst is None:
                return int(seg.wait_count(after, chunk, spin))
            return int(seg.read_new(dst, after, chunk, spin)[0])
        except TimeoutError:
            if stop.is_set() or (deadline is not None and time.monotonic() >= deadline):
                raise
        spin = 0  # spin only before the first sleep


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
    slots: int = _native.DEFAULT_SLOTS,
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
    more often under such a writer. Raises FileExistsError if the name
    exists (use :func:`open`).
    """
    handle = SharedMemory._create(
        name, shape=shape, dtype=dtype, size=size, gpu_device=gpu_device,
        cpu_mirror=cpu_mirror, notify=notify, mode=mode, slots=slots,
    )
    handle._auto_unlink = bool(auto_unlink)
    return handle


def open(
    name: str, *, gpu_device: str | int | bool | None = None, readonly: bool = False
) -> SharedMemory:
    """Attach to the existing stream ``name`` (shape, dtype and contents
    come from it). ``readonly=True`` gives a handle that refuses writes,
    locks and unlink. Raises FileNotFoundError if it does not exist."""
    return SharedMemory._open(name, gpu_device=gpu_device, readonly=readonly)


def unlink(name: str) -> None:
    """Destroy the stream ``name``; silent if it does not exist."""
    _check_name(name)
    _native.unlink_segname(_native.segment_name(name))


def unlink_quiet(name: str) -> None:
    """:func:`unlink`, named for cleanup code: silent for a missing name."""
    unlink(name)


class _Stream:
    """Returned by :func:`stream`: creates on enter, unlinks on exit."""

    __slots__ = ("_kwargs", "_handle")

    def __init__(self, kwargs: dict[str, Any]) -> None:
        self._kwargs = kwargs
        self._handle: SharedMemory | None = None

    def __enter__(self) -> SharedMemory:
        self._handle = create(**self._kwargs, auto_unlink=True)
        return self._handle

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        handle, self._handle = self._handle, None
        if handle is not None:
            handle.unlink()


def stream(
    name: str,
    *,
    shape: Sequence[int] | int,
    dtype: Any = np.float32,
    size: int | None = None,
    gpu_device: str | int | None = None,
    cpu_mirror: bool | None = None,
    notify: bool = False,
    mode: int = 0o600,
    slots: int = _native.DEFAULT_SLOTS,
) -> _Stream:
    """``with shmstream.stream(name, shape=...) as shm:`` a temporary stream,
    unlinked when the block ends (normally or by an exception). The
    arguments are :func:`create`'s."""
    return _Stream(dict(
        name=name, shape=shape, dtype=dtype, size=size, gpu_device=gpu_device,
        cpu_mirror=cpu_mirror, notify=notify, mode=mode, slots=slots,
    ))


def _segment_files() -> Iterator[str]:
    try:
        entries = os.listdir(_SHM_DIR)
    except OSError:
        return
    for entry in entries:
        if entry.startswith(_FILE_PREFIX):
            yield "/" + entry


def list_streams() -> list[str]:
    """Sorted names of the streams in /dev/shm (other kinds and unreadable
    or corrupt segments are left out)."""
    names = []
    for segname in _segment_files():
        try:
            seg = _native.Segment.peek(segname)
        except Exception:
            continue
        if seg.kind == _native.KIND_STREAM:
            names.append(seg.name)
    return sorted(names)


def _remove_orphaned_cuda_ipc_files() -> list[str]:
    """Remove PyTorch's ``cuda.shm.<id>.<hex pid>.<seq>`` files whose
    producer is dead."""
    removed: list[str] = []
    try:
        entries = os.listdir(_SHM_DIR)
    except OSError:
        return removed
    for entry in entries:
        parts = entry.split(".")
        if len(parts) < 4 or parts[0] != "cuda" or parts[1] != "shm":
            continue
        try:
            pid = int(parts[-2], 16)
        except ValueError:
            continue
        if _proc.alive(pid):
            continue
        try:
            os.remove(os.path.join(_SHM_DIR, entry))
        except FileNotFoundError:
            continue
        except OSError:
            continue
        removed.append(entry)
    return sorted(removed)


_UNFINISHED_ORPHAN_S = 60.0


def _unfinished_for_long(segname: str) -> bool:
    try:
        age = time.time() - os.stat(_SHM_DIR + segname).st_mtime
    except OSError:
        return False
    return age > _UNFINISHED_ORPHAN_S


def purge(*, include_cuda_orphans: bool = False) -> list[str]:
    """Remove every stream in /dev/shm and return their names (sorted).

    Segments of other kinds (channels, shared arrays) are left alone;
    corrupt or unfinished segments with shmstream's prefix are removed too
    (they have no name to return). With ``include_cuda_orphans=True`` it
    also deletes PyTorch CUDA IPC files whose producer process is dead.
    Not reversible: processes using a removed stream keep their mapping,
    but nobody can open it again.
    """
    removed = []
    for segname in _segment_files():
        try:
            seg = _native.Segment.peek(segname)
        except CorruptStreamError:
            name = None
        except BlockingIOError:
            # Unfinished: a live creator may be inside posix_fallocate of a
            # big segment; only one that stayed unfinished is an orphan.
            if not _unfinished_for_long(segname):
                continue
            name = None
        except Exception:
            continue  # vanished, or not ours to read
        else:
            if seg.kind != _native.KIND_STREAM:
                continue
            name = seg.name
        try:
            _native.unlink_segname(segname)
        except OSError:
            continue
        if name is not None:
            removed.append(name)
    if include_cuda_orphans:
        _remove_orphaned_cuda_ipc_files()
    return sorted(removed)


def stat(name: str) -> dict[str, Any]:
    """The stream's metadata, read from its header without mapping the
    payload: ``name``, ``shape`` (list), ``dtype`` (str), ``size``,
    ``gpu_enabled``, ``gpu_device``, ``cpu_mirror``, ``notify``,
    ``instance_id``, ``creator_pid``, ``creator_alive``, ``count``,
    ``write_sequence``, ``write_time``, and also ``frame_id``, ``state``,
    ``owner`` (pid holding the lock, or None), ``owner_tid``, ``waiters``,
    ``aborted_writes``, ``created``, ``mode``, ``kind`` and ``segment``."""
    _check_name(name)
    segname = _native.segment_name(name)
    try:
        seg = _native.Segment.peek(segname)
    except FileNotFoundError:
        raise _missing_name_error(name) from None
    except CorruptStreamError as exc:
        raise CorruptStreamError(
            f"stream {name!r} has a corrupt or foreign header ({exc}); remove it with "
            f"shmstream.unlink({name!r})"
        ) from None
    if seg.name != name:  # another name with the same hash: not ours
        raise _missing_name_error(name)
    return _stat_of(seg)


def _stat_of(seg: Any) -> dict[str, Any]:
    flags = int(seg.flags)
    kind = int(seg.kind)
    gpu = bool(flags & _native.FLAG_GPU)
    try:
        dtype = _dtype_text(_dtypes.decode(seg.dtype))
    except Exception:
        dtype = seg.dtype
    owner = int(seg.owner_pid)
    return {
        "name": seg.name,
        "shape": [int(d) for d in seg.shape],
        "dtype": dtype,
        "size": int(seg.payload_bytes),
        "gpu_enabled": gpu,
        "gpu_device": _gpu.stat_device(seg) if gpu else None,  # GPU hook
        "cpu_mirror": not gpu or bool(flags & _native.FLAG_CPU_MIRROR),
        "notify": bool(flags & _native.FLAG_NOTIFY),
        "instance_id": seg.instance_id,
        "creator_pid": int(seg.creator_pid),
        "creator_alive": _proc.alive(int(seg.creator_pid), int(seg.creator_start_ticks)),
        "count": int(seg.count),
        "write_sequence": int(seg.seq),
        "write_time": seg.write_time_ns / 1e9,
        "frame_id": int(seg.frame_id),
        "state": _STATE_NAMES.get(int(seg.state), int(seg.state)),
        "owner": owner if owner else None,
        "owner_tid": int(seg.owner_tid) or None,
        "waiters": int(seg.waiters),
        "aborted_writes": int(seg.aborted),
        "lock_acquisitions": int(seg.acquisitions),
        "created": seg.created_ns / 1e9,
        "mode": int(seg.mode),
        "kind": _KIND_NAMES.get(kind, kind),
        "segment": seg.segname,
    }


# ---- several locks at once -------------------------------------------------


class _LockedMany:
    """Returned by :func:`locked_many`."""

    __slots__ = ("_streams", "_timeout", "_poll_interval", "_exit")

    def __init__(self, streams: Sequence[Any], timeout: float | None, poll_interval: float) -> None:
        self._streams = streams
        self._timeout = timeout
        self._poll_interval = poll_interval
        self._exit: Any = None

    def __enter__(self) -> tuple[Any, ...]:
        from contextlib import ExitStack

        handles = tuple(self._streams)
        ordered = sorted(handles, key=_handle_name)
        for previous, current in zip(ordered, ordered[1:]):
            if previous.name == current.name:
                raise ValueError("locked_many() requires unique stream names")
        timeout = self._timeout
        if timeout is not None and float(timeout) < 0.0:
            raise ValueError("timeout must be non-negative")
        poll_interval = float(self._poll_interval)
        if not math.isfinite(poll_interval) or poll_interval <= 0.0:
            raise ValueError("poll_interval must be positive")
        deadline = None if timeout is None else time.monotonic() + float(timeout)
        if all(type(handle) is SharedMemory for handle in ordered):
            acquired: list[SharedMemory] = []
            self._exit = acquired
            try:
                for handle in ordered:
                    handle.acquire(timeout=_remaining(deadline), poll_interval=poll_interval)
                    acquired.append(handle)
            except BaseException:
                _release_in_reverse(acquired)
                raise
            return handles
        with ExitStack() as stack:
            for handle in ordered:
                stack.enter_context(
                    handle.locked(timeout=_remaining(deadline), poll_interval=poll_interval)
                )
            self._exit = stack.pop_all()
        return handles

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> Any:
        if isinstance(self._exit, list):
            _release_in_reverse(self._exit)
            return None
        return self._exit.__exit__(exc_type, exc, tb)


def _handle_name(handle: Any) -> str:
    return str(handle.name)


def _release_in_reverse(handles: list[SharedMemory]) -> None:
    while handles:
        handle = handles.pop()
        try:
            handle.release()
        except BaseException:
            _release_in_reverse(handles)
            raise


def locked_many(
    streams: Sequence[Any], *, timeout: float | None = None, poll_interval: float = 1e-3
) -> _LockedMany:
    """``with locked_many([a, b]) as (a, b):`` holds every stream's lock.

    Locks are taken in name order (so two callers cannot deadlock) under one
    deadline, and released in reverse; the handles come back in the caller's
    order. A repeated name is a ValueError. Any object with ``name`` and
    ``locked(timeout=, poll_interval=)`` works."""
    return _LockedMany(streams, timeout, poll_interval)
