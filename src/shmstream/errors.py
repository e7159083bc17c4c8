"""Exceptions raised by shmstream. Each type has one meaning.

Every error the library raises is a :class:`ShmstreamError` and, as a
second base, the built-in exception a Python user expects (RuntimeError,
ValueError, TimeoutError, FileNotFoundError, ...), so ``except
shmstream.ShmstreamError`` catches everything shmstream raises and ``except
TimeoutError`` (or any other built-in) keeps working. No caller needs to
match on message text: each situation has its own class.

Errors that carry an errno (a failed system call, a missing or duplicate
name) are :class:`ShmstreamOSError`. Like :class:`OSError` itself,
``ShmstreamOSError(errno, message)`` picks the subclass from the errno:
ENOENT gives :class:`ShmstreamFileNotFoundError` (also a FileNotFoundError),
EEXIST :class:`ShmstreamFileExistsError`, EACCES/EPERM
:class:`ShmstreamPermissionError`, ETIMEDOUT :class:`ShmstreamTimeoutError`,
EAGAIN :class:`ShmstreamBlockingIOError`; any other errno stays a
ShmstreamOSError with its ``errno`` set (``except OSError`` and a look at
``exc.errno`` work as for any OSError).
"""

import errno as _errno
from typing import Any

__all__ = [
    "ShmstreamError",
    "ShmstreamOSError",
    "ShmstreamFileNotFoundError",
    "ShmstreamFileExistsError",
    "ShmstreamPermissionError",
    "ShmstreamTimeoutError",
    "ShmstreamBlockingIOError",
    "ShmstreamValueError",
    "ShmstreamTypeError",
    "ShmstreamIndexError",
    "ShmstreamBufferError",
    "MissingExtraError",
    "ExtraVersionError",
    "NoPeerError",
    "InsecureBridgeError",
    "HandleClosedError",
    "WaitCancelledError",
    "LockHeldError",
    "NotLockOwnerError",
    "LoanStateError",
    "ChannelRoleError",
    "AlreadyStartedError",
    "BatchLostError",
    "DemoFailedError",
    "NoCpuMirrorError",
    "GpuRequiredError",
    "CudaUnavailableError",
    "CudaError",
    "InconsistentStreamError",
    "StaleStreamError",
    "FrameOverwrittenError",
    "ViewEndedError",
    "CorruptStreamError",
    "LayoutVersionError",
    "ChannelClosedError",
    "ChannelBrokenError",
    "ChannelBusyError",
    "GpuStreamGoneError",
    "SegmentOwnerError",
    "PidNamespaceError",
]


class ShmstreamError(Exception):
    """The root of every error shmstream raises."""


# -- errors with an errno (OSError and its built-in subclasses) ------------


class ShmstreamOSError(ShmstreamError, OSError):
    """A system call failed, or a name is missing or taken (``errno`` says
    which). ``ShmstreamOSError(errno, message)`` returns the subclass that
    matches the errno, as ``OSError(errno, message)`` does."""

    def __new__(cls, *args: Any, **kwargs: Any) -> "ShmstreamOSError":
        if cls is ShmstreamOSError and len(args) >= 2 and isinstance(args[0], int):
            cls = _BY_ERRNO.get(args[0], ShmstreamOSError)  # noqa: PLW0642 - errno picks the subclass
        return super().__new__(cls, *args, **kwargs)


class ShmstreamFileNotFoundError(ShmstreamOSError, FileNotFoundError):
    """No stream, channel, shared array, recording or file of that name
    (ENOENT); the message names the call that creates it."""


class ShmstreamFileExistsError(ShmstreamOSError, FileExistsError):
    """The name is taken (EEXIST); the message names the call that attaches
    to it."""


class ShmstreamPermissionError(ShmstreamOSError, PermissionError):
    """Not allowed (EACCES, EPERM): another user's segment or file, or a
    write through a read-only handle."""


class ShmstreamTimeoutError(ShmstreamOSError, TimeoutError):
    """A wait ran out of time (a read, a lock, a channel send or receive, a
    bridge waiting for a peer)."""


