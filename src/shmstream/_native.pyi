"""Type stubs for the nanobind binding of the C core (internal module).

Every blocking call releases the GIL and comes back to Python at least every
100 ms so signals are honoured. Timeouts are seconds (``None`` waits
forever); ``spin_ns=-1`` means the default spin budget.
"""
from typing import Any

import numpy as np
import numpy.typing as npt

LAYOUT_VERSION: int
HEADER_BYTES: int
MAX_NAME_BYTES: int
MAX_DTYPE_BYTES: int
MAX_NDIM: int
SEGMENT_PREFIX: str
KIND_STREAM: int
KIND_CHANNEL: int
KIND_ARRAY: int
FLAG_NOTIFY: int
FLAG_GPU: int
FLAG_CPU_MIRROR: int
STATE_VALID: int
STATE_ABORTED: int
STATE_ABANDONED: int

def set_error_types(inconsistent: type[BaseException], corrupt: type[BaseException]) -> None:
    """Hand the binding the exception types of shmstream.errors."""

def segment_name(name: str) -> str:
    """The POSIX shared-memory name ('/shmstream-<readable>-<hash>') of a user
    name. ValueError for an empty, too long or NUL-containing name."""

def unlink_segname(segname: str) -> bool:
    """Remove a segment by its POSIX name. True if removed, False if absent."""

def default_spin_ns() -> int:
    """The spin budget blocking waits use when spin_ns is -1."""

def monotonic_ns() -> int:
    """CLOCK_MONOTONIC in nanoseconds (the clock the core's deadlines use)."""

def layout() -> dict[str, tuple[int, int]]:
    """(offset, size) of every documented header field, by field name."""

class Segment:
    """One mapped segment. Closed (unmapped) when the object is freed; a
    payload() view keeps it alive."""

    @staticmethod
    def create(
        name: str,
        kind: int,
        shape: list[int],
        itemsize: int,
        dtype: str,
        flags: int = 0,
        mode: int = 0o600,
        payload_bytes: int = 0,
    ) -> Segment:
        """Create a segment (FileExistsError if the name exists)."""

    @staticmethod
    def open(name: str, kind: int = 0, readonly: bool = False) -> Segment:
        """Attach to an existing segment; kind 0 accepts any kind."""

    @staticmethod
    def peek(segname: str) -> Segment:
        """Map only the header of a segment, by segment name (for list and stat)."""

    @property
    def name(self) -> str: ...
    @property
    def segname(self) -> str: ...
    @property
    def kind(self) -> int: ...
    @property
    def flags(self) -> int: ...
    @property
    def shape(self) -> tuple[int, ...]: ...
    @property
    def itemsize(self) -> int: ...
    @property
    def dtype(self) -> str: ...
    @property
    def payload_bytes(self) -> int: ...
    @property
    def creator_pid(self) -> int: ...
    @property
    def creator_start_ticks(self) -> int: ...
    @property
    def created_ns(self) -> int: ...
    @property
    def mode(self) -> int: ...
    @property
    def instance_id(self) -> str:
        """32 hex characters, new for every create."""
    @property
    def gpu_area(self) -> bytes: ...
    @property
    def readonly(self) -> int:
        """0 writable, 1 opened read-only, 2 mapped read-only."""
    @property
    def count(self) -> int: ...
    @property
    def seq(self) -> int: ...
    @property
    def frame_id(self) -> int: ...
    @property
    def write_time_ns(self) -> int:
        """CLOCK_REALTIME of the last publish, 0 before the first."""
    @property
    def state(self) -> int: ...
    @property
    def writer_pid(self) -> int: ...
    @property
    def aborted(self) -> int: ...
    @property
    def owner_pid(self) -> int: ...
    @property
    def owner_tid(self) -> int: ...
    @property
    def acquisitions(self) -> int: ...
    @property
    def waiters(self) -> int: ...
    def publication(self) -> tuple[int, int, int]:
        """(count, frame_id, write_time_ns) of the published frame."""

    def lock(self, timeout: float | None = None) -> bool:
        """Take the cross-process lock. True if taken over from a dead owner."""

    def unlock(self) -> None: ...
    def write(
        self,
        src: Any,
        frame_id: int | None = None,
        locked: bool = False,
        timeout: float | None = None,
    ) -> int:
        """Publish the bytes of src (C-contiguous buffer of payload_bytes).
        frame_id None keeps the previous one. Returns the new count."""

    def write_begin(self) -> None: ...
    def write_end(self, frame_id: int | None = None) -> int: ...
    def write_abort(self) -> None: ...
    def clear(self, locked: bool = False, timeout: float | None = None) -> int: ...
    def read(
        self, dst: Any, timeout: float | None = None, holds_lock: bool = False
    ) -> tuple[int, int, int]:
        """Snapshot into dst; returns (count, frame_id, write_time_ns)."""

    def read_new(
        self, dst: Any, after: int, timeout: float | None = None, spin_ns: int = -1
    ) -> tuple[int, int, int]:
        """Wait until count > after, then snapshot into dst."""

    def wait_count(self, after: int, timeout: float | None = None, spin_ns: int = -1) -> int:
        """Wait until count > after; returns the count."""

    def payload(self) -> npt.NDArray[np.uint8]:
        """A writable byte view of the payload slot."""

    def cancel(self) -> None:
        """Make this handle's waiters give up (RuntimeError) and wake them."""

    def wake(self) -> None: ...
