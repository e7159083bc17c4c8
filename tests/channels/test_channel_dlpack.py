"""DLPack capsules of zero-copy channel messages, made in C++ (no ndarray
in between): what a consumer gets, the keywords of the protocol, and the
ring pin each capsule and each tensor holds."""

from __future__ import annotations

import gc
import threading

import numpy as np
import pytest

from shmstream.errors import (
    CorruptStreamError,
    ShmstreamBufferError,
    ShmstreamTypeError,
    ShmstreamValueError,
)


def test_every_dlpack_dtype_and_shape_reaches_torch_without_a_copy(channel_pair):
    torch = pytest.importorskip("torch")
    tx, rx = channel_pair
    sent = [
        np.arange(256, dtype=np.float32),
        np.arange(6, dtype="<i2").reshape(2, 3),
        np.array([True, False]),
        np.zeros((2, 0, 3), np.float64),
        b"bytes!",
        np.arange(4, dtype=np.complex64),
    ]
    tx.send_many(sent[:4])
    tx.send(sent[4])
    tx.send(sent[5])
    with rx.drain_zero_copy(10, None) as msgs:  # None: wait (it was refused before)
        tensors = [torch.from_dlpack(m) for m in msgs]
        for m, t in zip(msgs, tensors):
            assert t.data_ptr() == np.asarray(m).ctypes.data or t.numel() == 0
    for a, t in zip(sent, tensors):
        want = np.frombuffer(a, np.uint8) if isinstance(a, bytes) else a
        assert t.shape == want.shape and np.array_equal(t.numpy(), want)


def test_capsules_follow_the_protocol_keywords(channel_pair):
    tx, rx = channel_pair
    tx.send(np.ones(4, np.float32))
    with rx.recv_zero_copy(timeout=1) as m:
        assert "dltensor" in repr(m.__dlpack__())
        assert "dltensor_versioned" in repr(m.__dlpack__(max_version=(1, 0)))
        assert "dltensor" in repr(
            m.__dlpack__(max_version=(0, 8), stream=None, dl_device=(1, 0), copy=False)
        )
        assert np.from_dlpack(m).tolist() == [1, 1, 1, 1]
        with pytest.raises(ShmstreamBufferError, match="copy=True"):
            m.__dlpack__(copy=True)
        with pytest.raises(ShmstreamBufferError, match="dl_device"):
            m.__dlpack__(dl_device=(2, 0))
        with pytest.raises(ShmstreamTypeError, match="max_version"):
            m.__dlpack__(max_version=1)
        with pytest.raises(TypeError):  # nanobind lists the keywords it takes
            m.__dlpack__(bogus=1)
    with pytest.raises(RuntimeError, match="released"):
        m.__dlpack__()


def test_an_unconsumed_capsule_pins_the_ring_until_it_is_dropped(channel_pair):
    tx, rx = channel_pair
    tx.send(np.ones(256, np.float32))
    with rx.recv_zero_copy(timeout=1) as m:
        caps = [m.__dlpack__(), m.__dlpack__(max_version=(1, 0))]
    assert rx._ch.tail == 0
    caps.pop()
    gc.collect()
    assert rx._ch.tail == 0
    caps.pop()
    assert rx._ch.tail == tx._ch.head


def test_a_tensor_freed_in_another_thread_releases_its_pin(channel_pair):
    torch = pytest.importorskip("torch")
    tx, rx = channel_pair
    tx.send(np.ones(256, np.float32))
    with rx.recv_zero_copy(timeout=1) as m:
        box = [torch.from_dlpack(m)]
    t = threading.Thread(target=box.clear)
    t.start()
    t.join()
    assert rx._ch.tail == tx._ch.head


def test_an_array_message_whose_shape_does_not_match_its_bytes_is_refused(channel_pair):
    tx, rx = channel_pair
    meta = np.lib.format.dtype_to_descr(np.dtype(np.float32))
    import struct

    bad_meta = struct.pack("<II", 1, len(meta)) + struct.pack("<Q", 1000) + meta.encode()
    tx._ch.send(b"\0" * 16, 0, bad_meta, None)  # 16 bytes described as 1000 floats
    with rx.recv_zero_copy(timeout=1) as m:
        with pytest.raises(CorruptStreamError, match="corrupt"):
            m.__dlpack__()


def test_drain_dlpack_hands_capsules_that_pin_until_their_tensors_go(channel_pair):
    torch = pytest.importorskip("torch")
    tx, rx = channel_pair
    assert rx.drain_dlpack(10) == []  # nothing yet, timeout 0
    tx.send_many([np.full(4, i, np.float32) for i in range(3)])
    caps = rx.drain_dlpack(10, None)
    assert len(caps) == 3 and rx._ch.tail == 0
    tensors = [torch.from_dlpack(c) for c in caps]
    del caps
    assert [t.tolist() for t in tensors] == [[i] * 4 for i in range(3)]
    assert rx._ch.tail == 0  # the tensors pin the records
    del tensors
    assert rx._ch.tail == tx._ch.head


