"""The GPU layer's hook into the stream layer. ``shmstream.gpu`` registers its
create, open, device slot count and device stat here when it is imported
(``import shmstream`` imports it), so that the stream layer never imports
the GPU layer (tests/repo/test_layers.py)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any


@dataclasses.dataclass
class GpuHook:
    """What the GPU layer lends the stream layer; None until it registers."""

    create: Callable[..., Any] | None = None
    open: Callable[..., Any] | None = None
    #: a GPU stream's slot count (its device double buffer)
    slots: int = 2
    #: ``stat_device(header)`` -> the ``gpu_device`` stat shows
    stat_device: Callable[[Any], Any] | None = None


#: The one hook, filled by :func:`register_gpu`.
GPU = GpuHook()


def register_gpu(
    create_fn: Callable[..., Any],
    open_fn: Callable[..., Any],
    slots: int,
    stat_device: Callable[[Any], Any] | None = None,
) -> None:
    """Called by shmstream.gpu at import: where GPU streams are made."""
    GPU.create, GPU.open, GPU.slots, GPU.stat_device = create_fn, open_fn, slots, stat_device
