"""Old path of ``shmstream.arrays.direct`` (the direct reader), kept for code that imports
``shmstream.direct``: this name is that module itself, so its attributes (and
patches of them) are one."""

import sys
from typing import TYPE_CHECKING

from .arrays import direct as _impl

if TYPE_CHECKING:  # what a type checker sees here
    from .arrays.direct import *  # noqa: F403

sys.modules[__name__] = _impl
