"""The code and its documentation say the same thing.

* Every ``SYNC POINT (label)`` in the code is defined in docs/ABI.md's
  "SYNC POINT labels" table, every label there is used in the code, and
  each label marks one place (the documented pairs mark two).
* No comment or document names a path under src/, include/, tests/,
  docs/, examples/, tools/ or benchmarks/ that does not exist, and no link
  of a Markdown page points at a missing file.
* Every ``shmstream.x`` name a comment or document gives is importable or
  an attribute of what it names (``DOTTED_ALLOWED`` lists the few that are
  not on purpose, each with its reason).
"""

from __future__ import annotations

import collections
import glob
import importlib
import os
import re

import support

ROOT = support.ROOT

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
SCANNED = [
    "src",
    "include",
    "tests",
    "docs",
    "examples",
    "tools",
    "benchmarks",
    "README.md",
    "CONTRIBUTING.md",
    "BENCHMARKS.md",
]
SUFFIXES = (".c", ".h", ".cpp", ".py", ".pyi", ".md", ".txt", ".toml")
#: Paths named on purpose that are not in this repository (another project's).
EXTERNAL = {"include/dlpack/dlpack.h"}  # dmlc/dlpack, vendored in src/bindings/_dlpack.h

_REPO_PATH = re.compile(
    r"(?<![\w/.-])((?:src|include|tests|docs|examples|tools|benchmarks)/[\w./*-]*[\w*/])"
)
#: A placeholder in a path (``benchmarks/results/DATE-MACHINE-PART.json``).
_PLACEHOLDER = re.compile(r"\b(?:DATE|MACHINE|PART|COMMIT|NAME)\b")
#: What may precede a path that is not this tree's: an older commit's file
#: (``git show e2e106b:benchmarks/x.py``) or a file a command will write
#: (``--json benchmarks/results/x.json``).
_NOT_THIS_TREE = re.compile(r"(?:\b[0-9a-f]{7,40}:|--(?:json|out)[ =])$")
#: A Markdown link's target: ``[text](target)``.
_MD_LINK = re.compile(r"\]\(([^()\s]+)\)")
_PACKAGE_PATH = re.compile(r"(?<![\w/.-])(shmstream/[\w/]+\.py)\b")
#: A path from the package's root, as docs/ARCHITECTURE.md writes them
#: (``streams/_checks.py``): a folder of the package, then a module.
_FOLDER_PATH = re.compile(
    r"(?<![\w/.-])((?:"
    + "|".join(
        sorted(
            d.name
            for d in os.scandir(os.path.join(ROOT, "src", "shmstream"))
            if d.is_dir() and not d.name.startswith("_")
        )
    )
    + r")/[\w/]+\.py)\b"
)


def _scanned_files() -> list[str]:
    out = []
    results = os.path.join("benchmarks", "results")
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
                # raw benchmark output is data, not a document; its log is one
                and (os.path.relpath(dirpath, ROOT) != results or f.endswith(".md"))
            ]
    return sorted(out)


def _exists(path: str) -> bool:
    return bool(glob.glob(os.path.join(ROOT, path.rstrip("/"))))


def named_paths_missing() -> list[str]:
    missing = []
    for rel in _scanned_files():
        if rel == "tests/repo/test_docs_sync.py":
            continue  # names missing paths on purpose, to test the check
        for i, line in enumerate(_read(rel).splitlines(), 1):
            for m in _REPO_PATH.finditer(line):
                path = m.group(1).rstrip(".")
                if _NOT_THIS_TREE.search(line[: m.start()]) or _PLACEHOLDER.search(path):
                    continue
                if path not in EXTERNAL and not _exists(path):
                    missing.append(f"{rel}:{i}: {path}")
            if rel.endswith(".md"):
                for m in _MD_LINK.finditer(line):
                    target = m.group(1).split("#")[0]
                    if not target or re.match(r"[a-z]+:", target):
                        continue  # an anchor of the page, or a URL
                    if not os.path.exists(os.path.join(ROOT, os.path.dirname(rel), target)):
                        missing.append(f"{rel}:{i}: link {target}")
            for m in _PACKAGE_PATH.finditer(line):
                if not _exists("src/" + m.group(1)):
                    missing.append(f"{rel}:{i}: {m.group(1)}")
            for m in _FOLDER_PATH.finditer(line):
                if not _exists("src/shmstream/" + m.group(1)) and not _exists(m.group(1)):
                    missing.append(f"{rel}:{i}: {m.group(1)}")
    return missing


def test_no_comment_or_document_names_a_missing_path():
    assert named_paths_missing() == []


