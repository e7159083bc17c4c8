"""Where milk keeps its streams and what a stream file's metadata says.

The byte layout itself is parsed once, in the C core (src/core/milk.c,
docs/milk.md): this module turns the parsed dict into a typed record and
finds the directory the way milk's ImageStreamIO_shmdirname does.
"""

from __future__ import annotations

import dataclasses
import os
import time

import numpy as np

from .. import _milk
from ..errors import ShmstreamValueError
from .dtypes import dtype_of

#: milk's compiled-in default directory (ImageStruct.h SHAREDMEMDIR).
DEFAULT_DIR = "/milk/shm"
#: milk's last resort when neither $MILK_SHM_DIR nor /milk/shm exists.
FALLBACK_DIR = "/tmp"
SUFFIX = ".im.shm"


def shm_dir() -> str:
    """The directory milk uses: ``$MILK_SHM_DIR`` if it names a directory,
    else ``/milk/shm`` if it exists, else ``/tmp`` (ImageStreamIO_shmdirname)."""
    return listed_dir() or FALLBACK_DIR


def listed_dir() -> str | None:
    """milk's own directory (``$MILK_SHM_DIR`` or ``/milk/shm``) if it
    exists: where ``shmstream list`` looks. None when milk would fall back
    to /tmp, which holds everybody's files and is not searched."""
    env = os.environ.get("MILK_SHM_DIR")
    if env and os.path.isdir(env):
        return env
    if os.path.isdir(DEFAULT_DIR):
        return DEFAULT_DIR
    return None


def unix_ns(milk_ns: int) -> int:
    """A time milk stamped (CLOCK_TAI: 37 s ahead of UNIX time where the
    kernel was told the leap seconds, else equal) as UNIX nanoseconds."""
    return milk_ns - (time.clock_gettime_ns(time.CLOCK_TAI) - time.time_ns())


def instance_id(inode: int, creation_ns: int) -> str:
    """Which file a stream is, in the form of a shmstream stream's instance
    id (hex; its first 16 digits, milk's creationtime, tell one creation
    from the next, the rest is the inode)."""
    return f"{creation_ns & 0xFFFFFFFFFFFFFFFF:016x}{inode & 0xFFFFFFFFFFFFFFFF:016x}"


def path_of(name: str, directory: str | None = None) -> str:
    """The file of stream ``name``: ``<dir>/<name>.im.shm``."""
    if not isinstance(name, str):
        raise TypeError(f"a milk stream name is a str, not {type(name).__name__}")
    raw = name.encode("utf-8", "surrogateescape")
    if (
        not raw
        or len(raw) > _milk.MAX_NAME_BYTES
        or "/" in name
        or "\0" in name
        or name in {".", ".."}
    ):
        raise ShmstreamValueError(
            f"invalid milk stream name {name!r}: 1 to {_milk.MAX_NAME_BYTES} bytes, no '/' or NUL"
        )
    return os.path.join(directory or shm_dir(), name + SUFFIX)


@dataclasses.dataclass(frozen=True)
class Layout:
    """A milk stream's metadata as shmstream copied it at open."""

    version: str
    name: str
    shape: tuple[int, ...]  # NumPy's order: milk's size[] reversed
    dtype: np.dtype
    nsem: int
    nkw: int
    cbsize: int
    imagetype: int
    frame_bytes: int
    total_bytes: int
    offsets: dict[str, int]

    @classmethod
    def from_dict(cls, d: dict) -> Layout:
        size = tuple(int(s) for s in d["size"][: d["naxis"]])
        return cls(
            version=d["version"],
            name=d["name"],
            shape=size[::-1],
            dtype=dtype_of(d["datatype"]),
            nsem=d["nsem"],
            nkw=d["nkw"],
            cbsize=d["cbsize"],
            imagetype=d["imagetype"],
            frame_bytes=d["frame_bytes"],
            total_bytes=d["total_bytes"],
            offsets=dict(d["offsets"]),
        )


def parse(metadata: bytes, file_bytes: int) -> Layout:
    """Parse a stream file's first 384 bytes (CorruptStreamError,
    LayoutVersionError or ValueError when milk's reader would refuse it)."""
    return Layout.from_dict(_milk.parse_metadata(bytes(metadata), int(file_bytes)))