class ShmstreamBlockingIOError(ShmstreamOSError, BlockingIOError):
    """The segment is still being created (EAGAIN): try again."""


_BY_ERRNO = {
    _errno.ENOENT: ShmstreamFileNotFoundError,
    _errno.EEXIST: ShmstreamFileExistsError,
    _errno.EACCES: ShmstreamPermissionError,
    _errno.EPERM: ShmstreamPermissionError,
    _errno.ETIMEDOUT: ShmstreamTimeoutError,
    _errno.EAGAIN: ShmstreamBlockingIOError,
}


# -- bad arguments ---------------------------------------------------------


class ShmstreamValueError(ShmstreamError, ValueError):
    """An argument has a bad value: shape, dtype, name, size, count, index
    form, a request the stream cannot serve, ..."""


class ShmstreamTypeError(ShmstreamError, TypeError):
    """An argument has the wrong type."""


class ShmstreamIndexError(ShmstreamError, IndexError):
    """An index is out of range (DirectArray rows, slots)."""


class ShmstreamBufferError(ShmstreamError, BufferError):
    """A buffer cannot be exported as asked (a dtype with no DLPack
    equivalent: use ``np.asarray``)."""


class MissingExtraError(ShmstreamError, ModuleNotFoundError):
    """An optional dependency is not installed (``zenoh`` for the bridge);
    the message names the extra to install."""


class ExtraVersionError(ShmstreamError, RuntimeError):
    """An optional dependency is installed in a version shmstream does not
    support: ``shmstream.torch.DataLoader`` with a torch outside the range it
    is tested with (the message names the installed version and the range).
    Install a supported version, or use the dependency's own API."""


class NoPeerError(ShmstreamError, ConnectionError):
    """No Zenoh peer or router answered (``remote_exports``): nothing is
    reachable with these endpoints, which is not the same as reachable
    bridges that export nothing (an empty list)."""


class InsecureBridgeError(ShmstreamError, ValueError):
    """A bridge (or ``remote_exports``) was asked to listen or connect
    without authenticating its peers, or its password file is readable by
    others: give a private password file or TLS certificates, or say
    ``insecure=True`` (``--insecure``) to let anyone in."""


# -- handles and their state -----------------------------------------------


class HandleClosedError(ShmstreamError, RuntimeError):
    """The handle (stream, GPU stream, channel end, shared array, bridge
    export, zero-copy message or DLPack tensor) was closed or released; open
    a new one to go on."""


class WaitCancelledError(HandleClosedError):
    """The handle was closed (by another thread) while this call was waiting
    on it: a read, a ``wait_for``, a channel send or receive."""


class LockHeldError(ShmstreamError, RuntimeError):
    """The call needs the stream's lock, and it is already held where it
    cannot be taken: by this thread through another handle (taking it again
    would deadlock), or by another thread of this handle (close)."""


class NotLockOwnerError(ShmstreamError, RuntimeError):
    """The call needs the stream's lock held by this thread (``release``,
    ``write_locked``, ``read(safe=False)``, ``write_view`` inside
    ``locked()``), and this thread does not hold it."""


class LoanStateError(ShmstreamError, RuntimeError):
    """A write loan is in the wrong state for the call: a ``write_view`` or
    zero-copy send is already open on the handle, or none is open to finish,
    or a device view of an unpublished slot was asked for outside a
    ``write_view``."""


class ChannelRoleError(ShmstreamError, AttributeError):
    """The call belongs to the other end of the channel (``send`` on the
    consumer, ``recv`` on the producer). An AttributeError, as for any
    method an object lacks: ``hasattr(rx, "send")`` is False."""


class AlreadyStartedError(ShmstreamError, RuntimeError):
    """``start()`` on something already started (a bridge)."""


class BatchLostError(ShmstreamError, RuntimeError):
    """``shmstream.torch.DataLoader`` lost a batch: the worker that wrote it
    died and its slot was reused, or the batch arrived after its loader was
    garbage-collected. Restart the epoch."""


class DemoFailedError(ShmstreamError, RuntimeError):
    """A child process of ``shmstream demo`` exited early."""


# -- GPU streams -----------------------------------------------------------