#: A path on the developers' machines, outside any checkout.
_OUTSIDE = re.compile(r"(?<![\w/.-])/work/[\w./-]+")


def test_no_comment_or_document_cites_a_file_outside_the_repository():
    found = [
        f"{rel}:{i}: {m.group(0)}"
        for rel in _scanned_files()
        if rel not in HISTORY and rel != "tests/repo/test_docs_sync.py"
        for i, line in enumerate(_read(rel).splitlines(), 1)
        for m in _OUTSIDE.finditer(line)
    ]
    assert found == [], "cite the repository's own document (docs/API.md, ...)"


def test_the_path_check_sees_a_missing_path():
    assert _exists("src/core/*.c") and _exists("src/core/") and not _exists("src/core/lock.c")
    assert _REPO_PATH.search("see src/core/lock.c, the lock").group(1) == "src/core/lock.c"
    assert _PACKAGE_PATH.search("by shmstream/cli.py. Importing").group(1) == "shmstream/cli.py"
    assert _FOLDER_PATH.search("in loader/_pool.py, the").group(1) == "loader/_pool.py"
    assert not _FOLDER_PATH.search("tests/loader/x.py") and not _exists(
        "src/shmstream/loader/_pool.py"
    )
    assert _NOT_THIS_TREE.search("git show e2e106b:") and _NOT_THIS_TREE.search("cmd --json ")
    assert not _NOT_THIS_TREE.search("see ")
    assert _MD_LINK.findall("[log](benchmarks/results/LOG.md#x) and [a](#b)") == [
        "benchmarks/results/LOG.md#x",
        "#b",
    ]


# ---- no stale shmstream.x names --------------------------------------------------

#: ``shmstream.x`` names in comments and documents that are not importable,
#: on purpose. Every entry says why.
DOTTED_ALLOWED = {
    # the benchmarks' old home inside the package: tests/repo/test_bench.py checks
    # that it is gone
    "shmstream.bench",
    # placeholders in prose and in test_layers' made-up sources ("shmstream.x",
    # "shmstream._native.x"), and the made-up module those sources import
    "shmstream.x",
    "shmstream._native.x",
    "shmstream.loader._pool",
    # old module paths that raise naming their new place (common/_moved.py;
    # tests/test_old_paths.py checks that they raise), and a made-up name
    # that test imports to see it plainly missing
    "shmstream._loader_pool",
    "shmstream._npyfile",
    "shmstream.nothing",
}
#: Documents of history, which name what was: the changelog and the
#: benchmarks' results log.
HISTORY = {"CHANGELOG.md", "benchmarks/results/LOG.md"}
#: ``shmstream.`` followed by a name: not after a word character, a dot, a
#: slash or a hyphen (``libshmstream.so``, ``include/shmstream.h``), and not
#: before a hyphen (``shmstream.loader-<token>``, a file name's prefix).
_DOTTED = re.compile(r"(?<![\w./-])shmstream((?:\.[A-Za-z_]\w*)+)(?![\w-])")
#: Last parts that make a file name, not a Python name.
_FILE_SUFFIXES = {"h", "c", "cpp", "py", "pyi", "so", "md", "json", "txt", "toml", "egg"}


def _resolves(dotted: str) -> bool:
    """Whether ``shmstream.a.b.c`` names a module, or an attribute of the
    longest module prefix that imports."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            if not hasattr(obj, name):
                return False
            obj = getattr(obj, name)
        return True
    return False


def dotted_names_missing() -> list[str]:
    missing = []
    seen: dict[str, bool] = {}
    for rel in _scanned_files():
        if rel in HISTORY or rel == "tests/repo/test_docs_sync.py":
            continue
        for i, line in enumerate(_read(rel).splitlines(), 1):
            for m in _DOTTED.finditer(line):
                dotted = "shmstream" + m.group(1)
                if dotted.rsplit(".", 1)[1] in _FILE_SUFFIXES:
                    continue
                if any(dotted == a or dotted.startswith(a + ".") for a in DOTTED_ALLOWED):
                    continue
                if dotted not in seen:
                    seen[dotted] = _resolves(dotted)
                if not seen[dotted]:
                    missing.append(f"{rel}:{i}: {dotted}")
    return missing


def test_no_comment_or_document_names_a_missing_shmstream_name():
    assert dotted_names_missing() == []


def test_the_name_check_sees_a_missing_name():
    assert _resolves("shmstream.create") and _resolves("shmstream.errors.ShmstreamError")
    assert not _resolves("shmstream.no_such_name") and not _resolves("shmstream._owners")
    assert [
        m.group(1) for m in _DOTTED.finditer("shmstream.torch.DataLoader, libshmstream.so")
    ] == [".torch.DataLoader"]
