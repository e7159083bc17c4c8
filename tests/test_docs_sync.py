"""The code and its documentation say the same thing.

* Every ``SYNC POINT (label)`` in the code is defined in docs/ABI.md's
  "SYNC POINT labels" table, every label there is used in the code, and
  each label marks one place (the documented pairs mark two).
* No comment or document names a path under src/, include/, tests/ or
  docs/ that does not exist.
"""

from __future__ import annotations

import collections
import glob
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Labels that mark both sides of one pairing (docs/ABI.md says so).
PAIRS = {"c": 2, "m": 2}

_LABEL = re.compile(r"SYNC POINT (?:\(([^)]+)\)|([a-z][a-z0-9-]*[a-z0-9]))")


def _read(rel: str) -> str:
    with open(os.path.join(ROOT, rel), encoding="utf-8") as f:
        return f.read()


def _code_files() -> list[str]:
    pats = [
        "src/core/*.c",
        "src/core/*.h",
        "include/*.h",
        "src/bindings/*.cpp",
        "src/bindings/*.h",
        "src/shmstream/**/*.py",
    ]
    out: set[str] = set()
    for p in pats:
        out.update(
            os.path.relpath(f, ROOT) for f in glob.glob(os.path.join(ROOT, p), recursive=True)
        )
    return sorted(out)


def code_labels() -> dict[str, list[str]]:
    where: dict[str, list[str]] = collections.defaultdict(list)
    for rel in _code_files():
        for i, line in enumerate(_read(rel).splitlines(), 1):
            for m in _LABEL.finditer(line):
                where[m.group(1) or m.group(2)].append(f"{rel}:{i}")
    return where


def documented_labels() -> list[str]:
    text = _read("docs/ABI.md")
    section = text[text.index("\n## SYNC POINT labels") :]
    section = section[: section.index("\n## ", 1)]
    return re.findall(r"^\| \(([^)]+)\) \|", section, flags=re.M)


def test_every_sync_point_label_is_documented_and_used():
    documented = documented_labels()
    assert len(documented) == len(set(documented)), "a label is defined twice in docs/ABI.md"
    used = code_labels()
    assert set(used) - set(documented) == set(), "labels in the code, not in docs/ABI.md"
    assert set(documented) - set(used) == set(), "labels in docs/ABI.md, not in the code"


def test_each_sync_point_label_marks_one_place():
    many = {
        label: places
        for label, places in code_labels().items()
        if len(places) != PAIRS.get(label, 1)
    }
    assert not many, f"labels used at more places than documented: {many}"


# ---- no stale paths -------------------------------------------------------------

#: Where comments and documents are read.
SCANNED = ["src", "include", "tests", "docs", "examples", "tools", "README.md", "BENCHMARKS.md"]
SUFFIXES = (".c", ".h", ".cpp", ".py", ".pyi", ".md", ".txt", ".toml")
#: Paths named on purpose that are not in this repository (another project's).
EXTERNAL = {"include/dlpack/dlpack.h"}  # dmlc/dlpack, vendored in src/bindings/_dlpack.h

_REPO_PATH = re.compile(r"(?<![\w/.-])((?:src|include|tests|docs|examples|tools)/[\w./*-]*[\w*/])")
_PACKAGE_PATH = re.compile(r"(?<![\w/.-])(shmstream/[\w/]+\.py)\b")


def _scanned_files() -> list[str]:
    out = []
    for top in SCANNED:
        path = os.path.join(ROOT, top)
        if os.path.isfile(path):
            out.append(top)
            continue
        for dirpath, dirnames, filenames in os.walk(path):
            dirnames[:] = [d for d in dirnames if d != "__pycache__" and not d.startswith(".")]
            out += [
                os.path.relpath(os.path.join(dirpath, f), ROOT)
                for f in filenames
                if f.endswith(SUFFIXES)
            ]
    return sorted(out)


def _exists(path: str) -> bool:
    return bool(glob.glob(os.path.join(ROOT, path.rstrip("/"))))


def named_paths_missing() -> list[str]:
    missing = []
    for rel in _scanned_files():
        if rel == "tests/test_docs_sync.py":
            continue  # names missing paths on purpose, to test the check
        for i, line in enumerate(_read(rel).splitlines(), 1):
            for m in _REPO_PATH.finditer(line):
                path = m.group(1).rstrip(".")
                if path not in EXTERNAL and not _exists(path):
                    missing.append(f"{rel}:{i}: {path}")
            for m in _PACKAGE_PATH.finditer(line):
                if not _exists("src/" + m.group(1)):
                    missing.append(f"{rel}:{i}: {m.group(1)}")
    return missing


def test_no_comment_or_document_names_a_missing_path():
    assert named_paths_missing() == []


def test_the_path_check_sees_a_missing_path():
    assert _exists("src/core/*.c") and _exists("src/core/") and not _exists("src/core/lock.c")
    assert _REPO_PATH.search("see src/core/lock.c, the lock").group(1) == "src/core/lock.c"
    assert _PACKAGE_PATH.search("by shmstream/cli.py. Importing").group(1) == "shmstream/cli.py"
