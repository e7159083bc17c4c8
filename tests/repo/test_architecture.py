"""docs/ARCHITECTURE.md is the map of the source tree and stays true: every
file and folder of the package, the binding, the public headers and the
core has a row there, and every row names a file that exists (issue 33:
"a map, kept true by a test")."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "ARCHITECTURE.md"
PKG = "src/shmstream/"


def _tracked(*folders: str) -> list[str]:
    out = subprocess.run(
        ["git", "ls-files", *folders], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    return [line for line in out.splitlines() if line]


def _named_in_first_column() -> set[str]:
    """Every `path` in the first cell of a table row of the page."""
    names = set()
    for line in DOC.read_text().splitlines():
        cells = line.split("|")
        if len(cells) > 2 and line.startswith("|"):
            names.update(re.findall(r"`([^`]+)`", cells[1]))
    return names


def _doc_name(path: str) -> set[str]:
    """The ways a row may name a tracked file: its path from the root, from
    the package, or from its own folder (the bindings' table)."""
    names = {path}
    if path.startswith(PKG):
        names.add(path[len(PKG) :])
    names.add(path.rsplit("/", 1)[-1] if path.startswith("src/bindings/") else path)
    return names


def _files() -> list[str]:
    if not (ROOT / ".git").exists():
        return []
    return _tracked("src/shmstream", "src/bindings", "src/core", "include")


def test_every_file_of_the_package_binding_and_core_has_a_row():
    assert _files(), "not a git checkout: the map is checked from a clone"
    named = _named_in_first_column()
    missing = [f for f in _files() if not (_doc_name(f) & named)]
    assert missing == [], "docs/ARCHITECTURE.md has no row for:\n" + "\n".join(missing)


def test_every_folder_of_the_package_has_a_row():
    named = _named_in_first_column()
    folders = sorted({str(Path(f).parent) + "/" for f in _files() if f.startswith(PKG)})
    missing = [d for d in folders if d not in named and d != PKG]
    assert missing == [], "docs/ARCHITECTURE.md's folder table lacks:\n" + "\n".join(missing)


def test_every_row_names_a_file_that_exists():
    known = set()
    for f in _files():
        known |= _doc_name(f)
    known |= {str(Path(f).parent) + "/" for f in _files()}
    top = {p.name + "/" for p in ROOT.iterdir()} | {p.name for p in ROOT.iterdir()}
    stale = sorted(
        n
        for n in _named_in_first_column()
        if "/" in n or "." in n
        if n not in known and n not in top and not (ROOT / n).exists()
    )
    assert stale == [], "docs/ARCHITECTURE.md names what is not in the tree:\n" + "\n".join(stale)


#: Folders of tests/ that are no folder of the package, and what each holds
#: (CONTRIBUTING.md, "Build and test").
TESTS_BESIDE_THE_PACKAGE = {
    "core": "the C core and its ABI (src/core/, include/)",
    "fuzz": "the fuzz harnesses and the replay of their corpora",
    "repo": "checks of the repository: lint, types, stubs, docs, layers, release, benchmarks",
}
#: Test modules still at the top of tests/: the pre-release compatibility
#: work of issue 45 deletes this one.
TESTS_AT_THE_TOP: set[str] = set()


def test_the_tests_mirror_the_package():
    tests = ROOT / "tests"
    kinds = {
        d.name
        for d in (ROOT / "src" / "shmstream").iterdir()
        if d.is_dir() and (d / "__init__.py").exists()
    }
    folders = {p.parent.name for p in tests.glob("*/test_*.py")}
    assert folders - kinds - set(TESTS_BESIDE_THE_PACKAGE) == set(), "a tests/ folder no kind has"
    assert kinds - folders == set(), "a folder of the package without tests/<kind>/"
    assert {p.name for p in tests.glob("test_*.py")} <= TESTS_AT_THE_TOP, (
        "a test module at tests/'s top: it goes in the folder of its kind"
    )
    assert not list(tests.glob("*/*/test_*.py")), "one level of folders"
