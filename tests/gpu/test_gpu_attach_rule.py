"""The attachment rule of GPU streams, checked on any machine: a handle
without a device (``open(name)`` where CUDA is not usable, or
``gpu_device=False``) inspects metadata and takes the lock; its payload reads
use the CPU mirror or raise an error that names gpu_device.

A GPU stream's segment is made here through the core binding with the GPU
flags (no device buffer behind it), which is all these handles touch.
"""

from __future__ import annotations

import subprocess
import sys
import uuid

import numpy as np
import pytest

import shmstream
from shmstream import _native, _testhooks


@pytest.fixture
def name():
    n = f"gpurule-{uuid.uuid4().hex[:12]}"
    yield n
    shmstream.unlink(n)


def make_gpu_segment(name, mirror):
    flags = _native.FLAG_GPU | (_native.FLAG_CPU_MIRROR if mirror else 0)
    return _native.Segment.create(name, _native.KIND_STREAM, [2, 3], 4, "<f4", flags, 0o600, 0)


def test_gpu_supported_dtypes_is_a_frozenset_of_numpy_dtypes():
    assert isinstance(shmstream.GPU_SUPPORTED_DTYPES, frozenset)
    assert np.dtype(np.float32) in shmstream.GPU_SUPPORTED_DTYPES
    assert isinstance(shmstream.gpu_available(), bool)


def test_import_and_cpu_streams_never_import_torch_or_load_cuda():
    code = (
        "import sys, shmstream, numpy as np\n"
        f"h = shmstream.create('gpurule-torchcheck-{uuid.uuid4().hex[:8]}', shape=(2,))\n"
        "h.write(np.ones(2)); h.read(); h.unlink()\n"
        "assert 'torch' not in sys.modules, 'torch imported'\n"
        "maps = open('/proc/self/maps').read()\n"
        "assert 'libcuda' not in maps, 'libcuda loaded'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.skipif(shmstream.gpu_available(), reason="open(name) attaches where CUDA works")
def test_a_performance_mode_stream_without_gpu_device_gives_metadata_and_the_lock(name):
    make_gpu_segment(name, mirror=False)
    h = shmstream.open(name)
    assert h.gpu_enabled and not h.cpu_mirror and h.gpu_device is None
    assert h.shape == (2, 3) and h.count == 0 and "gpu_enabled:  True" in h.describe()
    with h.locked():
        pass
    for call in (
        h.read,
        h.read_publication,
        lambda: h.read_new(timeout=0.01),
        lambda: h.write(np.zeros((2, 3))),
        h.clear,
    ):
        with pytest.raises(RuntimeError, match="gpu_device="):
            call()
    with pytest.raises(RuntimeError, match="gpu_device="):
        h.__dlpack_device__()
    h.close()


def test_open_cpu_only_with_gpu_device_false_needs_a_mirror(name):
    make_gpu_segment(name, mirror=False)
    with pytest.raises(ValueError, match="cpu_mirror=True"):
        shmstream.open(name, gpu_device=False)


def test_a_mirrored_stream_reads_its_mirror_without_gpu_device_but_refuses_writes(name):
    seg = make_gpu_segment(name, mirror=True)
    seg.write(np.arange(6, dtype=np.float32))  # what a GPU writer puts in the mirror
    h = shmstream.open(name, gpu_device=False)
    assert h.cpu_mirror and h.read().tolist() == [[0, 1, 2], [3, 4, 5]]
    assert h.__dlpack_device__() == (1, 0)
    with pytest.raises(RuntimeError, match="gpu_device="):
        h.write(np.zeros((2, 3)))
    h.close()


def test_stat_reports_the_gpu_fields(name):
    make_gpu_segment(name, mirror=False)
    info = shmstream.stat(name)
    assert info["gpu_enabled"] is True and info["cpu_mirror"] is False
    assert info["gpu_device"] == "cuda:0"


def test_a_performance_mode_segment_has_no_cpu_slot(name):
    seg = make_gpu_segment(name, mirror=False)
    layout = _testhooks.layout()
    assert layout["gpu"] == (1456, 512)
    import os

    size = os.stat("/dev/shm" + seg.segname).st_size
    assert size == _native.HEADER_BYTES


@pytest.mark.skipif(shmstream.gpu_available(), reason="checks the no-CUDA error")
def test_without_cuda_gpu_requests_fail_with_a_clear_error(name):
    with pytest.raises(RuntimeError, match="CUDA support is not available"):
        shmstream.create(name, shape=(2,), gpu_device="cuda:0")
    make_gpu_segment(name, mirror=False)
    with pytest.raises(RuntimeError, match="CUDA support is not available"):
        shmstream.open(name, gpu_device="cuda:0")


def test_bad_gpu_device_values(name):
    with pytest.raises(ValueError, match="only CUDA"):
        shmstream.create(name, shape=(2,), gpu_device="cpu")
    with pytest.raises(TypeError, match="gpu_device"):
        shmstream.create(name, shape=(2,), gpu_device=1.5)
    with pytest.raises(ValueError, match="cuda:N"):
        shmstream.create(name, shape=(2,), gpu_device="cuda:x")
