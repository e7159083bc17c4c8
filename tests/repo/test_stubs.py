"""The type stubs (.pyi) describe the compiled modules exactly: they are
what tools/gen_stubs.py (nanobind's stub generator plus the members
channel.py adds in Python) produces from the built extensions, and mypy
accepts them."""

import importlib.util
import os
import subprocess
import sys

import pytest

import shmstream

import support

MODULES = ["_native", "_direct", "_channel", "_cuda", "_milk"]
PKG_DIR = os.path.dirname(os.path.abspath(shmstream.__file__))
SRC_DIR = os.path.join(support.ROOT, "src", "shmstream")


ROOT = support.ROOT


def test_stubs_match_the_compiled_modules(tmp_path):
    if importlib.util.find_spec("nanobind.stubgen") is None:
        pytest.skip("nanobind is not installed (pip install '.[test]')")
    subprocess.run(
        [sys.executable, os.path.join(ROOT, "tools", "gen_stubs.py"), str(tmp_path)],
        check=True,
        capture_output=True,
    )
    stale = []
    for module in MODULES:
        with open(os.path.join(SRC_DIR, f"{module}.pyi")) as f:
            if f.read() != (tmp_path / f"{module}.pyi").read_text():
                stale.append(module)
    assert not stale, f"stubs out of date for {stale}: run python tools/gen_stubs.py"


def test_mypy_accepts_the_stubs():
    if importlib.util.find_spec("mypy") is None:
        pytest.skip("mypy is not installed (pip install '.[test]')")
    stubs = [os.path.join(SRC_DIR, f"{m}.pyi") for m in MODULES]
    # Only the stubs are checked, not the package modules they import.
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--follow-imports=silent", *stubs],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
