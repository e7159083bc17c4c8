"""Many handles in one process: each open stream handle and channel end
keeps one file descriptor (its liveness lease, docs/ABI.md), so a process
meets its soft RLIMIT_NOFILE (often 1024) long before its hard one. The core
then raises the soft limit towards the hard one and goes on; at the hard
limit the error says what to do. Each case runs in a child that sets its own
limits first."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import uuid

import pytest

HARD = 8192


def run_child(body: str, soft: int, hard: int) -> str:
    import resource

    if resource.getrlimit(resource.RLIMIT_NOFILE)[1] < hard:
        pytest.skip(f"this process's hard fd limit is below {hard}")
    prefix = f"fdlim-{uuid.uuid4().hex[:8]}"
    script = textwrap.dedent(
        f"""
        import errno, resource
        import numpy as np
        import shmstream
        resource.setrlimit(resource.RLIMIT_NOFILE, ({soft}, {hard}))
        PREFIX = {prefix!r}
        """
    ) + textwrap.dedent(body)
    try:
        proc = subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
        )
    finally:
        for entry in os.listdir("/dev/shm"):
            if prefix in entry:
                os.remove(os.path.join("/dev/shm", entry))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def test_thousands_of_handles_raise_the_soft_fd_limit_and_all_work():
    out = run_child(
        """
        w = shmstream.create(PREFIX + "-s", shape=(4,), dtype=np.float32)
        w.write(np.arange(4, dtype=np.float32))
        handles = [shmstream.open(PREFIX + "-s") for _ in range(5000)]  # past 4096 too
        assert all(h.read()[3] == 3.0 for h in handles[::250])
        tx = [shmstream.channel(f"{PREFIX}-c{i}", capacity=4096) for i in range(20)]
        rx = [shmstream.open_channel(f"{PREFIX}-c{i}") for i in range(20)]
        tx[7].send(b"seven")
        assert rx[7].recv(timeout=5).data == b"seven"
        print("soft", resource.getrlimit(resource.RLIMIT_NOFILE)[0])
        for h in handles + tx + rx:
            h.close()
        w.close()
        w.unlink()
        for i in range(20):
            shmstream.unlink_channel(f"{PREFIX}-c{i}")
        """,
        soft=100,
        hard=HARD,
    )
    soft = int(out.split()[-1])
    assert 5000 < soft <= HARD  # raised by doubling, never past the hard limit


def test_at_the_hard_limit_the_error_says_what_to_do_and_leaves_nothing():
    run_child(
        """
        import os
        kept = []
        try:
            for i in range(200):
                kept.append(shmstream.create(f"{PREFIX}-{i}", shape=(4,), dtype=np.float32))
        except OSError as e:
            assert e.errno == errno.EMFILE, e
            assert isinstance(e, shmstream.ShmstreamError)
            text = str(e)
            assert "no file descriptor left" in text and "ulimit -Hn" in text, text
            assert f"{PREFIX}-{len(kept)}" in text  # names the stream it could not make
        else:
            raise AssertionError("200 handles fitted under a hard limit of 100 fds")
        failed = f"{PREFIX}-{len(kept)}-"
        for h in kept:
            h.close()
            h.unlink()
        # the failed create left no segment behind (looked at with fds free again)
        assert not any(failed in e for e in os.listdir("/dev/shm"))
        """,
        soft=100,
        hard=100,
    )
