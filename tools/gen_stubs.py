"""Regenerate the type stubs of the native modules (src/shmstream/_*.pyi).

    python tools/gen_stubs.py            # write them into src/shmstream/
    python tools/gen_stubs.py OUTDIR     # write them elsewhere (the test does)

The stubs are nanobind's stubgen output, plus the members that
shmstream/channel.py adds to ZeroCopyMessage in Python, which stubgen
cannot render (it emits a bare ``@property`` for them).
"""
from __future__ import annotations

import os
import subprocess
import sys

MODULES = ["_native", "_direct", "_channel", "_cuda"]
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# channel.py's additions to ZeroCopyMessage, in the order stubgen lists them.
_ZC_PYTHON_MEMBERS = [
    "    @property\n"
    "    def data(self) -> memoryview:\n"
    '        """The payload as a read-only memoryview (pins the ring bytes while alive)."""\n',
    "    @property\n"
    "    def array(self) -> object:\n"
    '        """The payload as a read-only ndarray view (uint8 for a bytes message)."""\n',
]


def _fix_python_members(text: str) -> str:
    broken = "    @property\n    @property\n"
    if broken in text:
        text = text.replace(broken, "\n".join(_ZC_PYTHON_MEMBERS) + "\n", 1)
    return text


def generate(outdir: str) -> list[str]:
    paths = []
    for module in MODULES:
        path = os.path.join(outdir, f"{module}.pyi")
        subprocess.run([sys.executable, "-m", "nanobind.stubgen", "-q", "-m",
                        f"shmstream.{module}", "-o", path], check=True)
        with open(path) as f:
            text = _fix_python_members(f.read())
        with open(path, "w") as f:
            f.write(text)
        paths.append(path)
    return paths


if __name__ == "__main__":
    target = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "src", "shmstream")
    for p in generate(target):
        print(p)
