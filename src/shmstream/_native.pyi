"""shmstream C core binding (internal; use the shmstream package)"""

from collections.abc import Sequence
from typing import Annotated, overload

import numpy
from numpy.typing import NDArray


class FileMapping:
    def __init__(self, fd: int, size: int, populate: bool = False) -> None:
        """
        Map size bytes of the open file fd, shared (writable if fd was opened for writing, read-only otherwise), under the bus-error guard; populate maps every page now.
        """

    def buffer(self) -> object:
        """
        The mapped bytes as a memoryview (read-only if the mapping is) that keeps the mapping alive.
        """

    @property
    def writable(self) -> bool:
        """True if the file was opened for writing, so the mapping is writable."""

    @property
    def lost(self) -> bool:
        """
        True once a bus error was caught in the mapping (the file shrank under it): its pages from there on are private zeros.
        """

    @property
    def size(self) -> int:
        """The mapped bytes."""

HEADER_BYTES: int = 4096

MAX_NAME_BYTES: int = 255

MAX_DTYPE_BYTES: int = 1023

MAX_NDIM: int = 8

MAX_SLOTS: int = 8

DEFAULT_SLOTS: int = 2

MAX_HISTORY: int = 1048576

MAX_COUNT: int = 9223372036854775807

LAYOUT_VERSION_ARRAY: int = 1

LAYOUT_VERSION_CHANNEL: int = 3

LAYOUT_VERSION_STREAM: int = 4

LAYOUT_VERSION_LOADER_POOL: int = 5

SEGMENT_PREFIX: str = '/shmstream-'

def pidns_self() -> tuple:
    """(st_dev, st_ino) of /proc/self/ns/pid; (0, 0) if unknown."""

KIND_STREAM: int = 1

KIND_CHANNEL: int = 2

KIND_ARRAY: int = 3

FLAG_NOTIFY: int = 1

FLAG_GPU: int = 2

FLAG_CPU_MIRROR: int = 4

FLAG_LOADER_POOL: int = 8

STATE_VALID: int = 0

STATE_ABORTED: int = 1

STATE_ABANDONED: int = 2

NAME_RULE: str = '1 to 255 UTF-8 bytes without NUL'

def segment_name(name: str) -> str: ...

def unlink_segname(segname: str) -> bool: ...

def proc_alive(pid: int, start_ticks: int = 0) -> bool:
    """
    True if pid runs (not a zombie) and, when start_ticks is given, started then.
    """

def proc_start_ticks(pid: int) -> int:
    """
    Start time of pid in clock ticks since boot (/proc/<pid>/stat field 22), 0 if unknown.
    """

def default_spin_ns() -> int: ...

def segment_bytes(payload: int, slots: int, history: int = 0) -> int:
    """
    Bytes of a segment with slots payload slots (history: history + 1 slots and records).
    """

def monotonic_ns() -> int: ...

