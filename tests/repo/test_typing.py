"""The package is typed (PEP 561: the wheel ships py.typed) and mypy,
configured in pyproject.toml ([tool.mypy]), finds no error in it or in the
benchmarks."""

import importlib.util
import os
import subprocess
import sys

import pytest

import shmstream

import support

ROOT = support.ROOT


def test_the_installed_package_has_the_py_typed_marker():
    pkg = os.path.dirname(os.path.abspath(shmstream.__file__))
    assert os.path.isfile(os.path.join(pkg, "py.typed")), pkg


def test_mypy_finds_no_error_in_the_package_or_the_benchmarks():
    if importlib.util.find_spec("mypy") is None:
        pytest.skip("mypy is not installed (pip install '.[test]')")
    # From the checkout, with its config: the files, the Python version and
    # the overrides all come from pyproject.toml.
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--config-file",
            os.path.join(ROOT, "pyproject.toml"),
            "--no-incremental",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Success: no issues found" in result.stdout, result.stdout
