"""The C core builds for macOS, checked here by cross-compiling with zig cc
(the `ziglang` wheel of the test extra bundles macOS's libc headers and
links Mach-O against libSystem's stubs). Nothing here runs on a Mac
(docs/platforms.md says what has been checked how).

Every file of src/core compiles for aarch64-macos and x86_64-macos with
warnings as errors, except the known remainder below, each with its reason:
a file that newly fails, or a listed file that now compiles, fails the
test, so the list only shrinks. What compiles is then linked as a dylib,
and every symbol it leaves undefined must come from libSystem."""

from __future__ import annotations

import concurrent.futures
import pathlib
import shutil
import subprocess
import sys

import pytest

import support

ROOT = pathlib.Path(support.ROOT)
CORE = ROOT / "src" / "core"
TARGETS = ("aarch64-macos", "x86_64-macos")
FLAGS = ["-std=gnu11", "-O2", "-Wall", "-Wextra", "-Werror", "-fvisibility=hidden"]

#: Files of src/core that do not compile for macOS yet, and why.
KNOWN_REMAINDER = {
    "milk.c": "milk's files embed glibc's 32-byte sem_t (a static assert): milk is a Linux system",
}


def _zig() -> list[str]:
    try:
        import ziglang  # noqa: F401
    except ImportError:
        pytest.skip("ziglang is not installed (pip install '.[test]')")
    return [sys.executable, "-m", "ziglang", "cc"]


def _macos_sources() -> list[pathlib.Path]:
    # All of them, as CMakeLists.txt globs them: each platform file compiles
    # to nothing on another system.
    return sorted(CORE.glob("*.c"))


def _compile(zig: list[str], target: str, src: pathlib.Path, out: pathlib.Path) -> str:
    cmd = [*zig, "-target", target, *FLAGS, "-I", str(ROOT / "include"), "-I", str(CORE)]
    proc = subprocess.run(
        [*cmd, "-c", str(src), "-o", str(out)], capture_output=True, text=True, check=False
    )
    return "" if proc.returncode == 0 else proc.stderr


@pytest.mark.parametrize("target", TARGETS)
def test_the_core_compiles_for_macos_but_the_known_remainder(target, tmp_path):
    zig = _zig()
    sources = _macos_sources()
    assert any(p.name == "platform_darwin.c" for p in sources)
    assert set(KNOWN_REMAINDER) <= {p.name for p in sources}, "a listed file is gone: drop it"
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        errors = dict(
            zip(
                [p.name for p in sources],
                pool.map(lambda p: _compile(zig, target, p, tmp_path / (p.name + ".o")), sources),
            )
        )
    failed = {name for name, err in errors.items() if err}
    compiled = sorted(set(errors) - failed)
    print(f"{target}: {len(compiled)} of {len(sources)} compile: {' '.join(compiled)}")
    unexpected = failed - set(KNOWN_REMAINDER)
    assert not unexpected, "\n".join(f"{n}:\n{errors[n]}" for n in sorted(unexpected))
    fixed = set(KNOWN_REMAINDER) - failed
    assert not fixed, f"{sorted(fixed)} compile now: take them off KNOWN_REMAINDER"


@pytest.mark.parametrize("target", TARGETS)
def test_what_compiles_links_as_a_dylib_needing_only_libsystem(target, tmp_path):
    zig = _zig()
    nm = shutil.which("llvm-nm")
    if nm is None:
        pytest.skip("llvm-nm (reads Mach-O) is not on PATH")
    sources = [str(p) for p in _macos_sources() if p.name not in KNOWN_REMAINDER]
    lib = tmp_path / "libshmstream.dylib"
    cmd = [*zig, "-target", target, *FLAGS, "-I", str(ROOT / "include"), "-I", str(CORE)]
    # -undefined error: a symbol no linked library defines fails the link.
    cmd += ["-shared", "-Wl,-undefined,error", *sources, "-o", str(lib)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    undefined = subprocess.run(
        [nm, "-m", "-u", str(lib)], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert len(undefined) > 20, "llvm-nm listed too little to be a real check"
    # dyld_stub_binder is the binder's own entry (libSystem's, unnamed on x86_64).
    foreign = [
        line
        for line in undefined
        if "(from libSystem)" not in line and not line.rstrip().endswith("dyld_stub_binder")
    ]
    assert foreign == [], "symbols from outside libSystem:\n" + "\n".join(foreign)
    # The Darwin wait is what the dylib calls: the seam chose platform_darwin.c.
    assert any("___ulock_wait2" in line for line in undefined)
    assert any("_proc_pidinfo" in line for line in undefined)