class Segment:
    @staticmethod
    def create(name: str, kind: int, shape: Sequence[int], itemsize: int, dtype: str, flags: int = 0, mode: int = 384, payload_bytes: int = 0, slots: int = 2, history: int = 0) -> Segment: ...

    @staticmethod
    def open(name: str, kind: int = 0, readonly: bool = False, allow_owners: Sequence[int] = []) -> Segment:
        """
        Open by user name; a segment owned by another uid than this process's effective uid is refused (SegmentOwnerError) unless its owner is in allow_owners or SHMSTREAM_ALLOW_OWNERS.
        """

    @overload
    @staticmethod
    def peek(segname: str) -> Segment:
        """Map only the header of a segment, by segment name (for list and stat)."""

    @overload
    @staticmethod
    def peek(segname: bytes) -> Segment:
        """
        peek by the file name's bytes (os.fsencode of a name listed in /dev/shm).
        """

    @property
    def name(self) -> str: ...

    @property
    def segname(self) -> str: ...

    @property
    def kind(self) -> int: ...

    @property
    def flags(self) -> int: ...

    @property
    def shape(self) -> tuple: ...

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
    def owner_uid(self) -> int: ...

    @property
    def file_mode(self) -> int: ...

    @property
    def pidns_ino(self) -> int: ...

    @property
    def pidns_match(self) -> int: ...

    @property
    def layout_version(self) -> int: ...

    @property
    def instance_id(self) -> str: ...

    @property
    def gpu_area(self) -> bytes: ...

    @property
    def readonly(self) -> int: ...

    @property
    def count(self) -> int: ...

    @property
    def seq(self) -> int: ...

    @property
    def frame_id(self) -> int: ...

    @property
    def write_time_ns(self) -> int: ...

    @property
    def state(self) -> int: ...

    @property
    def read_state(self) -> int:
        """
        The state a read finds now (ss_read_state): 'state', or abandoned while a write is in flight and the lock's owner died. Changes nothing.
        """

    @property
    def writer_pid(self) -> int: ...

    @property
    def writer_start_ticks(self) -> int: ...

    @property
    def aborted(self) -> int: ...

    @property
    def owner_pid(self) -> int: ...

    @property
    def owner_tid(self) -> int: ...

    @property
    def acquisitions(self) -> int: ...

    def leases(self) -> tuple:
        """
        A stream's or loader pool's (creator, lock holder, any handle) leases: 1 alive, 0 gone, -1 cannot tell (another kind, a free lock). One F_OFD_GETLK each.
        """

    @property
    def lease(self) -> int:
        """
        This handle's lease (0: none), for a payload table that names holders by lease (a loader pool's slot lines).
        """

    def lease_alive(self, word: int) -> int:
        """Whether the lease word is held: 1 alive, 0 gone, -1 cannot tell (l2)."""

    @property
    def waiters(self) -> int: ...

    def publication(self) -> tuple[int, int, int]: ...

    def lock(self, timeout: object | None = None) -> bool:
        """
        Take the cross-process lock. Returns True if it was taken over from a dead owner.
        """

    def unlock(self) -> None: ...

    def write(self, src: object, frame_id: int | None = None, locked: bool = False, timeout: object | None = None, count: int = 0, write_time_ns: int = 0) -> int:
        """
        Publish src (frame_id None keeps the previous frame id; count and write_time_ns 0: count + 1 and now). Returns the new count.
        """

    def write_begin(self) -> int:
        """Start a write (lock held); returns the slot to fill."""

    def write_end(self, frame_id: int | None = None) -> int: ...

    def write_abort(self) -> None: ...

    def clear(self, locked: bool = False, timeout: object | None = None) -> int: ...

    def read(self, dst: object, timeout: object | None = None, holds_lock: bool = False) -> tuple[int, int, int]: ...

    def read_last_complete(self, dst: object, timeout: object | None = None, holds_lock: bool = False) -> tuple[int, int, int, int]:
        """
        Copy the last complete publication whatever the state: (count, frame_id, write_time_ns, state).
        """

    def check_writer(self) -> None: ...

    def bind_array(self, dtype: object, shape: Sequence[int]) -> bool:
        """
        Bind the array type of the hot path (put, get, get_new). False if its bytes are not the payload's.
        """

    def put(self, src: object, frame_id: object | None = None, timeout: object | None = None) -> int | None:
        """
        write() of a C-contiguous ndarray of the bound dtype and shape without the lock held (waiting for it up to timeout): the new count, or None if src is not such an array (or frame_id not a plain int in [0, 2**64)).
        """

    def get(self, dst: object, timeout: object | None = None) -> int | None:
        """
        read() into a writable C-contiguous ndarray of the bound dtype and shape: the count read, or None if dst is not such an array.
        """

    def get_new(self, dst: object, after: int, timeout: object | None = None, spin_us: object | None = None, spin_ns: int = -1) -> int | None:
        """
        read_new() into a writable C-contiguous ndarray of the bound dtype and shape: the count read, or None if dst is not such an array, spin_us not a number >= 0, or the stream's last write failed.
        """

    def read_new(self, dst: object, after: int, timeout: object | None = None, spin_ns: int = -1) -> tuple[int, int, int]: ...

    def view(self, after: int, wait_new: bool, timeout: object | None = None, spin_ns: int = -1, holds_lock: bool = False) -> tuple[int, int, int, int, int]:
        """
        Locate the published frame without copying: (slot, slot_seq, count, frame_id, write_time_ns).
        """

    def view_valid(self, slot: int, slot_seq: int) -> bool:
        """True while the slot still holds the frame view() located."""

    def wait_count(self, after: int, timeout: object | None = None, spin_ns: int = -1) -> int: ...

    def payload(self, slot: int = 0) -> Annotated[NDArray[numpy.uint8], dict(shape=(None,))]: ...

    @property
    def spin_policy(self) -> dict:
        """
        This handle's wait policy (docs/waiting.md): the process's wake-up cost wake_ns and cap_ns, contended, the budget_ns chosen for the last wait, the histogram of wait lengths, when publications are due (low_ns) and the last nap (nap_ns), and the counters waits, spun, napped, caught, slept, slept_at_once, preempted, contended_waits.
        """

    @property
    def write_in_flight(self) -> bool: ...

    @property
    def published_slot(self) -> int: ...

    @property
    def slot_count(self) -> int: ...

    @property
    def history(self) -> int: ...

    def read_since(self, after: int, max_frames: int = 0, timeout: object | None = None, spin_ns: int = -1, out: object | None = None) -> tuple[numpy.ndarray, numpy.ndarray, int]:
        """
        Copies of the publications newer than after still held, oldest first: (frames, meta, last); meta (n, 3) uint64: count, frame_id, write_time_ns.
        """

    def locate(self, after: int, max_frames: int = 0, timeout: object | None = None, spin_ns: int = -1) -> tuple[numpy.ndarray, int]:
        """
        read_since without copying: (meta, last); meta (n, 5) uint64: count, frame_id, write_time_ns, slot, slot_seq.
        """

    def frames_valid(self, meta: object) -> list:
        """
        For each row of locate()'s meta: True while its slot still holds that frame.
        """

    def cancel(self) -> None:
        """Make this handle's waiters give up (RuntimeError) and wake them."""

    def wake(self) -> None: ...
