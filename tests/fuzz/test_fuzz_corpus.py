"""The fuzz corpora (tests/fuzz/corpus/<harness>/: seeds, inputs the
campaigns kept, regression inputs of every finding) replayed on every run.

C harnesses: compiled with the suite's compiler (gcc in CI, which has no
libFuzzer) together with tests/fuzz/replay_main.c, under ASan/UBSan when
that compiler's sanitizer runtimes link, and run over the whole corpus: a
crash, sanitizer report or broken invariant fails the test. Python
harnesses: ``test_one_input`` on every file of their corpus (it lets only
the library's documented errors through). Every segment is named with the
test's own tag and removed afterwards. tests/fuzz/README.md has the
campaigns.
"""

from __future__ import annotations

import concurrent.futures
import glob
import importlib
import os
import subprocess

import pytest

import support

FUZZ = os.path.join(support.ROOT, "tests", "fuzz")
C_HARNESSES = ("fuzz_header", "fuzz_open", "fuzz_ring", "fuzz_history", "fuzz_live", "fuzz_milk")
PY_HARNESSES = (
    "fuzz_py_open",
    "fuzz_py_stat",
    "fuzz_py_recv",
    "fuzz_py_shared_array",
    "fuzz_py_loader",
    "fuzz_py_bridge_wire",
    "fuzz_py_milk",
)
SANITIZE = ("-fsanitize=address,undefined", "-fno-sanitize-recover=all")


def corpus(harness: str) -> list[str]:
    return sorted(glob.glob(os.path.join(FUZZ, "corpus", harness, "*")))


def _sanitizers_link(tmp: str) -> bool:
    """Whether the compiler's ASan/UBSan runtimes are installed (gcc needs
    libasan and libubsan; without them the harnesses replay unsanitized)."""
    src = os.path.join(tmp, "probe.c")
    with open(src, "w") as f:
        f.write("int main(void) { return 0; }\n")
    cc = support.c_compiler()
    if cc is None:
        pytest.skip("no C compiler on PATH")
    exe = os.path.join(tmp, "probe")
    proc = subprocess.run([cc, *SANITIZE, src, "-o", exe], capture_output=True, check=False)
    return proc.returncode == 0 and subprocess.run([exe], check=False).returncode == 0


@pytest.fixture(scope="module")
def replayers(tmp_path_factory) -> dict[str, str]:
    d = str(tmp_path_factory.mktemp("fuzz"))
    flags = (
        "-O1",
        "-g",
        "-I",
        os.path.join(support.ROOT, "src", "core"),
        *(SANITIZE if _sanitizers_link(d) else ()),
    )
    with concurrent.futures.ThreadPoolExecutor(len(C_HARNESSES)) as ex:
        jobs = {
            h: ex.submit(
                support.compile_c,
                os.path.join(d, h),
                ["tests/fuzz/replay_main.c", f"tests/fuzz/{h}.c"],
                flags=flags,
            )
            for h in C_HARNESSES
        }
        return {h: job.result() for h, job in jobs.items()}


def _remove_tagged(tag: str) -> list[str]:
    left = glob.glob(f"{support.SHM_DIR}/{support.SEGMENT_PREFIX}fuzz-{tag}-*")
    for path in left:
        os.unlink(path)
    return left


@pytest.mark.parametrize("harness", C_HARNESSES)
def test_c_corpus_replays(harness: str, replayers: dict[str, str], name: str) -> None:
    files = corpus(harness)
    assert files, f"tests/fuzz/corpus/{harness} is empty: run tests/fuzz/make_seeds.py"
    env = dict(os.environ, SS_FUZZ_TAG=name)
    try:
        proc = subprocess.run(
            [replayers[harness], *files],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
            check=False,
        )
    finally:
        left = _remove_tagged(name)
    assert proc.returncode == 0, (
        f"{harness} failed on {proc.stderr.strip().splitlines()[-1:]} "
        f"(exit {proc.returncode}):\n{proc.stderr[-4000:]}"
    )
    assert f"replayed {len(files)} inputs" in proc.stdout
    assert not left, f"{harness} left segments behind: {left}"


@pytest.mark.parametrize("harness", PY_HARNESSES)
def test_python_corpus_replays(harness: str, name: str, monkeypatch) -> None:
    if harness == "fuzz_py_loader":
        pytest.importorskip("torch")
    files = corpus(harness)
    assert files, f"tests/fuzz/corpus/{harness} is empty: run tests/fuzz/make_seeds.py"
    monkeypatch.setenv("SS_FUZZ_TAG", name)
    monkeypatch.syspath_prepend(FUZZ)
    module = importlib.import_module(harness)
    try:
        for path in files:
            with open(path, "rb") as f:
                data = f.read()
            try:
                module.test_one_input(data)
            except BaseException as exc:
                raise AssertionError(
                    f"{harness} on {os.path.relpath(path, FUZZ)}: {type(exc).__name__}: {exc}"
                ) from exc
    finally:
        left = _remove_tagged(name)
    assert not left, f"{harness} left segments behind: {left}"
