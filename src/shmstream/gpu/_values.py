"""What a GPU stream's handle takes in and hands out: the device array a
read fills (the caller's ``out=`` checked, or a new one) and the source of
a write (a torch tensor, a DLPack CUDA array), each as the device pointer
and CUDA stream the core copies with.

Separate from handle.py: these are checks and conversions of the caller's
objects against a stream's shape and dtype, which need none of the handle's
state; the handle keeps the protocol (attach, write, read, wait).
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from .. import _cuda
from ..errors import ShmstreamTypeError, ShmstreamValueError
from ..streams._checks import check_cast
from .device import DL_CODE, CudaArray, cuda_torch, numpy_dtype, torch_dtype

#: The driver API's handle of the legacy default stream (``CU_STREAM_LEGACY``).
CU_STREAM_LEGACY = 0x1


def torch_stream(torch: Any, device: int) -> int:
    """The handle of torch's current stream on CUDA device ``device`` (an
    index) for the core.

    torch reports its default stream as 0, which the core reads as "no user
    stream" (nothing to order against); the legacy default stream's own
    handle orders our copies after the work torch queued there. Found on an
    H200: with 0, a write copied a recycled source buffer before torch had
    filled it, and a racing reader got frame k-1's bytes under frame k's id.

    ``torch._C._cuda_getCurrentRawStream`` (what torch's own compiler
    calls) gives the handle without building a Stream object, a few
    microseconds of every small GPU read and write; the public call is the
    fallback where a build lacks it.
    """
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is not None:
        return int(raw(device)) or CU_STREAM_LEGACY
    return int(torch.cuda.current_stream(device).cuda_stream) or CU_STREAM_LEGACY


def new_result(
    out: Any, shape: tuple[int, ...], dtype: np.dtype, ordinal: int, size: int
) -> tuple[Any, int, int]:
    """(array, device pointer, stream it is ordered on) of a read into
    ``out``, or into a new tensor (a CudaArray without torch)."""
    torch = cuda_torch()
    if out is not None:
        return device_out(out, torch, shape, dtype, ordinal)
    if torch is not None:
        t = torch.empty_like(_like(torch, shape, dtype, ordinal))
        return t, int(t.data_ptr()), torch_stream(torch, ordinal)
    buf = _cuda.DeviceBuffer.alloc(size, ordinal)
    return CudaArray(buf, shape, dtype), int(buf.ptr), 0


@functools.lru_cache(maxsize=64)
def _like(torch: Any, shape: tuple[int, ...], dtype: np.dtype, ordinal: int) -> Any:
    """A one-element CUDA tensor expanded to ``shape``: ``torch.empty_like``
    of it is a new contiguous result, about 2 us cheaper per read than
    ``torch.empty(shape, dtype=, device=)``, which parses its arguments."""
    one = torch.empty((1,) * len(shape), dtype=torch_dtype(torch, dtype), device=ordinal)
    return one.expand(shape)


def device_out(
    out: Any, torch: Any, shape: tuple[int, ...], dtype: np.dtype, ordinal: int
) -> tuple[Any, int, int]:
    """``out=`` of a read on a GPU-attached handle, checked: a contiguous
    CUDA tensor or CudaArray of the stream's shape and dtype."""
    if isinstance(out, np.ndarray):
        raise ShmstreamValueError(
            "out must be a CUDA array on a GPU-attached handle (a torch CUDA "
            "tensor or a CudaArray); NumPy out= works for CPU reads only"
        )
    if torch is not None and isinstance(out, torch.Tensor):
        if (
            not out.is_cuda
            or out.device.index != ordinal
            or tuple(out.shape) != shape
            or out.dtype != torch_dtype(torch, dtype)
            or not out.is_contiguous()
        ):
            raise ShmstreamValueError(
                f"out must be a contiguous {dtype} CUDA tensor of shape {shape} on cuda:{ordinal}"
            )
        return out, int(out.data_ptr()), torch_stream(torch, ordinal)
    if isinstance(out, CudaArray):
        if out.shape != shape or out.dtype != dtype:
            raise ShmstreamValueError(f"out must have shape {shape} and dtype {dtype}")
        return out, out.data_ptr, 0
    raise ShmstreamTypeError(
        f"out must be a torch CUDA tensor or a CudaArray, not {type(out).__name__}"
    )


def torch_source(
    torch: Any, value: Any, shape: tuple[int, ...], dtype: np.dtype, name: str, casting: str
) -> tuple[int, Any, int, Any]:
    """(kind, address or host array, user stream, keep-alive) of a write of
    the torch tensor ``value``, cast under the CPU handle's casting rule."""
    t = value  # no detach(): only its data is read, by address
    if tuple(t.shape) != shape:
        raise ShmstreamValueError(f"expected shape {shape}, got {tuple(t.shape)}")
    want = torch_dtype(torch, dtype)
    if t.dtype != want:  # the CPU handle's casting rule, the same check
        check_cast(numpy_dtype(t.dtype), dtype, name, casting, what=str(t.dtype))
    if t.is_cuda:
        if t.dtype != want or not t.is_contiguous():
            t = t.to(dtype=want).contiguous()
        return _cuda.SRC_DEVICE, int(t.data_ptr()), torch_stream(torch, t.get_device()), t
    t = t.to(dtype=want).contiguous()
    host = t.detach().numpy()
    return (_cuda.SRC_PINNED if _torch_pinned(t) else _cuda.SRC_HOST), host, 0, t


def dlpack_source(
    value: Any, stream: int, shape: tuple[int, ...], dtype: np.dtype
) -> tuple[int, Any, int, Any]:
    """The same for a CUDA array given by DLPack (taken on ``stream``): it
    must be C-contiguous, of the stream's shape and dtype."""
    try:
        capsule = value.__dlpack__(stream=stream)
    except TypeError:
        capsule = value.__dlpack__()
    imp = _cuda.DLImport.take(capsule)
    want = (DL_CODE[dtype.kind], dtype.itemsize * 8, 1)
    got = tuple(imp.shape)
    if got != shape or tuple(imp.dtype) != want:
        imp.release()
        raise ShmstreamValueError(
            f"expected a {dtype} CUDA array of shape {shape}, got DLPack "
            f"dtype {tuple(imp.dtype)} shape {got}"
        )
    strides = imp.strides
    if strides is not None:
        expect, step = [], 1
        for dim in reversed(got):
            expect.append(step)
            step *= dim
        if any(d > 1 and s != e for d, s, e in zip(got, strides, reversed(expect))):
            imp.release()
            raise ShmstreamValueError("a DLPack source must be C-contiguous")
    # No user stream to order against: the write waits for its copy.
    return _cuda.SRC_DEVICE, int(imp.ptr), 0, imp


def _torch_pinned(t: Any) -> bool:
    """t.is_pinned(), False where torch cannot tell (a CPU-only build)."""
    try:
        return bool(t.is_pinned())
    except RuntimeError:
        return False
