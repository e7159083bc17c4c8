"""Old path of ``shmstream.loader.torch`` (the DataLoader), kept for code that imports
``shmstream.torch``: this name is that module itself, so its attributes (and
patches of them) are one."""

import sys

from .loader import torch as _impl

sys.modules[__name__] = _impl
