"""Each limit of a segment has one owner, the core: it refuses a create past
a limit (EINVAL) and a count that cannot grow (ss_publish_count_check); the
binding only converts and raises; the Python API checks first, naming the
argument, with the numbers the binding exports from the core."""

from __future__ import annotations

import os

import numpy as np
import pytest

import shmstream
from shmstream import ShmstreamError, _native

import support

LIMITS = "outside the limits of a segment header"


def _create(name, **kw):
    args = {"shape": [4], "itemsize": 1, "dtype": "|u1"} | kw
    return _native.Segment.create(name, _native.KIND_STREAM, **args)


@pytest.mark.parametrize(
    "past",
    [
        {"shape": [1] * (_native.MAX_NDIM + 1)},
        {"slots": _native.MAX_SLOTS + 1},
        {"history": _native.MAX_HISTORY + 1},
        {"dtype": "x" * (_native.MAX_DTYPE_BYTES + 1)},
    ],
    ids=["ndim", "slots", "history", "dtype"],
)
def test_the_core_refuses_a_create_past_a_limit_with_one_message(name, past):
    with pytest.raises(ValueError, match=LIMITS) as info:
        _create(name, **past)
    assert isinstance(info.value, ShmstreamError)
    assert not os.path.exists(support.segment_path(name))


def test_each_limit_is_the_last_value_the_core_accepts(name):
    _create(name, history=_native.MAX_HISTORY)
    shmstream.unlink(name)
    _create(name, shape=[1] * _native.MAX_NDIM, slots=_native.MAX_SLOTS)


def test_the_python_check_names_the_argument_with_the_cores_number(name):
    with pytest.raises(ValueError, match=rf"history must be 0 to {_native.MAX_HISTORY}\b"):
        shmstream.create(name, shape=(4,), dtype=np.uint8, history=_native.MAX_HISTORY + 1)
    with pytest.raises(ValueError, match=rf"slots must be an int from 1 to {_native.MAX_SLOTS}\b"):
        shmstream.create(name, shape=(4,), dtype=np.uint8, slots=_native.MAX_SLOTS + 1)


def test_the_core_checks_an_explicit_count_for_every_writer(name):
    seg = _create(name)
    src = np.zeros(4, np.uint8)
    assert seg.write(src, count=5) == 5
    with pytest.raises(ValueError, match=r"count 5 does not exceed the count of .* \(5\)"):
        seg.write(src, count=5)
    # the words of the Python check (streams/_checks.py), which a handle meets first
    with pytest.raises(
        ValueError, match=r"count must be in \[1, 2\*\*63\), got 9223372036854775808"
    ):
        seg.write(src, count=_native.MAX_COUNT + 1)
    handle = shmstream.open(name)
    with pytest.raises(
        ValueError, match=r"count must be in \[1, 2\*\*63\), got 9223372036854775808"
    ):
        handle.write(src, count=_native.MAX_COUNT + 1)
    handle.close()
    assert seg.count == 5  # nothing was published, and the lock was given back
    assert seg.write(src) == 6


def test_the_dimension_limit_has_one_message_wherever_a_shape_is_taken(make_name):
    # One limit (MAX_NDIM, a header's and a message's shape), one message:
    # common/_checks.py's check_ndim, for a stream's shape, a stream's shape
    # grown by a sub-array dtype, share() and a channel message.
    over = (1,) * (_native.MAX_NDIM + 1)
    message = (
        rf"^shape \({', '.join('1' * len(over))}\) has {len(over)} dimensions; "
        rf"at most {_native.MAX_NDIM} are supported"
    )
    chan = make_name()
    tx = shmstream.channel(chan, capacity=4096)
    try:
        for make in (
            lambda: shmstream.create(make_name(), shape=over),
            lambda: shmstream.create(make_name(), shape=over[1:], dtype="(1,)f4"),
            lambda: shmstream.share(np.zeros(over), name=make_name()),
            lambda: tx.send(np.zeros(over)),
            lambda: tx.send_zero_copy(dtype=np.uint8, shape=over),
        ):
            with pytest.raises(ValueError, match=message) as info:
                make()
            assert isinstance(info.value, ShmstreamError)
    finally:
        tx.close()
        shmstream.unlink_channel(chan)


def test_the_channel_capacity_has_one_message_from_the_check_and_from_the_core(make_name):
    # The core refuses a capacity that is not a power of two in range; the
    # Python check says the same first, with the value it got.
    from shmstream import _channel

    wording = r"capacity must be a power of two from 4096 to 2\*\*40 bytes"
    name = make_name()
    with pytest.raises(ValueError, match=wording + r", not 5000$"):
        shmstream.channel(name, capacity=5000)
    with pytest.raises(ValueError, match=wording) as info:
        _channel.Channel.create(name, 5000, _channel.ROLE_PRODUCER)
    assert isinstance(info.value, ShmstreamError)
    assert not os.path.exists(support.segment_path(name))
