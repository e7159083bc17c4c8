"""GPU streams: ``shmstream.create(..., gpu_device="cuda:N")``.

The payload lives in a CUDA device buffer shared through CUDA IPC; the
segment's header (the same on-memory protocol as a CPU stream) orders the
device copies. ``device`` probes the driver and converts device arrays,
``handle`` is the GPU stream handle (a :class:`shmstream.SharedMemory`
subclass), ``factory`` makes handles. This package imports the stream layer
and registers its create and open with it; the stream layer never imports
this package. docs/gpu.md has the protocol and the checklist.
"""

from __future__ import annotations

from ..errors import GpuStreamGoneError
from ..streams._gpu import register_gpu
from .device import (
    DEVICE_SLOTS,
    GPU_SUPPORTED_DTYPES,
    CudaArray,
    gpu_available,
    parse_device,
    stat_device,
)
from .factory import create, open
from .handle import GpuSharedMemory

register_gpu(create, open, DEVICE_SLOTS, stat_device)

__all__ = [
    "CudaArray",
    "GPU_SUPPORTED_DTYPES",
    "GpuSharedMemory",
    "GpuStreamGoneError",
    "gpu_available",
    "parse_device",
]
