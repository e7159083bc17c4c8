"""The page's table: every segment the registry knows, one row each, from
``registry.survey`` (what ``shmstream list`` prints) and ``registry.stat``
(what ``shmstream stat`` prints), plus the write rate measured between two
refreshes (what ``shmstream watch`` prints). Header reads only: nothing is
mapped or locked.
"""

from __future__ import annotations

import time
from typing import Any

from .. import registry

#: stat's keys shown in a row (the details panel shows all of them).
ROW_KEYS = (
    "shape",
    "dtype",
    "size",
    "count",
    "frame_id",
    "state",
    "history",
    "aborted_writes",
    "creator_pid",
    "creator_alive",
    "lock_owner",
    "lock_owner_alive",
    "capacity",
    "queued_bytes",
    "slot_files",
    "slot_bytes",
    "cpu_mirror",
)


class Table:
    """Rows for the page; keeps each stream's last count to measure its rate."""

    def __init__(self) -> None:
        self._last: dict[tuple[str, str], tuple[float, int, float]] = {}  # -> (t, count, rate)

    def rows(self) -> dict[str, Any]:
        entries, skipped = registry.survey()
        now_mono, now = time.monotonic(), time.time()
        rows = []
        seen = set()
        for e in entries:
            row: dict[str, Any] = {
                "kind": e.kind,
                "name": e.name,
                "shown": e.shown,
                "segment": e.segname,
                "bytes": e.bytes,
                "creator_pid": e.creator_pid,
                "creator_alive": e.creator_alive,
            }
            if e.name is not None and e.kind not in ("corrupt", "unfinished"):
                try:
                    info = registry.stat(e.name)
                except Exception as exc:  # noqa: BLE001 - gone or damaged since the scan: say so
                    row["error"] = f"{type(exc).__name__}: {exc}"
                    rows.append(row)
                    continue
                row.update({k: info[k] for k in ROW_KEYS if k in info})
                if "producer" in info:  # a channel's ends
                    row["ends"] = {
                        end: {"pid": info[end].get("pid"), "alive": info[end].get("alive")}
                        for end in ("producer", "consumer")
                    }
                if "count" in info:
                    key = (e.segname, info.get("instance_id", ""))
                    seen.add(key)
                    row["rate"] = self._rate(key, now_mono, int(info["count"]))
                    write_time = info.get("write_time") or 0.0
                    row["age"] = now - write_time if write_time else None
            rows.append(row)
        self._last = {k: v for k, v in self._last.items() if k in seen}
        return {
            "rows": rows,
            "skipped": [{"segment": s.segname, "reason": s.reason} for s in skipped],
        }

    def _rate(self, key: tuple[str, str], now: float, count: int) -> float | None:
        last = self._last.get(key)
        if last is None:
            self._last[key] = (now, count, 0.0)
            return None
        t0, c0, rate = last
        if now - t0 >= 0.5:  # refreshes closer than that keep the last rate
            rate = (count - c0) / (now - t0)
            self._last[key] = (now, count, rate)
        return rate


def details(name: str) -> dict[str, Any]:
    """Everything ``shmstream stat NAME`` prints, for the details panel."""
    return registry.readable(registry.stat(name))
