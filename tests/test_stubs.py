"""The type stubs (.pyi) describe the compiled modules exactly: they are
what nanobind's stub generator produces from the built extensions, and mypy
accepts them."""
import importlib.util
import os
import subprocess
import sys

import pytest

import shmstream

MODULES = ["_native", "_direct", "_channel", "_cuda"]
PKG_DIR = os.path.dirname(os.path.abspath(shmstream.__file__))
SRC_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src", "shmstream")


@pytest.mark.parametrize("module", MODULES)
def test_stub_matches_the_compiled_module(module, tmp_path):
    if importlib.util.find_spec("nanobind.stubgen") is None:
        pytest.skip("nanobind is not installed (it is a build requirement only)")
    out = tmp_path / f"{module}.pyi"
    subprocess.run([sys.executable, "-m", "nanobind.stubgen", "-q", "-m",
                    f"shmstream.{module}", "-o", str(out)], check=True)
    committed = os.path.join(SRC_DIR, f"{module}.pyi")
    with open(committed) as f:
        assert f.read() == out.read_text(), (
            f"{committed} is out of date: regenerate it with "
            f"python -m nanobind.stubgen -m shmstream.{module} -o {committed}")


def test_mypy_accepts_the_stubs():
    if importlib.util.find_spec("mypy") is None:
        pytest.skip("mypy is not installed (pip install '.[test]')")
    stubs = [os.path.join(SRC_DIR, f"{m}.pyi") for m in MODULES]
    result = subprocess.run([sys.executable, "-m", "mypy", "--strict", *stubs],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
