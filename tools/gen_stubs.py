"""Regenerate the type stubs of the native modules (src/shmstream/_*.pyi).

    python tools/gen_stubs.py            # write them into src/shmstream/
    python tools/gen_stubs.py OUTDIR     # write them elsewhere (the test does)

The stubs are nanobind's stubgen output as it is: every member is defined
in the binding, so there is nothing to patch.
"""

from __future__ import annotations

import os
import subprocess
import sys

# shmstream._testhooks has no stub: only the suite imports it, and the
# release wheel does not carry it.
MODULES = ["_native", "_direct", "_channel", "_cuda", "_milk"]
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def generate(outdir: str) -> list[str]:
    paths = []
    for module in MODULES:
        path = os.path.join(outdir, f"{module}.pyi")
        subprocess.run(
            [
                sys.executable,
                "-m",
                "nanobind.stubgen",
                "-q",
                "-m",
                f"shmstream.{module}",
                "-o",
                path,
            ],
            check=True,
        )
        paths.append(path)
    return paths


if __name__ == "__main__":
    target = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "src", "shmstream")
    for p in generate(target):
        print(p)
