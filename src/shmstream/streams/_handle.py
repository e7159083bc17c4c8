"""The state and helpers of :class:`shmstream.SharedMemory` that its read
mixins (:mod:`._reading`, :mod:`._waiting`, :mod:`._history`) use, as a
protocol for the type checker. The mixins derive from it only while type
checking (at run time their base is ``object``), so mypy checks each mixin
against the handle it is mixed into; SharedMemory defines every member.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from .. import _native
from ._lockstate import LockState
from .publication import Publication


class HandleState(Protocol):
    """What a read mixin may use of its stream handle."""

    name: str
    shape: tuple[int, ...]
    dtype: np.dtype
    size: int
    gpu_enabled: bool
    cpu_mirror: bool
    _seg: _native.Segment | None
    _lk: LockState
    _views: dict[int, np.ndarray]
    _ro_views: dict[int, np.ndarray]
    _spin: int
    _last_read: int
    _wrote: int
    _missed: int
    _total_missed: int

    _creator_pid: int
    _creator_ticks: int
    _instance_id: str
    _segname: str
    owner: bool
    readonly: bool
    gpu_device: Any

    @property
    def notify(self) -> bool: ...

    def _closed_error(self, operation: str) -> RuntimeError: ...

    def _check_open(self, operation: str) -> _native.Segment: ...

    def _check_writable(self, operation: str) -> _native.Segment: ...

    def _holds_lock(self) -> bool: ...

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
