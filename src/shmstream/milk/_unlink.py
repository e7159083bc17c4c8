"""Removing a milk stream: its file, as milk's ImageStreamIO_destroyIm does,
under the ownership rule /dev/shm's sticky bit gives ``shmstream.unlink``
(docs/milk.md, "Removing a stream")."""

from __future__ import annotations

import errno
import os
from stat import S_ISDIR

from ..errors import ShmstreamFileNotFoundError, ShmstreamOSError, ShmstreamPermissionError
from .layout import path_of


def unlink(name: str, dir: str | None = None) -> None:
    """Remove milk stream ``name``'s file, as milk's ImageStreamIO_destroyIm
    does (its semaphores live in the file: nothing else is left behind).
    Open handles keep their mapping. The rule /dev/shm's sticky bit gives
    ``shmstream.unlink`` holds whatever milk's directory's mode: only the
    file's owner, the directory's owner or root removes it (else
    PermissionError); a link is removed, not followed; a directory is
    refused (IsADirectoryError's errno, EISDIR)."""
    path = path_of(name, dir)
    try:
        st = os.lstat(path)
        if S_ISDIR(st.st_mode):
            raise ShmstreamOSError(
                errno.EISDIR,
                f"{path} is a directory, not milk stream '{name}'; shmstream removes no "
                f"directories: if nothing uses it, remove it with rmdir or rm -r {path}",
            )
        me = os.geteuid()
        if me not in (0, st.st_uid) and os.stat(os.path.dirname(path)).st_uid != me:
            raise ShmstreamPermissionError(
                errno.EPERM,
                f"milk stream '{name}' ({path}) belongs to uid {st.st_uid}, not to you "
                f"(uid {me}): shmstream removes only your own milk streams, as /dev/shm's "
                "sticky bit has it for its own; ask its owner (or root) to remove it",
            )
        os.unlink(path)
    except FileNotFoundError:
        raise ShmstreamFileNotFoundError(
            errno.ENOENT, f"no milk stream '{name}' ({path})"
        ) from None
    except PermissionError as exc:
        if isinstance(exc, ShmstreamPermissionError):
            raise
        raise ShmstreamPermissionError(
            exc.errno,
            f"cannot remove milk stream '{name}' ({path}): {exc.strerror}; milk's directory "
            "does not let you remove it: ask its owner (or root)",
        ) from None
