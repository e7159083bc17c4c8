"""Old path of ``shmstream.loader.torch`` (the DataLoader), kept for code that imports
``shmstream.torch``: this name is that module itself, so its attributes (and
patches of them) are one."""

import sys
from typing import TYPE_CHECKING

from .loader import torch as _impl

if TYPE_CHECKING:  # what a type checker sees here
    from .loader.torch import *  # noqa: F403

sys.modules[__name__] = _impl
