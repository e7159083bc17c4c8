"""A loader's processes end cleanly: no worker and no main process holding
batches at exit prints nanobind's "leaked ... FileMapping" report (a slot's
mapping that outlived the interpreter), under every start method."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

import support

pytest.importorskip("torch")

SCRIPT = textwrap.dedent(
    """
    import sys
    import loader_cases
    from shmstream.torch import DataLoader

    loader = DataLoader(
        loader_cases.Rows(n=16, dim=1024),
        batch_size=4,
        num_workers=2,
        multiprocessing_context=sys.argv[1],
    )
    held = list(loader)  # every batch still alive when the interpreter exits
    stats = loader.stats()
    print(len(held), stats["fresh"] + stats["reused"], float(held[-1]["x"][-1][-1]))
    """
)


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_workers_and_a_main_process_holding_batches_exit_without_leak_reports(method):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([support.TESTS_DIR, *sys.path]))
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, method],
        capture_output=True,
        text=True,
        timeout=support.WAIT * 4,
        env=env,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    # 4 batches, all carried in slots (not torch's fallback), the last one whole
    assert proc.stdout.split() == ["4", "4", str(float(10 * 15 + 1023))], proc.stdout
    assert "leaked" not in proc.stderr, proc.stderr
