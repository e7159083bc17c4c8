"""The loader's tests on the oldest and newest supported torch
(tools/torch_matrix.sh: a fresh venv per release, shmstream's wheel and
that torch, every test_loader*.py under tests/).

Not in the default run: PyPI's torch wheels are CUDA builds, about 3 GB of
downloads per release, and each venv takes minutes to install and test.
``SHMSTREAM_TORCH_MATRIX=1 python -m pytest -m torch_matrix
tests/loader/test_torch_matrix.py`` runs it; ``SHMSTREAM_TORCH_MATRIX="2.4.0 2.6.0
2.14.1"`` names the releases instead of the default ends.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SWITCH = os.environ.get("SHMSTREAM_TORCH_MATRIX", "")

pytestmark = [
    pytest.mark.torch_matrix,
    pytest.mark.skipif(
        not SWITCH,
        reason="the torch matrix downloads GBs: set SHMSTREAM_TORCH_MATRIX=1 (tools/torch_matrix.sh)",
    ),
]


def test_the_loader_tests_pass_on_the_oldest_and_newest_supported_torch(tmp_path: Path):
    versions = [] if SWITCH == "1" else SWITCH.split()
    proc = subprocess.run(
        ["bash", str(ROOT / "tools" / "torch_matrix.sh"), *versions],
        check=False,
        env={**os.environ, "PYTHON": sys.executable, "VENVS": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=6 * 3600,
    )
    summary = (tmp_path / "summary.txt").read_text().splitlines()
    assert proc.returncode == 0, "\n".join(summary) + proc.stdout[-4000:] + proc.stderr[-4000:]
    assert len(summary) == (len(versions) or 2)
    for line in summary:
        assert " passed" in line and " failed" not in line and "[rc 0]" in line, line
