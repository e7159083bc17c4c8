"""Channels: what a message carries, ordering, every size and wrap position,
full ring, batching, zero-copy views, ownership and bad input."""

from __future__ import annotations

import time

import numpy as np
import pytest

import shmstream
from shmstream import _channel, _native
from shmstream.errors import (
    ChannelBrokenError,
    ChannelBusyError,
    ChannelClosedError,
    CorruptStreamError,
)

import support
from channel_util import SPAWN, pattern

CAP = support.CHANNEL_PAIR_CAPACITY  # the channel_pair fixture's


# ---- what a message carries ---------------------------------------------------


def test_bytes_buffers_and_type_ids_round_trip(channel_pair):
    tx, rx = channel_pair
    items = [b"", b"x", bytearray(b"abc"), memoryview(b"hello world")[6:], np.uint32(7)]
    for i, obj in enumerate(items):
        tx.send(obj, type_id=i * 1000)
    for i, obj in enumerate(items):
        m = rx.recv(timeout=1)
        assert m.type_id == i * 1000
        assert (
            m.data == bytes(memoryview(obj).cast("B"))
            if not isinstance(obj, np.generic)
            else m.data == obj.tobytes()
        )
        assert m.array is None and not m.is_array


@pytest.mark.parametrize(
    "arr",
    [
        np.arange(12, dtype=np.float32).reshape(3, 4),
        np.arange(5, dtype=">i4"),
        np.array(3.5),
        np.zeros((0, 7), np.int16),
        np.array([True, False]),
        np.arange(6, dtype=np.complex128).reshape(2, 3),
        np.arange(24, dtype=np.uint8).reshape(2, 3, 4)[:, ::2],  # not contiguous
        np.array([(1, 2.0), (3, 4.0)], dtype=[("a", "<i4"), ("b", "<f8")]),
        np.array(["ab", "c"], dtype="U3"),
        np.array(["2024-01-01", "2025-06-30"], dtype="datetime64[D]"),
        np.arange(8, dtype=np.float16),
    ],
    ids=lambda a: f"{a.dtype}{a.shape}",
)
def test_arrays_arrive_with_dtype_and_shape(channel_pair, arr):
    tx, rx = channel_pair
    tx.send(arr, type_id=5)
    m = rx.recv(timeout=1)
    assert m.type_id == 5 and m.is_array
    assert m.array.dtype == arr.dtype and m.array.shape == arr.shape
    np.testing.assert_array_equal(m.array, arr)


def test_dlpack_tensor_is_sent_as_array(channel_pair):
    torch = pytest.importorskip("torch")
    tx, rx = channel_pair
    tx.send(torch.arange(6, dtype=torch.float32).reshape(2, 3))
    np.testing.assert_array_equal(
        rx.recv(timeout=1).array, np.arange(6, dtype=np.float32).reshape(2, 3)
    )


def test_object_dtype_and_non_buffers_are_refused(channel_pair):
    tx, rx = channel_pair
    with pytest.raises(TypeError, match="object"):
        tx.send(np.array([object()]))
    with pytest.raises(TypeError):
        tx.send("a str is not bytes")
    with pytest.raises(TypeError):
        tx.send(12345)
    assert rx.drain(10) == []


# ---- order, sizes, wrap-around ---------------------------------------------------


def test_every_size_from_zero_to_the_largest_message(channel_pair):
    tx, rx = channel_pair
    assert tx.max_message_bytes == CAP - _channel.MSG_HEADER_BYTES
    for size in range(tx.max_message_bytes + 1):
        payload = pattern(size, size)
        tx.send(payload, type_id=size, timeout=0)
        m = rx.recv(timeout=0)
        assert (m.type_id, m.data) == (size, payload)


def test_a_message_larger_than_the_ring_is_a_value_error_before_anything_is_written(channel_pair):
    tx, rx = channel_pair
    head = tx._ch.head
    for size in (CAP - 15, CAP, CAP + 1, 10 * CAP):
        with pytest.raises(ValueError, match="larger than the ring"):
            tx.send(bytes(size))
    with pytest.raises(ValueError, match="larger than the ring"):
        tx.send_many([b"ok", bytes(CAP)])
    with pytest.raises(ValueError, match="larger than the ring"):
        tx.send_zero_copy(CAP)
    with pytest.raises(ValueError):
        tx.send(np.zeros(CAP, np.uint8))
    assert tx._ch.head == head and rx.drain(10) == []


