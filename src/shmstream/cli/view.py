"""``shmstream view [NAME | DIR]``: the live web view (``shmstream.viewer``,
docs/view.md)."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from typing import Any

from ..viewer import DEFAULT_FPS, DEFAULT_MAX_SOCKETS
from ._common import number


def register(sub: Any) -> dict[str, Callable[[argparse.Namespace], int]]:
    about = (
        "serve a local web page that lists every segment live and shows a stream's "
        "picture (or plays back a recording directory); prints the URL, whose token lets "
        "only you in (needs the 'view' extra: pip install \".[view]\" from a checkout, "
        'pip install "shmstream[view]" once released)'
    )
    view_p = sub.add_parser("view", help=about, description=about)
    view_p.add_argument(
        "target",
        nargs="?",
        metavar="NAME|DIR",
        help="a stream to show at once (waited for if it does not exist yet), or a "
        "recording directory to play back",
    )
    view_p.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (default 127.0.0.1: this machine only; "
        "reach it from elsewhere with 'ssh -L PORT:127.0.0.1:PORT host')",
    )
    view_p.add_argument(
        "--port",
        type=number(above=False, kind=int),
        default=0,
        help="port to listen on (default 0: a free one)",
    )
    view_p.add_argument(
        "--fps",
        type=number(),
        default=DEFAULT_FPS,
        help=f"pictures a second sent to each page, at most (default {DEFAULT_FPS:g})",
    )
    view_p.add_argument(
        "--max-side",
        type=number(minimum=16, above=False, kind=int),
        default=1024,
        metavar="PX",
        help="image sides longer than this are strided down (default 1024)",
    )
    view_p.add_argument(
        "--max-sockets",
        type=number(minimum=1, above=False, kind=int),
        default=DEFAULT_MAX_SOCKETS,
        metavar="N",
        help=f"pages served pictures at once, at most (default {DEFAULT_MAX_SOCKETS}); "
        "one more is told the viewer is busy",
    )
    view_p.add_argument("--open", action="store_true", help="open the page in a browser")
    return {"view": cmd_view}


def cmd_view(args: argparse.Namespace) -> int:
    from ..viewer import view

    target = args.target
    is_dir = target is not None and os.path.isdir(target)
    view(
        None if is_dir else target,
        recording=target if is_dir else None,
        host=args.host,
        port=args.port,
        fps=args.fps,
        max_side=args.max_side,
        max_sockets=args.max_sockets,
        open_browser=args.open,
    )
    return 0
