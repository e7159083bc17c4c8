"""Old path of ``shmstream.streams.publication`` (publications), kept for code that imports
``shmstream.publication``: this name is that module itself, so its attributes (and
patches of them) are one."""

import sys

from .streams import publication as _impl

sys.modules[__name__] = _impl
