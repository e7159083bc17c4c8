"""The registry entry of shared arrays: an array segment (not a loader
pool's root, which the loader registers); abandoned when its creator is
dead."""

from __future__ import annotations

from typing import Any

from .. import _native
from ..common import _kinds


def _recognise(header: Any) -> str | None:
    if int(header.kind) != _native.KIND_ARRAY or int(header.flags) & _native.FLAG_LOADER_POOL:
        return None
    return "array"  # the header says so: a user's array named "loader-x" stays an array


def _stat(header: Any, kind: str) -> dict[str, Any]:
    return _kinds.array_keys(header)


_kinds.register(_kinds.Kind(names=("array",), recognise=_recognise, stat=_stat))
