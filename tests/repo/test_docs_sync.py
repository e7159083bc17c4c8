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
* Every bare file name (``channel.py``, ``_binding.h``) a document, comment
  or docstring gives is a file of this repository, and every backticked
  code name (``read_new``, ``ss_publish()``) one the code defines or uses;
  ``EXTERNAL_FILES`` and ``EXTERNAL_NAMES`` list other projects' names,
  each with its reason.
"""

from __future__ import annotations

import collections
import functools
import glob
import importlib
import io
import os
import re
import subprocess
import tokenize

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
SUFFIXES = (".c", ".h", ".cpp", ".py", ".pyi", ".md", ".txt", ".toml", ".sh")
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


# ---- docs send users to public names only -----------------------------------------

#: ``shmstream.a._b``: a dotted path through a private (underscore) name.
_PRIVATE_PATH = re.compile(r"shmstream(?:\.[A-Za-z]\w*)*\.(_(?!_)\w+)")
#: The suite's own extension: the docs name it where they explain a test hook.
PRIVATE_ALLOWED = {"_testhooks"}


def _private_paths(text: str) -> set[str]:
    return {m.group(0) for m in _PRIVATE_PATH.finditer(text)} - {
        m.group(0) for m in _PRIVATE_PATH.finditer(text) if m.group(1) in PRIVATE_ALLOWED
    }


def test_the_docs_send_users_to_no_private_name():
    # A leading underscore means private everywhere: README.md and docs/
    # name public paths only (shmstream.purge, not a module's _helper).
    found = {}
    for path in [
        "README.md",
        "BENCHMARKS.md",
        *sorted(glob.glob(os.path.join(ROOT, "docs", "*.md"))),
    ]:
        with open(os.path.join(ROOT, path), encoding="utf-8") as f:
            names = _private_paths(f.read())
        if names:
            found[os.path.relpath(os.path.join(ROOT, path), ROOT)] = sorted(names)
    assert not found, f"documents that name private paths: {found}"


def test_the_private_name_check_sees_one():
    assert _private_paths(
        "see shmstream.loader._loader_pool.Pool and shmstream.torch._ShmIter"
    ) == {
        "shmstream.loader._loader_pool",
        "shmstream.torch._ShmIter",
    }
    assert _private_paths("shmstream._testhooks.fault_arm, shmstream.__version__") == set()


# ---- no stale file names or code names ---------------------------------------------


def _tracked() -> list[str]:
    out = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    return [f for f in out.splitlines() if os.path.isfile(os.path.join(ROOT, f))]


def _py_prose(text: str) -> list[tuple[int, str]]:
    """(line, text) of a Python file's comments and docstrings."""
    out: list[tuple[int, str]] = []
    statement_start = True
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.COMMENT:
            out.append((tok.start[0], tok.string))
        elif tok.type == tokenize.STRING and statement_start:
            out += [(tok.start[0] + k, ln) for k, ln in enumerate(tok.string.splitlines())]
        if tok.type not in (tokenize.COMMENT, tokenize.NL):
            statement_start = tok.type in (
                tokenize.NEWLINE,
                tokenize.INDENT,
                tokenize.DEDENT,
                tokenize.ENCODING,
            )
    return out


_C_COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)


def _c_prose(text: str) -> list[tuple[int, str]]:
    """(line, text) of a C or C++ file's comments."""
    out: list[tuple[int, str]] = []
    for m in _C_COMMENT.finditer(text):
        first = text.count("\n", 0, m.start()) + 1
        out += [(first + k, ln) for k, ln in enumerate(m.group(0).splitlines())]
    return out


def prose(rel: str) -> list[tuple[int, str]]:
    """What a person wrote for people in a file: a Markdown page whole, a
    source file's comments (and a Python file's docstrings)."""
    text = _read(rel)
    if rel.endswith(".md"):
        return list(enumerate(text.splitlines(), 1))
    if rel.endswith((".py", ".pyi")):
        return _py_prose(text)
    if rel.endswith((".c", ".h", ".cpp")):
        return _c_prose(text)
    return []


