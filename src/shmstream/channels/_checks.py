"""The checks of a channel's arguments and their wording: the ring's
capacity, a message's ``type_id``, the producer's ``batch``, a wait's
``max_messages`` and an end's ``spin_ns``. What every kind checks the same
way (names, integers, shapes, dtypes, modes, owners) is in
``common/_checks.py``.

Each check returns the normalised value or raises the exception a Python
user expects (TypeError for a wrong type, ValueError for a wrong value),
naming the argument.
"""

from __future__ import annotations

from typing import Any

from .. import _channel
from ..common._checks import check_int, check_u64, check_unsigned
from ..errors import ShmstreamValueError

#: The largest value of a 32-bit field (a message's type id, a batch).
MAX_U32 = 2**32 - 1


def check_type_id(type_id: Any) -> int:
    """A message's ``type_id``: an integer in [0, 2**32)."""
    return check_unsigned("type_id", type_id, 32)


def check_batch(batch: Any) -> int:
    """The producer's ``batch``: publish the head every 1 to 2**32 - 1
    messages."""
    return check_int("batch", batch, minimum=1, maximum=MAX_U32)


def check_capacity(capacity: Any) -> int:
    """A ring's ``capacity`` in bytes: a power of two the core accepts (its
    limits come from the core: include/shmstream_channel.h)."""
    capacity = check_int("capacity", capacity)
    low, high = _channel.MIN_CAPACITY, _channel.MAX_CAPACITY
    if not low <= capacity <= high or capacity & (capacity - 1):
        raise ShmstreamValueError(
            f"capacity must be a power of two from {low} to 2**{high.bit_length() - 1} "
            f"bytes, not {capacity}"
        )
    return capacity


def check_max_messages(value: Any) -> int:
    """How many messages a receive takes at most: a 64-bit count."""
    return check_u64("max_messages", value)


def check_spin_ns(value: Any) -> int:
    """An end's spin budget in ns (-1: the wait policy's own cap)."""
    return check_int("spin_ns", value, minimum=-(2**63), maximum=2**63 - 1)
