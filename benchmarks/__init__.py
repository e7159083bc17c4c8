"""Benchmarks: ``python -m benchmarks [PART] [options]``, run from a checkout.

They live beside the library, not in it: ``pip install shmstream`` installs
none of this (``shmstream bench`` only says how to run them).
Peers: ``pip install "shmstream[bench]"``.

Each part is a module ``benchmarks.<part>`` with ``main(argv) -> int``;
a new module in this folder is a new part, with no registration. Modules whose
name starts with ``_`` are helpers, not parts. ``stream`` is the default part;
``all`` runs every part in turn with the same options.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
from collections.abc import Sequence

DEFAULT_PART = "stream"


#: Modules here that are tools, not parts (``python -m benchmarks.NAME``).
TOOLS = {"compare_builds", "plot"}


def known_parts() -> list[str]:
    """Names of the benchmark parts found in this package, sorted."""
    return sorted(
        m.name
        for m in pkgutil.iter_modules(__path__)
        if not m.name.startswith("_") and not m.ispkg and m.name not in TOOLS
    )


def _usage(parts: list[str]) -> str:
    return (
        "usage: python -m benchmarks [PART] [options]   (from a checkout)\n"
        f"parts: {', '.join(parts)}, all   (default: {DEFAULT_PART})\n"
        "'python -m benchmarks PART --help' shows a part's options."
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run one benchmark part (default ``stream``); returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parts = known_parts()
    if argv and argv[0] in ("-h", "--help", "help"):
        print(_usage(parts))
        return 0
    if not argv or argv[0].startswith("-"):
        part, rest = DEFAULT_PART, argv
    else:
        part, rest = argv[0], argv[1:]
    if part == "all":
        status = 0
        for name in parts:
            print(f"== python -m benchmarks {name} ==", file=sys.stderr)
            status = max(status, _run(name, rest))
        return status
    if part not in parts:
        print(
            f"python -m benchmarks: error: unknown part {part!r}; known parts: "
            f"{', '.join(parts)}, all",
            file=sys.stderr,
        )
        return 2
    return _run(part, rest)


def _run(part: str, argv: list[str]) -> int:
    module = importlib.import_module(f"{__name__}.{part}")
    try:
        return int(module.main(list(argv)) or 0)
    except SystemExit as exc:  # a part's argparse --help or usage error
        return int(exc.code or 0)
