"""Large creates say what they are doing (issue 23 item 9): the CLI prints a
progress line while it creates a segment of 256 MiB or more, and a last
line with the time it took per GiB; a size /dev/shm cannot hold is refused
at once, before anything is reserved. The CLI cases run the real
``shmstream`` command."""

from __future__ import annotations

import mmap
import os
import re
import subprocess
import sys

import pytest

from shmstream.cli import _progress

SHM_DIR = "/dev/shm"


def _shmstream(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    with subprocess.Popen(
        [sys.executable, "-m", "shmstream", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        out, err = proc.communicate(timeout=timeout)
    done = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    done.pid = proc.pid  # type: ignore[attr-defined]
    return done


def _free() -> int:
    st = os.statvfs(SHM_DIR)
    return st.f_bavail * st.f_frsize


def test_a_large_create_in_the_cli_shows_its_progress_and_its_cost_per_gib():
    if _free() < 1 << 30:
        pytest.skip("needs 1 GiB free in /dev/shm for a 512 MiB stream")
    # 256 MiB frames, two slots: a 512 MiB segment
    proc = _shmstream("demo", "--seconds", "0.1", "--shape", "16384x16384", "--rate", "10")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    done = [
        i
        for i, line in enumerate(lines)
        if re.fullmatch(
            r"created stream 'shmstream-demo-\d+': 512\.0 MiB in [\d.]+ s \([\d.]+ s per GiB\)",
            line,
        )
    ]
    assert len(done) == 1, proc.stdout
    # the lines while it ran (none if it was made before the first look)
    for line in lines[: done[0]]:
        assert re.fullmatch(
            r"creating stream 'shmstream-demo-\d+': 512\.0 MiB in /dev/shm, "
            r"reserved +\d+%, mapped +\d+%, \d+ s",
            line,
        ), line
    assert lines[done[0] + 1].startswith("demo: stream"), proc.stdout  # then the demo


def test_a_small_create_prints_no_progress():
    proc = _shmstream("demo", "--seconds", "0.1", "--shape", "4x4")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "creat" not in proc.stdout, proc.stdout


def test_a_create_larger_than_dev_shm_is_refused_at_once_in_the_cli():
    # 1 TB of frames: refused with the sizes before a byte is reserved (a
    # reservation of what is free would first take seconds per GiB)
    proc = _shmstream("demo", "--shape", "1000000x1000000", timeout=60)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert re.search(
        r"cannot create stream .*it needs \d+ bytes in /dev/shm.* has \d+ bytes free",
        " ".join(proc.stderr.split()),
    ), proc.stderr
    assert "creat" not in proc.stdout, proc.stdout  # no progress for what was never made
    assert not [n for n in os.listdir(SHM_DIR) if f"shmstream-demo-{proc.pid}-" in n]


def test_the_mapped_bytes_are_this_process_resident_pages_of_the_file(tmp_path):
    path = str(tmp_path / "seg")
    with open(path, "wb") as f:
        f.truncate(64 << 12)
    with open(path, "r+b") as f:
        m = mmap.mmap(f.fileno(), 64 << 12)
    try:
        assert _progress._mapped_bytes(path) == 0
        for page in range(5):
            m[page << 12] = 1
        assert _progress._mapped_bytes(path) == 5 << 12
        assert _progress._mapped_bytes(path + "-other") == 0
    finally:
        m.close()
