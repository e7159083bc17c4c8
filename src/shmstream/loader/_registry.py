"""The registry entry of a DataLoader's slot pool: its root (an array
segment flagged as a loader pool) and its slot files
(``shmstream.loader-<token>.*``, plain files without a header, counted in
the pool's size; docs/loader.md). Purge removes a dead loader's root and
files together. No torch here."""

from __future__ import annotations

import os
from typing import Any

from .. import _native
from ..common import _kinds
from . import _loader_pool


def _recognise(header: Any) -> str | None:
    if int(header.kind) == _native.KIND_ARRAY and int(header.flags) & _native.FLAG_LOADER_POOL:
        return "loader-pool"
    return None


def _files(root: str) -> list[str]:
    token = root[len(_loader_pool.ROOT_PREFIX) :]
    return _loader_pool.list_slot_files(token).get(token, [])


def _in_use(name: str, segname: str) -> bool:
    """Does any handle hold a lease on the root (its loader's or a
    worker's)? Right from any PID namespace (docs/ABI.md, "Loader pool by
    lease")."""
    try:
        seg = _native.Segment.peek(segname)
    except Exception:  # noqa: BLE001 - gone or unreadable: nobody uses it through us
        return False
    return int(seg.leases()[2]) != 0


def _stat(header: Any, kind: str) -> dict[str, Any]:
    files = _files(header.name)
    sizes = 0
    for path in files:
        try:
            sizes += os.lstat(path).st_size
        except OSError:
            pass  # vanished meanwhile
    return {**_kinds.array_keys(header), "slot_files": len(files), "slot_bytes": sizes}


_kinds.register(
    _kinds.Kind(
        names=("loader-pool",),
        recognise=_recognise,
        stat=_stat,
        extra_files=_files,
        file_prefix=_loader_pool.SLOT_FILE_PREFIX,
        purge_dead=_loader_pool.purge_dead_loader_pools,
        in_use=_in_use,
    )
)
