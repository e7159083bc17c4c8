"""Old path of ``shmstream.recording.live`` (record and replay), kept for code
that imports ``shmstream.recorder``: this name is that module itself, so its
attributes (and patches of them) are one."""

import sys

from .recording import live as _impl

sys.modules[__name__] = _impl
