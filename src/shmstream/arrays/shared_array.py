"""Shared arrays: copy an ndarray into shared memory once, hand it to worker
processes as a tiny picklable descriptor, attach there without a copy.

``share(array)`` returns a :class:`SharedArray`, an ``ndarray`` subclass that
lives in a named shared-memory segment (kind ``KIND_ARRAY``). Why a subclass
and not a handle with an ``.array`` attribute: the object users already pass
to ``Pool.map``/``executor.submit``/``Process(args=...)`` *is* the array, so
sharing it is one line and every NumPy function keeps working on it, in the
parent and in the workers. What makes it shared is only how it pickles:

* A ``SharedArray`` whose memory lies in its segment pickles as
  ``(segment name, instance id, dtype, shape, strides, offset, access)``, a
  few hundred bytes whatever the array's size. Unpickling maps the segment
  (once per process, cached) and builds a view: zero-copy. Slices and fields
  of a shared array pickle the same way (a column goes as a strided view).
* Anything derived into fresh memory (``a + 1``, ``a.copy()``, reductions)
  is a plain ``ndarray``, and a ``SharedArray`` that does not point into its
  segment pickles as a plain array. Correctness never depends on the type.

Lifetime. The creating process owns the segment name: ``close()``, leaving a
``with`` block, or garbage collection of the last ``SharedArray`` (or view of
one) in the creator unlinks it. Unlinking removes the name only; memory stays
mapped in every process that still holds a view, and is freed by the kernel
when the last mapping goes (so nothing can ever point at unmapped memory).
Attaching processes never unlink (a fork child that inherited the creator's
objects neither: the unlink checks the pid), and nothing here touches
``multiprocessing.resource_tracker``. ``shmstream.purge()`` (the registry)
removes what creators that died left behind.

Access. Workers attach read-only by default (the array's ``WRITEABLE`` flag
is off and cannot be turned on, because its base is a read-only buffer);
``share(..., writable=True)`` makes them attach writable.
"""

from __future__ import annotations

import os
import secrets
import threading
import weakref
from typing import Any

import numpy as np

from .. import _native
from ..common import _checks, _dtypes, _space
from ..errors import (
    HandleClosedError,
    SegmentOwnerError,
    ShmstreamFileNotFoundError,
    ShmstreamPermissionError,
    ShmstreamTypeError,
    ShmstreamValueError,
    StaleStreamError,
)

__all__ = ["SharedArray", "SharedRecArray", "share"]

#: Names made by ``share(array)`` without a name start with this.
AUTO_PREFIX = "array-"


class _Mapping:
    """One process's mapping of one array segment, shared by every
    SharedArray (and view) of it in this process. The creator's instance
    unlinks the name when it is closed or collected."""

    __slots__ = (
        "seg",
        "payload",
        "ro",
        "addr",
        "nbytes",
        "name",
        "segname",
        "instance_id",
        "closed",
        "_unlink",
        "_creator_pid",
        "__weakref__",
    )

    def __init__(self, seg: Any, owner: bool) -> None:
        self.seg = seg
        self.payload = seg.payload()  # writable uint8 view; keeps the mapping
        # A read-only buffer over the same bytes: arrays built on it cannot be
        # made writable again (NumPy refuses WRITEABLE=True on such a base).
        # (np.frombuffer keeps the read-only memoryview as its base; building
        # an ndarray on the memoryview directly would unwrap it.)
        self.ro = np.frombuffer(memoryview(self.payload).toreadonly(), np.uint8)
        self.addr = self.payload.ctypes.data
        self.nbytes = self.payload.nbytes
        self.name = seg.name
        self.segname = seg.segname
        self.instance_id = seg.instance_id
        self.closed = False
        self._creator_pid = os.getpid() if owner else 0
        self._unlink = (
            weakref.finalize(self, _unlink_if_creator, self.segname, os.getpid()) if owner else None
        )

    @property
    def owner(self) -> bool:
        return os.getpid() == self._creator_pid

    def close(self) -> None:
        self.closed = True
        if self._unlink is not None:
            self._unlink()

    def contains(self, a: np.ndarray) -> bool:
        """Does every byte ``a`` can address lie inside this mapping?"""
        if a.size == 0:
            return True
        ptr = a.__array_interface__["data"][0]
        lo = hi = ptr
        for n, s in zip(a.shape, a.strides):
            if s < 0:
                lo += (n - 1) * s
            else:
                hi += (n - 1) * s
        return self.addr <= lo and hi + a.itemsize <= self.addr + self.nbytes


