"""Every code block of README.md and docs/*.md marked runnable runs.

The marker (CONTRIBUTING.md, "Runnable documentation") is an HTML comment
on the line before the fence, invisible once rendered:

* ``<!-- runnable -->``: the block is a whole Python program;
* ``<!-- runnable: continued -->``: the block goes on from the runnable
  block before it in the same file (a page that builds one example over
  several blocks); the program is every block of the chain, run once.

Each program runs as a script file in a fresh process, in an empty
directory, with a private, empty /dev/shm (a tmpfs in its own mount
namespace, as tests/common/test_full_shm.py does), so the names the docs use
("cam/left") never meet another process's. What a program leaves in that
/dev/shm fails the test, as the suite fails on leftovers: a reader who
runs the block leaves nothing behind either.
"""

from __future__ import annotations

import os
import re
import sys
import textwrap
from pathlib import Path

import pytest

from support import private_shm_available, run_in_private_shm

ROOT = Path(__file__).resolve().parents[2]
DOCS = ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))]

_MARK = re.compile(r"^<!-- runnable(: continued)? -->$")
_FENCE = re.compile(r"^```(\S*)")


def runnable_programs(rel: str) -> list[tuple[str, str]]:
    """(id, source) of each runnable program in one document: marked blocks,
    continued ones joined to the chain they continue."""
    lines = (ROOT / rel).read_text(encoding="utf-8").splitlines()
    programs: list[tuple[str, str]] = []
    i = 0
    while i < len(lines):
        mark = _MARK.match(lines[i].strip())
        if not mark:
            i += 1
            continue
        fence = _FENCE.match(lines[i + 1]) if i + 1 < len(lines) else None
        assert fence and fence.group(1) == "python", (
            f"{rel}:{i + 1}: a runnable mark must sit right above a ```python fence"
        )
        end = lines.index("```", i + 2)
        body = "\n".join(lines[i + 2 : end]) + "\n"
        if mark.group(1):
            assert programs, f"{rel}:{i + 1}: 'continued' with no runnable block before it"
            first_id, source = programs.pop()
            programs.append((first_id, source + body))
        else:
            programs.append((f"{rel}:{i + 3}", body))
        i = end + 1
    return programs


PROGRAMS = [p for rel in DOCS for p in runnable_programs(rel)]


def test_the_quick_start_and_every_standalone_page_example_are_marked():
    # the marks are what the test runs: losing one silently would stop it
    marked = {pid.split(":")[0] for pid, _ in PROGRAMS}
    assert {"README.md", "docs/history.md", "docs/shared-arrays.md", "docs/API.md"} <= marked


def test_a_mark_not_above_a_python_block_is_an_error(tmp_path, monkeypatch):
    (tmp_path / "bad.md").write_text("<!-- runnable -->\n```bash\nls\n```\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    with pytest.raises(AssertionError, match="right above a ```python fence"):
        runnable_programs("bad.md")


@pytest.mark.parametrize("source", [s for _, s in PROGRAMS], ids=[i for i, _ in PROGRAMS])
def test_a_runnable_doc_block_runs(source, tmp_path):
    reason = private_shm_available()
    if reason:
        pytest.skip(f"doc blocks run with a private /dev/shm; {reason}")
    script = tmp_path / "block.py"  # a file, so spawned children can import __main__
    script.write_text(source)
    runner = tmp_path / "run_block.py"  # the block, then what it left in the private /dev/shm
    runner.write_text(_RUNNER)
    proc = run_in_private_shm(
        size="1g",
        timeout=300,
        path=str(runner),
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": ""},
    )
    head, _, left = proc.stdout.rpartition(_LEFT)
    shown = (
        f"\n--- block ---\n{textwrap.indent(source, '  ')}"
        f"--- stdout ---\n{head[-2000:]}--- stderr ---\n{proc.stderr[-3000:]}"
    )
    assert proc.returncode == 0, f"exit {proc.returncode}{shown}"
    assert left.strip() == "[]", f"the block left {left.strip()} in /dev/shm{shown}"


_LEFT = "\n-- left in /dev/shm: "

#: Runs block.py, then prints what is in the (private) /dev/shm.
_RUNNER = f"""
import os, subprocess, sys
rc = subprocess.run([sys.executable, "block.py"]).returncode
sys.stdout.flush()
print({_LEFT!r} + repr(sorted(os.listdir("/dev/shm"))), flush=True)
sys.exit(rc)
"""
