"""The README's test command works on a fresh machine: every third-party
module the suite imports (or mypy must see, for benchmarks/plot.py) comes
with `pip install ".[test]"`, so no test fails or skips for want of a
package that only a used machine has. .ci/run proves the same from the
other side: it runs the command in an empty virtual environment."""

from __future__ import annotations

import ast
import importlib.metadata as md
import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: Modules the suite imports that are not PyPI distributions of the test
#: extra, with the reason each is allowed.
NOT_FROM_THE_EXTRA = {
    "shmstream": "the package under test",
    "benchmarks": "the checkout's benchmarks, on pytest's pythonpath",
    "support": "tests/ helpers",
    "conftest": "tests/ helpers",
    "atheris": "fuzz harnesses only; tests/fuzz/test_fuzz_corpus.py replays corpora without it",
    "cupy": "GPU tests only (pytest -m gpu), on a CUDA machine",
}


def _imported_modules(path: Path) -> set[str]:
    """The top-level names of every module a file imports, anywhere in it."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
        elif (
            isinstance(node, ast.Call)
            and getattr(node.func, "attr", "") == "importorskip"
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            found.add(str(node.args[0].value).split(".")[0])
    return found


def _requirement_names(requirements: list[str] | None, extra: str | None) -> set[str]:
    names = set()
    for req in requirements or []:
        name, _, marker = req.partition(";")
        if "extra ==" in marker and (extra is None or f'"{extra}"' not in marker):
            continue
        names.add(re.split(r"[\s<>=!~\[(]", name.strip(), maxsplit=1)[0].lower().replace("_", "-"))
    return names


def _closure_of_test_extra() -> set[str]:
    """Distributions `pip install ".[test]"` installs (the extra and what each needs)."""
    todo = _requirement_names(md.requires("shmstream"), "test")
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            todo |= _requirement_names(md.requires(name), None)
        except md.PackageNotFoundError:
            pass
    return seen


def _suite_files() -> list[Path]:
    """The helpers at tests/ and every test module in its folders."""
    tests = ROOT / "tests"
    return [
        *sorted(tests.glob("*.py")),
        *sorted(tests.glob("*/test_*.py")),
        ROOT / "benchmarks" / "plot.py",
    ]


def test_every_third_party_module_the_suite_imports_comes_with_the_test_extra():
    # the helpers, and the fuzz harnesses tests/fuzz/test_fuzz_corpus.py imports
    local = {p.stem for p in (ROOT / "tests").rglob("*.py")}
    stdlib = set(sys.stdlib_module_names)
    dists = md.packages_distributions()
    installed = _closure_of_test_extra()
    missing = []
    for path in _suite_files():
        for module in sorted(_imported_modules(path) - stdlib - local - set(NOT_FROM_THE_EXTRA)):
            owners = {d.lower().replace("_", "-") for d in dists.get(module, [])}
            if not owners & installed:
                where = os.path.relpath(path, ROOT)
                missing.append(
                    f"{where}: {module} (from {sorted(owners) or 'no installed package'})"
                )
    assert missing == [], "add these to [project.optional-dependencies] test:\n" + "\n".join(
        missing
    )


def test_ci_runs_the_readme_test_command_in_a_fresh_virtual_environment():
    readme = (ROOT / "README.md").read_text()
    command = re.search(
        r"^(python3 -m pip install \"\.\[test\]\" && python3 -m pytest.*)$", readme, re.M
    )
    assert command is not None, "README.md lost its test command"
    ci = (ROOT / ".ci" / "run").read_text()
    venv_at = ci.index("python3 -m venv")
    activate_at = ci.index("/bin/activate")
    assert venv_at < activate_at < ci.index(command[1] + "\n")


def test_the_readme_command_runs_in_parallel_then_the_serial_tests_alone():
    """CONTRIBUTING.md, "Build and test": the suite on every core (pytest-xdist,
    from the test extra) but for the tests marked ``serial``, which then run
    in one process; every skip's reason shown (``-rs`` in addopts)."""
    readme = (ROOT / "README.md").read_text()
    command = re.search(r"^python3 -m pip install \"\.\[test\]\" && (.*)$", readme, re.M)
    assert command is not None, "README.md lost its test command"
    runs = command[1].split(" && ")
    assert runs == [
        'python3 -m pytest -n auto -m "not serial"',
        "python3 -m pytest -m serial",
    ], runs
    assert "pytest-xdist" in _requirement_names(md.requires("shmstream"), "test")
    pyproject = (ROOT / "pyproject.toml").read_text()
    addopts = re.search(r"^addopts = \"(.*)\"$", pyproject, re.M)
    assert addopts is not None and "-rs" in addopts[1].split()
    assert re.search(r"^    \"serial: ", pyproject, re.M), "the serial marker is not declared"