def _prose_files() -> list[str]:
    return [
        rel
        for rel in _scanned_files()
        if rel not in HISTORY and rel != "tests/repo/test_docs_sync.py" and "/corpus/" not in rel
    ]


#: File names given bare that are other projects' files, with the reason.
EXTERNAL_FILES = {
    # milk-org/ImageStreamIO, milk's library (docs/milk.md)
    "ImageStreamIO.c": "milk's",
    "ImageStreamIO.h": "milk's",
    "ImageStruct.h": "milk's",
    # NVIDIA's driver API header, which the core does without (cuda_internal.h)
    "cuda.h": "NVIDIA's",
    # dmlc/dlpack, vendored as src/bindings/_dlpack.h
    "dlpack.h": "dmlc's",
    # torch/multiprocessing/reductions.py, where torch shares tensors
    "reductions.py": "torch's",
    # glibc's nptl/tpp.c, the priority-protect mutexes
    "tpp.c": "glibc's",
    # placeholders: the reader's own program, a harness's name
    "prog.c": "a placeholder",
    "fuzz_x.c": "a placeholder",
    "fuzz_x.py": "a placeholder",
    # a crash point's name, "stream.c" (docs/ABI.md, "Crash points")
    "stream.c": "a crash point",
    # the script tests/repo/test_doc_blocks.py writes for each block
    "block.py": "a test's file",
}
#: A file name given bare: not after a word, a path, a dot, a glob or an
#: #include's bracket (``<stdio.h>``, the system's).
_BARE_FILE = re.compile(
    r"(?<![\w/.*<-])([\w-]+(?:\.[\w-]+)*\.(?:py|pyi|c|h|cpp|md|sh|toml))\b(?![\w/(-])"
)


def bare_file_names_missing() -> list[str]:
    tracked = _tracked()
    anywhere = {os.path.basename(f) for f in tracked}
    # The library's comments name the library's files, never the benchmarks'
    # (a stale "channel.py" must not pass for benchmarks/channel.py).
    library = {os.path.basename(f) for f in tracked if not f.startswith("benchmarks/")}
    missing = []
    for rel in _prose_files():
        known = library if rel.startswith(("src/", "include/")) else anywhere
        for i, line in prose(rel):
            for m in _BARE_FILE.finditer(line):
                name = m.group(1)
                if name not in known and name not in EXTERNAL_FILES:
                    missing.append(f"{rel}:{i}: {name}")
    return missing


def test_no_comment_or_document_names_a_missing_file():
    assert bare_file_names_missing() == []


#: Code names given in backticks that are other projects' (or the system's),
#: with the reason; a name starting with one of ``EXTERNAL_PREFIXES`` is too.
EXTERNAL_NAMES = {
    # milk's ImageStreamIO constants (docs/milk.md)
    "CIRCULAR_BUFFER": "milk's",
    "DAO_COMPAT": "milk's",
    "IMAGESTRUCT_VERSION": "milk's",
    "IMAGESTRUCT_WRITEHISTORY": "milk's",
    "MATH_DATA": "milk's",
    "complex_float": "milk's",
    "SEMAPHORE_MAXVAL": "milk's",
    # torch's DataLoader iterator, whose state docs/loader.md compares with ours
    "_data_queue": "torch's",
    "_index_queues": "torch's",
    "_next_data": "torch's",
    "_num_yielded": "torch's",
    "_rcvd_idx": "torch's",
    "_task_info": "torch's",
    "_worker_result_queue": "torch's",
    "_workers_status": "torch's",
    "is_shared": "torch's",
    "share_memory_": "torch's",
    # Zenoh's configuration keys (docs/bridge.md)
    "access_control": "Zenoh's",
    # Linux and C11 (docs/direct.md, docs/waiting.md, docs/ABI.md)
    "io_uring_disabled": "Linux's",
    "io_uring_enter": "Linux's",
    "sched_runtime": "Linux's",
    "sched_setattr": "Linux's",
    "compare_exchange": "C11's atomic_compare_exchange_*",
    # a wheel's platform tag (CONTRIBUTING.md, "Release build")
    "manylinux_2_34": "PyPA's",
}
EXTERNAL_PREFIXES = ("ImageStreamIO_",)  # milk's functions
_TICKED = re.compile(r"``([^`\n]+)``|`([^`\n]+)`")
_CODE_NAME = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*(?:\(\))?")
_WORD = re.compile(r"[A-Za-z_]\w*")


