"""Named latest-value streams: the handle and the module functions that make
it (the pyshmem-compatible surface).

A stream is one shared-memory segment (``/dev/shm/shmstream-<readable>-<hash>``)
holding a header and N payload slots (2 by default) of a fixed shape and
dtype. Writers publish under a robust cross-process lock, filling the slot
after the published one; readers take consistent snapshots of the published
slot without the lock (per-slot seqlocks) and fall back to it after a few
torn tries. All of that lives in the C core; the Python side checks
arguments (``_checks``), keeps per-handle bookkeeping (missed writes,
re-entrant lock depth: ``_lockstate``) and turns the core's answers into the
exceptions a Python user expects. Reading and waiting live in the mixins
``_reading`` and ``_waiting``; listing, ``stat`` and ``purge`` of every kind
of segment in ``registry``. GPU streams are a subpackage (``shmstream.gpu``)
that subclasses the handle and registers its create/open here at import.

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
from collections.abc import Callable, Iterable, Sequence
from types import TracebackType
from typing import Any

import numpy as np

from . import _checks, _dtypes, _native, _space
from ._history import History
from ._lockstate import HANDLES, lock_state_for
from ._reading import Reading
from ._scopes import LockScope, WriteView
from ._status import Status
from ._waiting import Waiting
from .errors import (
    GpuRequiredError,
    HandleClosedError,
    LoanStateError,
    LockHeldError,
    NotLockOwnerError,
    ShmstreamPermissionError,
    ShmstreamTypeError,
    ShmstreamValueError,
    StaleStreamError,
)

__all__ = ["SharedMemory", "create", "open", "stream", "unlink", "unlink_quiet"]

# Hot-path globals bound once.
_get_ident = threading.get_ident

# GPU streams: shmstream.gpu registers its create and open here when it is
# imported (shmstream/__init__ imports it), so that this module never
# imports the GPU layer.
_gpu_create: Callable[..., Any] | None = None
_gpu_open: Callable[..., Any] | None = None
GPU_SLOTS = 2  # replaced by the GPU layer's device slot count when it registers


#: The keys of a stream's configuration (to_config, create_from_config).
CONFIG_KEYS = ("name", "shape", "dtype", "gpu_device", "cpu_mirror", "notify", "slots", "history")


def register_gpu(create_fn: Callable[..., Any], open_fn: Callable[..., Any], slots: int) -> None:
    """Called by shmstream.gpu at import: where GPU streams are made."""
    global _gpu_create, _gpu_open, GPU_SLOTS
    _gpu_create, _gpu_open, GPU_SLOTS = create_fn, open_fn, slots


class SharedMemory(Reading, Waiting, History, Status):
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
        self.name: str = segment.name
        self.shape: tuple[int, ...] = shape
        self.dtype: np.dtype = dtype
        self.size: int = int(segment.payload_bytes)
        flags = int(segment.flags)
        self.gpu_enabled: bool = bool(flags & _native.FLAG_GPU)
        self.gpu_device: str | None = None
        self.cpu_mirror: bool = not self.gpu_enabled or bool(flags & _native.FLAG_CPU_MIRROR)
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
        self._lk = lock_state_for(self._segname, self._instance_id)
        self._held = 0  # lock levels taken through this handle
        self._writing = False  # a write_view of this handle is open
        self._views: dict[int, np.ndarray] = {}  # slot -> payload view, on demand
        self._ro_views: dict[int, np.ndarray] = {}  # slot -> read-only view
        # read_new waits for a count above max(_last_read, _wrote): the last
        # publication this handle read (the count at open before any read)
        # or wrote itself.
        self._last_read: int = int(segment.count)
        self._wrote: int = 0
        self._missed: int = 0
        self._total_missed: int = 0
        self._spin: int = -1  # native default (SHMSTREAM_SPIN_US or built in)
        # The hot path (write, read, read_new) hands an ndarray of exactly
        # this dtype and shape to one native call that checks and copies.
        segment.bind_array(dtype, list(shape))
        self._auto_unlink = False
        HANDLES.add(self)

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
        slots: int | None = None,
        history: int = 0,
    ) -> SharedMemory:
        _checks.check_name(name)
        dims = _checks.check_shape(shape)
        dt = _checks.check_dtype(dtype)
        if dt.subdtype is not None:  # '(2,)f4' -> base dtype, longer shape
            dims = dims + tuple(dt.shape)
            dt = dt.base
        if len(dims) > _native.MAX_NDIM:
            raise ShmstreamValueError(
                f"shape {dims} has {len(dims)} dimensions; at most {_native.MAX_NDIM} are supported"
            )
        expected = math.prod(dims) * dt.itemsize
        if size is not None and _checks.check_int("size", size, minimum=0) != expected:
            raise ShmstreamValueError(
                f"size does not match shape and dtype: expected {expected}, got {size}"
            )
        if expected >= 2**62:
            raise ShmstreamValueError(f"a payload of {expected} bytes is too large")
        mode = _checks.check_mode(mode)
        history = _checks.check_history(history, slots, gpu_device is not None)
        slots = _checks.check_slots(_native.DEFAULT_SLOTS if slots is None else slots)
        if gpu_device is not None:  # CUDA streams: shmstream.gpu (registered)
            if slots not in (_native.DEFAULT_SLOTS, GPU_SLOTS):
                raise ShmstreamValueError(
                    f"a GPU stream has {GPU_SLOTS} slots (its device double "
                    f"buffer), got slots={slots!r}"
                )
            assert _gpu_create is not None, "shmstream.gpu is imported with shmstream"
            return _gpu_create(name, dims, dt, gpu_device, cpu_mirror, notify, mode)
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
        return cls(segment, owner=True)

    @classmethod
    def _open(
        cls,
        name: str,
        *,
        gpu_device: Any = None,
        readonly: bool = False,
        allow_owner: Any = None,
    ) -> SharedMemory:
        _checks.check_name(name)
        owners = _checks.check_allow_owner(allow_owner)
        try:
            segment = _native.Segment.open(name, _native.KIND_STREAM, bool(readonly), owners)
        except FileNotFoundError:
            raise _checks.missing_name_error(name) from None
        if int(segment.flags) & _native.FLAG_GPU:  # CUDA streams: shmstream.gpu (registered)
            assert _gpu_open is not None, "shmstream.gpu is imported with shmstream"
            return _gpu_open(segment, name, gpu_device, bool(readonly), owners)
        _checks.check_cpu_open(name, gpu_device)
        return cls(segment, readonly=bool(readonly))

    @classmethod
    def create_from_config(cls, config: dict[str, Any]) -> SharedMemory:
        """Create a stream from a :meth:`to_config` dict (or a hand-written
        one with ``name`` and ``shape``; ``dtype`` defaults to float32).
        A missing ``name`` or ``shape``, or a key :meth:`to_config` does not
        write, is a ValueError naming it."""
        config = _checks.check_config(config, CONFIG_KEYS, ("name", "shape"))
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
        self._spin = _checks.spin_ns(value)

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
            raise NotLockOwnerError(
                f"cannot release an unlocked shared memory lock ({self.name!r})"
            )
        if state.owner != _get_ident():
            raise NotLockOwnerError(
                f"cannot release a lock owned by another thread ({self.name!r})"
            )
        state.depth -= 1
        if self._held:
            self._held -= 1
        if state.depth == 0:
            state.owner = None
            seg.unlock()

    def locked(self, *, timeout: float | None = None, poll_interval: float = 1e-3) -> LockScope:
        """``with shm.locked():`` holds the write lock for the block."""
        return LockScope(self, timeout)

    # -- writing --

    _casting: str = "unsafe"

    @property
    def casting(self) -> str:
        """How write() converts what is not of the stream's dtype: "unsafe"
        (the default: pyshmem's np.asarray(value, dtype)), or a strict NumPy
        rule, "same_kind" or "safe", under which a lossy conversion is a
        TypeError. Checked when set: another value is a ValueError."""
        return self._casting

    @casting.setter
    def casting(self, value: str) -> None:
        self._casting = _checks.check_casting(value)

    def _coerce(self, value: Any) -> np.ndarray:
        # The slow path of write() (docs/API.md, "Writing").
        return _checks.coerce_write(value, self.dtype, self.shape, self.name, self.casting)

    def write(
        self,
        value: Any,
        *,
        frame_id: int | None = None,
        count: int | None = None,
        write_time_ns: int | None = None,
        timeout: float | None = None,
    ) -> None:
        """Publish a copy of ``value`` (converted like ``np.asarray(value,
        dtype)``; its shape must match). ``frame_id`` (any uint64) is stored
        with the write; omitted, the previous one is kept. Waits up to
        ``timeout`` seconds (None: for ever) for the write lock, then raises
        TimeoutError.

        For a mirror of another stream or a replay: ``count`` publishes the
        write as that count (it must exceed the current one and be below
        2**63, so that the count still grows after it; readers count the
        gap as missed writes) and ``write_time_ns`` (ns since the epoch)
        replaces the clock's time."""
        seg = self._wseg
        if seg is not None and count is None and write_time_ns is None and self._lk.owner is None:
            # Fast case: a C-contiguous ndarray of the stream's dtype and
            # shape, checked and published in one native call; anything
            # else (None back) takes the checked path below.
            try:
                wrote = seg.put(value, frame_id, timeout)
            except TypeError:  # None, or a frame_id of a wrong type: the checked path says
                wrote = None
            if wrote is not None:
                self._wrote = wrote
                return
        if count is not None or write_time_ns is not None:
            self._write_with_metadata(value, frame_id, count, write_time_ns, timeout)
            return
        seg = self._check_writable("write to")  # raises: closed or read-only
        value, frame_id = self._write_args(value, frame_id)
        timeout = _checks.check_timeout(timeout)
        self._wrote = seg.write(value, frame_id, self._holds_lock(), timeout)

    def _write_args(self, value: Any, frame_id: int | None) -> tuple[np.ndarray, int | None]:
        """The checked (payload, frame_id) of every slow-path write."""
        value = self._coerce(value)
        if frame_id is not None:
            frame_id = _checks.check_u64("frame_id", frame_id)
        return value, frame_id

    def _write_with_metadata(
        self,
        value: Any,
        frame_id: int | None,
        count: int | None,
        write_time_ns: int | None,
        timeout: float | None,
    ) -> None:
        seg = self._check_writable("write to")
        value, frame_id = self._write_args(value, frame_id)
        count = 0 if count is None else _checks.check_count(count)
        write_time_ns = (
            0
            if write_time_ns is None
            else _checks.check_u64("write_time_ns", write_time_ns, minimum=1)
        )
        timeout = _checks.check_timeout(timeout)
        self._wrote = seg.write(value, frame_id, self._holds_lock(), timeout, count, write_time_ns)

    def write_locked(self, value: Any, *, frame_id: int | None = None) -> None:
        """:meth:`write` for a caller that already holds the lock."""
        seg = self._check_writable("write to")
        if not self._holds_lock():
            raise NotLockOwnerError("write_locked() requires an active 'with shm.locked()' block")
        value, frame_id = self._write_args(value, frame_id)
        self._wrote = seg.write(value, frame_id, True)

    def write_view(self, *, timeout: float | None = None, frame_id: int | None = None) -> WriteView:
        """``with shm.write_view() as a:`` fills the shared payload in place
        and publishes it on exit, holding the lock for the block. If the
        block raises, the stream is left invalid (readers get
        InconsistentStreamError until the next good write)."""
        self._check_writable("write to")
        if frame_id is not None:
            frame_id = _checks.check_u64("frame_id", frame_id)
        return WriteView(self, frame_id, timeout, True)

    def write_view_locked(self, *, frame_id: int | None = None) -> WriteView:
        """:meth:`write_view` for a caller that already holds the lock."""
        if frame_id is not None:
            frame_id = _checks.check_u64("frame_id", frame_id)
        return WriteView(self, frame_id, None, False)

    def _begin_write_view(self, frame_id: int | None, what: str) -> np.ndarray:
        seg = self._check_writable("write to")
        if not self._holds_lock():
            raise NotLockOwnerError(f"{what} requires an active 'with shm.locked()' block")
        if self._writing:
            raise LoanStateError(f"a write_view of {self.name!r} is already open on this handle")
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

    def clear(self, *, timeout: float | None = None) -> None:
        """Zero the payload; counts as a write. Waits up to ``timeout``
        seconds (None: for ever) for the write lock, as :meth:`write`."""
        seg = self._check_writable("clear")
        self._wrote = seg.clear(self._holds_lock(), _checks.check_timeout(timeout))

    def pinned_buffer(self) -> Any:
        """GPU streams only: a stream without ``gpu_device`` has no pinned
        buffer, so this raises :class:`GpuRequiredError`."""
        self._check_writable("allocate a pinned write buffer for")
        raise GpuRequiredError("pinned_buffer() requires a GPU-attached stream handle")

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
    handle = SharedMemory._create(
        name,
        shape=shape,
        dtype=dtype,
        size=size,
        gpu_device=gpu_device,
        cpu_mirror=cpu_mirror,
        notify=notify,
        mode=mode,
        slots=slots,
        history=history,
    )
    handle._auto_unlink = bool(auto_unlink)
    return handle


def open(
    name: str,
    *,
    gpu_device: str | int | bool | None = None,
    readonly: bool = False,
    allow_owner: int | str | Iterable[int | str] | None = None,
) -> SharedMemory:
    """Attach to the existing stream ``name`` (shape, dtype and contents
    come from it). ``readonly=True`` gives a handle that refuses writes,
    locks and unlink. Raises FileNotFoundError if it does not exist.
    Another user's stream is refused (SegmentOwnerError) unless that user
    is in ``allow_owner`` (a uid, a user name, or a collection of them) or
    in ``SHMSTREAM_ALLOW_OWNERS``; one made in another PID namespace is
    refused (PidNamespaceError; docs/ABI.md, "Owner and PID namespace")."""
    return SharedMemory._open(
        name, gpu_device=gpu_device, readonly=readonly, allow_owner=allow_owner
    )


def unlink(name: str) -> None:
    """Destroy the object ``name`` (a stream, or any other kind, or any name
    ``shmstream list`` shows: a corrupt segment by its segment name); silent
    if it does not exist (``shmstream.registry.remove`` says whether it did)."""
    from . import registry  # here: the registry imports every kind

    registry.remove(name)


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
    slots: int | None = None,
    history: int = 0,
) -> _Stream:
    """``with shmstream.stream(name, shape=...) as shm:`` a temporary stream,
    unlinked when the block ends (normally or by an exception). The
    arguments are :func:`create`'s."""
    return _Stream(
        dict(
            name=name,
            shape=shape,
            dtype=dtype,
            size=size,
            gpu_device=gpu_device,
            cpu_mirror=cpu_mirror,
            notify=notify,
            mode=mode,
            slots=slots,
            history=history,
        )
    )
