"""Channels: a bounded lock-free single-producer single-consumer ring of
variable-size messages in named shared memory.

Every message carries a ``type_id`` and either bytes or an ndarray (its dtype
and shape travel in the record, so the consumer gets an array back). Nothing
is overwritten: a full ring makes ``send`` wait (or raise, with
``timeout=0``). One end may be a C process using ``include/shmstream.h``.

    tx = shmstream.channel("feed", capacity=1 << 20)      # producer
    rx = shmstream.open_channel("feed")                   # consumer, elsewhere
    tx.send(b"hello", type_id=1); rx.recv().data          # -> b"hello"

End of stream: when the producer closes or dies, the consumer first receives
everything it published, then ``ChannelClosedError`` (an ``EOFError``). When
the consumer closes, or dies while the producer waits for room, ``send``
raises ``ChannelBrokenError`` (a ``BrokenPipeError``). A new process can take
over a dead end with ``open_channel(name, role=...)``. The ring layout and
protocol are in docs/ABI.md ("Channels").

This file holds the two ends and the functions that make, open and unlink
a channel; what a record carries (message types, array metadata, DLPack
dtypes, zero-copy loans) is in ``_messages.py``.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import Any, Literal

import numpy as np

from .. import _channel, _native
from ..common import _checks, _space
from ..errors import (
    ChannelClosedError,
    ChannelRoleError,
    ShmstreamError,
    ShmstreamTypeError,
    ShmstreamValueError,
)
from ._checks import check_batch, check_capacity, check_max_messages, check_spin_ns, check_type_id
from ._messages import (
    DLPackDtype,
    Loan,
    Message,
    ZeroCopyBatch,
    ZeroCopyMessage,
    array_meta,
    describe,
    dlpack_payload,
)

__all__ = [
    "channel",
    "open_channel",
    "unlink_channel",
    "ChannelProducer",
    "ChannelConsumer",
    "Message",
    "ZeroCopyMessage",
    "DLPackDtype",
    "describe",
]


_ROLES = {"producer": _channel.ROLE_PRODUCER, "consumer": _channel.ROLE_CONSUMER}


# ---- the two ends -------------------------------------------------------------


class _End:
    __slots__ = ("_ch",)

    def __init__(self, ch: Any) -> None:
        self._ch = ch

    @property
    def name(self) -> str:
        return self._ch.name

    @property
    def capacity(self) -> int:
        """Ring bytes (a power of two)."""
        return self._ch.capacity

    @property
    def max_message_bytes(self) -> int:
        """Largest bytes payload one message can carry (capacity - 16)."""
        return self._ch.max_message(0)

    @property
    def closed(self) -> bool:
        return self._ch.closed

    @property
    def spin_ns(self) -> int:
        """The most a wait spins before it sleeps on the futex (-1: the wait
        policy's own cap; 0: never spin). docs/waiting.md."""
        return self._ch.spin_ns

    @spin_ns.setter
    def spin_ns(self, value: int) -> None:
        self._ch.spin_ns = check_spin_ns(value)

    @property
    def spin_policy(self) -> dict:
        """This end's wait policy, as ``SharedMemory.spin_policy``
        (docs/waiting.md)."""
        return self._ch.spin_policy

    def stat(self) -> dict:
        """Both ends' owners and the ring indices (the fields of
        ``shmstream.stat(name)`` for a channel)."""
        return _stat_dict(
            self.name,
            self.capacity,
            self._ch.head,
            self._ch.tail,
            self._ch.end_info(_channel.ROLE_PRODUCER),
            self._ch.end_info(_channel.ROLE_CONSUMER),
        )

    def close(self) -> None:
        """Give up this end (the peer sees a clean close) and drop the mapping
        once no zero-copy view refers to it. Idempotent."""
        self._ch.close()

    def unlink(self) -> bool:
        """Remove the name; handles already attached keep working."""
        return unlink_channel(self.name)

    def __enter__(self):
        return self

    def __exit__(self, *exc: Any) -> Literal[False]:
        self.close()
        return False

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"capacity={self.capacity}"
        return f"<{type(self).__name__} {self.name!r} {state}>"


class _OtherEnd:
    """A call of the other end, refused by name on this end: reading it is a
    ChannelRoleError (an AttributeError, so hasattr() stays False).

    A descriptor per name rather than ``__getattr__``: a class with
    ``__getattr__`` loses CPython's specialised attribute lookups, which cost
    every ``tx.send`` some 70 ns (issue 48)."""

    __slots__ = ("attr", "other")

    def __init__(self, attr: str, other: str) -> None:
        self.attr, self.other = attr, other

    def __get__(self, obj: Any, owner: Any = None) -> Any:
        if obj is None:
            return self
        this = "consumer" if self.other == "producer" else "producer"
        exc = ChannelRoleError(
            f"{self.attr} belongs to the {self.other} end of channel {obj.name!r}, and this is "
            f"the {this} end; call it on a {self.other} "
            f"(shmstream.open_channel({obj.name!r}, role={self.other!r}))"
        )
        exc.name, exc.obj = self.attr, obj
        raise exc


def _refuse(cls: type, other: str, calls: tuple[str, ...]) -> None:
    """Give ``cls`` the calls of the ``other`` end, refused by name."""
    for attr in calls:
        setattr(cls, attr, _OtherEnd(attr, other))


class ChannelProducer(_End):
    """The sending end of a channel."""

    __slots__ = ()

    @property
    def batch(self) -> int:
        """Publish the head index at most every ``batch`` messages (and on
        ``flush``, at the end of ``send_many``, and before waiting for room)."""
        return self._ch.batch

    @batch.setter
    def batch(self, value: int) -> None:
        self._ch.batch = check_batch(value)

    def send(self, obj: Any, type_id: int = 0, timeout: float | None = None) -> None:
        """Copy ``obj`` (bytes, any buffer, an ndarray, or a DLPack tensor)
        into the ring. A full ring waits up to ``timeout`` seconds (None:
        forever; 0: raise TimeoutError at once)."""
        if isinstance(obj, np.ndarray):
            if not obj.flags.c_contiguous:
                obj = np.ascontiguousarray(obj)
            meta = array_meta(obj.dtype, obj.shape)
            if obj.dtype.kind in "mM" or obj.dtype.itemsize == 0:
                obj = obj.reshape(-1).view(np.uint8) if obj.dtype.itemsize else b""
            try:
                self._ch.send(obj, type_id, meta, timeout)
            except ShmstreamError:
                raise
            except TypeError:  # the binding's u32 refused type_id: say which argument
                check_type_id(type_id)
                raise
            return
        try:
            self._ch.send(obj, type_id, None, timeout)
            return
        except ShmstreamError:
            raise
        except TypeError:
            # Not a buffer (a DLPack tensor?), or a type_id the binding's u32
            # refuses: checked here, off the hot path.
            type_id = check_type_id(type_id)
        payload = dlpack_payload(obj)
        if payload is None:
            raise ShmstreamTypeError(
                f"send takes bytes, a buffer, an ndarray or a DLPack tensor, not {type(obj).__name__}"
            )
        data, header = payload
        if header is None:
            self.send(data, type_id, timeout)
        else:
            self._ch.send(data, type_id, header, timeout)

    def send_many(
        self, items: Sequence[Any], type_id: int = 0, timeout: float | None = None
    ) -> int:
        """Send a sequence of messages in one native call, all with ``type_id``:
        bytes-like objects, or ndarrays that all share one dtype and shape.
        Sizes are checked before anything is written."""
        type_id = check_type_id(type_id)
        if not isinstance(items, Sequence) or isinstance(items, (str, bytes, bytearray)):
            raise ShmstreamTypeError(
                f"items must be a sequence (a list or a tuple) of bytes-like objects or "
                f"ndarrays, not {type(items).__name__}"
            )
        if len(items) and isinstance(items[0], np.ndarray):
            first = items[0]
            dt, shp = first.dtype, first.shape
            if dt.kind in "mM" or not all(
                isinstance(a, np.ndarray)
                and a.dtype == dt
                and a.shape == shp
                and a.flags.c_contiguous
                for a in items
            ):
                for a in items:  # mixed arrays: one by one, each with its own header
                    self.send(a, type_id, timeout)
                return len(items)
            return self._ch.send_many(items, type_id, array_meta(dt, shp), timeout)
        try:
            return self._ch.send_many(items, type_id, None, timeout)
        except ShmstreamError:
            raise
        except TypeError as exc:  # an item without the buffer protocol; nothing was sent
            raise ShmstreamTypeError(
                f"items must be bytes-like objects or ndarrays of one dtype and shape ({exc})"
            ) from None

    def send_zero_copy(
        self,
        nbytes: int | None = None,
        type_id: int = 0,
        *,
        dtype: Any = None,
        shape: Any = None,
        timeout: float | None = None,
    ) -> Loan:
        """``with tx.send_zero_copy(n) as buf:`` fill a writable memoryview of
        ``n`` ring bytes (or, with ``dtype`` and ``shape``, an ndarray view);
        the message is committed when the block ends normally and rolled back
        if it raises. Views must not outlive the block."""
        type_id = check_type_id(type_id)
        if dtype is None and shape is None:
            if nbytes is None:
                raise ShmstreamTypeError("send_zero_copy needs nbytes, or dtype and shape")
            n = _checks.check_int("nbytes", nbytes, minimum=0)
            self._check_fits(n, None)
            return Loan(self._ch, n, None, type_id, timeout, None, None)
        dt = _checks.check_dtype(dtype if dtype is not None else np.uint8)
        shp = _checks.check_shape(() if shape is None else shape)
        n = math.prod(shp) * dt.itemsize
        if nbytes is not None and _checks.check_int("nbytes", nbytes) != n:
            raise ShmstreamValueError(
                f"nbytes={nbytes} does not match shape {shp} of {dt} ({n} bytes)"
            )
        meta = array_meta(dt, shp)
        self._check_fits(n, meta)
        return Loan(self._ch, n, meta, type_id, timeout, dt, shp)

    def _check_fits(self, n: int, meta: bytes | None) -> None:
        most = self._ch.max_message(len(meta) if meta else 0)
        if n > most:
            raise ShmstreamValueError(
                f"message of {n} bytes is larger than the ring of {self.name!r} can hold "
                f"(at most {most} bytes per message with capacity {self.capacity}); "
                "create the channel with a larger capacity"
            )

    def flush(self) -> None:
        """Publish every committed message now and wake a sleeping consumer."""
        self._ch.flush()

    @property
    def consumer_pid(self) -> int:
        """pid of the attached consumer, 0 if none."""
        return self._ch.end_info(_channel.ROLE_CONSUMER)[0]


class ChannelConsumer(_End):
    """The receiving end of a channel."""

    __slots__ = ()

    def recv(self, timeout: float | None = None) -> Message:
        """The next message, copied out (``.type_id``, ``.data``, ``.array``).
        Waits up to ``timeout`` seconds (None: forever) and raises
        TimeoutError, or ChannelClosedError once the producer is gone and
        everything it sent has been received."""
        return self._ch.recv(timeout)

    def drain(self, max_messages: int = 1024, timeout: float | None = 0.0) -> list:
        """Up to ``max_messages`` messages that are there now (an empty list if
        none; with a timeout, waits for the first one)."""
        return self._ch.drain(check_max_messages(max_messages), timeout)

    def recv_zero_copy(self, timeout: float | None = None) -> ZeroCopyMessage:
        """``with rx.recv_zero_copy() as msg:`` the next message read in place:
        ``msg.data`` (read-only memoryview), ``msg.array``, ``np.asarray(msg)``,
        ``torch.from_dlpack(msg)``. Its ring bytes are not reused until the
        block ends and every view of them is gone."""
        return self._ch.recv_view(timeout)

    def drain_dlpack(self, max_messages: int = 1024, timeout: float | None = 0.0) -> list[Any]:
        """Up to n messages read in place as DLPack capsules, for
        ``torch.from_dlpack(capsule)`` (its fastest input; a capsule can be
        consumed once). Each pins its ring bytes until the capsule, or the
        tensor made from it, is gone. A message without a DLPack layout
        (structured or string dtypes) ends the batch unconsumed; met first,
        it raises BufferError: take it with :meth:`recv_zero_copy`."""
        return self._ch.drain_capsules(check_max_messages(max_messages), timeout)

    def drain_zero_copy(
        self, max_messages: int = 1024, timeout: float | None = 0.0
    ) -> ZeroCopyBatch:
        """``with rx.drain_zero_copy(n) as msgs:`` up to n messages read in
        place; released (unless views hold them) when the block ends."""
        return ZeroCopyBatch(self._ch.drain_views(check_max_messages(max_messages), timeout))

    def __iter__(self) -> Iterator[Message]:
        """Messages until the producer closes the channel (or dies)."""
        while True:
            try:
                yield self._ch.recv(None)
            except ChannelClosedError:
                return

    @property
    def producer_pid(self) -> int:
        """pid of the attached producer, 0 if none."""
        return self._ch.end_info(_channel.ROLE_PRODUCER)[0]


_END_STATES = ("none", "attached", "closed")


_refuse(
    ChannelProducer,
    "consumer",
    ("recv", "drain", "recv_zero_copy", "drain_dlpack", "drain_zero_copy"),
)
_refuse(
    ChannelConsumer,
    "producer",
    ("send", "send_many", "send_zero_copy", "flush", "batch", "consumer_pid"),
)


def _end_dict(info: tuple) -> dict:
    pid, state, attaches, takeovers, alive, pidns_ino = info
    return {
        "pid": pid,
        # the PID namespace the pid is in (pid:[inode] of /proc/<pid>/ns/pid), for
        # humans: the end's liveness is judged by its lease, not by this pid
        "pid_namespace": f"pid:[{pidns_ino}]" if pidns_ino else None,
        "state": _END_STATES[state] if state < len(_END_STATES) else state,
        "alive": bool(alive),
        "attaches": attaches,
        "takeovers": takeovers,
    }


def _stat_dict(
    name: str, capacity: int, head: int, tail: int, producer: tuple, consumer: tuple
) -> dict:
    return {
        "name": name,
        "capacity": capacity,
        "head": head,
        "tail": tail,
        "queued_bytes": head - tail,
        "producer": _end_dict(producer),
        "consumer": _end_dict(consumer),
    }


def stat_of_segment(name: str, segname: str) -> dict:
    """A channel's ``stat`` read from its header alone (no attach)."""
    d = _channel.peek(segname)
    return _stat_dict(name, d["capacity"], d["head"], d["tail"], d["producer"], d["consumer"])


def _role(role: str) -> int:
    try:
        return _ROLES[role]
    except (KeyError, TypeError):
        raise ShmstreamValueError(f"role must be 'producer' or 'consumer', not {role!r}") from None


def _wrap(ch: Any) -> ChannelProducer | ChannelConsumer:
    return ChannelProducer(ch) if ch.role == _channel.ROLE_PRODUCER else ChannelConsumer(ch)


def channel(
    name: str,
    capacity: int = 1 << 20,
    *,
    role: str = "producer",
    batch: int = 1,
    mode: int = 0o600,
) -> ChannelProducer | ChannelConsumer:
    """Create the channel ``name`` with a ring of ``capacity`` bytes (a power
    of two >= 4096) and attach as ``role`` (the producer by default).
    FileExistsError if the name exists (attach with ``open_channel``)."""
    _checks.check_name(name, "channel")
    capacity = check_capacity(capacity)
    mode = _checks.check_mode(mode)
    with _space.room_for(
        name,
        "channel",
        _space.segment_bytes(capacity, 1),
        f"a ring of {capacity} bytes and a 4096-byte header",
    ):
        ch = _wrap(_channel.Channel.create(name, capacity, _role(role), mode))
    if batch != 1 and isinstance(ch, ChannelProducer):
        ch.batch = batch
    return ch


def open_channel(
    name: str, *, role: str = "consumer", batch: int = 1, allow_owner: Any = None
) -> ChannelProducer | ChannelConsumer:
    """Attach to the existing channel ``name`` as ``role`` (the consumer by
    default). ChannelBusyError if a live process holds that end; a dead
    holder's end is taken over. FileNotFoundError if there is no such
    channel (create it with ``channel``). A channel owned by another user
    is refused (SegmentOwnerError) unless ``allow_owner`` (a uid, a user
    name or a collection of them) or SHMSTREAM_ALLOW_OWNERS names that
    user. It opens from another PID namespace (its ends are judged by
    lease)."""
    _checks.check_name(name, "channel")
    owners = _checks.check_allow_owner(allow_owner)
    ch = _wrap(_channel.Channel.open(name, _role(role), owners))
    if batch != 1 and isinstance(ch, ChannelProducer):
        ch.batch = batch
    return ch


def unlink_channel(name: str) -> bool:
    """Remove the channel ``name``: True if it existed, False if nothing
    has that name. It removes channels only: a name that is another kind's
    (a stream, a shared array; a corrupt or unfinished segment) is a
    ShmstreamValueError naming what it is, and stays."""
    segname = _native.segment_name(_checks.check_name(name, "channel"))
    from .. import registry  # here: the registry imports every kind

    found = registry.entry(segname)
    if found is not None and found.kind != "channel":
        raise ShmstreamValueError(
            f"{name!r} is a {found.kind} segment, not a channel: unlink_channel removes only "
            f"channels; to remove it anyway, shmstream.unlink({name!r}) (any kind)"
        )
    return _native.unlink_segname(segname)
