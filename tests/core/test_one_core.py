"""The C core exists once in a process (CONTRIBUTING.md, "Layout"): the
extensions link one shared library (libshmstream.so, installed next to
them) instead of each carrying a static copy, so the core's process-wide
state (armed crash points, cached pid, CUDA contexts, the SIGBUS guard
table) is one state."""

from __future__ import annotations

import glob
import os
import pathlib
import shutil
import subprocess

import pytest

import shmstream
from shmstream import _channel, _native, _testhooks

PKG_DIR = os.path.dirname(os.path.abspath(shmstream.__file__))
EXTENSIONS = sorted(glob.glob(os.path.join(PKG_DIR, "_*.so")))
LIBRARY = os.path.join(PKG_DIR, "libshmstream.so")
# Symbols of the core that every build has: segments, the crash points, the clocks.
CORE_SYMBOLS = {
    "ss_segment_open",
    "ss_segment_open_ex",
    "ss_fault_arm",
    "ss_monotonic_ns",
    "ss_proc_alive",
    "ss_channel_create",
    "ss_direct_open",
}


def dynamic_symbols(path: str) -> tuple[set[str], set[str]]:
    """(defined, undefined) dynamic symbols of a shared object, by nm -D."""
    out = subprocess.run(["nm", "-D", path], capture_output=True, text=True, check=True).stdout
    defined, undefined = set(), set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == "U":
            undefined.add(parts[1].split("@")[0])
        elif len(parts) == 3 and parts[1] not in ("U", "w", "v"):
            defined.add(parts[2].split("@")[0])
    return defined, undefined


@pytest.fixture(scope="module")
def nm():
    if shutil.which("nm") is None:
        pytest.skip("nm (binutils) is not on PATH: cannot read the extensions' symbols")


def test_the_package_ships_one_core_library_and_its_extensions():
    assert os.path.isfile(LIBRARY), f"no {LIBRARY}: the core must be built as a shared library"
    names = {os.path.basename(p).split(".")[0] for p in EXTENSIONS}
    # _testhooks: the suite's hooks, in a build from a checkout (the release
    # wheel has none: tests/repo/test_release.py)
    assert {"_native", "_channel", "_direct", "_cuda", "_testhooks"} <= names


def test_only_the_library_defines_the_cores_symbols(nm):
    lib_defined, _ = dynamic_symbols(LIBRARY)
    assert lib_defined >= CORE_SYMBOLS
    for ext in EXTENSIONS:
        defined, undefined = dynamic_symbols(ext)
        own = sorted(s for s in defined if s.startswith("ss_"))
        assert not own, f"{os.path.basename(ext)} defines core symbols itself: {own[:5]}"
        # Each extension calls the core through the library, which has every
        # symbol it needs.
        needed = {s for s in undefined if s.startswith("ss_")}
        assert needed, f"{os.path.basename(ext)} calls no core symbol: a static copy?"
        assert needed <= lib_defined, sorted(needed - lib_defined)


def test_the_cores_code_is_in_one_file():
    # Works on stripped objects too: a string literal of fault.c is in the
    # one file that carries the core's code, and in no extension.
    marker = b"SHMSTREAM_CRASH_AT"
    holders = [
        os.path.basename(p)
        for p in [LIBRARY, *EXTENSIONS]
        if marker in pathlib.Path(p).read_bytes()
    ]
    assert holders == ["libshmstream.so"]


def test_the_library_exports_only_the_api(nm):
    # Hidden visibility for everything but SS_API: internals such as the
    # guard table, the fault hit and the pid cache are not exported.
    defined, _ = dynamic_symbols(LIBRARY)
    for internal in ("ss_fault_hit", "ss_self_pid", "ss_owner_check", "ss_backoff"):
        assert internal not in defined


def test_one_arming_for_every_module():
    # The crash points are one table: only the test hooks expose them, and
    # they cover the channel's points (tests/streams/test_crash_points.py arms those).
    assert not hasattr(_channel, "fault_arm") and not hasattr(_native, "fault_arm")
    assert any(p.startswith("ring.") for p in _testhooks.fault_points())


def test_the_production_extensions_carry_no_test_hook():
    hooks = {"fault_arm", "fault_disarm", "fault_points", "wait_policy_override", "layout"}
    hooks |= {"slot_record_layout", "channel_layout"}
    for module in (_native, _channel):
        assert not hooks & set(dir(module)), module.__name__
    assert hooks <= set(dir(_testhooks))
