"""The seam where CUDA streams plug in.

This build has no CUDA support: ``gpu_available()`` is False and every request
for a GPU stream raises :class:`RuntimeError` from :func:`unsupported`. The
stream module calls only the names below, so CUDA support replaces this module
without touching ``stream.py``. Nothing here imports torch: importing
shmstream and using CPU streams never does.
"""
from __future__ import annotations

from typing import Any, NoReturn

#: dtypes a CUDA stream can hold; empty while CUDA support is not built in.
GPU_SUPPORTED_DTYPES: frozenset[Any] = frozenset()


def gpu_available() -> bool:
    """True when CUDA-backed streams can be made in this process."""
    return False


def unsupported(name: str, gpu_device: Any) -> NoReturn:
    """Raise the error for a GPU stream request this build cannot serve."""
    raise RuntimeError(
        "CUDA support is not available in this build of shmstream: stream "
        f"{name!r} asks for gpu_device={gpu_device!r}. Create a CPU stream "
        "(gpu_device=None) and move the array to the GPU after reading it."
    )
