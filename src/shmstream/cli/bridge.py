"""``shmstream bridge``: export and import streams and channels over
Eclipse Zenoh. The options and the command live with the bridge
(``shmstream.bridge.cli``); zenoh is imported only when the command runs."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from ..bridge import cli as bridge_cli


def register(sub: Any) -> dict[str, Callable[[argparse.Namespace], int]]:
    bridge_cli.add_bridge_parser(sub)
    return {"bridge": bridge_cli.cmd_bridge}
