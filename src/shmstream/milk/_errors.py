"""What a new user meets first with milk streams, said with the next step:
the OS errors of ``open`` and ``create`` (a missing directory, a
MILK_SHM_DIR that names none, permissions, a file that is not one) turned
into messages that name the path, the cause and what to do. The binding
raises them with strerror's words only; the Python layer knows the
stream's name, its directory and how milk chose it."""

from __future__ import annotations

import errno
import os

from ..errors import ShmstreamOSError
from .layout import DEFAULT_DIR


def _who(path: str) -> str:
    """``mode 0o644, owner uid 0`` of path, or '' if it cannot be read."""
    try:
        st = os.stat(path)
    except OSError:
        return ""
    return f" (mode {oct(st.st_mode & 0o7777)}, owner uid {st.st_uid})"


def _missing_env() -> str:
    """A note when $MILK_SHM_DIR names no directory: milk then falls back
    (and warns "[ WARNING ] ... does not exist"), and so does shmstream."""
    env = os.environ.get("MILK_SHM_DIR")
    if not env or os.path.isdir(env):
        return ""
    return (
        f"; MILK_SHM_DIR is {env!r}, which is not a directory, so milk's fallback "
        f"({DEFAULT_DIR}, else /tmp) was used: create it (mkdir -p {env}) or fix MILK_SHM_DIR"
    )


def _not_a_file(exc: OSError, name: str, path: str) -> ShmstreamOSError | None:
    if exc.errno not in (errno.ENODEV, errno.EISDIR, errno.ENXIO):
        return None
    return ShmstreamOSError(
        exc.errno,
        f"{path} is not a regular file (a directory, FIFO or device), so not milk stream "
        f"'{name}'; if nothing uses it, remove it, then create the stream again",
    )


def on_open(exc: OSError, name: str, path: str, given: str | None) -> ShmstreamOSError | None:
    """The error ``open(name)`` raises for ``exc`` from the binding, or None
    to raise ``exc`` as it is. ``given``: the caller's ``dir=``."""
    directory = os.path.dirname(path)
    if exc.errno == errno.ENOENT:
        where = (
            f"directory {directory} does not exist"
            if not os.path.isdir(directory)
            else f"no file {path}"
        )
        return ShmstreamOSError(
            errno.ENOENT,
            f"no milk stream '{name}' ({where}); create it with shmstream.milk.create or "
            "milk, or point MILK_SHM_DIR (or dir=) at the directory that holds it"
            + ("" if given else _missing_env()),
        )
    if exc.errno in (errno.EACCES, errno.EPERM):
        return ShmstreamOSError(
            exc.errno,
            f"cannot open milk stream '{name}' ({path}{_who(path)}): permission denied. A "
            "milk reader writes into the file (it claims a semaphore in the reader PID "
            "table), so it needs read and write access: ask its owner to make it 0666 "
            f"(chmod 666 {path}, milk's own default) or run as that user",
        )
    return _not_a_file(exc, name, path)


def on_stat_denied(exc: OSError, name: str, path: str) -> ShmstreamOSError:
    """The error ``stat("milk:NAME")`` raises when the file cannot be read."""
    return ShmstreamOSError(
        exc.errno,
        f"cannot read milk stream '{name}' ({path}{_who(path)}): permission denied; stat "
        "only reads the file, so read access is enough: ask its owner to make it readable "
        f"(chmod 644 {path}, or 666 as milk makes it) or run as that user",
    )


def on_create(exc: OSError, name: str, path: str, given: str | None) -> ShmstreamOSError | None:
    """The error ``create(name)`` raises for ``exc`` (None: ``exc`` as it is)."""
    directory = os.path.dirname(path)
    if exc.errno == errno.ENOENT:
        return ShmstreamOSError(
            errno.ENOENT,
            f"cannot create milk stream '{name}': directory {directory} does not exist; "
            f"create it (mkdir -p {directory}; milk's own is {DEFAULT_DIR}, often a tmpfs "
            "mount) or point MILK_SHM_DIR (or dir=) at an existing one"
            + ("" if given else _missing_env()),
        )
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return ShmstreamOSError(
            exc.errno,
            f"cannot create milk stream '{name}' in {directory}{_who(directory)}: the "
            f"directory is not writable by you (uid {os.geteuid()}); point MILK_SHM_DIR (or "
            "dir=) at one you can write, or ask its owner to let you (milk's directory is "
            "usually open to every user of the machine: chmod 1777)",
        )
    return _not_a_file(exc, name, path)
