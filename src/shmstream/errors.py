"""Exceptions raised by shmstream. Each type has one meaning."""


class InconsistentStreamError(RuntimeError):
    """No consistent payload is published: the last write was aborted (an
    exception inside ``write_view``) or its writer died mid-write. The next
    successful write recovers the stream."""


class StaleStreamError(RuntimeError):
    """The handle belongs to an older generation of the name: the stream was
    unlinked and created again since this handle was opened."""


class FrameOverwrittenError(RuntimeError):
    """A zero-copy view (``read_view``/``read_new_view``) was overwritten by
    the writer while the block was still using it: what the block read may
    mix two frames. Copy out what you need inside the block, create the
    stream with more ``slots``, or use ``read()`` for a copy."""


class CorruptStreamError(RuntimeError):
    """A segment's header failed validation (magic, layout version, checksum or
    sizes): it is corrupt, unfinished, or made by another shmstream version."""


class ChannelClosedError(EOFError):
    """End of a channel's stream: its producer closed the channel or died, and
    every message it published has been received. A new producer can take
    over with ``open_channel(name, role="producer")``."""


class ChannelBrokenError(BrokenPipeError):
    """Nothing will read what is sent: the channel's consumer closed it, or
    died while the ring was full. A new consumer can take over with
    ``open_channel(name)``."""


class ChannelBusyError(RuntimeError):
    """The channel end (producer or consumer) is held by another live process
    or handle: a channel has exactly one of each."""


class GpuStreamGoneError(RuntimeError):
    """The device buffer of a GPU stream is gone: the process that created it
    exited (CUDA IPC memory belongs to its exporter), or a writer died before
    its device copy completed. Metadata, and a CPU mirror if there is one,
    stay readable; recreate the stream to go on."""


class SegmentOwnerError(PermissionError):
    """The segment's file belongs to another user than this process's
    effective uid: whoever owns it can read and change what goes through it
    (a name squatted by another user becomes a channel into this process).
    Open it anyway, if you trust that user, with ``allow_owner=<uid or user
    name>`` or the environment variable ``SHMSTREAM_ALLOW_OWNERS=uid,...``."""


class PidNamespaceError(RuntimeError):
    """The segment was created in another PID namespace (another container
    sharing /dev/shm): its pids cannot be judged from here, so a live peer
    would look dead. Peers must share a PID namespace (``docker run
    --pid=container:<id>``, Kubernetes ``shareProcessNamespace: true``).

    A RuntimeError, not an OSError: the call and the file are fine, the
    deployment is not; code that catches OSError around ``open`` to create
    a missing stream must not take this for one."""
