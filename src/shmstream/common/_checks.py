"""Argument checks that every kind shares: names, integers, paths, shapes,
dtypes, modes, timeouts, owners, and the errors for a missing or existing
name. One rule and one message for each, so the kinds cannot drift apart.
A check that belongs to one kind lives in its folder with its wording
(``streams/_checks.py``, ``channels/_checks.py``; the loader, arrays and
recordings keep theirs beside their code); tests/repo/test_layers.py holds
that each check here is used by two kinds at least.

Each check returns the normalised value or raises the exception a Python
user expects (TypeError for a wrong type, ValueError for a wrong value),
naming the argument.
"""

from __future__ import annotations

import math
import numbers
import operator
import os
import re
import warnings
from typing import Any

import numpy as np

from .. import _native
from ..errors import (
    ShmstreamFileExistsError,
    ShmstreamFileNotFoundError,
    ShmstreamTypeError,
    ShmstreamValueError,
)
from . import _dtypes

#: The rule every name follows (streams, channels, shared arrays, loader
#: slots): the C core's ss_segment_name() says the same.
NAME_RULE: str = _native.NAME_RULE


def check_name(name: Any, what: str = "stream") -> str:
    """A name of 1 to 255 UTF-8 bytes without NUL (docs/ABI.md, "Names")."""
    if not isinstance(name, str):
        raise ShmstreamTypeError(f"{what} name must be a str, not {type(name).__name__}")
    try:
        size = len(name.encode("utf-8"))
    except UnicodeEncodeError:
        raise ShmstreamValueError(
            f"{what} name {name!r} cannot be encoded as UTF-8 (lone surrogate); "
            f"a name is {NAME_RULE}"
        ) from None
    if not name or "\x00" in name or size > _native.MAX_NAME_BYTES:
        reason = (
            "is empty"
            if not name
            else "contains a NUL character"
            if "\x00" in name
            else f"is {size} UTF-8 bytes long"
        )
        raise ShmstreamValueError(
            f"invalid {what} name {name!r}: it {reason}; a name is {NAME_RULE}"
        )
    return name


def check_int(what: str, value: Any, minimum: int | None = None, maximum: int | None = None) -> int:
    """An integer (a bool, a float or a string is refused, not truncated)
    in [minimum, maximum]: a value the binding's C type cannot hold never
    reaches it (nanobind's TypeError would name neither the argument nor
    the range)."""
    if isinstance(value, (bool, np.bool_)):
        raise ShmstreamTypeError(f"{what} must be an integer, not {value!r}")
    try:
        checked = operator.index(value)
    except TypeError:
        raise ShmstreamTypeError(
            f"{what} must be an integer, not {type(value).__name__} {value!r}"
        ) from None
    if minimum is not None and checked < minimum:
        raise ShmstreamValueError(f"{what} must be >= {minimum}, got {checked}")
    if maximum is not None and checked > maximum:
        raise ShmstreamValueError(f"{what} must be <= {maximum}, got {checked}")
    return checked


def check_unsigned(what: str, value: Any, bits: int, minimum: int = 0) -> int:
    """An integer in [minimum, 2**bits): a field of that many bits."""
    checked = check_int(what, value)
    if not minimum <= checked < 2**bits:
        raise ShmstreamValueError(f"{what} must be in [{minimum}, 2**{bits}), got {checked}")
    return checked


def check_u64(what: str, value: Any, minimum: int = 0) -> int:
    """An integer in [minimum, 2**64): the type of every shared counter."""
    return check_unsigned(what, value, 64, minimum)


