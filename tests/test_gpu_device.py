"""GPU streams on a real CUDA device: marked ``gpu`` and skipped cleanly when
``shmstream.gpu_available()`` is False. Run with ``pytest -m gpu``.

STATUS: written on a machine without a GPU; these have never run. A session
with a device runs them first (docs/gpu.md, "What remains to verify").

The attachment rule for handles without a device is tested on CPU in
test_gpu_attach_rule.py, and the plumbing through a fake driver in
test_gpu_fake.py.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import time
import uuid

import numpy as np
import pytest

import shmstream

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not shmstream.gpu_available(), reason="no CUDA device (gpu_available() is False)"
    ),
]

MODES = [pytest.param(False, id="performance"), pytest.param(True, id="cpu_mirror")]


@pytest.fixture
def name():
    n = f"gputest-{uuid.uuid4().hex[:12]}"
    yield n
    shmstream.unlink(n)


def host(x):
    """A read result as NumPy, whichever framework it is."""
    if hasattr(x, "get"):
        return x.get()
    return x.detach().cpu().numpy()


@pytest.mark.parametrize("mirror", MODES)
def test_round_trip_in_both_modes(name, mirror):
    h = shmstream.create(name, shape=(64, 64), gpu_device="cuda:0", cpu_mirror=mirror)
    x = np.random.default_rng(0).random((64, 64), dtype=np.float32)
    h.write(x, frame_id=3)
    assert (host(h.read()) == x).all()
    pub = h.read_publication()
    assert (pub.count, pub.frame_id) == (1, 3)
    assert h.__dlpack_device__() == (2, 0)
    h.close()


@pytest.mark.parametrize("dtype", sorted(shmstream.GPU_SUPPORTED_DTYPES, key=str), ids=str)
def test_every_supported_dtype(name, dtype):
    h = shmstream.create(name, shape=(7, 3), dtype=dtype, gpu_device="cuda:0")
    x = (np.arange(21).reshape(7, 3) % 3).astype(dtype)
    h.write(x)
    assert (host(h.read()) == x).all()
    h.close()


def test_torch_cuda_tensors_in_and_out(name):
    torch = pytest.importorskip("torch")
    h = shmstream.create(name, shape=(1000, 1000), gpu_device="cuda:0")
    t = torch.randn(1000, 1000, device="cuda:0")
    h.write(t)
    r = h.read()
    assert isinstance(r, torch.Tensor) and r.is_cuda
    assert torch.equal(r, t)
    t.add_(1)  # our copy was ordered before this on the current stream
    assert torch.equal(h.read(), r)
    h.close()


def test_cupy_arrays_in_and_out(name):
    cp = pytest.importorskip("cupy")
    h = shmstream.create(name, shape=(256,), gpu_device="cuda:0")
    a = cp.arange(256, dtype=cp.float32)
    h.write(a)
    b = cp.from_dlpack(h.read())
    assert bool((a == b).all())
    h.close()


def _writer(name, n, ready, done):
    h = shmstream.open(name, gpu_device="cuda:0")
    ready.set()
    for i in range(1, n + 1):
        h.write(np.full((512, 512), i, np.float32), frame_id=i)
    done.set()
    time.sleep(2)  # keep the process (a writer only; the creator owns the buffer)
    h.close()


@pytest.mark.parametrize("mirror", MODES)
def test_snapshots_are_never_torn_under_a_racing_writer_in_another_process(name, mirror):
    h = shmstream.create(name, shape=(512, 512), gpu_device="cuda:0", cpu_mirror=mirror)
    ctx = mp.get_context("spawn")
    ready, done = ctx.Event(), ctx.Event()
    p = ctx.Process(target=_writer, args=(name, 2000, ready, done))
    p.start()
    assert ready.wait(60)
    seen = 0
    while not done.is_set():
        pub = h.read_publication()
        a = host(pub.payload)
        assert a.min() == a.max() == pub.frame_id  # one frame, matching metadata
        seen += 1
    p.join(30)
    assert p.exitcode == 0 and seen > 0
    assert host(h.read()).min() == 2000
    h.close()


def _pinger(name_a, name_b, n):
    a = shmstream.open(name_a, gpu_device="cuda:0")
    b = shmstream.open(name_b, gpu_device="cuda:0")
    for _ in range(n):
        x = a.read_new(timeout=10)
        b.write(x)
    a.close()
    b.close()


def test_cross_process_ping_pong(name):
    other = name + "-b"
    a = shmstream.create(name, shape=(16384,), gpu_device="cuda:0")
    b = shmstream.create(other, shape=(16384,), gpu_device="cuda:0")
    try:
        ctx = mp.get_context("spawn")
        p = ctx.Process(target=_pinger, args=(name, other, 50))
        p.start()
        for i in range(50):
            a.write(np.full(16384, i, np.float32))
            assert host(b.read_new(timeout=10))[0] == i
        p.join(30)
        assert p.exitcode == 0
    finally:
        a.close()
        b.close()
        shmstream.unlink(other)


def _create_and_hold(name, mirror, ready, stop):
    h = shmstream.create(name, shape=(8,), gpu_device="cuda:0", cpu_mirror=mirror)
    h.write(np.arange(8, dtype=np.float32))
    ready.set()
    stop.wait(60)


@pytest.mark.parametrize("mirror", MODES)
def test_after_the_creator_dies_readers_get_a_clear_error_not_a_hang(name, mirror):
    ctx = mp.get_context("spawn")
    ready, stop = ctx.Event(), ctx.Event()
    p = ctx.Process(target=_create_and_hold, args=(name, mirror, ready, stop))
    p.start()
    assert ready.wait(60)
    r = shmstream.open(name, gpu_device="cuda:0")
    assert host(r.read()).tolist() == list(range(8))
    os.kill(p.pid, signal.SIGKILL)
    p.join(10)
    from shmstream import GpuStreamGoneError

    t0 = time.monotonic()
    with pytest.raises(GpuStreamGoneError, match="exited"):
        r.read()
    assert time.monotonic() - t0 < 5
    with pytest.raises(GpuStreamGoneError):
        shmstream.open(name, gpu_device="cuda:0")
    cpu = shmstream.open(name)  # cannot attach any more: a handle without a device
    assert cpu.gpu_device is None and cpu.count == 1
    if mirror:
        assert cpu.read().tolist() == list(range(8))
    r.close()


def _die_mid_write(name):
    h = shmstream.open(name, gpu_device="cuda:0")
    with h.write_view():
        os._exit(1)


def test_a_writer_killed_mid_write_leaves_an_inconsistent_stream_that_recovers(name):
    h = shmstream.create(name, shape=(4,), gpu_device="cuda:0")
    ctx = mp.get_context("spawn")
    p = ctx.Process(target=_die_mid_write, args=(name,))
    p.start()
    p.join(60)
    with pytest.raises(shmstream.InconsistentStreamError, match="exited"):
        h.read(timeout=1)
    h.write(np.ones(4, np.float32))
    assert host(h.read()).tolist() == [1, 1, 1, 1]
    h.close()


def test_bad_input(name):
    h = shmstream.create(name, shape=(4,), gpu_device="cuda:0")
    with pytest.raises(ValueError, match="shape"):
        h.write(np.zeros(5, np.float32))
    with pytest.raises(ValueError, match="out"):
        h.read(out=np.empty(4, np.float32))
    with pytest.raises(ValueError, match="device"):
        shmstream.create(name + "x", shape=(4,), gpu_device=f"cuda:{99}")
    with pytest.raises(ValueError, match="not supported for GPU"):
        shmstream.create(name + "x", shape=(4,), dtype="U3", gpu_device="cuda:0")
    h.close()
