"""Streams by name, besides ``create`` (in ``shared_memory``): ``open``
attaches to one, ``unlink`` removes one (or any object ``list`` shows), and
``stream`` is a temporary one, unlinked when its block ends. The
pyshmem-compatible surface, with ``create``.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable
from typing import Any

from .. import _native
from ..common import _checks
from ._checks import check_cpu_open
from ._gpu import GPU
from .shared_memory import SharedMemory, create

__all__ = ["open", "stream", "unlink", "unlink_quiet"]


def open(
    name: str,
    *,
    gpu_device: str | int | bool | None = None,
    readonly: bool = False,
    allow_owner: int | str | Iterable[int | str] | None = None,
) -> SharedMemory:
    """Attach to the existing stream ``name`` (shape, dtype and contents
    come from it). ``readonly=True`` gives a handle that refuses writes,
    locks and unlink. Raises FileNotFoundError if it does not exist.
    Another user's stream is refused (SegmentOwnerError) unless that user
    is in ``allow_owner`` (a uid, a user name, or a collection of them) or
    in ``SHMSTREAM_ALLOW_OWNERS``. One made in another PID namespace opens
    (its lock, sleepers and creator are judged by lease); a GPU stream's
    device buffer maps only in its creator's (PidNamespaceError)."""
    _checks.check_name(name)
    readonly = _checks.check_bool("readonly", readonly)
    owners = _checks.check_allow_owner(allow_owner)
    try:
        segment = _native.Segment.open(name, _native.KIND_STREAM, readonly, owners)
    except FileNotFoundError:
        raise _checks.missing_name_error(name) from None
    if int(segment.flags) & _native.FLAG_GPU:  # CUDA streams: shmstream.gpu (registered)
        assert GPU.open is not None, "shmstream.gpu is imported with shmstream"
        return GPU.open(segment, name, gpu_device, readonly, owners)
    check_cpu_open(name, gpu_device)
    return SharedMemory(segment, readonly=readonly)


def unlink(name: str) -> None:
    """Destroy the object ``name`` (a stream, or any other kind, or any name
    ``shmstream list`` shows: a corrupt segment by its segment name); silent
    if it does not exist (``shmstream.registry.remove`` says whether it did)."""
    from .. import registry  # here: the registry imports every kind

    registry.remove(name)


#: pyshmem's name for :func:`unlink` in cleanup code (silent for a missing
#: name, as unlink is): the same function.
unlink_quiet = unlink


class _Stream:
    """Returned by :func:`stream`: creates on enter, unlinks on exit."""

    __slots__ = ("_name", "_options", "_handle")

    def __init__(self, name: str, options: dict[str, Any]) -> None:
        self._name = name
        self._options = options
        self._handle: SharedMemory | None = None

    def __enter__(self) -> SharedMemory:
        self._handle = create(self._name, **self._options, auto_unlink=True)
        return self._handle

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        handle, self._handle = self._handle, None
        if handle is not None:
            handle.unlink()


#: :func:`stream`'s signature: :func:`create`'s keywords (the one place they
#: are spelled), less ``auto_unlink``, which a temporary stream always has.
_STREAM_SIGNATURE = inspect.signature(create).replace(
    parameters=[
        p for p in inspect.signature(create).parameters.values() if p.name != "auto_unlink"
    ],
    return_annotation="_Stream",
)


def stream(name: str, **options: Any) -> _Stream:
    """``with shmstream.stream(name, shape=...) as shm:`` a temporary stream,
    unlinked when the block ends (normally or by an exception). The
    arguments are :func:`create`'s (``auto_unlink`` aside); a missing or
    unknown one is a TypeError here, as for create."""
    _STREAM_SIGNATURE.bind(name, **options)
    return _Stream(name, options)


stream.__signature__ = _STREAM_SIGNATURE  # type: ignore[attr-defined]  # help() and IDEs