def test_drain_dlpack_stops_before_a_message_without_a_dlpack_layout(channel_pair):
    tx, rx = channel_pair
    tx.send(np.ones(2, np.int16))
    tx.send(np.array([(1, 2.0)], dtype=[("a", "<i4"), ("b", "<f8")]))
    caps = rx.drain_dlpack(10)
    assert len(caps) == 1  # the int16 message; the structured one stays
    del caps
    with pytest.raises(BufferError, match="DLPack"):
        rx.drain_dlpack(10)
    with rx.recv_zero_copy(timeout=0) as m:  # still there: it was not consumed
        assert m.array["a"].tolist() == [1]


# ---- dtypes NumPy has no name for (bfloat16, float8): carried by their DLPack code


def child_send_bfloat16(chan: str) -> None:
    import torch

    import shmstream

    tx = shmstream.open_channel(chan, role="producer")
    tx.send(torch.arange(6, dtype=torch.bfloat16).reshape(2, 3) / 4, type_id=7)
    tx.send(torch.arange(4).to(torch.float8_e4m3fn), type_id=8)
    tx.close()


def test_bfloat16_and_float8_tensors_cross_processes_by_their_dlpack_dtype(make_name, spawn):
    torch = pytest.importorskip("torch")
    import shmstream
    from shmstream.channels import DLPackDtype, describe

    chan = make_name()
    rx = shmstream.channel(chan, 1 << 14, role="consumer")
    try:
        spawn(child_send_bfloat16, chan).result()
        m = rx.recv(timeout=5)
        assert m.type_id == 7 and describe(m.meta) == (DLPackDtype(4, 16), (2, 3))
        t = torch.from_dlpack(m)  # a copied message is a DLPack tensor too
        assert t.dtype == torch.bfloat16
        assert torch.equal(t, torch.arange(6, dtype=torch.bfloat16).reshape(2, 3) / 4)
        assert (
            m.data
            == (torch.arange(6, dtype=torch.bfloat16).reshape(2, 3) / 4)
            .view(torch.uint8)
            .numpy()
            .tobytes()
        )
        with pytest.raises(ShmstreamTypeError, match=r"bfloat16.*torch\.from_dlpack"):
            _ = m.array
        with rx.recv_zero_copy(timeout=5) as z:
            assert z.type_id == 8
            t8 = torch.from_dlpack(z)
            assert t8.dtype == torch.float8_e4m3fn
            assert t8.float().tolist() == [0.0, 1.0, 2.0, 3.0]
            with pytest.raises(ShmstreamTypeError, match="NumPy has no dtype"):
                np.asarray(z)
            del t8
    finally:
        rx.close()
        shmstream.unlink_channel(chan)


def test_drain_dlpack_hands_bfloat16_messages_as_bfloat16_tensors(channel_pair):
    torch = pytest.importorskip("torch")
    tx, rx = channel_pair
    sent = [torch.full((3,), i, dtype=torch.bfloat16) for i in range(3)]
    sent.append(torch.zeros((2, 0), dtype=torch.bfloat16))
    for t in sent:
        tx.send(t)
    got = [torch.from_dlpack(c) for c in rx.drain_dlpack(10, None)]
    assert [g.dtype for g in got] == [torch.bfloat16] * 4
    assert all(torch.equal(g, t) for g, t in zip(got, sent))


def test_a_strided_bfloat16_tensor_is_refused_and_a_strided_float_one_is_sent(channel_pair):
    torch = pytest.importorskip("torch")
    tx, rx = channel_pair
    with pytest.raises(ShmstreamValueError, match=r"bfloat16.*\.contiguous\(\)"):
        tx.send(torch.zeros((2, 3), dtype=torch.bfloat16).t())
    tx.send(torch.arange(6.0).reshape(2, 3).t())  # NumPy's dtype: sent contiguous, as before
    assert rx.recv(timeout=1).array.tolist() == [[0, 3], [1, 4], [2, 5]]


@pytest.mark.parametrize(
    "text", ["dlpack:4:", "dlpack:4:12", "dlpack:4:16x", "dlpack:9999:16", "dlpack::16", "dlpack:4"]
)
def test_a_malformed_dlpack_dtype_text_is_refused_not_read(channel_pair, text):
    import struct

    from shmstream.channels import describe

    tx, rx = channel_pair
    meta = struct.pack("<IIQ", 1, len(text), 8) + text.encode()
    tx._ch.send(b"\0" * 16, 0, meta, None)  # 8 elements of 2 bytes, under a bad name
    with rx.recv_zero_copy(timeout=1) as m:
        with pytest.raises(BufferError, match="DLPack"):
            m.__dlpack__()
        with pytest.raises(CorruptStreamError):
            describe(m.meta)
