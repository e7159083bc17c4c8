"""Making GPU stream handles: ``shmstream.create(..., gpu_device=...)`` and
``shmstream.open`` of a GPU stream end here (the stream layer calls them
through the hook this package registers)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import _cuda, _native
from ..common import _checks, _dtypes
from ..errors import (
    CudaUnavailableError,
    NoCpuMirrorError,
    ShmstreamError,
    ShmstreamTypeError,
    ShmstreamValueError,
    StaleStreamError,
)
from .device import GPU_SUPPORTED_DTYPES, check_index, gpu_available, parse_device, unsupported
from .handle import GpuSharedMemory

__all__ = ["create", "open"]


def create(
    name: str,
    dims: tuple[int, ...],
    dt: np.dtype,
    gpu_device: Any,
    cpu_mirror: bool | None,
    notify: bool,
    mode: int,
) -> Any:
    """``shmstream.create(..., gpu_device=...)`` (arguments already checked
    by the stream module, except the GPU ones)."""
    index = parse_device(gpu_device)
    if index is None:
        raise ShmstreamTypeError("create() needs an explicit gpu_device such as 'cuda:0'")
    if dt not in GPU_SUPPORTED_DTYPES:
        supported = ", ".join(sorted(str(d) for d in GPU_SUPPORTED_DTYPES))
        raise ShmstreamValueError(
            f"dtype {dt} is not supported for GPU shared memory; supported: {supported}"
        )
    if cpu_mirror is not None and not isinstance(cpu_mirror, (bool, np.bool_)):
        raise ShmstreamTypeError(f"cpu_mirror must be True, False or None, not {cpu_mirror!r}")
    check_index(name, gpu_device, index)
    flags = _native.FLAG_GPU
    if cpu_mirror:
        flags |= _native.FLAG_CPU_MIRROR
    if notify:
        flags |= _native.FLAG_NOTIFY
    try:
        gs = _cuda.GpuStream.create(
            name, list(dims), dt.itemsize, _dtypes.encode(dt), flags, mode, index
        )
    except FileExistsError:
        raise _checks.duplicate_name_error(name) from None
    segment = _native.Segment.open(name, _native.KIND_STREAM, False)
    if segment.instance_id != gs.instance_id:  # replaced in between: not ours
        gs.close()
        raise StaleStreamError(f"stream {name!r} was replaced while it was being created")
    handle = GpuSharedMemory(segment, owner=True)
    handle._attach(gs)
    return handle


def open(
    segment: Any, name: str, gpu_device: Any, readonly: bool, allow_owners: Sequence[int] = ()
) -> Any:
    """``shmstream.open(name, gpu_device=...)`` of a GPU stream
    (``allow_owners``: the uids ``allow_owner`` resolved to)."""
    mirror = bool(int(segment.flags) & _native.FLAG_CPU_MIRROR)
    if gpu_device is False:
        if not mirror:
            raise NoCpuMirrorError(
                f"{name!r} is a GPU stream without a CPU mirror; cannot open it "
                "CPU-only (recreate it with cpu_mirror=True, or open it with "
                "gpu_device='cuda:N')"
            )
        return GpuSharedMemory(segment, readonly=readonly)
    if gpu_device is None:
        # pyshmem's rule: attach to the stream's device when this process can;
        # otherwise a handle without a device (metadata, lock, CPU mirror).
        if not gpu_available():
            return GpuSharedMemory(segment, readonly=readonly)
        try:
            return open(segment, name, True, readonly, allow_owners)
        except ShmstreamError as exc:  # not attachable here: a handle without a device
            return GpuSharedMemory(segment, readonly=readonly, attach_error=str(exc))
    index = parse_device(gpu_device)
    if not gpu_available():
        unsupported(name, gpu_device)
    if index is None:  # gpu_device=True: wherever the buffer lives
        index = _cuda.device_by_uuid(bytes(segment.gpu_area)[8:24])
        if index < 0:
            raise CudaUnavailableError(
                f"GPU stream {name!r} lives on a device this process cannot see "
                "(check CUDA_VISIBLE_DEVICES)"
            )
    else:
        check_index(name, gpu_device, index)
    gs = _cuda.GpuStream.attach(name, index, bool(readonly), list(allow_owners))
    if gs.instance_id != segment.instance_id:
        gs.close()
        raise StaleStreamError(f"stream {name!r} was replaced while it was being opened")
    handle = GpuSharedMemory(segment, readonly=readonly)
    handle._attach(gs)
    return handle
