"""The Python examples under examples/ run, print their summary and clean up.

Each example names its streams ``ex-<its pid>-...``, so the segments it could
leave behind are ``/dev/shm/shmstream-ex-<pid>-*``: this is checked without
being confused by other processes using /dev/shm at the same time.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SHM_DIR = "/dev/shm"

# file -> the summary line it prints on success
SUMMARIES = {
    "producer_consumer.py": (
        r"^consumer: received (\d+) of 600 frames, missed (\d+) "
        r"\(total_missed_writes \2\), last frame_id 599$"
    ),
    "request_response.py": (
        r"^request/response: \d+ round trips, \d+ round trips/s, "
        r"p50 latency [\d.]+ us, p99 [\d.]+ us$"
    ),
    "camera_write_view.py": (
        r"^camera: \d+ frames checked, 0 torn, \d+ skipped by the reader, 400 written$"
    ),
    "bridge_two_hosts.py": (
        r"^bridge: 100 frames crossed with their count, frame id and write time; "
        r"peers authenticated by password; source alive True; after the exporter stopped, "
        r"source gone True$"
    ),
    "history_logger.py": (
        r"^history: read 600 of 600 frames in \d+ batches, missed 0 "
        r"\(the reader stalled 30 ms after each batch\)$"
    ),
}
#: examples that need an optional extra: file -> (module, extra)
NEEDS = {"bridge_two_hosts.py": ("zenoh", "shmstream[zenoh]")}


def _leftovers(pid: int) -> list[str]:
    prefix = f"shmstream-ex-{pid}-"
    return sorted(n for n in os.listdir(SHM_DIR) if n.startswith(prefix))


def test_every_python_example_is_covered():
    assert sorted(p.name for p in EXAMPLES.glob("*.py")) == sorted(SUMMARIES)


@pytest.mark.parametrize("example", sorted(SUMMARIES))
def test_example_runs_prints_summary_and_cleans_up(example):
    if example in NEEDS:
        pytest.importorskip(NEEDS[example][0], reason=f"needs pip install {NEEDS[example][1]}")
    proc = subprocess.Popen(
        [sys.executable, str(EXAMPLES / example)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=EXAMPLES.parent,
    )
    try:
        out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"{example} did not finish in 60 s\n{out}\n{err}")
    try:
        assert proc.returncode == 0, f"{example} exited {proc.returncode}\n{out}\n{err}"
        lines = out.strip().splitlines()
        assert lines, f"{example} printed nothing\n{err}"
        match = re.match(SUMMARIES[example], lines[-1])
        assert match, lines[-1]
        if example == "producer_consumer.py":  # every frame is received or counted missed
            received, missed = map(int, match.groups())
            assert received + missed == 600
        assert "resource_tracker" not in err, err
        assert _leftovers(proc.pid) == []
    finally:
        for leftover in _leftovers(proc.pid):  # never leave them for the next run
            os.unlink(os.path.join(SHM_DIR, leftover))
