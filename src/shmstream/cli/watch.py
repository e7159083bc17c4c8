"""``shmstream watch NAME``: follow a stream live (count, write rate, missed
writes, age, creator liveness)."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from typing import Any

from ..common import _kinds
from ._common import fmt_age, fmt_rate, number, package, status_line


def register(sub: Any) -> dict[str, Callable[[argparse.Namespace], int]]:
    watch_p = sub.add_parser(
        "watch",
        help="follow a stream live: count, write rate, missed writes, age, whether "
        "the stream's creator (not its writer) runs (Ctrl-C to stop)",
    )
    watch_p.add_argument("name", metavar="NAME", help="stream name")
    watch_p.add_argument(
        "--interval",
        type=number(),
        default=0.5,
        metavar="S",
        help="seconds between refreshes (default 0.5)",
    )
    watch_p.add_argument(
        "--count",
        type=number(kind=int),
        default=None,
        metavar="N",
        help="stop after N refreshes, N >= 1 (default: run until Ctrl-C)",
    )
    watch_p.add_argument(
        "--no-read",
        action="store_true",
        help="only sample the counters; do not consume frames (missed is then not measured)",
    )
    return {"watch": cmd_watch}


def cmd_watch(args: argparse.Namespace) -> int:
    pkg = package()
    # a stream, or (no stream of that name) milk's stream "milk:NAME"
    handle = _kinds.open_reader(args.name, lambda n: pkg.open(n, readonly=True))
    tty = sys.stdout.isatty()
    buf = None
    if not args.no_read:
        import numpy as np

        buf = np.empty(handle.shape, dtype=handle.dtype)
    refreshes = 0
    try:
        prev_count = handle.count
        prev_t = time.monotonic()
        missed_base = handle.total_missed_writes if buf is not None else 0
        seen = 0
        while True:
            deadline = prev_t + args.interval
            if buf is None:
                time.sleep(max(0.0, deadline - time.monotonic()))
            else:
                # Consume like a real reader until the refresh is due, so
                # "missed" says whether one Python consumer keeps up.
                while True:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        break
                    try:
                        handle.read_new(timeout=remaining, out=buf)
                    except TimeoutError:
                        break
                    except Exception as exc:  # aborted write etc.
                        if type(exc).__name__ == "InconsistentStreamError":
                            time.sleep(min(remaining, 0.01))
                            continue
                        raise
                    seen += 1
            now = time.monotonic()
            count = handle.count
            rate = (count - prev_count) / (now - prev_t) if now > prev_t else 0.0
            alive = handle.creator_alive()
            parts = [
                f"{args.name}",
                f"count {count}",
                f"rate {fmt_rate(rate)}",
            ]
            if buf is not None:
                parts.append(f"read {seen}")
                parts.append(f"missed {handle.total_missed_writes - missed_base}")
            parts.append(f"age {fmt_age(handle.age)}")
            parts.append(f"creator {'alive' if alive else 'dead'}")
            line = "  ".join(parts)
            status_line(line, tty)
            prev_count, prev_t = count, now
            refreshes += 1
            if args.count is not None and refreshes >= args.count:
                break
    except KeyboardInterrupt:
        pass
    finally:
        if tty and refreshes:
            sys.stdout.write("\n")
            sys.stdout.flush()
        handle.close()
    return 0
