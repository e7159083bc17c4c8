"""CUDA streams: ``create(..., gpu_device="cuda:N")`` and ``open(...,
gpu_device=...)``.

The stream module calls only :func:`create`, :func:`open`, :func:`stat_device`,
:func:`gpu_available` and :data:`GPU_SUPPORTED_DTYPES`; everything GPU lives
here and in ``_cuda`` (binding) / ``src/core/cuda_stream.c`` (protocol). docs/gpu.md
is the design.

Framework-neutral: the CUDA driver is loaded at run time by the C core, so
``import shmstream`` needs neither CUDA nor torch, and CPU streams never
import torch. GPU-attached handles import torch on first use *if it is
installed*: reads then return torch CUDA tensors; without torch they return
:class:`CudaArray` (DLPack ``kDLCUDA`` and ``__cuda_array_interface__``, so
``cupy.from_dlpack`` / ``jax.dlpack.from_dlpack`` take it). Writes accept
CUDA tensors of any framework through ``__dlpack__``, NumPy arrays and CPU
tensors.

Attachment rule: a handle opened with ``gpu_device`` maps the device buffer
(once per process) and reads and writes it. A handle opened without it
in a process where CUDA is not usable, or with ``gpu_device=False``, inspects
metadata, waits for counts and takes the lock; its payload reads come from the
CPU mirror when the stream has one (``cpu_mirror=True``) and otherwise raise
an error naming ``gpu_device``; it cannot write (the device copy would go
stale). As in pyshmem, ``open(name)`` without ``gpu_device`` attaches to the
stream's device when this process can (``gpu_device=True`` says so
explicitly); if attaching fails (creator gone, device not visible) it gives
the device-less handle, whose payload errors then say why.

STATUS: written and tested on a machine without a GPU. The CPU-side rules
(argument checks, the attachment rule for handles without a device, error
messages) are tested; everything that touches a device is not yet verified
(docs/gpu.md lists what to run).
"""

from __future__ import annotations

import functools
import math
from typing import Any, NoReturn

import numpy as np

from .. import _cuda, _native
from ..errors import CudaUnavailableError, ShmstreamTypeError, ShmstreamValueError

#: dtypes a CUDA stream can hold (the payload is copied as bytes; these are
#: the ones every DLPack consumer, torch included, maps to a tensor dtype).
GPU_SUPPORTED_DTYPES: frozenset[np.dtype] = frozenset(
    np.dtype(t)
    for t in (
        np.bool_,
        np.int8,
        np.int16,
        np.int32,
        np.int64,
        np.uint8,
        np.uint16,
        np.uint32,
        np.uint64,
        np.float16,
        np.float32,
        np.float64,
        np.complex64,
        np.complex128,
    )
)

#: device slots of a GPU stream (its double buffer); the segment has as many
#: slot seqlocks, and a CPU mirror as many CPU slots.
DEVICE_SLOTS: int = int(_cuda.SLOTS)

# DLPack type codes: kDLInt 0, kDLUInt 1, kDLFloat 2, kDLComplex 5, kDLBool 6.
#: DLPack type codes of the dtype kinds a GPU stream holds (int, uint, float,
#: complex, bool).
DL_CODE = {"i": 0, "u": 1, "f": 2, "c": 5, "b": 6}

_probe: tuple[bool, str] | None = None


def _probe_cuda() -> tuple[bool, str]:
    global _probe
    if _probe is None:
        _probe = tuple(_cuda.probe())  # type: ignore[assignment]
    return _probe  # type: ignore[return-value]


def gpu_available() -> bool:
    """True when CUDA-backed streams can be made in this process (the CUDA
    driver loads and at least one device is visible). Never imports torch."""
    return _probe_cuda()[0]


def unavailable_reason() -> str:
    """Why :func:`gpu_available` is False ('' when it is True)."""
    return _probe_cuda()[1]


def unsupported(name: str, gpu_device: Any) -> NoReturn:
    """Raise the error for a GPU stream request this process cannot serve."""
    raise CudaUnavailableError(
        f"CUDA support is not available in this process ({unavailable_reason()}): stream "
        f"{name!r} asks for gpu_device={gpu_device!r}. Create a CPU stream "
        "(gpu_device=None), or run where a CUDA device is visible."
    )


def parse_device(gpu_device: Any) -> int | None:
    """``'cuda'``, ``'cuda:N'``, ``N`` or a ``torch.device('cuda', N)`` ->
    ordinal N; ``True`` -> None (the device the stream lives on)."""
    if gpu_device is True:
        return None
    if isinstance(gpu_device, (int, np.integer)) and not isinstance(gpu_device, bool):
        index = int(gpu_device)
    elif isinstance(gpu_device, str):
        kind, _, rest = gpu_device.strip().partition(":")
        if kind != "cuda":
            raise ShmstreamValueError(
                f"only CUDA devices are supported: gpu_device={gpu_device!r}; "
                "use 'cuda' or 'cuda:N'"
            )
        try:
            index = int(rest) if rest else 0
        except ValueError:
            raise ShmstreamValueError(f"bad CUDA device {gpu_device!r}; use 'cuda:N'") from None
    elif hasattr(gpu_device, "type") and hasattr(gpu_device, "index"):  # torch.device
        if gpu_device.type != "cuda":
            raise ShmstreamValueError(f"only CUDA devices are supported, got {gpu_device!r}")
        index = 0 if gpu_device.index is None else int(gpu_device.index)
    else:
        raise ShmstreamTypeError(
            "gpu_device must be 'cuda:N', an int, a torch.device or None, not "
            f"{type(gpu_device).__name__}"
        )
    if index < 0:
        raise ShmstreamValueError(f"CUDA device index must be >= 0, got {index}")
    return index


