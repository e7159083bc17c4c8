"""``shmstream bench``: says how to run the benchmarks.

The benchmarks are not part of the installed package: they live in the
top-level ``benchmarks/`` folder of shmstream's source tree and run from a
checkout as ``python -m benchmarks [PART] [options]``. The installed library
never needs a checkout, so this command imports nothing from one: it prints
how to run them (exit status 2; 0 for ``shmstream bench --help``, whose
answer that is).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from ._common import PROG

#: What ``shmstream bench`` prints.
HOW_TO_RUN = (
    f"{PROG} bench: the benchmarks are not installed with shmstream; they live in the\n"
    "benchmarks/ folder of its source tree. From a checkout of shmstream:\n"
    "\n"
    '    pip install ".[bench]"                # shmstream and the benchmarks\' peers\n'
    "    python -m benchmarks [PART] [options]  # at the checkout's root\n"
    "\n"
    "'python -m benchmarks --help' lists the parts; BENCHMARKS.md has the results."
)


def main(argv: Sequence[str]) -> int:
    """Print how to run the benchmarks: 0 when asked for help, else 2."""
    if any(a in ("-h", "--help") for a in argv):
        print(HOW_TO_RUN)  # asked for help: this is it (exit 0, as every --help)
        return 0
    print(HOW_TO_RUN, file=sys.stderr)
    return 2