class NoCpuMirrorError(ShmstreamError, ValueError):
    """The GPU stream has no CPU mirror, and the call reads frames on the
    CPU (a CPU-only open, history reads, recording). Create the stream with
    ``cpu_mirror=True``."""


class GpuRequiredError(ShmstreamError, RuntimeError):
    """The call needs a GPU-attached stream handle (``pinned_buffer``)."""


class CudaUnavailableError(ShmstreamError, RuntimeError):
    """CUDA, or the device the stream lives on, is not available in this
    process (no driver, no device, CUDA_VISIBLE_DEVICES hides it)."""


class CudaError(ShmstreamError, RuntimeError):
    """A CUDA call failed, or a GPU stream handle was used in a forked child
    (CUDA state does not survive fork)."""


# -- segments and streams --------------------------------------------------


class InconsistentStreamError(ShmstreamError, RuntimeError):
    """No consistent payload is published: the last write was aborted (an
    exception inside ``write_view``) or its writer died mid-write. The next
    successful write recovers the stream."""


class StaleStreamError(ShmstreamError, RuntimeError):
    """The handle belongs to an older generation of the name: the stream was
    unlinked and created again since this handle was opened."""


class FrameOverwrittenError(ShmstreamError, RuntimeError):
    """A zero-copy view (``read_view``/``read_new_view``) was overwritten by
    the writer while the block was still using it: what the block read may
    mix two frames. Copy out what you need inside the block, create the
    stream with more ``slots``, or use ``read()`` for a copy."""


class ViewEndedError(ShmstreamError, RuntimeError):
    """The ``payload`` of a zero-copy read view (``read_view``,
    ``read_new_view``; ``frames`` of ``read_since_view``) was used after its
    block: the slot it showed may hold a newer frame by then. Copy out what
    you keep inside the block (``np.array(pub.payload)``), or use ``read()``."""


class CorruptStreamError(ShmstreamError, RuntimeError):
    """A segment's header failed validation (magic, layout version, checksum or
    sizes): it is corrupt, unfinished, or made by another shmstream version."""


class LayoutVersionError(CorruptStreamError):
    """The segment has another layout version: another shmstream version
    made it. Upgrade, or remove the segment and create it again."""


class ChannelClosedError(ShmstreamError, EOFError):
    """End of a channel's stream: its producer closed the channel or died, and
    every message it published has been received. A new producer can take
    over with ``open_channel(name, role="producer")``."""


class ChannelBrokenError(ShmstreamError, BrokenPipeError):
    """Nothing will read what is sent: the channel's consumer closed it, or
    died while the ring was full. A new consumer can take over with
    ``open_channel(name)``."""


class ChannelBusyError(ShmstreamError, RuntimeError):
    """The channel end (producer or consumer) is held by another live process
    or handle: a channel has exactly one of each."""


class GpuStreamGoneError(ShmstreamError, RuntimeError):
    """The device buffer of a GPU stream is gone: the process that created it
    exited (CUDA IPC memory belongs to its exporter), or a writer died before
    its device copy completed. Metadata, and a CPU mirror if there is one,
    stay readable; recreate the stream to go on."""


class SegmentOwnerError(ShmstreamPermissionError):
    """The segment's file belongs to another user than this process's
    effective uid: whoever owns it can read and change what goes through it
    (a name squatted by another user becomes a channel into this process).
    Open it anyway, if you trust that user, with ``allow_owner=<uid or user
    name>`` or the environment variable ``SHMSTREAM_ALLOW_OWNERS=uid,...``."""


class PidNamespaceError(ShmstreamError, RuntimeError):
    """A GPU stream was created in another PID namespace (another container
    sharing /dev/shm): its device buffer (CUDA IPC memory) is mapped only
    where its creator's pid can be judged. Peers of a GPU stream must share
    a PID namespace (``docker run --pid=container:<id>``, Kubernetes
    ``shareProcessNamespace: true``). CPU streams, channels, shared arrays
    and loader pools are not refused (docs/containers.md).

    A RuntimeError, not an OSError: the call and the file are fine, the
    deployment is not; code that catches OSError around ``open`` to create
    a missing stream must not take this for one."""
