"""The count never wraps: an explicit count must leave it room to grow, and
the core stops at 2**64 - 1 instead of going back to 0 (docs/ABI.md,
"Publish")."""

from __future__ import annotations

import numpy as np
import pytest

import shmstream
from shmstream import ShmstreamError

import support

MAX_COUNT = 2**63 - 1


@pytest.mark.parametrize("count", [2**63, 2**64 - 2, 2**64 - 1])
def test_an_explicit_count_with_no_room_to_grow_is_refused(name, count):
    h = shmstream.create(name, shape=(3,), dtype=np.uint8)
    try:
        with pytest.raises(ShmstreamError) as info:
            h.write(np.ones(3, np.uint8), count=count)
        assert isinstance(info.value, ValueError)
        assert "count" in str(info.value) and "2**63" in str(info.value)
        assert h.count == 0  # nothing was written
    finally:
        h.close()


def test_the_largest_explicit_count_is_published_and_a_later_write_is_seen(name):
    h = shmstream.create(name, shape=(3,), dtype=np.uint8)
    r = shmstream.open(name)
    try:
        h.write(np.full(3, 1, np.uint8), count=MAX_COUNT)
        assert r.read_new(timeout=5)[0] == 1
        assert r.count == MAX_COUNT
        h.write(np.full(3, 2, np.uint8))
        assert h.count == MAX_COUNT + 1
        assert r.read_new(timeout=5)[0] == 2  # the reader sees the next write
    finally:
        r.close()
        h.close()


def test_the_core_stops_the_count_at_its_end_instead_of_wrapping(name):
    h = shmstream.create(name, shape=(3,), dtype=np.uint8)
    try:
        h.write(np.zeros(3, np.uint8))
        # Only a foreign writer reaches the end: put it there in the segment.
        offset, size = support.field("count")
        support.patch_bytes(
            support.segment_path(name), offset, (2**64 - 1).to_bytes(size, "little")
        )
        assert h.count == 2**64 - 1
        h.write(np.full(3, 7, np.uint8))
        assert h.count == 2**64 - 1  # not 0
        assert h.read()[0] == 7  # the write is published
    finally:
        h.close()
