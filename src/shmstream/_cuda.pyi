"""
shmstream CUDA binding (internal; use shmstream.create(..., gpu_device=...))
"""

from collections.abc import Sequence
from typing import Annotated

import numpy
from numpy.typing import NDArray


SRC_HOST: int = 0

SRC_PINNED: int = 1

SRC_DEVICE: int = 2

SLOTS: int = 2

AREA_VERSION: int = 1

def probe() -> tuple[bool, str]: ...

def device_count() -> int: ...

def device_uuid(arg: int, /) -> bytes: ...

def device_by_uuid(arg: bytes, /) -> int: ...

class GpuStream:
    @staticmethod
    def create(arg0: str, arg1: Sequence[int], arg2: int, arg3: str, arg4: int, arg5: int, arg6: int, /) -> GpuStream: ...

    @staticmethod
    def attach(name: str, ordinal: int, readonly: bool, allow_owners: Sequence[int] = []) -> GpuStream: ...

    def close(self) -> None: ...

    def release_owned(self) -> None: ...

    @property
    def closed(self) -> bool: ...

    @property
    def ordinal(self) -> int: ...

    @property
    def stream(self) -> int: ...

    @property
    def owner(self) -> bool: ...

    @property
    def instance_id(self) -> str: ...

    @property
    def payload_bytes(self) -> int: ...

    def slot_ptr(self, arg: int, /) -> int: ...

    def published_ptr(self) -> int: ...

    def write(self, src: int, kind: int, user_stream: int = 0, frame_id: int | None = None, timeout: object | None = None, count: int = 0, write_time_ns: int = 0) -> int:
        """
        Publish payload_bytes at address src (the caller holds the stream lock); count and write_time_ns 0: count + 1 and now.
        """

    def write_host(self, buffer: object, pinned: bool = False, frame_id: int | None = None, timeout: object | None = None, count: int = 0, write_time_ns: int = 0) -> int: ...

    def clear(self, timeout: object | None = None) -> int: ...

    def read(self, dst: int, user_stream: int = 0, timeout: object | None = None, holds_lock: bool = False) -> tuple[int, int, int]: ...

    def view_begin(self, user_stream: int = 0, timeout: object | None = None) -> int: ...

    def view_commit(self, user_stream: int = 0, frame_id: int | None = None) -> int: ...

    def view_abort(self) -> None: ...

class DeviceBuffer:
    @staticmethod
    def alloc(arg0: int, arg1: int, /) -> DeviceBuffer: ...

    @property
    def ptr(self) -> int: ...

    @property
    def nbytes(self) -> int: ...

    @property
    def ordinal(self) -> int: ...

def host_alloc(arg: int, /) -> Annotated[NDArray[numpy.uint8], dict(shape=(None,))]: ...

def copy_to_host(arg0: int, arg1: int, arg2: object, /) -> None: ...

def to_dlpack(arg0: object, arg1: int, arg2: Sequence[int], arg3: int, arg4: int, arg5: int, /) -> object: ...

class DLImport:
    @staticmethod
    def take(arg: object, /) -> DLImport: ...

    @property
    def ptr(self) -> int: ...

    @property
    def device(self) -> tuple[int, int]: ...

    @property
    def shape(self) -> list[int]: ...

    @property
    def strides(self) -> list[int] | None: ...

    @property
    def dtype(self) -> tuple[int, int, int]: ...

    def release(self) -> None: ...

kDLCPU: int = 1

kDLCUDA: int = 2

kDLCUDAHost: int = 3

kDLCUDAManaged: int = 13
