"""Old path of ``shmstream.streams.publication`` (publications), kept for code that imports
``shmstream.publication``: this name is that module itself, so its attributes (and
patches of them) are one."""

import sys
from typing import TYPE_CHECKING

from .streams import publication as _impl

if TYPE_CHECKING:  # what a type checker sees here
    from .streams.publication import *  # noqa: F403

sys.modules[__name__] = _impl
