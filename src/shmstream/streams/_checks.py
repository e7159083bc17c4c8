"""The checks of a stream's arguments (CPU and GPU streams: ``gpu/`` is
built on this folder) and their wording: slots, history, counts, casting,
configs, waits and locks. What every kind checks the same way (names,
integers, shapes, dtypes, modes, owners, timeouts) is in
``common/_checks.py``.

Each check returns the normalised value or raises the exception a Python
user expects (TypeError for a wrong type, ValueError for a wrong value),
naming the argument. The limits are the core's (include/shmstream.h), read
from the binding: the core refuses them too, for a caller of the C API.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from typing import Any, Literal

import numpy as np

from .. import _native
from ..common._checks import check_bool, check_int, check_u64
from ..errors import ShmstreamTypeError, ShmstreamValueError


def check_count(value: Any) -> int:
    """An explicit count for a write: in [1, 2**63), so that the count
    still grows after it (include/shmstream.h, SS_MAX_COUNT)."""
    checked = check_int("count", value)
    if not 1 <= checked <= _native.MAX_COUNT:
        raise ShmstreamValueError(
            f"count must be in [1, 2**63), got {checked}: the count must still grow after it"
        )
    return checked


def check_after(after: Any) -> int:
    """A count to wait past (read_after, wait_for_count): the rule of every
    count argument, :func:`check_u64` (TypeError for a non-integer, as for
    read_since's ``count``; ValueError outside [0, 2**64))."""
    return check_u64("after", after)


def check_create_flags(
    auto_unlink: Any, notify: Any, cpu_mirror: Any
) -> tuple[bool, bool, bool | None]:
    """``create``'s flags: True or False (``cpu_mirror`` None too)."""
    mirror = None if cpu_mirror is None else check_bool("cpu_mirror", cpu_mirror)
    return check_bool("auto_unlink", auto_unlink), check_bool("notify", notify), mirror


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
