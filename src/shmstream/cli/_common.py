"""Helpers every ``shmstream`` subcommand uses: the package looked up at
call time (so tests can monkeypatch it), one-line errors, readable rates and
ages."""

from __future__ import annotations

import argparse
import importlib
import math
import sys
from collections.abc import Callable
from typing import Any

from ..errors import ShmstreamError

PROG = "shmstream"

# Exceptions that mean "the user asked for something that cannot be done":
# every error the library raises (missing stream, bad name, read-only,
# timeout...; shmstream.ShmstreamError) and a failed system call on a path
# the user gave (OSError). Anything else is a bug and keeps its traceback.
USER_ERRORS: tuple[type[BaseException], ...] = (
    ShmstreamError,
    OSError,
)


def number(
    *, minimum: float = 0.0, above: bool = True, infinite: bool = False, kind: type = float
) -> Callable[[str], Any]:
    """An argparse ``type=`` for a numeric option: refuses what is not a
    number, NaN, infinities (unless ``infinite``) and values below
    ``minimum`` (or equal to it, with ``above``), so that every option of
    every subcommand fails with exit 2 and a message naming the option."""
    bound = f"{'>' if above else '>='} {minimum:g}"

    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{text!r} is not {'a whole number' if kind is int else 'a number'}"
            ) from None
        if math.isnan(value):
            raise argparse.ArgumentTypeError(f"NaN is not a value; give a number {bound}")
        if math.isinf(value) and not infinite:
            raise argparse.ArgumentTypeError(f"{text!r} is not finite; give a number {bound}")
        if value < minimum or (above and value == minimum):
            raise argparse.ArgumentTypeError(f"{text!r} must be {bound}")
        return value

    parse.__name__ = kind.__name__  # argparse's fallback message names the type
    return parse


def package() -> Any:
    """The library package, imported at call time."""
    return importlib.import_module("shmstream")


def error(message: str) -> None:
    from ..registry import printable  # a name in a message may come from /dev/shm

    print(f"{PROG}: error: {printable(message, backslash=False)}", file=sys.stderr)


def one_line(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return " ".join(text.split())


def fmt_age(age: float) -> str:
    if math.isinf(age):
        return "never written"
    if age < 1e-3:
        return f"{age * 1e6:.0f} us"
    if age < 1.0:
        return f"{age * 1e3:.1f} ms"
    return f"{age:.1f} s"


def fmt_rate(hz: float) -> str:
    if hz >= 1e6:
        return f"{hz / 1e6:.2f} MHz"
    if hz >= 1e3:
        return f"{hz / 1e3:.2f} kHz"
    return f"{hz:.1f} Hz"


def fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"  # pragma: no cover


def status_line(line: str, tty: bool) -> None:
    """A progress line: rewritten in place on a terminal, one per refresh
    otherwise (logs, pipes)."""
    sys.stdout.write(("\r" + line + "\x1b[K") if tty else (line + "\n"))
    sys.stdout.flush()
