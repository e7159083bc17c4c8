"""The sources pass the project's linters and formatters: ruff check and
ruff format ([tool.ruff] in pyproject.toml) over src, benchmarks, tests and
tools, clang-format (.clang-format) over every C and C++ file, and vulture
over the package (no dead code), with no finding left. ruff, clang-format
and vulture come with the test extra (pip install '.[test]')."""

import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import sysconfig

import pytest

import support

ROOT = support.ROOT
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


def test_python_sources_are_in_ruff_format_layout():
    """`ruff format` ([tool.ruff.format]) would change no file: the layout is
    the formatter's, so a diff shows only what a change means."""
    ruff = _ruff()
    if ruff is None:
        pytest.skip("ruff is not installed (pip install '.[test]')")
    proc = subprocess.run(
        [ruff, "format", "--no-cache", "--check", "--diff", *PATHS],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, (
        f"ruff format would change these files (run `ruff format {' '.join(PATHS)}`):\n"
        f"{proc.stdout[-4000:]}{proc.stderr}"
    )


# clang-format's output differs between major versions; the test extra pins
# the PyPI wheel of this one (clang-format==19.1.*), as Debian's clang-format-19.
CLANG_FORMAT_MAJOR = 19
C_DIRS = ["src/core", "src/bindings", "include", "examples", "tests", "benchmarks/c"]


def _clang_format() -> str | None:
    here = os.path.join(sysconfig.get_path("scripts"), "clang-format")
    for candidate in (here, shutil.which("clang-format"), shutil.which("clang-format-19")):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


def _c_sources() -> list[str]:
    found = []
    for d in C_DIRS:
        for dirpath, _dirs, files in os.walk(os.path.join(ROOT, d)):
            found += [
                os.path.relpath(os.path.join(dirpath, f), ROOT)
                for f in files
                if f.endswith((".c", ".h", ".cpp"))
            ]
    return sorted(found)


def test_c_sources_are_in_clang_format_layout():
    """clang-format (.clang-format) would change no C or C++ file."""
    tool = _clang_format()
    if tool is None:
        pytest.skip("clang-format is not installed (pip install '.[test]')")
    version = subprocess.run([tool, "--version"], capture_output=True, text=True, check=True).stdout
    found = re.search(r"version (\d+)\.", version)
    if found is None or int(found[1]) != CLANG_FORMAT_MAJOR:
        pytest.skip(f"{version.strip()} is not the pinned clang-format {CLANG_FORMAT_MAJOR}")
    sources = _c_sources()
    assert len(sources) > 40, sources  # the walk found the tree
    proc = subprocess.run(
        [tool, "--dry-run", "-Werror", "--style=file", *sources],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, (
        "clang-format would change these files (run `clang-format -i` on them, "
        f"see CONTRIBUTING.md):\n{proc.stderr[-4000:]}"
    )


# The version pinned in pyproject.toml's test extra: what it finds changes
# between releases.
VULTURE = "2.16"
#: What reads the package's names besides the package: its users. The
#: whitelist names what is used where vulture cannot see (a protocol hook).
VULTURE_USERS = ["tests", "benchmarks", "examples", "tools"]


def test_vulture_finds_no_dead_code_in_the_package():
    """Nothing in src/shmstream that nothing uses: vulture over the package
    and its users (a public name the tests or examples use is used), every
    finding of any confidence reported, tests/vulture_whitelist.py for the
    names only Python or a library calls. Remove what it finds, or add the
    name to the whitelist saying who uses it."""
    try:
        version = importlib.metadata.version("vulture")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("vulture is not installed (pip install '.[test]')")
    if version != VULTURE:
        pytest.skip(f"vulture {version} is not the pinned {VULTURE}")
    proc = subprocess.run(
        [sys.executable, "-m", "vulture", "src/shmstream", *VULTURE_USERS],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode in (0, 3), proc.stderr  # 3: it found something
    dead = [line for line in proc.stdout.splitlines() if line.startswith("src/")]
    assert not dead, "unused code in the package (remove it, or whitelist it):\n" + "\n".join(dead)
