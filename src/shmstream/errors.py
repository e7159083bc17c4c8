"""Exceptions raised by shmstream. Each type has one meaning."""


class InconsistentStreamError(RuntimeError):
    """No consistent payload is published: the last write was aborted (an
    exception inside ``write_view``) or its writer died mid-write. The next
    successful write recovers the stream."""


class StaleStreamError(RuntimeError):
    """The handle belongs to an older generation of the name: the stream was
    unlinked and created again since this handle was opened."""


class CorruptStreamError(RuntimeError):
    """A segment's header failed validation (magic, layout version, checksum or
    sizes): it is corrupt, unfinished, or made by another shmstream version."""
