"""GPU streams (``gpu_device="cuda:N"``).

Without CUDA support every GPU request fails at once with a clear
RuntimeError and leaves nothing behind. The tests marked ``gpu`` need a
CUDA device and torch; they are skipped elsewhere.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

import shmstream

import support

needs_cuda = pytest.mark.skipif(
    not shmstream.gpu_available(), reason="needs a CUDA device and CUDA support (torch)"
)


@pytest.mark.skipif(shmstream.gpu_available(), reason="CUDA is available here")
def test_without_cuda_gpu_available_is_false():
    assert shmstream.gpu_available() is False


def test_gpu_supported_dtypes_is_a_frozenset_of_numpy_dtypes():
    # empty without torch; with torch, the dtypes a CUDA stream could hold
    supported = shmstream.GPU_SUPPORTED_DTYPES
    assert isinstance(supported, frozenset)
    assert all(isinstance(dt, np.dtype) for dt in supported)
    assert np.dtype(object) not in supported


@pytest.mark.skipif(shmstream.gpu_available(), reason="CUDA is available here")
@pytest.mark.parametrize("device", ["cuda:0", "cuda", 0])
def test_without_cuda_a_gpu_stream_raises_a_clear_error_and_creates_nothing(name, device):
    with pytest.raises(RuntimeError, match="CUDA support is not available"):
        shmstream.create(name, shape=(2, 2), gpu_device=device)
    assert not os.path.exists(support.segment_path(name))
    with pytest.raises(FileNotFoundError):
        shmstream.open(name)


@pytest.mark.skipif(shmstream.gpu_available(), reason="CUDA is available here")
def test_without_cuda_stream_with_a_gpu_device_raises_the_same_error(name):
    with pytest.raises(RuntimeError, match="CUDA support is not available"):
        with shmstream.stream(name, shape=(2,), gpu_device="cuda:0"):
            pass
    assert not os.path.exists(support.segment_path(name))


# ---- with CUDA -------------------------------------------------------------------


def child_read_gpu(stream_name):
    h = shmstream.open(stream_name)
    try:
        t = h.read()
        return str(t.device), t.cpu().numpy()
    finally:
        h.close()


@pytest.mark.gpu
@needs_cuda
def test_a_gpu_stream_carries_a_cuda_tensor_to_another_process(name, spawn):
    import torch

    h = shmstream.create(name, shape=(4, 4), dtype=np.float32, gpu_device="cuda:0")
    try:
        assert h.gpu_device is not None
        h.write(torch.arange(16, dtype=torch.float32, device="cuda:0").reshape(4, 4))
        device, data = spawn(child_read_gpu, name).result()
        assert device.startswith("cuda")
        assert np.array_equal(data, np.arange(16, dtype=np.float32).reshape(4, 4))
    finally:
        h.close()


@pytest.mark.gpu
@needs_cuda
def test_a_gpu_stream_with_cpu_mirror_is_readable_as_numpy_from_a_cpu_handle(name):
    import torch

    h = shmstream.create(name, shape=(3,), dtype=np.float32, gpu_device="cuda:0", cpu_mirror=True)
    try:
        h.write(torch.tensor([1.0, 2.0, 3.0], device="cuda:0"))
        cpu = shmstream.open(name, gpu_device=False)
        assert cpu.read().tolist() == [1.0, 2.0, 3.0]
        cpu.close()
    finally:
        h.close()


def test_torch_default_stream_is_handed_to_the_core_as_the_legacy_stream():
    """torch names its default stream 0, which the core reads as "no stream
    to order against"; the legacy stream's handle (1) orders our copies
    after torch's work (a missing wait found on an H200)."""
    from shmstream.gpu._values import CU_STREAM_LEGACY, torch_stream

    class Stream:
        cuda_stream = 0

    class Torch:
        class _C:  # a build without the raw-handle call: the public one
            pass

        class cuda:
            @staticmethod
            def current_stream(device):
                return Stream

    assert torch_stream(Torch, 0) == CU_STREAM_LEGACY == 1
    Stream.cuda_stream = 0x55AA00
    assert torch_stream(Torch, 0) == 0x55AA00
    raw = {0: 0, 1: 0x77BB00}  # and torch's raw handle where it has one
    Torch._C._cuda_getCurrentRawStream = staticmethod(raw.__getitem__)
    assert torch_stream(Torch, 0) == CU_STREAM_LEGACY
    assert torch_stream(Torch, 1) == 0x77BB00
