"""The Python sources pass ruff with the project's configuration
([tool.ruff] in pyproject.toml): src, benchmarks, tests and tools, no
finding left. ruff comes with the test extra (pip install '.[test]')."""

import os
import re
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PATHS = ["src", "benchmarks", "tests", "tools"]
# The rule set changes between ruff's minor series; the pin in pyproject.toml
# ([project.optional-dependencies] test) is the series the code is clean for.
SERIES = (0, 17)


def _ruff() -> str | None:
    try:
        from ruff.__main__ import find_ruff_bin
    except ImportError:
        return shutil.which("ruff")
    try:
        return find_ruff_bin()
    except FileNotFoundError:
        return shutil.which("ruff")


def test_ruff_check_reports_nothing():
    ruff = _ruff()
    if ruff is None:
        pytest.skip("ruff is not installed (pip install '.[test]')")
    version = subprocess.run([ruff, "--version"], capture_output=True, text=True, check=True).stdout
    found = re.search(r"(\d+)\.(\d+)\.\d+", version)
    if found is None or (int(found[1]), int(found[2])) != SERIES:
        pytest.skip(f"{version.strip()} is not the pinned {SERIES[0]}.{SERIES[1]} series")
    proc = subprocess.run(
        [ruff, "check", "--no-cache", "--output-format", "concise", *PATHS],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, f"ruff check found problems:\n{proc.stdout}{proc.stderr}"
