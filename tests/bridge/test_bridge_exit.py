"""A script that ends with a bridge started exits (issue 47, bug 3): the
interpreter waits for the threads that are not daemons, Zenoh's callback
threads among them, so a bridge still open then hung the exit for ever.
Each script runs in its own interpreter; a hang is the subprocess timeout."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytest.importorskip("zenoh", reason="eclipse-zenoh is not installed (the test extra has it)")

import shmstream

import support

SCRIPT = """
import sys
import numpy as np
import shmstream
from shmstream.bridge import Bridge

h = shmstream.open(sys.argv[1])
bridge = Bridge(exports=[sys.argv[1]]).start()
print("started", flush=True)
{end}
"""


@pytest.mark.parametrize(
    "end, code",
    [("raise RuntimeError('the script failed')", 1), ("pass", 0)],
    ids=["raises", "returns"],
)
def test_a_script_that_ends_with_a_bridge_started_exits(make_name, end, code):
    name = make_name()
    with shmstream.create(name, shape=(4,), dtype="f4") as h:
        h.write([1, 2, 3, 4])
        try:
            proc = subprocess.run(
                [sys.executable, "-c", SCRIPT.format(end=end), name],
                capture_output=True,
                text=True,
                timeout=support.WAIT,
                env={**os.environ, "PYTHONFAULTHANDLER": "1"},
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            pytest.fail(f"the script did not exit within {support.WAIT} s: {exc.stdout!r}")
        assert proc.stdout == "started\n"
        assert proc.returncode == code, proc.stderr
        if code:
            assert "the script failed" in proc.stderr
