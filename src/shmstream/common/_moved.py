"""Old module paths of the package (before it became one folder per kind).

The public ones that do not collide with a function keep working through a
shim module beside ``__init__.py`` (``shmstream.torch``, ``shmstream.direct``
...). The rest raise an ImportError that names the new place: the modules
``shmstream.stream`` and ``shmstream.channel``, whose names are the package's
functions, and the private modules."""

from __future__ import annotations

import importlib.abc
import sys
from typing import Any

#: old module -> where it is now
MOVED = {
    "shmstream.stream": "shmstream.streams.shared_memory",
    "shmstream.channel": "shmstream.channels.ends",
    **{
        f"shmstream.{m}": f"shmstream.streams.{m}"
        for m in (
            "_handle",
            "_history",
            "_locked_many",
            "_lockstate",
            "_reading",
            "_scopes",
            "_status",
            "_waiting",
        )
    },
    "shmstream._loader_pool": "shmstream.loader._loader_pool",
    "shmstream._npyfile": "shmstream.recording._npyfile",
    **{
        f"shmstream.{m}": f"shmstream.common.{m}" for m in ("_checks", "_dtypes", "_proc", "_space")
    },
}


class MovedModuleFinder(importlib.abc.MetaPathFinder):
    """Last on ``sys.meta_path``: asked only for a name no file answers."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> None:
        new = MOVED.get(fullname)
        if new is not None:
            raise ModuleNotFoundError(
                f"No module named {fullname!r}: it moved to {new!r} "
                "(public names: import them from 'shmstream'; see CHANGELOG.md)",
                name=fullname,
            )


def install() -> None:
    """Put the finder at the end of ``sys.meta_path`` (once)."""
    if not any(isinstance(f, MovedModuleFinder) for f in sys.meta_path):
        sys.meta_path.append(MovedModuleFinder())
