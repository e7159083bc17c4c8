"""shmstream: NumPy arrays between processes through named shared memory."""
from . import _native
from .errors import CorruptStreamError, InconsistentStreamError, StaleStreamError

_native.set_error_types(InconsistentStreamError, CorruptStreamError)
from .channel import channel, open_channel, unlink_channel, ChannelProducer, ChannelConsumer  # noqa: E402
