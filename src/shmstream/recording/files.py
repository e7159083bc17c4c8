"""Recordings of a stream on disk, in files a scientist opens without
shmstream (docs/history.md).

A recording is a directory::

    frames.npy          (n, *shape) frames, the stream's dtype
    counts.npy          (n,) uint64: the count of each frame in the stream
    frame_ids.npy       (n,) uint64: its frame id
    write_times_ns.npy  (n,) uint64: its write time, ns since the epoch
    stream.json         the stream's description and the recording's summary

``np.load("rec/frames.npy", mmap_mode="r")`` reads it; the ``.npy`` files
are written as the frames arrive and their headers are rewritten at every
sync (about once a second) and at the end, so a recorder that is killed
leaves a recording readable up to its last sync. Plain NumPy rather than
HDF5 or Zarr: no dependency for anyone, and appending a frame is one
``write``. ``shmstream.record`` and ``shmstream.replay`` (module
``recorder``) move frames between a stream and a recording.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from ..common import _checks, _dtypes
from ..errors import (
    CorruptStreamError,
    ShmstreamFileExistsError,
    ShmstreamFileNotFoundError,
    ShmstreamIndexError,
    ShmstreamOSError,
    ShmstreamValueError,
)
from ..streams.publication import FrameBatch, Publication
from ._npyfile import MappedNpy, NpyAppender

__all__ = ["FORMAT", "COLUMNS", "Recording", "RecordingWriter", "load_recording"]

FORMAT = "shmstream-recording"
FORMAT_VERSION = 1
#: The metadata columns, one uint64 .npy file each.
COLUMNS = ("counts", "frame_ids", "write_times_ns")
DESCRIPTION = "stream.json"


def _describe_dtype(dt: np.dtype) -> str:
    return _dtypes.config_text(dt)


class RecordingWriter:
    """Writes a recording directory frame batch by frame batch.

    ``description`` (the stream's name, history, slots, ...) goes into
    stream.json with the recording's summary. The directory must not exist,
    unless ``overwrite`` and it is a recording (nothing else is replaced)."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        shape: tuple[int, ...],
        dtype: Any,
        description: dict[str, Any] | None = None,
        overwrite: bool = False,
    ) -> None:
        self.path = Path(_checks.check_path("path", path))
        self.shape = tuple(int(d) for d in shape)
        self.dtype = np.dtype(dtype)
        _prepare_directory(self.path, overwrite)
        self.info: dict[str, Any] = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            **(description or {}),
            "shape": list(self.shape),
            "dtype": _describe_dtype(self.dtype),
            "frames": 0,
            "missed": 0,
            "first_count": None,
            "last_count": None,
            "started_ns": time.time_ns(),
            "stopped_ns": None,
            "complete": False,
        }
        self._write_description()
        self._frames = NpyAppender(self.path / "frames.npy", self.dtype, self.shape)
        self._columns = [
            NpyAppender(self.path / f"{c}.npy", np.dtype(np.uint64), ()) for c in COLUMNS
        ]
        self.closed = False

    @property
    def frames(self) -> int:
        return self._frames.rows

    def append(
        self, frames: Any, counts: Any, frame_ids: Any, write_times_ns: Any, missed: int = 0
    ) -> None:
        """Append frames (shape ``(n, *shape)``) and their metadata;
        ``missed`` publications were lost before them."""
        n = len(counts)
        if n:
            self._frames.append(frames[:n])
            for col, values in zip(self._columns, (counts, frame_ids, write_times_ns)):
                col.append(np.asarray(values, np.uint64))
            if self.info["first_count"] is None:
                self.info["first_count"] = int(counts[0])
            self.info["last_count"] = int(counts[n - 1])
        self.info["missed"] += int(missed)

    def append_batch(self, batch: FrameBatch) -> None:
        self.append(batch.frames, batch.counts, batch.frame_ids, batch.write_times_ns, batch.missed)

    def sync(self) -> None:
        """Make what was appended readable: data first, then the headers
        (a reader never sees a header promise rows that are not written)."""
        files = [self._frames, *self._columns]
        for f in files:
            f.flush()
        for f in files:
            f.write_count(f.rows)
        self.info["frames"] = self._frames.rows
        self._write_description()

    def close(self) -> None:
        """Sync and mark the recording complete."""
        if self.closed:
            return
        self.closed = True
        for f in (self._frames, *self._columns):
            f.close()
        self.info.update(frames=self._frames.rows, stopped_ns=time.time_ns(), complete=True)
        self._write_description()

    def _write_description(self) -> None:
        tmp = self.path / (DESCRIPTION + ".tmp")
        tmp.write_text(json.dumps(self.info, indent=1) + "\n", encoding="utf-8")
        os.replace(tmp, self.path / DESCRIPTION)  # never a half-written description

    def __enter__(self) -> RecordingWriter:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _prepare_directory(path: Path, overwrite: bool) -> None:
    if path.exists():
        if not overwrite:
            raise ShmstreamFileExistsError(
                f"{str(path)!r} already exists; choose another path, or pass overwrite=True "
                "(--overwrite) to replace a recording"
            )
        if not (path / DESCRIPTION).is_file():
            raise ShmstreamFileExistsError(
                f"{str(path)!r} exists and is not a shmstream recording (no {DESCRIPTION}); "
                "refusing to overwrite it"
            )
    try:
        if path.exists():
            for entry in ["frames.npy", *(f"{c}.npy" for c in COLUMNS), DESCRIPTION]:
                (path / entry).unlink(missing_ok=True)
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ShmstreamOSError(
            exc.errno,
            f"cannot make the recording directory {str(path)!r}: {exc.strerror}; choose a "
            "path in a directory you can write (e.g. under your home or /tmp)",
        ) from None