def check_bool(what: str, value: Any) -> bool:
    """A flag: True or False (NumPy's bool too). Anything else, a string
    such as "no" or an int included, is a TypeError, not read as true."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise ShmstreamTypeError(f"{what} must be True or False, not {type(value).__name__} {value!r}")


def check_path(what: str, path: Any) -> str:
    """A file or directory path: a str or an os.PathLike (bytes are
    decoded as the file system does)."""
    try:
        text = os.fspath(path)
    except TypeError:
        raise ShmstreamTypeError(
            f"{what} must be a path (str or os.PathLike), not {type(path).__name__} {path!r}"
        ) from None
    return os.fsdecode(text)


def check_dim(dim: Any) -> int:
    return check_int("shape dimensions", dim, minimum=0)


def check_shape(shape: Any, limited: bool = True) -> tuple[int, ...]:
    """An int or a sequence of non-negative ints (no bools, no floats), of
    at most MAX_NDIM dimensions (:func:`check_ndim`), or of any number when
    ``limited`` is False (the direct reader's arrays in files)."""
    if isinstance(shape, (str, bytes, bool, np.bool_)):
        raise ShmstreamTypeError(f"shape must be a tuple of integers, not {shape!r}")
    if isinstance(shape, (int, np.integer)):
        return (check_dim(shape),)
    try:
        items = list(shape)
    except TypeError:
        raise ShmstreamTypeError(
            f"shape must be a tuple of integers, not {type(shape).__name__}"
        ) from None
    dims = tuple(check_dim(d) for d in items)
    return check_ndim(dims) if limited else dims


def check_ndim(dims: tuple[int, ...], hint: str = "") -> tuple[int, ...]:
    """A shape of at most MAX_NDIM dimensions (a segment header and a
    channel message hold 8): the one message of that limit, with ``hint``
    (what to do instead) after it."""
    if len(dims) > _native.MAX_NDIM:
        raise ShmstreamValueError(
            f"shape {dims} has {len(dims)} dimensions; at most {_native.MAX_NDIM} are "
            f"supported{hint}"
        )
    return dims


def check_dtype(dtype: Any) -> np.dtype:
    """A fixed-size NumPy dtype (object dtypes refused), also given as the
    description text that ``stat()`` and ``to_config()`` print."""
    if isinstance(dtype, str) and dtype[:1] in "[(":
        try:
            return _dtypes.normalize(_dtypes.decode(dtype))
        except (ValueError, SyntaxError, TypeError):
            pass
    return _dtypes.normalize(dtype)


def check_timeout(timeout: Any, what: str = "timeout") -> float | None:
    """Seconds to wait: None or ``math.inf`` wait for ever, 0 does not
    wait. A negative or NaN value is a ValueError; anything but a real
    number a TypeError."""
    if timeout is None:
        return None
    if isinstance(timeout, (bool, np.bool_)) or not isinstance(timeout, numbers.Real):
        raise ShmstreamTypeError(
            f"{what} must be a number of seconds, math.inf or None, not "
            f"{type(timeout).__name__} {timeout!r}"
        )
    value = float(timeout)
    if math.isnan(value) or value < 0:
        raise ShmstreamValueError(f"{what} must be >= 0 seconds, math.inf or None, got {timeout!r}")
    return value


def check_mode(mode: Any) -> int:
    if isinstance(mode, bool) or not isinstance(mode, (int, np.integer)) or not 0 < mode <= 0o777:
        shown = oct(mode) if isinstance(mode, (int, np.integer)) and mode > 0 else repr(mode)
        raise ShmstreamValueError(
            f"mode must be permission bits from 0o1 to 0o777 like 0o600, got {shown}"
        )
    return int(mode)


def missing_name_error(
    name: str, what: str = "shared memory", create: str = "shmstream.create({name!r}, ...)"
) -> FileNotFoundError:
    exc = ShmstreamFileNotFoundError(
        f"{what} {name!r} does not exist; create it with {create.format(name=name)} first"
    )
    exc.errno = 2  # ENOENT
    return exc


def duplicate_name_error(
    name: str, what: str = "shared memory", attach: str = "shmstream.open({name!r})"
) -> FileExistsError:
    exc = ShmstreamFileExistsError(
        f"{what} {name!r} already exists; use {attach.format(name=name)} to attach to it"
    )
    exc.errno = 17  # EEXIST
    return exc


def check_allow_owner(allow_owner: Any) -> list[int]:
    """``allow_owner`` of every open function: None, a uid (int), a user
    name (str), or a collection of them (a service that opens the streams
    of several users); returns the uids. The open refuses a segment owned by
    another uid than the caller's effective uid unless it is listed here or
    in the environment variable SHMSTREAM_ALLOW_OWNERS (docs/ABI.md, "Owner
    and PID namespace")."""
    _check_allow_owners_env()
    if allow_owner is None:
        return []
    items = [allow_owner] if isinstance(allow_owner, (int, str)) else allow_owner
    try:
        items = list(items)
    except TypeError:
        raise ShmstreamTypeError(
            "allow_owner must be a uid (int), a user name (str) or a collection of them, "
            f"not {type(allow_owner).__name__}"
        ) from None
    uids = []
    for item in items:
        if isinstance(item, bool) or not isinstance(item, (int, str)):
            raise ShmstreamTypeError(
                f"allow_owner entries must be uids (int) or user names (str), "
                f"not {type(item).__name__}"
            )
        if isinstance(item, str):
            import pwd

            try:
                item = pwd.getpwnam(item).pw_uid  # noqa: PLW2901 - a user name becomes its uid
            except KeyError:
                raise ShmstreamValueError(f"allow_owner: no user named {item!r}") from None
        if not 0 <= item < 2**32 - 1:
            raise ShmstreamValueError(f"allow_owner: {item} is not a uid (0 to 2**32 - 2)")
        uids.append(int(item))
    return uids


#: The SHMSTREAM_ALLOW_OWNERS value last checked (each value is warned about once).
_env_checked: list[str | None] = [None]


def _check_allow_owners_env() -> None:
    """A SHMSTREAM_ALLOW_OWNERS entry that is neither a uid nor a user name
    here is ignored by the core's rule: say so once, naming it, rather than
    refuse other users' segments with no hint why."""
    value = os.environ.get("SHMSTREAM_ALLOW_OWNERS")
    if value is None or value == _env_checked[0]:
        return
    _env_checked[0] = value
    import pwd

    bad = []
    for entry in re.split(r"[,\s]+", value):
        if not entry or (entry.isascii() and entry.isdigit() and int(entry) < 2**32 - 1):
            continue
        try:
            pwd.getpwnam(entry)
        except KeyError:
            bad.append(entry)
    if bad:
        warnings.warn(
            f"SHMSTREAM_ALLOW_OWNERS: {', '.join(map(repr, bad))} is neither a uid (0 to "
            "2**32 - 2) nor a user name here, so it is ignored; list uids or user names, "
            "separated by commas or blanks",
            RuntimeWarning,
            stacklevel=4,
        )


def spin_ns(spin_us: Any) -> int:
    """The spin budget in ns for the core (-1: the default)."""
    if spin_us is None:
        return -1
    if isinstance(spin_us, (bool, np.bool_)) or not isinstance(spin_us, numbers.Real):
        raise ShmstreamTypeError(
            f"spin_us must be a number of microseconds or None, not {spin_us!r}"
        )
    value = float(spin_us)
    if not value >= 0:
        raise ShmstreamValueError(f"spin_us must be >= 0 or None, got {spin_us!r}")
    return int(min(value, 1e12) * 1000)
