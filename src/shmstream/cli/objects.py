"""``shmstream list | stat | unlink | purge``: what lives in /dev/shm, built
on the registry (``shmstream.registry``)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any

from .. import registry
from ..bridge import cli as bridge_cli  # no zenoh import until it is used
from ..errors import ShmstreamOSError
from ..registry import KINDS, printable, readable, remove, survey
from ._common import PROG, fmt_bytes, one_line, package


def register(sub: Any) -> dict[str, Callable[[argparse.Namespace], int]]:
    list_p = sub.add_parser(
        "list",
        aliases=["ls"],
        help="list every shmstream object in /dev/shm: streams, GPU streams, channels, "
        "shared arrays, DataLoader slot pools, and the milk/CACAO streams of milk's directory "
        "($MILK_SHM_DIR or /milk/shm, when it exists) as kind milk, named milk:NAME "
        "(a table: KIND, SIZE, CREATOR, NAME; names with "
        "control characters or undecodable bytes escaped, as 'ls -b' does); entries that are "
        "not regular files or cannot be read are skipped, each named on stderr",
    )
    list_p.add_argument(
        "--kind", choices=KINDS, action="append", help="only this kind (repeatable)"
    )
    list_p.add_argument(
        "--names",
        action="store_true",
        help="print bare names, one per line (pyshmem's output; streams only "
        "unless --kind is given)",
    )
    list_p.add_argument("--json", action="store_true", help="print a JSON list of objects")
    bridge_cli.add_remote_arguments(list_p)  # --remote: what bridges export (Zenoh)

    stat_p = sub.add_parser(
        "stat", help="print an object's metadata, read from its header without attaching"
    )
    stat_p.add_argument(
        "name",
        metavar="NAME",
        help="name of a stream, channel, shared array, DataLoader slot pool or milk stream "
        "(milk:NAME), as 'shmstream list' shows it",
    )
    stat_p.add_argument(
        "--json",
        action="store_true",
        help="one JSON object, raw values (mode as an int, UNIX times)",
    )

    unlink_p = sub.add_parser(
        "unlink",
        aliases=["rm"],
        help="destroy objects by name; exit status 0 whether or not each existed "
        "(a missing name is reported on stderr), 1 for an invalid name or an entry it "
        "cannot remove (a directory: each is named on stderr, the other names are removed)",
    )
    unlink_p.add_argument(
        "names",
        nargs="+",
        metavar="NAME",
        help="names, as 'shmstream list' shows them (a corrupt segment by its /shmstream-... name)",
    )

    purge_p = sub.add_parser(
        "purge",
        help="'purge --abandoned' removes only what dead processes left (channels, shared "
        "arrays, DataLoader slot pools nobody uses; never a stream). Plain 'purge' removes "
        "EVERY STREAM you may remove, IN USE OR NOT, other jobs' too (pyshmem's purge), and "
        "the abandoned objects; it prints what was removed, and on stderr what was skipped "
        "and why (not a regular file, unreadable)",
    )
    purge_p.add_argument(
        "--abandoned",
        action="store_true",
        help="the safe choice: only what dead processes left, never a stream",
    )
    purge_p.add_argument(
        "--include-cuda-orphans",
        action="store_true",
        help="also remove PyTorch IPC files /dev/shm/cuda.shm.* whose process is dead",
    )
    return {
        "list": cmd_list,
        "ls": cmd_list,
        "stat": cmd_stat,
        "unlink": cmd_unlink,
        "rm": cmd_unlink,
        "purge": cmd_purge,
    }


def _report_skipped(skipped: list[registry.Skipped]) -> None:
    for s in skipped:
        print(f"{PROG}: skipped {printable(s.segname)}: {s.reason}", file=sys.stderr)


def cmd_list(args: argparse.Namespace) -> int:
    if getattr(args, "remote", False):
        return bridge_cli.print_remote(args)
    if args.names:
        kinds = args.kind or ["stream", "gpu-stream"]
        if kinds == ["stream", "gpu-stream"]:
            names = package().list_streams()
        else:
            found, skipped = survey(kinds)
            names = sorted(e.name for e in found if e.name is not None)
            _report_skipped(skipped)
        for name in names:
            print(printable(name))
        if not names:
            print("nothing found", file=sys.stderr)
        return 0
    entries, skipped = survey(args.kind)
    _report_skipped(skipped)
    if args.json:
        print(json.dumps([e.__dict__ for e in entries]))
        return 0
    if not entries:
        print(
            "nothing found" + (f" of kind {', '.join(args.kind)}" if args.kind else ""),
            file=sys.stderr,
        )
        return 0
    rows = [
        (
            e.kind,
            fmt_bytes(e.bytes),
            "-"
            if e.creator_pid is None
            else f"{e.creator_pid} ({'alive' if e.creator_alive else 'dead'})",
            e.shown,
        )
        for e in entries
    ]
    widths = [max(len(r[i]) for r in [*rows, ("KIND", "SIZE", "CREATOR", "")]) for i in range(3)]
    print(f"{'KIND':<{widths[0]}}  {'SIZE':>{widths[1]}}  {'CREATOR':<{widths[2]}}  NAME")
    for kind, size, creator, name in rows:
        print(f"{kind:<{widths[0]}}  {size:>{widths[1]}}  {creator:<{widths[2]}}  {name}")
    return 0


def _format_value(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return "(" + ", ".join(str(v) for v in value) + ("," if len(value) == 1 else "") + ")"
    if isinstance(value, dict):
        return ", ".join(f"{k} {v}" for k, v in value.items())
    return str(value)


def cmd_stat(args: argparse.Namespace) -> int:
    info = dict(package().stat(args.name))
    if args.json:
        print(json.dumps(info, default=str, sort_keys=False))
        return 0
    shown = readable(info)
    if shown.get("lock_owner") is not None:
        shown["lock_owner"] = (
            f"{shown['lock_owner']} ({'alive' if shown.get('lock_owner_alive') else 'dead'})"
        )
    shown.pop("lock_owner_alive", None)
    width = max((len(k) for k in shown), default=0) + 2
    for key, value in shown.items():
        print(f"{key + ':':<{width}}{printable(_format_value(value))}")
    return 0


def cmd_unlink(args: argparse.Namespace) -> int:
    status = 0
    for name in args.names:
        typed = printable(name, backslash=False)  # echoed as typed, control characters escaped
        try:
            removed = remove(name)
        except ShmstreamOSError as exc:  # e.g. a directory: the other names still go
            print(f"{PROG}: {one_line(exc)}", file=sys.stderr)
            status = 1
            continue
        if removed:
            print(f"unlinked '{typed}'")
        else:
            print(f"nothing named '{typed}' to unlink", file=sys.stderr)
    return status


def cmd_purge(args: argparse.Namespace) -> int:
    # Through the public function, looked up at call time (pyshmem's CLI
    # contract: a test may patch shmstream.purge with one returning a list).
    purge = package().purge
    if args.abandoned:
        result = purge(include_cuda_orphans=args.include_cuda_orphans, kinds=ABANDONABLE)
    else:
        result = purge(include_cuda_orphans=args.include_cuda_orphans)
    entries = getattr(result, "removed", None)
    shown = (e.shown for e in entries) if entries is not None else map(printable, result)
    removed = sorted(shown)
    for name in removed:
        print(f"purged '{name}'")
    orphans = list(getattr(result, "cuda_orphans", []))
    for name in orphans:
        print(f"purged CUDA IPC file '{printable(name)}'")
    _report_skipped(getattr(result, "skipped", []))
    count = len(removed) + len(orphans)
    print(f"removed {count} object(s)" if count else "nothing to purge", file=sys.stderr)
    if not args.abandoned and any(e.kind in ("stream", "gpu-stream") for e in entries or ()):
        print(
            f"{PROG}: purge removed streams in use or not (pyshmem's meaning); "
            f"'{PROG} purge --abandoned' removes only what dead processes left",
            file=sys.stderr,
        )
    _report_kept_in_use()
    return 0


#: What ``purge --abandoned`` removes: the kinds judged abandoned when nobody uses them.
ABANDONABLE = ("channel", "array", "loader-pool")


def _report_kept_in_use() -> None:
    """Objects whose creator is dead that purge kept, because live processes
    still use them: ``list`` shows them "(dead)", so say why they stay."""
    kept = [e for e in survey(ABANDONABLE)[0] if e.creator_alive is False]
    if kept:
        print(
            f"{PROG}: kept {len(kept)} object(s) whose creator is dead but that live processes "
            "still use (a channel while an end is open; a DataLoader's slot pool while its "
            "workers hold their leases, about 5 s after its parent died): "
            + ", ".join(e.shown for e in kept[:5])
            + (", ..." if len(kept) > 5 else "")
            + f"; '{PROG} purge' again once they are gone",
            file=sys.stderr,
        )