class Recording:
    """A recording opened for reading (:func:`load_recording`).

    ``frames`` is a read-only map of frames.npy (nothing is loaded until
    used), made through the core's bus-error guard: a file that another
    process truncates while it is mapped reads zeros past the cut, and
    :meth:`frame`, iteration and :meth:`check` raise
    :class:`CorruptStreamError`, where a plain ``np.memmap`` would kill the
    process with SIGBUS. ``counts``, ``frame_ids`` and ``write_times_ns`` are
    uint64 arrays; ``info`` is stream.json; ``name``, ``shape``, ``dtype``
    and ``history`` describe the stream it came from. ``missed`` counts the
    publications between the first and last frame that are not in it.
    A recording whose recorder was killed (``complete`` False) is read up
    to its last sync."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(_checks.check_path("path", path))
        self.info = _read_description(self.path)
        self.shape, self.dtype, described = _check_description(self.path, self.info)
        self._frames_file = _map_npy(self.path, "frames.npy")
        self.frames = self._frames_file.array
        columns = [_load_column(self.path, f"{c}.npy") for c in COLUMNS]
        self.complete = bool(self.info.get("complete"))
        n = len(self.frames)
        lengths = {len(c) for c in columns}
        if lengths != {n}:
            if self.complete:
                raise ShmstreamValueError(
                    f"recording {str(self.path)!r} is inconsistent: frames.npy has {n} frames "
                    f"but its columns have {sorted(lengths)} entries"
                )
            n = min(n, *lengths)  # killed between two files: what all of them hold
            self.frames = self.frames[:n]
        if self.complete and described != n:
            raise ShmstreamValueError(
                f"recording {str(self.path)!r} is inconsistent: {DESCRIPTION} says "
                f"{described} frames, the files hold {n}"
            )
        self.counts, self.frame_ids, self.write_times_ns = (
            c[:n].astype(np.uint64, copy=False) for c in columns
        )
        if self.frames.shape[1:] != self.shape or self.frames.dtype != self.dtype:
            raise ShmstreamValueError(
                f"recording {str(self.path)!r} is inconsistent: frames.npy holds "
                f"{self.frames.dtype} frames of shape {self.frames.shape[1:]}, {DESCRIPTION} "
                f"says {self.dtype} of shape {self.shape}"
            )
        if n > 1 and not bool(np.all(self.counts[1:] > self.counts[:-1])):
            raise ShmstreamValueError(
                f"recording {str(self.path)!r} is corrupt: its counts do not increase"
            )

    def check(self) -> None:
        """Raise :class:`CorruptStreamError` if frames.npy was truncated
        while mapped here (what was read from it since may be zeros)."""
        if self._frames_file.lost:
            raise CorruptStreamError(
                f"recording {str(self.path)!r}: frames.npy was truncated while it was read "
                "(another process cut the file); what was read from it is not the recording"
            )

    def frame(self, i: int, out: np.ndarray | None = None) -> np.ndarray:
        """A private copy of frame ``i`` (into ``out`` if given), checked:
        :class:`CorruptStreamError` if frames.npy was cut under it."""
        n = len(self.frames)
        i = _checks.check_int("frame index i", i)
        if not -n <= i < n:
            raise ShmstreamIndexError(
                f"frame index i={i} is out of range: the recording has {n} frame(s) "
                f"(0 to {n - 1}, or negative from the end)"
            )
        if out is None:
            out = np.empty(self.shape, self.dtype)
        np.copyto(out, self.frames[i])
        self.check()
        return out

    @property
    def name(self) -> str | None:
        return self.info.get("name")

    @property
    def history(self) -> int:
        """The history of the stream it was recorded from (stream.json)."""
        return int(self.info.get("history") or 0)

    @property
    def missed(self) -> int:
        n = len(self.counts)
        return int(self.counts[-1] - self.counts[0]) + 1 - n if n else 0

    def __len__(self) -> int:
        return len(self.counts)

    def __iter__(self) -> Iterator[Publication]:
        """The frames as :class:`Publication` objects (payload: a read-only
        row of the memory map), missed_publications from the count gaps.
        Each step raises :class:`CorruptStreamError` once frames.npy was
        truncated under the map (a payload touched after the cut reads
        zeros; :meth:`frame` copies and checks)."""
        previous = None
        for i, count in enumerate(self.counts.tolist()):
            self.check()
            missed = 0 if previous is None else count - previous - 1
            yield Publication(
                self.frames[i],
                count,
                int(self.frame_ids[i]),
                int(self.write_times_ns[i]) / 1e9,
                missed,
            )
            previous = count
        self.check()

    def __repr__(self) -> str:
        return (
            f"Recording({str(self.path)!r}, name={self.name!r}, frames={len(self)}, "
            f"shape={self.shape}, dtype={str(self.dtype)!r})"
        )


def load_recording(path: str | os.PathLike[str]) -> Recording:
    """Open the recording in directory ``path`` (see the module notes)."""
    return Recording(path)


def _read_description(path: Path) -> dict[str, Any]:
    if not path.exists():
        raise ShmstreamFileNotFoundError(
            f"no recording at {str(path)!r}; make one with 'shmstream record NAME -o {path}'"
        )
    if not path.is_dir():
        raise ShmstreamValueError(
            f"{str(path)!r} is not a shmstream recording: a recording is a "
            f"directory holding frames.npy, {', '.join(COLUMNS)} and {DESCRIPTION}"
        )
    desc = path / DESCRIPTION
    if not desc.is_file():
        raise ShmstreamValueError(
            f"{str(path)!r} is not a shmstream recording: {DESCRIPTION} is missing"
        )
    try:
        info = json.loads(desc.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ShmstreamValueError(
            f"recording {str(path)!r} has a corrupt {DESCRIPTION}: {exc}"
        ) from None
    if not isinstance(info, dict) or info.get("format") != FORMAT:
        raise ShmstreamValueError(
            f"{str(path)!r} is not a shmstream recording: {DESCRIPTION} does not "
            f"say format {FORMAT!r}"
        )
    if info.get("format_version") != FORMAT_VERSION:
        raise ShmstreamValueError(
            f"recording {str(path)!r} has format version "
            f"{info.get('format_version')!r}; this shmstream reads version "
            f"{FORMAT_VERSION}: upgrade shmstream"
        )
    return info


#: Dimensions a recorded frame may have (NumPy's own limit).
_MAX_NDIM = 64


def _check_description(path: Path, info: dict[str, Any]) -> tuple[tuple[int, ...], np.dtype, int]:
    """The shape, dtype and frame count stream.json gives, each checked
    (someone else's file is input): a bad field is a ValueError naming it."""
    where = str(path / DESCRIPTION)

    def bad(what: str) -> ShmstreamValueError:
        return ShmstreamValueError(
            f"recording {str(path)!r} has a bad {DESCRIPTION} ({where}): {what}"
        )

    def count(key: str) -> int:
        value = info.get(key)
        if value is None:
            return 0
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**63:
            raise bad(f"{key!r} must be an integer >= 0, not {value!r}")
        return value

    shape = info.get("shape")
    if (
        not isinstance(shape, list)
        or len(shape) > _MAX_NDIM
        or not all(isinstance(d, int) and not isinstance(d, bool) and 0 <= d < 2**63 for d in shape)
    ):
        raise bad(f"'shape' must be a list of at most {_MAX_NDIM} sizes >= 0, not {shape!r}")
    try:
        dtype = _dtypes.decode(info["dtype"]) if isinstance(info.get("dtype"), str) else None
    except (TypeError, ValueError, SyntaxError) as exc:
        raise bad(f"'dtype' {info.get('dtype')!r} is not a dtype ({exc})") from None
    if dtype is None:
        raise bad(f"'dtype' must be a dtype's text, not {info.get('dtype')!r}")
    if not isinstance(info.get("name"), (str, type(None))):
        raise bad(f"'name' must be a string, not {info.get('name')!r}")
    if not isinstance(info.get("complete", False), bool):
        raise bad(f"'complete' must be true or false, not {info.get('complete')!r}")
    count("history")
    return tuple(shape), dtype, count("frames")


def _map_npy(path: Path, file: str) -> MappedNpy:
    """One of the recording's .npy files, mapped under the bus-error guard
    (_npyfile.MappedNpy): its header checked against the file's size, and
    a file cut while mapped a CorruptStreamError, never a SIGBUS."""
    where = path / file
    if not where.is_file():
        raise ShmstreamValueError(f"recording {str(path)!r} is incomplete: {file} is missing")
    try:
        mapped = MappedNpy(where)
    except CorruptStreamError as exc:
        raise CorruptStreamError(f"recording {str(path)!r}: {exc}") from None
    except OSError as exc:
        raise ShmstreamValueError(f"recording {str(path)!r}: cannot read {file} ({exc})") from None
    except Exception as exc:  # noqa: BLE001 - a damaged header raises anything (SyntaxError, ...)
        # Without the magic, np.load takes a file for a pickle and says so,
        # which misleads: say what is wrong.
        text = str(exc)
        what = (
            "is not a NumPy .npy file" if "magic" in text else "is not a readable NumPy .npy file"
        )
        raise ShmstreamValueError(f"recording {str(path)!r}: {file} {what} ({text})") from None
    array = mapped.array
    if array.ndim < 1 or (
        file != "frames.npy" and (array.ndim != 1 or array.dtype.kind not in "iu")
    ):
        raise ShmstreamValueError(
            f"recording {str(path)!r}: {file} does not hold "
            f"{'frames' if file == 'frames.npy' else 'one integer per frame'}"
        )
    return mapped


def _load_column(path: Path, file: str) -> np.ndarray:
    """A metadata column, copied out of its guarded map and checked."""
    mapped = _map_npy(path, file)
    column = np.array(mapped.array)
    if mapped.lost:
        raise CorruptStreamError(f"recording {str(path)!r}: {file} was truncated while it was read")
    return column
