"""shmstream channel binding (internal; use shmstream.channel)"""

from collections.abc import Sequence
from typing import Annotated

from numpy.typing import NDArray


ROLE_PRODUCER: int = 1

ROLE_CONSUMER: int = 2

MIN_CAPACITY: int = 4096

MAX_CAPACITY: int = 1099511627776

MSG_HEADER_BYTES: int = 16

MSG_ALIGN: int = 64

MSG_ARRAY: int = 1

MAX_META: int = 4000

DLPACK_TEXT_PREFIX: str = 'dlpack:'

def dlpack_import(tensor: Annotated[NDArray, dict(writable=False)]) -> tuple: ...

def dlpack_dtype(text: str) -> tuple[int, int] | None:
    """(code, bits) of a 'dlpack:<code>:<bits>' dtype text, or None."""

def encode_meta(dtype: str, shape: tuple[int, ...]) -> bytes | None:
    """
    An array message's metadata for dtype text and shape; None if it does not fit (more than MAX_NDIM dimensions, or more than MAX_META bytes).
    """

def parse_meta(meta: bytes) -> tuple[bytes, tuple[int, ...]] | None:
    """
    (dtype text bytes, shape) of an array message's metadata; None if malformed.
    """

def set_decoder(arg: object, /) -> None: ...

def peek(segname: str) -> dict:
    """
    capacity, head, tail and both ends (pid, state, attaches, takeovers, alive, pidns_ino).
    """

class Message:
    """A received message: type_id, data (bytes) and, for arrays, .array."""

    @property
    def type_id(self) -> int: ...

    @property
    def data(self) -> object: ...

    @property
    def meta(self) -> object: ...

    @property
    def is_array(self) -> bool: ...

    @property
    def array(self) -> object:
        """The message as a read-only ndarray (None for a bytes message)."""

    def __dlpack__(self, *, stream: object | None = None, max_version: object | None = None, dl_device: object | None = None, copy: object | None = None) -> object:
        """
        A DLPack capsule of the copied message (any dtype, bfloat16 included), read-only; it keeps the message's bytes alive.
        """

    def __dlpack_device__(self) -> tuple: ...

    def __len__(self) -> int: ...

    def __repr__(self) -> str: ...

class ZeroCopyMessage:
    """
    A message read in place. Valid inside its 'with' block; views taken from it (np.asarray, torch.from_dlpack, .data) keep its ring bytes from reuse until they are gone.
    """

    @property
    def type_id(self) -> int: ...

    @property
    def meta(self) -> bytes: ...

    @property
    def nbytes(self) -> int: ...

    @property
    def is_array(self) -> bool: ...

    @property
    def released(self) -> bool: ...

    @property
    def data(self) -> object:
        """
        The payload as a read-only memoryview (pins the ring bytes while alive).
        """

    @property
    def array(self) -> object:
        """The payload as a read-only ndarray view (uint8 for a bytes message)."""

    def __array__(self, dtype: object | None = None, copy: object | None = None) -> object:
        """
        The payload as an ndarray (numpy's array protocol): the view, converted to dtype or copied when asked.
        """

    def release(self) -> None:
        """Drop this message's hold on its ring bytes (views keep theirs)."""

    def __enter__(self) -> object: ...

    def __exit__(self, *args) -> bool: ...

    def __dlpack__(self, *, stream: object | None = None, max_version: object | None = None, dl_device: object | None = None, copy: object | None = None) -> object:
        """
        A DLPack capsule of the message (no copy); it and the consumer's tensor keep the ring bytes pinned until they are gone.
        """

    def __dlpack_device__(self) -> tuple: ...

def release_all(msgs: object) -> None:
    """Release every ZeroCopyMessage of msgs (views keep their own holds)."""

class Channel:
    @staticmethod
    def create(name: str, capacity: int, role: int, mode: int = 384) -> Channel: ...

    @staticmethod
    def open(name: str, role: int, allow_owners: Sequence[int] = []) -> Channel: ...

    @property
    def name(self) -> str: ...

    @property
    def segname(self) -> str: ...

    @property
    def capacity(self) -> int: ...

    @property
    def role(self) -> int: ...

    @property
    def closed(self) -> bool: ...

    def max_message(self, meta_len: int = 0) -> int: ...

    @property
    def batch(self) -> int: ...

    @batch.setter
    def batch(self, arg: int, /) -> None: ...

    @property
    def spin_ns(self) -> int: ...

    @spin_ns.setter
    def spin_ns(self, arg: int, /) -> None: ...

    @property
    def spin_policy(self) -> dict:
        """This end's wait policy (docs/waiting.md), as Segment.spin_policy."""

    @property
    def head(self) -> int: ...

    @property
    def tail(self) -> int: ...

    @property
    def pending(self) -> int: ...

    def end_info(self, role: int) -> tuple: ...

    def peer_status(self) -> tuple: ...

    def send(self, obj: object, type_id: int = 0, meta: object | None = None, timeout: object | None = None) -> None: ...

    def send_many(self, items: object, type_id: int = 0, meta: object | None = None, timeout: object | None = None) -> int: ...

    def loan(self, nbytes: int, meta: object | None = None, timeout: object | None = None) -> object: ...

    def commit(self, nbytes: int, type_id: int = 0, array: bool = False) -> None: ...

    def rollback(self) -> None: ...

    def flush(self) -> None: ...

    def recv(self, timeout: object | None = None) -> Message: ...

    def drain(self, max_messages: int, timeout: object | None = 0.0) -> list: ...

    def recv_view(self, timeout: object | None = None) -> ZeroCopyMessage: ...

    def drain_capsules(self, max_messages: int, timeout: object | None = 0.0) -> list: ...

    def drain_views(self, max_messages: int, timeout: object | None = 0.0) -> list: ...

    def close(self) -> None: ...

    def cancel(self) -> None: ...
