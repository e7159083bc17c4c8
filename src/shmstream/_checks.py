"""Argument checks shared by every part: streams, GPU streams, channels,
shared arrays, the loader and the direct reader. One rule and one message
for each kind of argument, so the parts cannot drift apart.

Each check returns the normalised value or raises the exception a Python
user expects (TypeError for a wrong type, ValueError for a wrong value),
naming the argument.
"""

from __future__ import annotations

import math
import numbers
import operator
import os
from collections.abc import Mapping
from typing import Any, Literal

import numpy as np

from . import _dtypes, _native
from .errors import (
    ShmstreamFileExistsError,
    ShmstreamFileNotFoundError,
    ShmstreamTypeError,
    ShmstreamValueError,
)

#: The largest value of a shared 64-bit counter (count, frame id, time).
MAX_U64 = 2**64 - 1
#: The largest value of a 32-bit field (a channel message's type id, a batch).
MAX_U32 = 2**32 - 1

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


def _check_unsigned(what: str, value: Any, bits: int, minimum: int = 0) -> int:
    checked = check_int(what, value)
    if not minimum <= checked < 2**bits:
        raise ShmstreamValueError(f"{what} must be in [{minimum}, 2**{bits}), got {checked}")
    return checked


def check_u64(what: str, value: Any, minimum: int = 0) -> int:
    """An integer in [minimum, 2**64): the type of every shared counter."""
    return _check_unsigned(what, value, 64, minimum)


def check_u32(what: str, value: Any) -> int:
    """An integer in [0, 2**32): a channel message's ``type_id``."""
    return _check_unsigned(what, value, 32)


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


def check_count(value: Any) -> int:
    """An explicit count for a write: in [1, 2**63), so that the count
    still grows after it (include/shmstream.h, SS_MAX_COUNT)."""
    checked = check_int("count", value)
    if not 1 <= checked <= _native.MAX_COUNT:
        raise ShmstreamValueError(
            f"count must be in [1, 2**63), got {checked}: the count must still grow after it"
        )
    return checked


def check_dim(dim: Any) -> int:
    return check_int("shape dimensions", dim, minimum=0)


