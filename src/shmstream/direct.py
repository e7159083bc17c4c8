"""Old path of ``shmstream.arrays.direct`` (the direct reader), kept for code that imports
``shmstream.direct``: this name is that module itself, so its attributes (and
patches of them) are one."""

import sys

from .arrays import direct as _impl

sys.modules[__name__] = _impl
