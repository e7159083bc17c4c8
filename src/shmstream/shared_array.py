"""Old path of ``shmstream.arrays.shared_array`` (shared arrays), kept for code that imports
``shmstream.shared_array``: this name is that module itself, so its attributes (and
patches of them) are one."""

import sys
from typing import TYPE_CHECKING

from .arrays import shared_array as _impl

if TYPE_CHECKING:  # what a type checker sees here
    from .arrays.shared_array import *  # noqa: F403

sys.modules[__name__] = _impl
