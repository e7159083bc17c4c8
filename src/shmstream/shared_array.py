"""Old path of ``shmstream.arrays.shared_array`` (shared arrays), kept for code that imports
``shmstream.shared_array``: this name is that module itself, so its attributes (and
patches of them) are one."""

import sys

from .arrays import shared_array as _impl

sys.modules[__name__] = _impl
