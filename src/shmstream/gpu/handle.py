"""The handle of a GPU stream (see ``device`` for the rules and docs/gpu.md
for the design): a :class:`shmstream.SharedMemory` whose payload copies go
through the CUDA half of the core.

The device paths ran on an NVIDIA H200 (docs/gpu.md, "Runs on a GPU").
"""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Any

import numpy as np

from .. import _cuda
from ..common import _checks
from ..common._checks import spin_ns
from ..errors import (
    GpuRequiredError,
    LoanStateError,
    NotLockOwnerError,
)
from ..streams._checks import check_count
from ..streams._waiting import remaining
from ..streams.publication import Publication
from ..streams.shared_memory import SharedMemory
from ._values import dlpack_source, new_result, torch_source, torch_stream
from .device import DL_CODE, CudaArray, SlotOwner, cuda_torch, torch_dtype


class GpuSharedMemory(SharedMemory):
    """A handle on a GPU stream (see the module notes for the attachment
    rule). Same API as :class:`SharedMemory`; payloads are device arrays."""

    def __init__(
        self, segment: Any, *, owner: bool = False, readonly: bool = False, attach_error: str = ""
    ) -> None:
        super().__init__(segment, owner=owner, readonly=readonly)
        self._gs: Any = None
        self._ordinal = -1
        self._pinned: Any = None
        self._view_stream = 0
        self._attach_error = attach_error  # why open(name) could not attach, if it tried

    def _attach(self, gs: Any) -> None:
        self._gs = gs
        self._ordinal = int(gs.ordinal)
        self.gpu_device = f"cuda:{self._ordinal}"

    # -- the attachment rule --

    def _unattached(self, operation: str) -> RuntimeError:
        n = self.name
        if self.gpu_enabled and not self.cpu_mirror:
            what = "GPU shared memory was created without cpu_mirror=True"
        else:
            what = f"GPU stream {n!r} is not attached to its device on this handle"
        why = f" (attaching failed: {self._attach_error})" if self._attach_error else ""
        return GpuRequiredError(
            f"cannot {operation} {n!r}: {what}{why}; reopen it with "
            f"shmstream.open({n!r}, gpu_device='cuda:N') (or gpu_device=True)"
        )

    def _cpu_reads(self) -> bool:
        """An unattached handle of a mirrored stream reads the mirror."""
        return self._gs is None and self.cpu_mirror

    # -- results and sources (the caller's objects, checked in _values) --

    def _result(self, out: Any) -> tuple[Any, int, int]:
        """(array, device pointer, stream it is ordered on)."""
        return new_result(out, self.shape, self.dtype, self._ordinal, self.size)

    def _source(self, value: Any) -> tuple[int, Any, int, Any]:
        """(kind, address or host array, user stream, keep-alive) of a write."""
        torch = sys.modules.get("torch")  # a NumPy write never imports torch
        if torch is not None and isinstance(value, torch.Tensor):
            return torch_source(torch, value, self.shape, self.dtype, self.name, self.casting)
        if not isinstance(value, np.ndarray) and hasattr(value, "__dlpack_device__"):
            dev_type, _ = value.__dlpack_device__()
            if dev_type in (_cuda.kDLCUDA, _cuda.kDLCUDAManaged):
                return dlpack_source(value, int(self._gs.stream), self.shape, self.dtype)
        array = self._coerce(value)
        pinned = self._pinned is not None and np.shares_memory(array, self._pinned_np())
        return (_cuda.SRC_PINNED if pinned else _cuda.SRC_HOST), array, 0, None

    def _pinned_np(self) -> np.ndarray:
        pinned = self._pinned
        return pinned if isinstance(pinned, np.ndarray) else pinned.numpy()

    # -- writing --

    def _publish(
        self, value: Any, frame_id: int | None, count: int = 0, write_time_ns: int = 0
    ) -> None:
        gs = self._gs
        kind, src, stream, keep = self._source(value)
        try:
            if kind == _cuda.SRC_DEVICE:
                self._wrote = gs.write(
                    src, kind, stream, frame_id, count=count, write_time_ns=write_time_ns
                )
            else:
                self._wrote = gs.write_host(
                    src,
                    kind == _cuda.SRC_PINNED,
                    frame_id,
                    count=count,
                    write_time_ns=write_time_ns,
                )
        finally:
            if isinstance(keep, _cuda.DLImport):
                keep.release()

    def write(
        self,
        value: Any,
        *,
        frame_id: int | None = None,
        count: int | None = None,
        write_time_ns: int | None = None,
        timeout: float | None = None,
    ) -> None:
        """Publish a copy of ``value`` (a CUDA tensor of any framework, a
        NumPy array or a CPU tensor) to the device buffer. ``count`` and
        ``write_time_ns`` are a mirror's or a replay's metadata, as for
        :meth:`shmstream.SharedMemory.write`."""

        self._check_writable("write to")
        if self._gs is None:
            raise self._unattached("write to")
        fid = None if frame_id is None else _checks.check_u64("frame_id", frame_id)
        number = 0 if count is None else check_count(count)
        wt = (
            0
            if write_time_ns is None
            else _checks.check_u64("write_time_ns", write_time_ns, minimum=1)
        )
        self.acquire(timeout=timeout)
        try:
            self._publish(value, fid, number, wt)
        finally:
            self.release()

    def write_locked(self, value: Any, *, frame_id: int | None = None) -> None:

        self._check_writable("write to")
        if not self._holds_lock():
            raise NotLockOwnerError("write_locked() requires an active 'with shm.locked()' block")
        if self._gs is None:
            raise self._unattached("write to")
        self._publish(value, None if frame_id is None else _checks.check_u64("frame_id", frame_id))

    def clear(self, *, timeout: float | None = None) -> None:
        self._check_writable("clear")
        gs = self._gs
        if gs is None:
            raise self._unattached("clear")
        self.acquire(timeout=timeout)
        try:
            self._wrote = gs.clear()
        finally:
            self.release()

    def _device_view(self, ptr: int) -> Any:
        """A live device array over the buffer at ptr (torch tensor if torch
        is installed); it keeps this handle alive."""
        owner = SlotOwner(self, self._ordinal)
        code, bits = DL_CODE[self.dtype.kind], self.dtype.itemsize * 8
        capsule = _cuda.to_dlpack(owner, ptr, list(self.shape), code, bits, self._ordinal)
        torch = cuda_torch()
        if torch is not None:
            return torch.utils.dlpack.from_dlpack(capsule)
        return CudaArray(_SlotBuffer(ptr, self._ordinal), self.shape, self.dtype, ptr, owner)

    def _stream_now(self) -> int:
        torch = cuda_torch()
        if torch is None:
            return 0
        return torch_stream(torch, self._ordinal)

    def _begin_write_view(self, frame_id: int | None, what: str) -> Any:
        self._check_writable("write to")
        if not self._holds_lock():
            raise NotLockOwnerError(f"{what} requires an active 'with shm.locked()' block")
        gs = self._gs
        if gs is None:
            raise self._unattached("write to")
        if self._writing:
            raise LoanStateError(f"a write_view of {self.name!r} is already open on this handle")
        self._view_stream = self._stream_now()
        ptr = gs.view_begin(self._view_stream)
        self._writing = True
        return self._device_view(ptr)

    def _commit_write_view(self, frame_id: int | None) -> None:
        if self._seg is None or not self._writing:
            return
        self._writing = False
        self._wrote = self._gs.view_commit(self._view_stream, frame_id)

    def _abort_write_view(self) -> None:
        if self._seg is None or not self._writing:
            return
        self._writing = False
        self._gs.view_abort()

    def _payload_view(self, seg: Any, slot: int | None = None) -> Any:
        # The CPU mirror has one CPU slot per device slot (slot_count 2);
        # an unattached handle reads it through the slot-aware base views.
        if self._gs is None:
            if self.cpu_mirror:
                return super()._payload_view(seg, slot)
            raise self._unattached("take a shared view of")
        if slot is not None and slot != seg.published_slot:
            raise LoanStateError("a device view of an unpublished slot is taken by write_view only")
        return self._device_view(int(self._gs.published_ptr()))

    def pinned_buffer(self) -> Any:
        """A reusable page-locked host buffer of the stream's shape: fill it
        and pass it to :meth:`write` for a direct DMA upload (the write then
        waits for its copy, so the buffer may be refilled at once)."""
        self._check_writable("allocate a pinned write buffer for")
        if self._gs is None:
            raise GpuRequiredError("pinned_buffer() requires a GPU-attached stream handle")
        if self._pinned is None:
            torch = cuda_torch()
            if torch is not None:
                self._pinned = torch.empty(
                    self.shape, dtype=torch_dtype(torch, self.dtype), pin_memory=True
                )
            else:
                raw = _cuda.host_alloc(self.size)
                self._pinned = raw.view(self.dtype).reshape(self.shape)
        return self._pinned

    # -- reading --

    def _gpu_read(self, out: Any, timeout: float | None) -> tuple[Any, int, int, int]:
        gs = self._gs
        dst, ptr, stream = self._result(out)
        count, frame_id, wt = gs.read(ptr, stream, timeout, self._holds_lock())
        return dst, count, frame_id, wt

    def read(
        self,
        *,
        safe: bool = True,
        poll_interval: float = 1e-6,
        out: Any = None,
        timeout: float | None = None,
    ) -> Any:
        """A consistent snapshot of the payload: a torch CUDA tensor (or a
        :class:`CudaArray` without torch) on a GPU-attached handle; a NumPy
        array from the CPU mirror on a handle without ``gpu_device``."""
        self._check_open("read from")
        if self._cpu_reads():
            return super().read(safe=safe, out=out, timeout=timeout)
        if self._gs is None:
            raise self._unattached("read from")
        if not _checks.check_bool("safe", safe):
            return self._read_unsafe(safe, out)
        dst, count, _, _ = self._gpu_read(out, timeout)
        self._record(count)
        return dst

    def read_publication(
        self,
        *,
        safe: bool = True,
        poll_interval: float = 1e-6,
        out: Any = None,
        timeout: float | None = None,
    ) -> Publication:
        self._check_open("read a publication from")
        if self._cpu_reads() or not _checks.check_bool("safe", safe):
            if self._gs is None and not self.cpu_mirror:
                raise self._unattached("read a publication from")
            return super().read_publication(safe=safe, out=out, timeout=timeout)
        if self._gs is None:
            raise self._unattached("read a publication from")
        dst, count, frame_id, wt = self._gpu_read(out, timeout)
        missed = self._record(count)
        return Publication(dst, count, frame_id, wt / 1e9, missed)

    def _wait_read(
        self, after: int, timeout: float | None, out: Any, spin_us: float | None, operation: str
    ) -> tuple[Any, int, int, int]:
        if self._cpu_reads():
            return super()._wait_read(after, timeout, out, spin_us, operation)
        seg = self._seg
        if seg is None:
            raise self._closed_error(operation)
        if self._gs is None:
            raise self._unattached(operation.replace("read ", "read ", 1))

        self._fail_if_invalid(seg)
        spin = self._spin if spin_us is None else spin_ns(spin_us)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            seg.wait_count(after, remaining(deadline), spin)
            dst, count, frame_id, wt = self._gpu_read(out, remaining(deadline))
            if count > after:
                return dst, count, frame_id, wt
            spin = 0

    def read_new(
        self,
        *,
        timeout: float | None = None,
        safe: bool = True,
        poll_interval: float = 1e-5,
        out: Any = None,
        spin_us: float | None = None,
    ) -> Any:
        if self._cpu_reads():
            return super().read_new(timeout=timeout, safe=safe, out=out, spin_us=spin_us)
        return self._read_new_slow(timeout, safe, out, spin_us)

    async def read_new_async(
        self,
        *,
        timeout: float | None = None,
        safe: bool = True,
        poll_interval: float = 1e-5,
        out: Any = None,
        spin_us: float | None = None,
    ) -> Any:
        if self._cpu_reads() or not _checks.check_bool("safe", safe):
            return await super().read_new_async(
                timeout=timeout, safe=safe, out=out, spin_us=spin_us
            )
        seg = self._seg
        if seg is None:
            raise self._closed_error("read from")
        if self._gs is None:
            raise self._unattached("read from")
        self._fail_if_invalid(seg)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            await self._wait_async(seg, self._seen, remaining(deadline), None, spin_us)
            loop = asyncio.get_running_loop()
            dst, count, _, _ = await loop.run_in_executor(
                None, self._gpu_read, out, remaining(deadline)
            )
            if count > self._seen:
                self._record(count)
                return dst

    # -- DLPack --

    def __dlpack_device__(self) -> tuple[int, int]:
        self._check_open("read the DLPack device of")
        if self._gs is not None:
            return (_cuda.kDLCUDA, self._ordinal)
        if self.cpu_mirror:
            return (1, 0)
        raise self._unattached("read the DLPack device of")

    # -- lifetime --

    def close(self, *, timeout: float = 5.0) -> None:
        super().close(timeout=timeout)
        gs, self._gs = self._gs, None
        if gs is not None:
            gs.close()
        self._pinned = None

    def unlink(self) -> None:
        gs = self._gs
        if gs is not None and self.owner and not self.readonly:
            # The creator frees its device buffer once this handle lets go.
            gs.release_owned()
        super().unlink()


class _SlotBuffer:
    """Duck-typed DeviceBuffer for live views (owns nothing)."""

    __slots__ = ("ptr", "ordinal")

    def __init__(self, ptr: int, ordinal: int) -> None:
        self.ptr = ptr
        self.ordinal = ordinal
