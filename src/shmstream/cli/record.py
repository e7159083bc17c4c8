"""``shmstream record NAME -o DIR`` and ``shmstream replay DIR NAME``: a live
stream to disk and back (docs/history.md)."""

from __future__ import annotations

import argparse
import contextlib
import math
import sys
from collections.abc import Callable
from typing import Any

from ._common import PROG, fmt_rate, number, package, status_line
from ._progress import create_progress


def register(sub: Any) -> dict[str, Callable[[argparse.Namespace], int]]:
    rec_p = sub.add_parser(
        "record",
        help="record a stream's frames and metadata to a directory of .npy files "
        "(from its history when it has one, counting misses); Ctrl-C stops cleanly",
    )
    rec_p.add_argument("name", metavar="NAME", help="stream name")
    rec_p.add_argument(
        "-o",
        "--output",
        required=True,
        metavar="DIR",
        help="recording directory to create (frames.npy, counts.npy, "
        "frame_ids.npy, write_times_ns.npy, stream.json)",
    )
    stop = rec_p.add_mutually_exclusive_group()
    stop.add_argument(
        "--frames",
        type=number(minimum=1, above=False, kind=int),
        metavar="N",
        help="stop after N frames",
    )
    stop.add_argument("--seconds", type=number(), metavar="S", help="stop after S seconds")
    rec_p.add_argument(
        "--backlog",
        action="store_true",
        help="start with the frames the stream's history still holds (default: "
        "the frames published from now on)",
    )
    rec_p.add_argument("--overwrite", action="store_true", help="replace DIR if it is a recording")
    rec_p.add_argument(
        "--interval",
        type=number(),
        default=1.0,
        metavar="S",
        help="seconds between progress lines and file syncs (default 1)",
    )
    rec_p.add_argument("--quiet", action="store_true", help="no progress line")
    rec_p.add_argument(
        "--wait",
        type=number(above=False, infinite=True),
        nargs="?",
        const=math.inf,
        default=0.0,
        metavar="S",
        help="wait up to S seconds (no S: for ever) for NAME to be created, "
        "for a recorder started before its camera (default: NAME must exist)",
    )

    rep_p = sub.add_parser(
        "replay",
        help="publish a recording into a stream with its frame ids, counts and write "
        "times (created if missing), paced as recorded by default",
    )
    rep_p.add_argument("path", metavar="DIR", help="recording directory")
    rep_p.add_argument("name", metavar="NAME", help="stream name")
    pace = rep_p.add_mutually_exclusive_group()
    pace.add_argument(
        "--as-recorded",
        action="store_true",
        help="the recorded spacing of the write times (the default)",
    )
    pace.add_argument("--rate", type=number(), metavar="HZ", help="HZ frames per second")
    pace.add_argument("--fast", action="store_true", help="as fast as possible")
    rep_p.add_argument(
        "--renumber",
        action="store_true",
        help="publish with the stream's own counts (for a stream already past "
        "the recorded ones); frame ids and times are kept",
    )
    rep_p.add_argument(
        "--restamp",
        action="store_true",
        help="stamp the publication time instead of the recorded write time",
    )
    rep_p.add_argument(
        "--history",
        type=number(minimum=1, above=False, kind=int),
        metavar="N",
        help="history of a stream the replay creates (default: the recorded stream's)",
    )
    rep_p.add_argument("--quiet", action="store_true", help="no progress line")
    return {"record": cmd_record, "replay": cmd_replay}


def _line(what: str, frames: int, rate: float, extra: str) -> str:
    return f"{what}  frames {frames}  rate {fmt_rate(rate)}{extra}"


def cmd_record(args: argparse.Namespace) -> int:
    tty = sys.stdout.isatty()
    shown = []

    def progress(st: Any) -> None:
        status_line(
            _line(
                f"recording {args.name}",
                st.frames,
                st.rate,
                f"  missed {st.missed}  {st.seconds:.0f} s",
            ),
            tty,
        )
        shown.append(1)

    if args.wait and args.name not in package().list_streams():
        # record waits without a word otherwise: say so (a missing name is
        # the usual typo, and waiting for ever on it looks like a hang)
        print(
            f"{PROG} record: waiting "
            + ("for ever" if math.isinf(args.wait) else f"up to {args.wait:g} s")
            + f" for stream {args.name!r} to be created (Ctrl-C stops)",
            file=sys.stderr,
            flush=True,
        )
    st = package().record(
        args.name,
        args.output,
        frames=args.frames,
        seconds=args.seconds,
        since=0 if args.backlog else None,
        overwrite=args.overwrite,
        progress=None if args.quiet else progress,
        progress_interval=args.interval,
        handle_signals=True,
        wait=args.wait,
    )
    if tty and shown:
        sys.stdout.write("\n")
    print(
        f"recorded {st.frames} frames of {args.name!r} to {args.output} in {st.seconds:.1f} s "
        f"({fmt_rate(st.rate)}), missed {st.missed}"
        + (f" (stopped by {st.stopped_by})" if st.stopped_by in ("signal", "stop") else "")
    )
    return 0


def cmd_replay(args: argparse.Namespace) -> int:
    rate = math.inf if args.fast else args.rate
    tty = sys.stdout.isatty()
    shown = []

    def progress(st: Any) -> None:
        status_line(_line(f"replaying into {args.name}", st.frames, st.rate, ""), tty)
        shown.append(1)

    # a missing stream is created first: a large one shows its progress
    with contextlib.nullcontext() if args.quiet else create_progress(args.name, tty=tty):
        st = package().replay(
            args.path,
            args.name,
            rate=rate,
            renumber=args.renumber,
            restamp=args.restamp,
            history=args.history,
            progress=None if args.quiet else progress,
            handle_signals=True,
        )
    if tty and shown:
        sys.stdout.write("\n")
    print(
        f"replayed {st.frames} frames into {args.name!r} in {st.seconds:.1f} s "
        f"({fmt_rate(st.rate)})"
        + (
            f"; stream {args.name!r} was created and stays (shmstream unlink {args.name})"
            if st.created
            else ""
        )
        + (" (stopped by a signal)" if st.stopped_by == "signal" else "")
    )
    return 0