def check_index(name: str, gpu_device: Any, index: int) -> None:
    """Refuse a device index this process cannot use (no CUDA, out of range)."""
    if not gpu_available():
        unsupported(name, gpu_device)
    count = _cuda.device_count()
    if index >= count:
        raise ShmstreamValueError(
            f"gpu_device={gpu_device!r} for stream {name!r}: this process sees "
            f"{count} CUDA device(s) (cuda:0..cuda:{count - 1})"
        )


def _area_ordinal(seg: Any) -> int:
    area = bytes(seg.gpu_area)
    return int.from_bytes(area[4:8], "little", signed=True)


def stat_device(seg: Any) -> str | None:
    """``stat()``'s ``gpu_device``: the device the creator put the buffer on
    (its ordinal in the creator's process)."""
    if not int(seg.flags) & _native.FLAG_GPU:
        return None
    return f"cuda:{_area_ordinal(seg)}"


# ---- torch, when present ---------------------------------------------------

_torch_mod: Any = None
_torch_tried = False


def cuda_torch() -> Any:
    """torch if it is installed *with CUDA usable* (imported on the first GPU
    operation), else None. A CPU-only torch build (``torch.cuda.is_available()``
    False, e.g. the CUDA driver is only ours or a fake) cannot hold a CUDA
    tensor, so results are then :class:`CudaArray`."""
    global _torch_mod, _torch_tried
    if not _torch_tried:
        _torch_tried = True
        try:
            import torch

            _torch_mod = torch if torch.cuda.is_available() else None
        except Exception:  # noqa: BLE001 - a broken torch install means no GPU
            _torch_mod = None
    return _torch_mod


@functools.lru_cache(maxsize=64)
def torch_dtype(torch: Any, dt: np.dtype) -> Any:
    """The torch dtype of a NumPy dtype a GPU stream holds (cached: NumPy's
    ``dtype.name`` cost about 3 us of every 20 us GPU write on an H200)."""
    return getattr(torch, "bool" if dt.kind == "b" else dt.name)


def numpy_dtype(torch_dt: Any) -> np.dtype | None:
    """The NumPy dtype of a torch dtype (torch.float32 -> float32), or None
    for one NumPy has no name for (bfloat16, the float8 kinds)."""
    try:
        return np.dtype(str(torch_dt).removeprefix("torch."))
    except TypeError:
        return None


# ---- device arrays without torch -------------------------------------------


class CudaArray:
    """A read result on the device when torch is not installed: it owns its
    device memory and hands it to any framework through DLPack
    (``cupy.from_dlpack(a)``, ``jax.dlpack.from_dlpack(a)``) or
    ``__cuda_array_interface__``. The data is complete when it is returned."""

    __slots__ = ("_buf", "shape", "dtype", "_ptr", "_keep", "__weakref__")

    def __init__(
        self,
        buf: Any,
        shape: tuple[int, ...],
        dtype: np.dtype,
        ptr: int | None = None,
        keep: Any = None,
    ) -> None:
        self._buf = buf
        self.shape = tuple(shape)
        self.dtype = np.dtype(dtype)
        self._ptr = int(buf.ptr) if ptr is None else int(ptr)
        self._keep = keep

    @property
    def device(self) -> str:
        return f"cuda:{self._buf.ordinal}"

    @property
    def data_ptr(self) -> int:
        return self._ptr

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize

    def __dlpack_device__(self) -> tuple[int, int]:
        return (_cuda.kDLCUDA, int(self._buf.ordinal))

    def __dlpack__(
        self,
        *,
        stream: Any = None,
        max_version: Any = None,
        dl_device: Any = None,
        copy: Any = None,
    ) -> Any:
        # The copy that filled this array has completed on the host's
        # watch, so no stream needs to wait for anything.
        return _cuda.to_dlpack(
            self,
            self._ptr,
            list(self.shape),
            DL_CODE[self.dtype.kind],
            self.dtype.itemsize * 8,
            int(self._buf.ordinal),
        )

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        return {
            "shape": self.shape,
            "typestr": self.dtype.str,
            "data": (self._ptr, False),
            "version": 3,
            "strides": None,
            "stream": None,  # ready: nothing to synchronise
        }

    def get(self) -> np.ndarray:
        """Copy to a NumPy array."""
        out = np.empty(self.shape, self.dtype)
        _cuda.copy_to_host(self._ptr, int(self._buf.ordinal), out)
        return out

    def __repr__(self) -> str:
        return f"CudaArray(shape={self.shape}, dtype={self.dtype}, device={self.device!r})"


class SlotOwner:
    """Keeps a handle alive for a live device view of its buffer."""

    __slots__ = ("handle", "ordinal")

    def __init__(self, handle: Any, ordinal: int) -> None:
        self.handle = handle
        self.ordinal = ordinal


# ---- doors -----------------------------------------------------------------


__all__ = [
    "CudaArray",
    "GPU_SUPPORTED_DTYPES",
    "gpu_available",
    "parse_device",
    "stat_device",
]
