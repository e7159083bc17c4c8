"""iceoryx2 nodes for the benchmarks. Each run points iceoryx2 at a file
prefix and a root directory of its own (named after the run's main process),
so that everything it creates, its management files included, is removed by
prefix when the run ends: the default config leaves ``/dev/shm/iox2_*``
files behind. The stream and channel parts both use it."""

from __future__ import annotations

import contextlib
import glob
import importlib
import os
import shutil
from typing import Any


def run_files(pid: int) -> tuple[str, str]:
    """The file prefix and root directory of the run whose main process is
    ``pid``."""
    return f"shmsbench{pid}_", f"/tmp/shmsbench_iox2_{pid}/"


def node(prefix: str, root: str) -> tuple[Any, Any]:
    """(the iceoryx2 module, an IPC node) under ``prefix`` and ``root``."""
    iox = importlib.import_module("iceoryx2")
    iox.set_log_level(iox.LogLevel.Error)
    cfg = iox.config.default()
    cfg.global_cfg.prefix = iox.FileName.new(prefix)
    cfg.global_cfg.root_path = iox.Path.new(root)
    return iox, iox.NodeBuilder.new().config(cfg).create(iox.ServiceType.Ipc)


def remove(prefix: str, root: str) -> None:
    """Remove every file iceoryx2 made under ``prefix`` and ``root``."""
    for path in glob.glob(f"/dev/shm/{prefix}*"):
        with contextlib.suppress(OSError):
            os.unlink(path)
    shutil.rmtree(root, ignore_errors=True)