def _unlink_if_creator(segname: str, creator_pid: int) -> None:
    # A fork child inherits the creator's objects; only the creator unlinks.
    if os.getpid() == creator_pid:
        try:
            _native.unlink_segname(segname)
        except OSError:
            pass


# Mappings of this process by (segment name, instance id): an array pickled
# to a worker many times (one Pool task per chunk) is mapped once. Weak, so a
# worker that drops the array also drops the mapping (and the memory, once
# the creator has unlinked the name).
_mappings: weakref.WeakValueDictionary[tuple[str, str], _Mapping] = weakref.WeakValueDictionary()
_mappings_lock = threading.Lock()


def _attach(name: str, segname: str, instance_id: str) -> _Mapping:
    key = (segname, instance_id)
    with _mappings_lock:
        m = _mappings.get(key)
        if m is not None:
            return m
        try:
            seg = _native.Segment.open(name, _native.KIND_ARRAY, False)
        except SegmentOwnerError:
            raise
        except PermissionError:
            seg = _native.Segment.open(name, _native.KIND_ARRAY, True)
        except FileNotFoundError:
            raise ShmstreamFileNotFoundError(
                f"shared array {name!r} no longer exists: its creator closed it, dropped "
                "its last reference, or exited before this process attached; keep the "
                "SharedArray returned by share() alive until the workers have attached"
            ) from None
        if seg.instance_id != instance_id:
            raise StaleStreamError(
                f"shared array {name!r} was closed and a new array was shared under the "
                "same name; this handle refers to the old one, which is gone"
            )
        m = _Mapping(seg, owner=False)
        _mappings[key] = m
        return m


def _build(
    cls: type,
    m: _Mapping,
    dtype: np.dtype,
    shape: tuple,
    strides: tuple | None,
    offset: int,
    writable: bool,
    attach_writable: bool,
) -> SharedArray:
    if writable and m.seg.readonly == 2:
        raise ShmstreamPermissionError(
            f"shared array {m.name!r} belongs to another user who shared it read-only; "
            "attach it read-only"
        )
    buf = m.payload if writable else m.ro
    arr: Any = np.ndarray.__new__(cls, shape, dtype, buffer=buf, offset=offset, strides=strides)
    if not m.contains(arr):
        # NumPy takes a negative offset without strides and points before
        # the buffer (a fuzz_py_shared_array finding): the descriptor, which
        # another process sent, is checked here.
        raise ShmstreamValueError(
            f"shared array {m.name!r}: the received descriptor (offset {offset}, shape {shape}, "
            f"strides {strides}) points outside the shared memory; it is corrupt"
        )
    arr._shm = m
    arr._attach_writable = attach_writable
    return arr


def _rebuild(
    name: str,
    segname: str,
    instance_id: str,
    dtype: np.dtype,
    shape: tuple,
    strides: tuple,
    offset: int,
    writable: bool,
    rec: bool,
) -> SharedArray:
    """Unpickle a SharedArray: attach (cached) and view."""
    m = _attach(name, segname, instance_id)
    cls = SharedRecArray if rec else SharedArray
    if rec and dtype.names is not None and dtype.type is not np.record:
        dtype = np.dtype((np.record, dtype))
    return _build(cls, m, dtype, shape, strides, offset, writable, writable)


