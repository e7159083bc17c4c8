"""The ``shmstream`` command: list, inspect, watch, remove and measure what
shmstream keeps in shared memory.

``main(argv) -> int`` is the console script. Each subcommand lives in its
own module and registers its parser here; every library call looks its
function up on the package at call time (``package().purge``), so tests can
monkeypatch it. Errors print one line to stderr and return 1 (argparse's
usage errors return 2); nothing here prints a traceback for a user mistake.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence

from . import bridge, demo, objects, record, view, watch
from ._common import PROG, USER_ERRORS, error, one_line, package

#: Modules that add subcommands: each has register(subparsers) -> {name: handler}.
_COMMAND_MODULES = (objects, watch, view, record, demo, bridge)


def _build_parser() -> tuple[argparse.ArgumentParser, dict[str, Callable[..., int]]]:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Inspect, watch, record, replay and remove shmstream's "
        "shared-memory objects (streams, channels, shared arrays, loader slots).",
        epilog="Examples: 'shmstream list', 'shmstream watch cam/left', "
        "'shmstream view cam/left', 'shmstream demo --seconds 3'.",
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {package().__version__}")
    sub = parser.add_subparsers(dest="command", metavar="command")
    commands: dict[str, Callable[..., int]] = {}
    for module in _COMMAND_MODULES:
        commands.update(module.register(sub))
    bench_p = sub.add_parser(
        "bench",
        help="say how to run the benchmarks (python -m benchmarks, from a source "
        "checkout: they are not installed)",
        add_help=False,
    )
    bench_p.add_argument("args", nargs=argparse.REMAINDER, help="PART [options]")
    return parser, commands


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``shmstream`` command line; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "bench":
        from . import bench

        return bench.main(argv[1:])
    parser, commands = _build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse: --help/--version (0) or a usage error (2)
        return int(exc.code or 0)
    command = commands.get(args.command or "")
    if command is None:
        parser.print_help()
        return 1
    try:
        status = command(args)
        sys.stdout.flush()  # here, not at exit: a closed pipe is seen below
        return status
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return _stdout_closed()
    except USER_ERRORS as exc:
        error(one_line(exc))
        return 1


#: The status of a command whose reader closed its standard output: what a
#: shell shows for a Unix tool that SIGPIPE ended (128 + 13).
STDOUT_CLOSED = 141


def _stdout_closed() -> int:
    """The reader of standard output went away (``shmstream list | head
    -1``): end quietly, as other Unix tools do. What is still buffered goes
    to /dev/null, so the flush at exit does not fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # not a file descriptor (tests)
        pass
    return STDOUT_CLOSED


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