@pytest.mark.parametrize("size", [0, 1, 47, 48, 49, 100, 1000, 2047, 3000, CAP - 16])
def test_wrap_around_at_every_record_boundary(channel_pair, size):
    # Move the head to every 64-byte position of the ring, then send a
    # message that starts there (and so straddles the end for most sizes).
    tx, rx = channel_pair
    for start in range(0, CAP, 64):
        gap = (start - tx._ch.head) % CAP  # a multiple of 64
        if gap:
            tx.send(bytes(gap - 16))  # one record of exactly `gap` bytes
            rx.drain(10)
        assert tx._ch.head % CAP == start
        payload = pattern(start, size)
        tx.send(payload, type_id=start)
        m = rx.recv(timeout=0)
        assert (m.type_id, m.data) == (start, payload)


def test_order_is_kept_through_a_full_small_ring_across_processes(name):
    n = 20000
    tx = shmstream.channel(name, CAP)
    child = SPAWN.Process(target=_count_and_check, args=(name, n))
    child.start()
    try:
        i = 0
        while i < n:
            k = min(37, n - i)
            tx.send_many(
                [(i + j).to_bytes(4, "little") * (1 + (i + j) % 20) for j in range(k)], type_id=1
            )
            i += k
            tx.send(np.array([i], np.int64), type_id=2)
        tx.close()
        child.join(30)
        assert child.exitcode == 0
    finally:
        child.kill()


def _count_and_check(name, n):
    rx = shmstream.open_channel(name)
    expect = 0
    for m in rx:
        if m.type_id == 1:
            v = int.from_bytes(m.data[:4], "little")
            assert v == expect and len(m.data) == 4 * (1 + v % 20)
            expect += 1
        else:
            assert m.array[0] == expect
    assert expect == n
    rx.close()


# ---- full ring, batching, waiting ------------------------------------------------------


def test_send_on_a_full_ring_raises_or_waits_as_asked(channel_pair):
    tx, rx = channel_pair
    while True:
        try:
            tx.send(bytes(1000), timeout=0)
        except TimeoutError as e:
            assert "full" in str(e)
            break
    head = tx._ch.head
    t0 = time.monotonic()
    with pytest.raises(TimeoutError):
        tx.send(bytes(1000), timeout=0.05)
    assert time.monotonic() - t0 >= 0.05 and tx._ch.head == head
    rx.recv(timeout=0)
    tx.send(bytes(1000), timeout=0)  # room again


def test_recv_timeout_on_an_empty_ring(channel_pair):
    _tx, rx = channel_pair
    t0 = time.monotonic()
    with pytest.raises(TimeoutError):
        rx.recv(timeout=0.05)
    assert time.monotonic() - t0 >= 0.05
    assert rx.drain(10) == []
    with pytest.raises(ValueError):
        rx.recv(timeout=-1)


def test_batch_publishes_every_k_messages_or_on_flush(name):
    tx = shmstream.channel(name, CAP, batch=4)
    rx = shmstream.open_channel(name)
    for i in range(3):
        tx.send(bytes([i]))
    assert rx.drain(10) == []
    tx.send(b"\x03")
    assert [m.data for m in rx.drain(10)] == [b"\x00", b"\x01", b"\x02", b"\x03"]
    tx.send(b"x")
    assert rx.drain(10) == []
    tx.flush()
    assert [m.data for m in rx.drain(10)] == [b"x"]
    tx.send(b"y")
    tx.close()  # close publishes what is pending
    assert rx.recv(timeout=1).data == b"y"
    with pytest.raises(ChannelClosedError):
        rx.recv(timeout=1)
    rx.close()