class SharedArray(np.ndarray):
    """An ndarray in named shared memory that pickles as a small descriptor.

    Made by :func:`share` (the creating process owns it) or by unpickling in
    another process (attached, zero-copy). It is an ``ndarray`` in every other
    respect. Results computed from it into new memory are plain ndarrays.

    Extra attributes: ``shm_name`` (the name to :meth:`open` it by),
    ``shm_owner`` (True in the creating process), :meth:`close`, and
    context-manager support (``with share(a) as s: ...`` closes on exit).
    """

    _shm: _Mapping | None
    _attach_writable: bool

    def __array_finalize__(self, obj: Any) -> None:
        # Views inherit the mapping (keeping it, and the creator's name,
        # alive). Whether a given array really points into the segment is
        # decided when it is pickled.
        self._shm = getattr(obj, "_shm", None)
        self._attach_writable = getattr(obj, "_attach_writable", False)

    def __array_wrap__(self, arr: Any, context: Any = None, return_scalar: bool = False) -> Any:
        if return_scalar:
            return arr[()]
        if arr is self:
            return self
        # A ufunc result lives in fresh memory: a plain (rec)array.
        return arr.view(np.recarray) if isinstance(self, np.recarray) else arr.view(np.ndarray)

    # -- pickling -----------------------------------------------------
    def __reduce__(self) -> Any:
        m = getattr(self, "_shm", None)
        if m is None or not m.contains(self):
            return self._plain().__reduce__()
        if m.closed:
            raise HandleClosedError(
                f"shared array {m.name!r} is closed, so other processes cannot attach to it; "
                "pickle it before close(), or share() the data again"
            )
        ptr = self.__array_interface__["data"][0] if self.size else m.addr
        return (
            _rebuild,
            (
                m.name,
                m.segname,
                m.instance_id,
                self.dtype,
                self.shape,
                self.strides,
                ptr - m.addr,
                bool(self._attach_writable),
                isinstance(self, np.recarray),
            ),
        )

    def __reduce_ex__(self, protocol: Any) -> Any:
        return self.__reduce__()

    def _plain(self) -> np.ndarray:
        return self.view(np.recarray if isinstance(self, np.recarray) else np.ndarray)

    # -- copies are plain arrays ---------------------------------------
    def copy(self, order: Any = "C") -> np.ndarray:  # type: ignore[override]
        return self._plain().copy(order=order)

    def __copy__(self) -> np.ndarray:  # type: ignore[override]
        return self._plain().copy()

    def __deepcopy__(self, memo: Any) -> np.ndarray:  # type: ignore[override]
        return self._plain().copy()

    def astype(self, *args: Any, **kwargs: Any) -> np.ndarray:  # type: ignore[override]
        return self._plain().astype(*args, **kwargs)

    # -- lifetime -----------------------------------------------------
    @property
    def shm_name(self) -> str | None:
        """The name of the segment (for :meth:`open`), or None if unshared."""
        m = getattr(self, "_shm", None)
        return m.name if m is not None else None

    @property
    def shm_owner(self) -> bool:
        """True in the process that created the segment (and owns its name)."""
        m = getattr(self, "_shm", None)
        return m is not None and m.owner

    def close(self) -> None:
        """In the creator: unlink the segment's name now, so no further
        process can attach (those attached keep their mapping). Elsewhere:
        nothing to release early; the mapping goes with the last view.
        The data stays readable here either way. Idempotent."""
        m = getattr(self, "_shm", None)
        if m is not None:
            m.close()

    def __enter__(self) -> SharedArray:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @classmethod
    def open(cls, name: str, *, writable: bool = False, allow_owner: Any = None) -> SharedArray:
        """Attach to a shared array by name (the ``name`` given to
        :func:`share`, or ``shm_name``). Read-only unless ``writable``.
        An array owned by another user is refused (SegmentOwnerError)
        unless ``allow_owner`` (a uid, a user name or a collection of them)
        or SHMSTREAM_ALLOW_OWNERS names that user."""
        _checks.check_name(name, "shared array")
        writable = _checks.check_bool("writable", writable)
        owners = _checks.check_allow_owner(allow_owner)
        try:
            seg = _native.Segment.open(name, _native.KIND_ARRAY, not writable, owners)
        except FileNotFoundError:
            raise ShmstreamFileNotFoundError(
                f"no shared array named {name!r}; create one with shmstream.share(array, name=...)"
            ) from None
        key = (seg.segname, seg.instance_id)
        with _mappings_lock:
            m = _mappings.get(key)
            if m is None:
                m = _Mapping(seg, owner=False)
                _mappings[key] = m
        dt = _dtypes.of_segment(m.seg)
        rec = dt.names is not None
        if rec:
            dt = np.dtype((np.record, dt))
        return _build(
            SharedRecArray if rec else SharedArray,
            m,
            dt,
            tuple(m.seg.shape),
            None,
            0,
            writable,
            writable,
        )


