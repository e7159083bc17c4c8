"""Old path of ``shmstream.recording.live`` (record and replay), kept for code that imports
``shmstream.recorder``: this name is that module itself, so its attributes (and
patches of them) are one."""

import sys
from typing import TYPE_CHECKING

from .recording import live as _impl

if TYPE_CHECKING:  # what a type checker sees here
    from .recording.live import *  # noqa: F403

sys.modules[__name__] = _impl
