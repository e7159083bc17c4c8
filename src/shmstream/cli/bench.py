"""``shmstream bench``: run the benchmarks of a source checkout.

The benchmarks are not part of the installed package: they live in the
top-level ``benchmarks/`` folder of shmstream's source tree and run from a
checkout as ``python -m benchmarks [PART] [options]``. This command is a
shortcut for that: it looks for the checkout in the current directory and
its parents, and elsewhere says how to run them (exit status 2; 0 for
``shmstream bench --help``, whose answer that is).
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Sequence

from ._common import PROG

#: What ``shmstream bench`` prints outside a checkout.
NOT_IN_CHECKOUT = (
    f"{PROG} bench: the benchmarks are not installed with shmstream; they live in the\n"
    "benchmarks/ folder of its source tree. From a checkout of shmstream:\n"
    "\n"
    '    pip install ".[bench]"                # shmstream and the benchmarks\' peers\n'
    "    python -m benchmarks [PART] [options]  # or: shmstream bench [PART] [options]\n"
    "\n"
    "'python -m benchmarks --help' lists the parts; BENCHMARKS.md has the results."
)


def find_checkout(start: str | os.PathLike | None = None) -> str | None:
    """The shmstream source tree that holds ``start`` (default: the current
    directory): the nearest of it and its parents with ``pyproject.toml`` and
    ``benchmarks/__init__.py``; None if there is none."""
    here = os.path.abspath(os.fspath(start) if start is not None else os.getcwd())
    while True:
        if os.path.isfile(
            os.path.join(here, "benchmarks", "__init__.py")
        ) and _is_shmstream_project(os.path.join(here, "pyproject.toml")):
            return here
        parent = os.path.dirname(here)
        if parent == here:
            return None
        here = parent


def _is_shmstream_project(path: str) -> bool:
    try:
        with open(path, encoding="utf-8") as f:
            return any(line.strip() == 'name = "shmstream"' for line in f)
    except OSError:
        return False


def main(argv: Sequence[str]) -> int:
    """Run ``python -m benchmarks`` of the checkout around the current
    directory with ``argv``; 2 (and how to run them) outside one."""
    root = find_checkout()
    if root is None:
        if any(a in ("-h", "--help") for a in argv):
            print(NOT_IN_CHECKOUT)  # asked for help: this is it (exit 0, as every --help)
            return 0
        print(NOT_IN_CHECKOUT, file=sys.stderr)
        return 2
    if root not in sys.path:
        sys.path.insert(0, root)  # spawned benchmark workers inherit sys.path
    benchmarks = importlib.import_module("benchmarks")
    init = benchmarks.__file__  # None: a namespace package, not the checkout's
    found = None if init is None else os.path.dirname(os.path.abspath(init))
    if found != os.path.join(root, "benchmarks"):
        print(
            f"{PROG} bench: 'import benchmarks' finds {found}, not the checkout's "
            f"{os.path.join(root, 'benchmarks')}; run 'python -m benchmarks' in {root}",
            file=sys.stderr,
        )
        return 2
    return int(benchmarks.main(list(argv)) or 0)