class SharedRecArray(SharedArray, np.recarray):
    """A SharedArray with ``np.recarray`` behaviour (fields as attributes);
    what :func:`share` returns for a recarray. Fields taken from it (by
    attribute or by index) stay SharedArrays, so a column pickles zero-copy."""

    def __array_finalize__(self, obj: Any) -> None:
        SharedArray.__array_finalize__(self, obj)
        np.recarray.__array_finalize__(self, obj)

    def __getitem__(self, index: Any) -> Any:
        return _adopt(self, np.recarray.__getitem__(self, index))

    def __getattribute__(self, attr: str) -> Any:
        value = np.recarray.__getattribute__(self, attr)
        if type(value) is np.ndarray:
            fields = np.ndarray.__getattribute__(self, "dtype").fields
            if fields and attr in fields:
                return _adopt(self, value)
        return value


def _adopt(parent: SharedArray, value: Any) -> Any:
    """recarray turns non-structured fields into plain ndarrays; make them
    SharedArrays of the same segment again."""
    if type(value) is not np.ndarray:
        return value
    out: Any = value.view(SharedArray)
    out._shm = np.ndarray.__getattribute__(parent, "_shm")
    out._attach_writable = np.ndarray.__getattribute__(parent, "_attach_writable")
    return out


def share(
    array: Any, name: str | None = None, *, writable: bool = False, mode: int = 0o600
) -> SharedArray:
    """Copy ``array`` into a new shared-memory segment once; return it as a
    :class:`SharedArray` owned by this process.

    ``name``: the segment's name (any 1..255-byte string; ``None`` makes a
    unique one). ``writable``: whether processes that receive the array
    attach writable (default read-only). ``mode``: file permissions.

    Every fixed-size dtype works, structured ones included (nested records,
    sub-arrays, datetime64/timedelta64, fixed-width strings). A
    ``np.recarray`` comes back as a :class:`SharedRecArray`. Object dtypes
    (or records holding an object field) raise TypeError: an object array
    holds pointers into this process's heap, which mean nothing elsewhere.
    Raises FileExistsError if ``name`` is taken, OSError(ENOSPC) if
    /dev/shm is full.
    """
    mode = _checks.check_mode(mode)
    writable = _checks.check_bool("writable", writable)
    if isinstance(array, np.ma.MaskedArray):
        raise ShmstreamTypeError(
            "share() does not share masked arrays (the mask would be lost); "
            "share array.data and array.mask separately"
        )
    a = np.asanyarray(array)
    try:
        dt = _checks.check_dtype(a.dtype)
    except TypeError as exc:
        raise ShmstreamTypeError(
            f"share() cannot put this array in shared memory: {exc}. For text, "
            "convert first (e.g. arr.astype('U32')); for arbitrary Python objects, "
            "pass the array to the workers normally (it is pickled)"
        ) from None
    if name is None:
        name = f"{AUTO_PREFIX}{os.getpid()}-{secrets.token_hex(8)}"
    else:
        _checks.check_name(name, "shared array")
    _checks.check_ndim(a.shape, "; share a reshaped array and reshape it back in the workers")
    base_dt = np.dtype(dt.descr) if dt.names is not None and dt.type is np.record else dt
    try:
        text = _dtypes.encode(base_dt)
    except ValueError:
        # Too long for the header: pickled handles carry the exact dtype;
        # the header says "records of this size".
        text = f"|V{dt.itemsize}"
    with _space.room_for(
        name,
        "shared array",
        _space.segment_bytes(a.nbytes, 1),
        f"{a.nbytes} bytes of data and a 4096-byte header",
    ):
        seg = _native.Segment.create(
            name, _native.KIND_ARRAY, list(a.shape), dt.itemsize, text, 0, mode, 0, 1
        )  # one slot: no writer/reader hand-off
    try:
        m = _Mapping(seg, owner=True)
        with _mappings_lock:
            _mappings[(m.segname, m.instance_id)] = m
        rec = isinstance(a, np.recarray)
        out_dt = np.dtype((np.record, base_dt)) if rec and base_dt.names is not None else base_dt
        out = _build(
            SharedRecArray if rec else SharedArray, m, out_dt, a.shape, None, 0, True, writable
        )
        if out.size and a.flags.c_contiguous:
            # Raw bytes: one memcpy, padding of structured dtypes included.
            m.payload[:] = np.asarray(a).reshape(-1).view(np.uint8)
        elif out.size:
            np.copyto(np.ndarray(a.shape, dt, buffer=m.payload), np.asarray(a), casting="no")
    except BaseException:
        _native.unlink_segname(seg.segname)
        raise
    return out