def check_shape(shape: Any, max_ndim: int | None = _native.MAX_NDIM) -> tuple[int, ...]:
    """An int or a sequence of non-negative ints (no bools, no floats), of
    at most ``max_ndim`` dimensions (a segment header holds 8; None: any)."""
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
    if max_ndim is not None and len(dims) > max_ndim:
        raise ShmstreamValueError(
            f"shape {dims} has {len(dims)} dimensions; at most {max_ndim} are supported"
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


def check_after(after: Any) -> int:
    """A count to wait past (read_after, wait_for_count): the rule of every
    count argument, :func:`check_u64` (TypeError for a non-integer, as for
    read_since's ``count``; ValueError outside [0, 2**64))."""
    return check_u64("after", after)


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


def check_positive_seconds(what: str, value: Any) -> float:
    """A duration that must be > 0 seconds (``is_stale``'s ``max_age``)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise ShmstreamTypeError(
            f"{what} must be a number of seconds, not {type(value).__name__} {value!r}"
        )
    seconds = float(value)
    if not seconds > 0:  # NaN too
        raise ShmstreamValueError(f"{what} must be positive, got {value!r}")
    return seconds


def check_lockables(streams: Any) -> tuple[Any, ...]:
    """``locked_many``'s streams: a collection of handles, each with a
    ``name`` and ``locked(timeout=, poll_interval=)``."""
    if isinstance(streams, (str, bytes)):
        streams = [streams]  # refused below, as one item
    try:
        handles = tuple(streams)
    except TypeError:
        raise ShmstreamTypeError(
            f"streams must be a sequence of stream handles, not {type(streams).__name__}"
        ) from None
    for handle in handles:
        if not (hasattr(handle, "name") and callable(getattr(handle, "locked", None))):
            raise ShmstreamTypeError(
                "streams must hold stream handles (objects with name and locked(), as "
                f"shmstream.open returns), not {type(handle).__name__} {handle!r}"
            )
    return handles


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


def check_mode(mode: Any) -> int:
    if isinstance(mode, bool) or not isinstance(mode, (int, np.integer)) or not 0 < mode <= 0o777:
        raise ShmstreamValueError(f"mode must be permission bits like 0o600, got {mode!r}")
    return int(mode)


def check_slots(slots: Any) -> int:
    if (
        isinstance(slots, bool)
        or not isinstance(slots, (int, np.integer))
        or not (1 <= slots <= _native.MAX_SLOTS)
    ):
        raise ShmstreamValueError(
            f"slots must be an int from 1 to {_native.MAX_SLOTS}, got {slots!r}"
        )
    return int(slots)


def check_history(history: Any, slots: Any, gpu: bool) -> int:
    """``history=N`` of create: 0 (none) to MAX_HISTORY publications kept;
    it sets the slots itself (N + 1), so ``slots`` must be left out (None),
    and GPU streams have none."""
    n = check_int("history", history, minimum=0)
    if n > _native.MAX_HISTORY:
        raise ShmstreamValueError(f"history must be 0 to {_native.MAX_HISTORY}, got {n}")
    if n and gpu:
        raise ShmstreamValueError(
            "history is not available on GPU streams (their device buffer has 2 slots); "
            "record a GPU stream through its CPU mirror (cpu_mirror=True) instead"
        )
    if n and slots is not None:
        raise ShmstreamValueError(
            f"history={n} uses {n + 1} slots; leave slots out (got slots={slots})"
        )
    return n


Casting = Literal["unsafe", "same_kind", "safe", "equiv", "no"]
CASTINGS: tuple[Casting, ...] = ("unsafe", "same_kind", "safe", "equiv", "no")


def check_casting(casting: Any) -> Casting:
    """A handle's ``casting`` rule, checked when it is set (not at the
    next write)."""
    for rule in CASTINGS:
        if isinstance(casting, str) and casting == rule:
            return rule
    raise ShmstreamValueError(f"casting must be one of {CASTINGS}, not {casting!r}")


def check_config(config: Any, keys: tuple[str, ...], required: tuple[str, ...]) -> dict:
    """A configuration dict (``create_from_config``): a mapping with the
    ``required`` keys and no key outside ``keys`` (a misspelt key would
    otherwise be dropped without a word)."""
    if not isinstance(config, Mapping):
        raise ShmstreamTypeError(
            f"config must be a dict like to_config() returns, not {type(config).__name__}"
        )
    missing = [k for k in required if k not in config]
    if missing:
        raise ShmstreamValueError(
            f"config lacks {', '.join(map(repr, missing))}; a config needs "
            f"{', '.join(map(repr, required))} (to_config() writes every key)"
        )
    unknown = [k for k in config if k not in keys]
    if unknown:
        raise ShmstreamValueError(
            f"config has unknown key(s) {', '.join(map(repr, unknown))}; the keys are "
            f"{', '.join(map(repr, keys))}"
        )
    return dict(config)


def check_cast(
    have: np.dtype | None, dtype: np.dtype, name: str, casting: str, what: str = ""
) -> None:
    """A write of ``have`` values into a stream of ``dtype`` under the
    handle's ``casting`` rule: nothing under "unsafe" (the default), else a
    TypeError unless NumPy casts ``have`` to ``dtype`` by that rule. The
    one check of every write path, CPU and GPU (``have`` None: a source
    dtype NumPy cannot name, ``what``, e.g. torch.bfloat16, which no strict
    rule can vouch for)."""
    if casting == "unsafe":
        return
    rule = check_casting(casting)
    if have is None or not np.can_cast(have, dtype, casting=rule):
        raise ShmstreamTypeError(
            f"writing {what or have} to stream {name!r} ({dtype}) is not a {casting!r} cast (it "
            f"could lose values); convert it yourself, or set the handle's casting to "
            f"'unsafe' (the default) to convert as np.asarray(value, dtype) does"
        )


def coerce_write(
    value: Any, dtype: np.dtype, shape: tuple[int, ...], name: str, casting: str
) -> np.ndarray:
    """What a write publishes from ``value``: np.asarray(value, dtype) (the
    "unsafe" default, pyshmem's), or under a strict ``casting`` rule only
    what NumPy casts by that rule; the shape must be the stream's."""
    if value is None:  # np.asarray(None) is an object array: say what write takes
        raise ShmstreamTypeError(
            f"value must be an array of shape {shape} and dtype {dtype} (or anything "
            f"np.asarray converts to one) to write to stream {name!r}, not None"
        )
    if casting != "unsafe":
        check_cast(np.asarray(value).dtype, dtype, name, casting)
    try:
        array = np.asarray(value, dtype=dtype)
    except (TypeError, ValueError, OverflowError) as exc:  # OverflowError: 2**40 into int32
        raise ShmstreamValueError(
            f"cannot write {type(value).__name__} to stream {name!r}: expected an array of "
            f"shape {shape} and dtype {dtype} ({exc})"
        ) from None
    if array.shape != shape:
        raise ShmstreamValueError(
            f"expected shape {shape}, got {tuple(array.shape)} (stream {name!r} holds "
            f"{dtype} arrays of shape {shape})"
        )
    return np.ascontiguousarray(array)


def check_cpu_open(name: str, gpu_device: Any) -> None:
    """open(name, gpu_device=...) of a CPU stream: a CPU handle where the
    caller asked for device memory would surprise it later, so refuse."""
    if gpu_device is not None and gpu_device is not False:
        raise ShmstreamValueError(
            f"stream {name!r} is a CPU stream, so it cannot be opened with gpu_device="
            f"{gpu_device!r}; open it without gpu_device (a GPU stream is made with "
            f"shmstream.create(..., gpu_device=...))"
        )


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
