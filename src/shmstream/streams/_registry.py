"""The registry entry of streams (``stream`` and ``gpu-stream``): how to
recognise their segments and what ``stat`` says of one besides the keys
every kind has. Purge removes streams in use or not (pyshmem's meaning)."""

from __future__ import annotations

from typing import Any

from .. import _native
from ..common import _kinds
from ._gpu import GPU
from .publication import STATE_NAMES


def _recognise(header: Any) -> str | None:
    if int(header.kind) != _native.KIND_STREAM:
        return None
    return "gpu-stream" if int(header.flags) & _native.FLAG_GPU else "stream"


def _lock_owner_alive(header: Any, lock_owner: int) -> bool | None:
    """The lock holder is judged by its lease, in any PID namespace."""
    if not lock_owner:
        return None
    return {1: True, 0: False}.get(int(header.leases()[1]))


def _stat(header: Any, kind: str) -> dict[str, Any]:
    flags = int(header.flags)
    gpu = bool(flags & _native.FLAG_GPU)
    lock_owner = int(header.owner_pid)
    return {
        **_kinds.array_keys(header),
        "slots": int(header.slot_count),
        "history": int(header.history),
        "gpu_enabled": gpu,
        "gpu_device": GPU.stat_device(header) if gpu and GPU.stat_device else None,
        "cpu_mirror": not gpu or bool(flags & _native.FLAG_CPU_MIRROR),
        "notify": bool(flags & _native.FLAG_NOTIFY),
        "count": int(header.count),
        "write_sequence": int(header.seq),
        "write_time": header.write_time_ns / 1e9,
        "frame_id": int(header.frame_id),
        # What a read would find (a writer that died mid-write: abandoned),
        # not only the published word: stat changes nothing to learn it.
        "state": STATE_NAMES.get(int(header.read_state), int(header.read_state)),
        "lock_owner": lock_owner or None,
        "lock_owner_tid": int(header.owner_tid) or None,
        "lock_owner_alive": _lock_owner_alive(header, lock_owner),
        "lock_acquisitions": int(header.acquisitions),
        "waiters": int(header.waiters),
        "aborted_writes": int(header.aborted),
    }


_kinds.register(
    _kinds.Kind(
        names=("stream", "gpu-stream"), recognise=_recognise, stat=_stat, always_purged=True
    )
)
