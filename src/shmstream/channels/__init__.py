"""Channels: single-producer single-consumer message rings
(``shmstream.channel`` / ``shmstream.open_channel``)."""

from . import _registry  # noqa: F401  (its registry entry)
from .ends import (
    ChannelConsumer,
    ChannelProducer,
    DLPackDtype,
    Message,
    ZeroCopyMessage,
    channel,
    describe,
    open_channel,
    unlink_channel,
)

__all__ = [
    "ChannelConsumer",
    "ChannelProducer",
    "DLPackDtype",
    "Message",
    "ZeroCopyMessage",
    "channel",
    "describe",
    "open_channel",
    "unlink_channel",
]