def test_drain_returns_at_most_max_messages(channel_pair):
    tx, rx = channel_pair
    tx.send_many([bytes([i]) for i in range(10)])
    assert [m.data for m in rx.drain(4)] == [bytes([i]) for i in range(4)]
    assert [m.data for m in rx.drain(100)] == [bytes([i]) for i in range(4, 10)]


def test_blocking_recv_wakes_when_another_process_sends(name):
    rx = shmstream.channel(name, CAP, role="consumer")
    go = SPAWN.Event()
    child = SPAWN.Process(target=_send_after, args=(name, go))
    child.start()
    try:
        go.set()
        m = rx.recv(timeout=30)
        assert m.data == b"late"
        child.join(30)
    finally:
        child.kill()
        rx.close()


def _send_after(name, go):
    tx = shmstream.open_channel(name, role="producer")
    go.wait()
    tx.send(b"late")
    tx.close()


# ---- zero copy -------------------------------------------------------------------------------


def test_send_zero_copy_commits_on_exit_and_rolls_back_on_error(channel_pair):
    tx, rx = channel_pair
    with tx.send_zero_copy(5, type_id=9) as buf:
        buf[:] = b"hello"
    with pytest.raises(KeyError):
        with tx.send_zero_copy(3) as buf:
            buf[:] = b"bad"
            raise KeyError
    with tx.send_zero_copy(dtype=np.float32, shape=(2, 2), type_id=4) as a:
        a[...] = [[1, 2], [3, 4]]
    m = rx.recv(timeout=0)
    assert (m.type_id, m.data) == (9, b"hello")
    m = rx.recv(timeout=0)
    assert m.type_id == 4
    np.testing.assert_array_equal(m.array, [[1, 2], [3, 4]])
    assert rx.drain(10) == []


def test_recv_zero_copy_views_are_read_only_and_match(channel_pair):
    tx, rx = channel_pair
    tx.send(np.arange(256, dtype=np.float32), type_id=3)
    with rx.recv_zero_copy(timeout=1) as msg:
        assert msg.type_id == 3 and msg.nbytes == 1024
        a = np.asarray(msg)
        assert a.dtype == np.float32 and not a.flags.writeable
        np.testing.assert_array_equal(a, np.arange(256, dtype=np.float32))
        assert msg.data.readonly and len(msg.data) == 1024
        with pytest.raises(ValueError):
            a[0] = 1
    with pytest.raises(RuntimeError, match="released"):
        np.asarray(msg)


def test_slot_is_not_reused_until_the_block_ends_and_every_dlpack_consumer_releases(channel_pair):
    torch = pytest.importorskip("torch")
    tx, rx = channel_pair
    tx.send(np.full(256, 7, np.float32))
    with rx.recv_zero_copy(timeout=1) as msg:
        t = torch.from_dlpack(msg)
        tail_inside = rx._ch.tail
    assert rx._ch.tail == tail_inside == 0  # the block ended, the tensor still pins it
    assert float(t.sum()) == 7 * 256
    del t
    assert rx._ch.tail == tx._ch.head  # released: room for the producer again


def test_views_released_out_of_order_free_the_ring_in_order(channel_pair):
    tx, rx = channel_pair
    tx.send_many([bytes([i]) * 100 for i in range(3)])
    with rx.drain_zero_copy(10) as msgs:
        views = [np.asarray(m) for m in msgs]
    assert [v[0] for v in views] == [0, 1, 2]
    ends = []
    del views[1]
    ends.append(rx._ch.tail)
    del views[1]  # the third message
    ends.append(rx._ch.tail)
    del views[0]
    ends.append(rx._ch.tail)
    assert ends[0] == ends[1] == 0 and ends[2] == tx._ch.head
    # copied receives behind pinned ones release in order too
    tx.send_many([b"a", b"b"])
    with rx.recv_zero_copy() as m:
        keep = m.data
    assert rx.recv(timeout=0).data == b"b" and rx._ch.tail < tx._ch.head
    del keep
    assert rx._ch.tail == tx._ch.head


