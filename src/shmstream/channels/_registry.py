"""The registry entry of channels: how to recognise their segments, what
``stat`` says of one (its ring and its two ends), and whether a channel
whose creator died is still in use (a live process holds either end)."""

from __future__ import annotations

from typing import Any

from .. import _native
from ..common import _kinds
from .ends import stat_of_segment


def _recognise(header: Any) -> str | None:
    return "channel" if int(header.kind) == _native.KIND_CHANNEL else None


def _stat(header: Any, kind: str) -> dict[str, Any]:
    d = stat_of_segment(header.name, header.segname)
    d.pop("name", None)
    return d


def _in_use(name: str, segname: str) -> bool:
    try:
        d = stat_of_segment(name, segname)
    except Exception:  # noqa: BLE001 - vanished or corrupt meanwhile: leave it
        return True
    return bool(d["producer"]["alive"] or d["consumer"]["alive"])


_kinds.register(_kinds.Kind(names=("channel",), recognise=_recognise, stat=_stat, in_use=_in_use))
