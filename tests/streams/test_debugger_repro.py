"""The reproduction that opened issue 10, run literally: a writer stopped
by a debugger inside publish() (at ``ss_realtime_ns``, which the writer calls
while the publish seq is odd) and killed there.

test_crash_points.py kills writers at every named point without a
debugger; this test keeps the original recipe honest too. It needs gdb and
the native module's symbol ``ss_realtime_ns`` (both are there on the
machines this project runs on; without gdb it is skipped and says so).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

import shmstream

pytestmark = pytest.mark.skipif(shutil.which("gdb") is None, reason="needs gdb")

#: The child: one write, which the debugger stops and kills mid-publish.
WRITER = """
import sys, numpy as np, shmstream
h = shmstream.open(sys.argv[1])
h.write(np.full(4, 7.0, np.float32), frame_id=77)
print("the write finished: the breakpoint was never hit")
"""


def test_writer_killed_by_a_debugger_in_publish_is_reported_then_fully_recovered(name):
    h = shmstream.create(name, shape=(4,), dtype=np.float32)
    try:
        h.write(np.full(4, 1.0, np.float32), frame_id=1)
        gdb = subprocess.run(
            [
                "gdb",
                "-q",
                "-batch",
                "-ex",
                "set breakpoint pending on",
                "-ex",
                "break ss_realtime_ns",
                "-ex",
                "run",
                "-ex",
                "kill",
                "--args",
                sys.executable,
                "-c",
                WRITER,
                name,
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        # (one location per native module that links the core: "Breakpoint 1.N")
        assert re.search(r"Breakpoint 1[.0-9]*, ", gdb.stdout), gdb.stdout + gdb.stderr
        assert "the write finished" not in gdb.stdout

        # Right after the kill: the abandoned frame is reported, not paired
        # with the previous payload.
        with pytest.raises(shmstream.InconsistentStreamError, match="exited"):
            h.read()

        for k in range(4):
            h.write(np.full(4, 10.0 + k, np.float32), frame_id=100 + k)
        info = shmstream.stat(name)
        assert info["write_sequence"] % 2 == 0
        np.testing.assert_array_equal(h.read(), np.full(4, 13.0, np.float32))
        assert (h.frame_id, h.count) == (103, 5)

        # A healthy stream again: plain reads take no lock.
        before = info["lock_acquisitions"]
        for _ in range(100):
            h.read()
        assert shmstream.stat(name)["lock_acquisitions"] == before
    finally:
        h.close()