@functools.lru_cache(maxsize=1)
def code_words() -> frozenset[str]:
    """Every name the code uses, its comments and docstrings left out (so a
    comment cannot vouch for itself), and the tracked files' names."""
    words: set[str] = set()
    for rel in _tracked():
        if not rel.startswith(("src/", "include/", "benchmarks/", "examples/", "tools/", "tests/")):
            continue
        if "/corpus/" in rel or rel == "tests/repo/test_docs_sync.py":
            continue  # data, and this file's examples of missing names
        text = _read(rel) if rel.endswith((*SUFFIXES, ".sh", ".html")) else ""
        if rel.endswith((".py", ".pyi")):
            docstrings = {ln for _, ln in _py_prose(text)}
            words.update(
                w
                for line in text.splitlines()
                if line not in docstrings
                for w in _WORD.findall(line.split("#", 1)[0])
            )
        elif rel.endswith((".c", ".h", ".cpp")):
            words.update(_WORD.findall(_C_COMMENT.sub(" ", text)))
        else:
            words.update(_WORD.findall(text))
        words.add(os.path.basename(rel).split(".")[0])
    for rel in ("CMakeLists.txt", "pyproject.toml"):
        words.update(_WORD.findall(_read(rel)))
    return frozenset(words)


def _is_code_name(name: str, words: frozenset[str]) -> bool:
    """A name the code has, or a C function's short name (``commit_rx``
    for ``ss_channel_commit_rx``), or another project's."""
    if name in words or name in EXTERNAL_NAMES or name.startswith(EXTERNAL_PREFIXES):
        return True
    return any(w.startswith("ss_") and w.endswith("_" + name) for w in words)


def code_names_missing() -> list[str]:
    words = code_words()
    missing = []
    for rel in _prose_files():
        for i, line in prose(rel):
            for m in _TICKED.finditer(line):
                ticked = (m.group(1) or m.group(2)).strip()
                if not _CODE_NAME.fullmatch(ticked) or ticked.startswith("shmstream."):
                    continue  # not a code name, or the dotted-name check's
                parts = ticked.removesuffix("()").split(".")
                if parts[-1] in _FILE_SUFFIXES:
                    continue  # a file name: the file-name check's
                for part in parts:
                    # names of code: snake_case or called; plain words are prose
                    if ("_" in part.strip("_") or ticked.endswith("()")) and not _is_code_name(
                        part, words
                    ):
                        missing.append(f"{rel}:{i}: {part}")
    return missing


def test_no_comment_or_document_names_missing_code():
    assert code_names_missing() == []


def test_the_file_and_code_name_checks_see_what_is_missing():
    assert _BARE_FILE.search("see channel.py's decoder").group(1) == "channel.py"
    assert not _BARE_FILE.search("#include <stdio.h>") and not _BARE_FILE.search("src/a/b.py")
    assert not _BARE_FILE.search("the helpers (*_util.py)")
    words = code_words()
    assert "read_new" in words and "list_segments" not in words
    assert _is_code_name("commit_tx", words) and not _is_code_name("list_segments", words)
    assert _py_prose('x = 1  # a note\n"""Doc."""\ny = "not prose"\n') == [
        (1, "# a note"),
        (2, '"""Doc."""'),
    ]
    assert _c_prose("int a; /* one\n two */ int b; // three\n") == [
        (1, "/* one"),
        (2, " two */"),
        (2, "// three"),
    ]
