"""The state and helpers of :class:`shmstream.SharedMemory` that its read
mixins (:mod:`._reading`, :mod:`._waiting`, :mod:`._history`) use, as a
protocol for the type checker. The mixins derive from it only while type
checking (at run time their base is ``object``), so mypy checks each mixin
against the handle it is mixed into; SharedMemory defines every member.
The handle's attributes are declared here only: SharedMemory gets them
through its mixins while type checking.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from .. import _native
from ._lockstate import LockState
from .publication import Publication


class HandleFields:
    """Every attribute of the handle, declared here once: SharedMemory's
    __init__ assigns them without annotations. (A plain class, not the
    protocol below, so that mypy takes these types for those assignments.)"""

    name: str
    shape: tuple[int, ...]
    dtype: np.dtype
    size: int
    gpu_enabled: bool
    gpu_device: str | None
    cpu_mirror: bool
    owner: bool
    readonly: bool
    _flags: int
    _segname: str
    _instance_id: str
    _creator_pid: int
    _creator_ticks: int
    _seg: _native.Segment | None  # None once closed
    _wseg: _native.Segment | None  # None when closed or read-only
    _lk: LockState
    _held: int
    _writing: bool
    _views: dict[int, np.ndarray]
    _ro_views: dict[int, np.ndarray]
    _last_read: int
    _wrote: int
    _missed: int
    _total_missed: int
    _spin: int
    _auto_unlink: bool


class HandleMethods(Protocol):
    """The methods a read mixin may use of its stream handle."""

    @property
    def notify(self) -> bool: ...

    def _closed_error(self, operation: str) -> RuntimeError: ...

    def _check_open(self, operation: str) -> _native.Segment: ...

    def _check_writable(self, operation: str) -> _native.Segment: ...

    def _holds_lock(self) -> bool: ...

    def _payload_view(self, seg: _native.Segment, slot: int | None = None) -> np.ndarray: ...

    # Defined by the mixins themselves, used across them.

    def _record(self, count: int) -> int: ...

    @property
    def _seen(self) -> int: ...

    def _check_out(self, out: Any) -> np.ndarray: ...

    def read(
        self,
        *,
        safe: bool = True,
        poll_interval: float = 1e-6,
        out: np.ndarray | None = None,
        timeout: float | None = None,
    ) -> Any: ...

    def read_publication(
        self,
        *,
        safe: bool = True,
        poll_interval: float = 1e-6,
        out: np.ndarray | None = None,
        timeout: float | None = None,
    ) -> Publication: ...

    def wait_for_count(
        self,
        *,
        after: int,
        timeout: float | None = None,
        poll_interval: float = 1e-5,
        spin_us: float | None = None,
    ) -> int: ...


class HandleState(HandleFields, HandleMethods):
    """What a read mixin may use of its stream handle: its attributes and
    methods."""
