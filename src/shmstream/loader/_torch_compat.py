"""Which torch releases ``shmstream.torch.DataLoader`` supports, and the one
place where their private iterators are told apart.

The loader's iterator subclasses torch's private
``_MultiProcessingDataLoaderIter`` (docs/loader.md, "torch internals that
work"). Across the supported releases (2.4 to 2.14) what the subclass uses
of it is the same, except one signature:

==============  =====================================  ======================
torch           ``_process_data``                      why it changed
==============  =====================================  ======================
2.4 - 2.6       ``(self, data)``
2.7 - 2.14      ``(self, data, worker_idx)``           per-worker task counts
                                                       for ``in_order=False``
==============  =====================================  ======================

One public behaviour differs too: torch 2.4 and 2.5 warn when a storage
pickled by value is loaded back (``reduce_storage`` and ``load_storage``).

``PROCESS_DATA`` is that table; ``check`` reads the installed iterator's
signature (not its version string) to pick the override, and refuses a
torch outside ``SUPPORTED``, or one whose loader or iterator lacks a hook
or has a ``_process_data`` of another shape. ``shmstream.torch.DataLoader``
raises the refusal (``ExtraVersionError``) at construction, so no
``TypeError`` from torch's insides reaches a user. Importing this module
does not import torch (only ``load_storage`` does, when called): the tests
check it against fake iterator classes of every shape.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from typing import Any, NamedTuple

from ..errors import ExtraVersionError

__all__ = [
    "PROCESS_DATA",
    "SUPPORTED",
    "SUPPORTED_TEXT",
    "Support",
    "check",
    "load_storage",
    "reduce_storage",
    "release",
]

#: The supported torch releases: from the first (major, minor) up to, not
#: including, the second. pyproject.toml's ``torch`` extra says the same.
SUPPORTED = ((2, 4), (2, 15))
SUPPORTED_TEXT = "torch>=2.4,<2.15 (2.4.0 to 2.14.1)"

#: What the loader overrides or calls on torch's DataLoader, and on its
#: iterator besides ``_process_data`` (whose shape is in PROCESS_DATA).
LOADER_HOOKS = ("_get_iterator", "check_worker_number_rationality")
ITERATOR_HOOKS = ("_next_data", "_shutdown_workers")


class Shape(NamedTuple):
    """One shape of ``_MultiProcessingDataLoaderIter._process_data``."""

    since: tuple[int, int]  # the first torch release with it
    params: tuple[str, ...]  # its parameters after self
    #: (base, unwrap) -> the override for _ShmIter: the base's method, then
    #: ``unwrap`` on its result (one call frame, like the base's own)
    override: Callable[[Any, Callable[[Any], Any]], Callable[..., Any]]


def _one_arg(base: Any, unwrap: Callable[[Any], Any]) -> Callable[..., Any]:
    process = base._process_data

    def _process_data(self: Any, data: Any) -> Any:
        return unwrap(process(self, data))

    return _process_data


def _with_worker_idx(base: Any, unwrap: Callable[[Any], Any]) -> Callable[..., Any]:
    process = base._process_data

    def _process_data(self: Any, data: Any, worker_idx: int) -> Any:
        return unwrap(process(self, data, worker_idx))

    return _process_data


#: ``_process_data`` by release, oldest first (the table above).
PROCESS_DATA = (
    Shape((2, 4), ("data",), _one_arg),
    Shape((2, 7), ("data", "worker_idx"), _with_worker_idx),
)


def load_storage(data: bytes) -> Any:
    """A storage that a worker pickled by value, loaded back: what torch's
    ``torch.storage._load_from_bytes`` does, with ``weights_only=False``
    said, as torch 2.6 and later say it (the bytes are torch's own
    ``torch.save`` of the storage, made by the loader's worker)."""
    import io

    import torch

    return torch.load(io.BytesIO(data), weights_only=False)


def reduce_storage(storage: Any) -> tuple[Any, tuple[Any, ...]]:
    """How a worker pickles a storage by value (that of a tensor the slot
    does not carry: nested, sparse, quantized ...): torch's own reduction,
    loaded back by ``load_storage``. torch 2.4 and 2.5's
    ``_load_from_bytes`` leaves ``weights_only`` out, and their
    ``torch.load`` then warns (a FutureWarning) for every storage of the
    batch, which torch's loader (storages by file descriptor) never does."""
    fn, args = storage.__reduce__()[:2]
    if getattr(fn, "__name__", None) == "_load_from_bytes":
        return load_storage, args
    return fn, args


def release(version: str) -> tuple[int, int] | None:
    """(major, minor) of a torch version string ("2.6.0+cu124",
    "2.15.0a0+git1234" alike), or None if it does not start with one."""
    m = re.match(r"(\d+)\.(\d+)", str(version))
    return (int(m.group(1)), int(m.group(2))) if m else None


def shape_for(rel: tuple[int, int]) -> Shape | None:
    """The PROCESS_DATA row that a supported release ships, or None
    outside SUPPORTED."""
    if not SUPPORTED[0] <= rel < SUPPORTED[1]:
        return None
    return [s for s in PROCESS_DATA if s.since <= rel][-1]


class Support(NamedTuple):
    """What ``check`` found: ``problem`` is None where the loader works
    with this torch; else the refusal's message, and ``process_data`` a
    stand-in that raises it (construction raises it first)."""

    version: str
    problem: str | None
    process_data: Callable[..., Any]

    def require(self) -> None:
        """Raise the refusal, if any (at the loader's construction)."""
        if self.problem is not None:
            raise ExtraVersionError(self.problem)


def _params(fn: Any) -> tuple[str, ...] | None:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    names = []
    for p in sig.parameters.values():
        if p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            return None  # *args, **kwargs, keyword-only: a shape we never saw
        names.append(p.name)
    return tuple(names[1:])  # without self


def _problem(version: str, loader: Any, base: Any) -> tuple[str | None, Shape | None]:
    rel = release(version)
    advice = (
        f"shmstream.torch.DataLoader supports {SUPPORTED_TEXT}: install one "
        "(pip install 'shmstream[torch]'), or use torch.utils.data.DataLoader."
    )
    if rel is None or shape_for(rel) is None:
        return f"torch {version} is installed. {advice}", None
    missing = [
        f"{cls.__name__}.{h}"
        for cls, hooks in ((loader, LOADER_HOOKS), (base, ITERATOR_HOOKS))
        for h in hooks
        if not callable(getattr(cls, h, None))
    ]
    if missing:
        return (
            f"torch {version} has no {', '.join(missing)}, which "
            f"shmstream.torch.DataLoader builds on. {advice}"
        ), None
    found = _params(getattr(base, "_process_data", None))
    for shape in PROCESS_DATA:
        if found == shape.params:
            return None, shape
    shown = "(self, " + ", ".join(found) + ")" if found is not None else "an unknown signature"
    return (
        f"torch {version}'s {base.__name__}._process_data takes {shown}, which "
        f"shmstream.torch.DataLoader does not know. {advice}"
    ), None


def check(version: str, loader: Any, base: Any, unwrap: Callable[[Any], Any]) -> Support:
    """Whether the loader works with this torch (``version``, its
    ``DataLoader`` as ``loader``, its ``_MultiProcessingDataLoaderIter`` as
    ``base``), and the
    ``_process_data`` override that fits ``base``: it calls the base's and
    hands the result to ``unwrap``. Chosen by the base's signature, so a
    build whose version string says little (a nightly, a vendor's patch)
    gets the override that fits the code it runs."""
    problem, shape = _problem(str(version), loader, base)
    if shape is not None:
        return Support(str(version), None, shape.override(base, unwrap))

    def _process_data(self: Any, *args: Any) -> Any:
        raise ExtraVersionError(problem)

    return Support(str(version), problem, _process_data)