def test_zero_copy_of_every_kind_of_array(channel_pair):
    tx, rx = channel_pair
    for arr in (
        np.arange(6, dtype="<i8").reshape(2, 3),
        np.array([(1, 2.0)], dtype=[("a", "<i4"), ("b", "<f8")]),
        np.zeros((0,), np.float64),
        np.array(["xy"], "S2"),
    ):
        tx.send(arr)
        with rx.recv_zero_copy(timeout=0) as m:
            np.testing.assert_array_equal(m.array, arr)
            assert m.array.dtype == arr.dtype


# ---- ownership, lifecycle, bad input -------------------------------------------------------


def test_a_second_producer_or_consumer_is_refused(channel_pair, name):
    with pytest.raises(ChannelBusyError, match="one producer and one consumer"):
        shmstream.open_channel(name, role="producer")
    with pytest.raises(ChannelBusyError):
        shmstream.open_channel(name, role="consumer")


def test_end_of_stream_after_the_producer_closes(channel_pair):
    tx, rx = channel_pair
    tx.send_many([b"1", b"2"])
    tx.close()
    assert [m.data for m in rx] == [b"1", b"2"]
    with pytest.raises(ChannelClosedError, match="closed"):
        rx.recv(timeout=0)
    assert isinstance(ChannelClosedError("x"), EOFError)


def test_send_after_the_consumer_closed_is_a_broken_pipe(channel_pair):
    tx, rx = channel_pair
    rx.close()
    with pytest.raises(ChannelBrokenError, match="closed"):
        tx.send(b"x")
    assert isinstance(ChannelBrokenError("x"), BrokenPipeError)


def test_a_closed_end_can_be_attached_again(channel_pair, name):
    tx, rx = channel_pair
    tx.close()
    tx2 = shmstream.open_channel(name, role="producer")
    tx2.send(b"again")
    assert rx.recv(timeout=1).data == b"again"
    tx2.close()


def test_closed_handles_raise_runtime_error_naming_open_channel(channel_pair):
    tx, rx = channel_pair
    tx.close()
    tx.close()  # idempotent
    rx.close()
    with pytest.raises(RuntimeError, match="open_channel"):
        tx.send(b"x")
    with pytest.raises(RuntimeError, match="open_channel"):
        rx.recv(timeout=0)


def test_create_and_open_errors(name):
    with pytest.raises(FileNotFoundError, match=r"shmstream.channel"):
        shmstream.open_channel(name)
    tx = shmstream.channel(name, CAP)
    with pytest.raises(FileExistsError, match="open_channel") as taken:
        shmstream.channel(name, CAP)
    assert str(taken.value).endswith(f"shmstream.unlink_channel('{name}')")
    tx.close()


@pytest.mark.parametrize("capacity", [0, 1000, 2048, 4095, 4097, 3 * 4096, -4096])
def test_capacity_must_be_a_power_of_two_of_at_least_a_page(name, capacity):
    with pytest.raises(ValueError, match="power of two"):
        shmstream.channel(name, capacity)


def test_bad_argument_types(name):
    with pytest.raises(TypeError):
        shmstream.channel(name, "4096")
    with pytest.raises(TypeError):
        shmstream.channel(name, True)
    with pytest.raises(TypeError):
        shmstream.channel(123, 4096)
    with pytest.raises(ValueError):
        shmstream.channel("", 4096)
    with pytest.raises(ValueError):
        shmstream.channel("a\0b", 4096)
    with pytest.raises(ValueError, match="role"):
        shmstream.channel(name, 4096, role="both")


def test_a_stream_segment_is_not_a_channel(name):
    seg = _native.Segment.create(name, _native.KIND_STREAM, [4], 4, "<f4")
    try:
        with pytest.raises(ValueError, match="not a channel"):
            shmstream.open_channel(name)
    finally:
        del seg


def test_a_corrupt_record_header_is_reported_not_followed(channel_pair):
    tx, rx = channel_pair
    with tx.send_zero_copy(8) as buf:
        buf[:] = bytes(8)
    # Make the record claim more bytes than were published.
    seg = _native.Segment.open(tx.name)
    # payload() maps the first capacity bytes after the header: the ring
    ring = seg.payload()
    ring[0:4] = np.frombuffer(np.uint32(CAP).tobytes(), np.uint8)
    with pytest.raises(CorruptStreamError, match="impossible record"):
        rx.recv(timeout=0)
    del ring, seg


def test_a_zero_copy_array_larger_than_its_payload_is_refused(channel_pair):
    # The metadata's shape claimed more bytes than the record carried: the
    # view reached past the ring (a fuzz finding).
    tx, rx = channel_pair
    tx.send(np.zeros((2, 3), np.float32))
    ring = _native.Segment.open(tx.name).payload()
    ring[24:32] = np.frombuffer(np.uint64(1 << 40).tobytes(), np.uint8)  # meta shape[0]
    with rx.recv_zero_copy(timeout=0) as msg:
        with pytest.raises(CorruptStreamError, match="payload bytes"):
            np.asarray(msg)
    del ring


def test_a_ring_position_off_the_record_grid_is_refused(name):
    tx = shmstream.channel(name, CAP)
    try:
        path = support.segment_path(name)
        support.patch_bytes(path, 2240, (72).to_bytes(8, "little"))  # head
        support.patch_bytes(path, 2304, (8).to_bytes(8, "little"))  # tail: not a multiple of 64
        rx = shmstream.open_channel(name)
        with pytest.raises(CorruptStreamError, match="ring position"):
            rx.recv(timeout=0)
        rx.close()
    finally:
        tx.close()


def test_layout_offsets_are_the_documented_ones():
    # the release wheel has no test hooks (tests/repo/test_release.py runs this file)
    hooks = pytest.importorskip("shmstream._testhooks", reason="a build without test hooks")
    lay = hooks.channel_layout()
    assert lay == {
        "head": 2240,
        "tail": 2304,
        "producer": 2368,
        "consumer": 2432,
        "space": 2496,
        "space_want": 2504,
        "notify": 2176,
        "end_state": 8,
        "end_attaches": 16,
        "end_takeovers": 24,
        "msg_type_id": 4,
        "msg_flags": 8,
        "msg_meta_len": 12,
        "msg_payload_off": 14,
        "msg_header_bytes": 16,
        "ring_offset": 4096,
    }
    # control words written by different processes never share a line
    offs = [
        lay[k] for k in ("head", "tail", "producer", "consumer", "space", "notify")
    ]  # one line each
    assert len({o // 64 for o in offs}) == len(offs)


def test_stat_names_both_ends(channel_pair):
    import os

    tx, rx = channel_pair
    st = tx.stat()
    assert st["producer"]["pid"] == os.getpid() and st["consumer"]["pid"] == os.getpid()
    assert st["producer"]["state"] == "attached" and st["capacity"] == CAP
    assert tx.consumer_pid == os.getpid() and rx.producer_pid == os.getpid()


def test_send_many_arrays_keep_dtype_and_shape(channel_pair):
    tx, rx = channel_pair
    frames = [np.full((2, 3), i, np.float32) for i in range(5)]
    assert tx.send_many(frames, type_id=8) == 5
    tx.send_many([np.arange(3), np.arange(4.0)])  # mixed: one header each
    got = rx.drain(100)
    assert [m.type_id for m in got[:5]] == [8] * 5
    for i, m in enumerate(got[:5]):
        np.testing.assert_array_equal(m.array, frames[i])
    np.testing.assert_array_equal(got[5].array, np.arange(3))
    assert got[6].array.dtype == np.float64


def test_unlink_channel_removes_channels_only(name, make_name):
    """issue 47, bug 5: unlink_channel of a stream's or a shared array's
    name removed it; it now says what the name is and leaves it."""
    array_name = make_name()
    with shmstream.create(name, shape=(2,)), shmstream.share(np.arange(3), name=array_name):
        for other, kind in ((name, "stream"), (array_name, "array")):
            with pytest.raises(shmstream.ShmstreamValueError, match=f"is a {kind} segment, not"):
                shmstream.unlink_channel(other)
        shmstream.open(name).close()  # still there
        shmstream.SharedArray.open(array_name).close()
    chan = make_name()
    shmstream.channel(chan, 4096).close()
    assert shmstream.unlink_channel(chan) is True
    assert shmstream.unlink_channel(chan) is False
