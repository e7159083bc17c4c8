"""Turning one frame into what the page draws: a small copy of the part
shown (:func:`select`), then 8-bit pixels or line points and a histogram
(:func:`render`). Pure NumPy, no server: the sources call it on a zero-copy
view of shared memory, a history frame or a recording's memory map.

The work is capped by the shape shown, not the stream's: a 3-D frame
gives one plane, a side longer than ``max_side`` is strided down, a line
is at most ``max_points`` long, and statistics come from at most
``STAT_SAMPLES`` values. The colour map is the page's (a lookup table in
JavaScript applied to the 8-bit values), so the bytes sent are one per
pixel whatever the map.
"""

from __future__ import annotations

import dataclasses
import math
import struct
from typing import Any

import numpy as np

#: Values the contrast and the histogram are computed from, at most.
STAT_SAMPLES = 1 << 16
HIST_BINS = 64
#: dtype kinds drawn as numbers: bool, signed, unsigned, float, complex (as |z|).
DRAWN_KINDS = "biufc"


@dataclasses.dataclass
class Settings:
    """What the page asked for (sent as JSON; unknown keys ignored)."""

    contrast: str = "auto"  # "auto" (0.5 and 99.5 percentiles) or "fixed" (lo..hi)
    lo: float = 0.0
    hi: float = 1.0
    axis: int = 0  # 3-D frames: the axis the plane is taken across (0 or 2)
    plane: int = 0
    max_side: int = 1024
    max_points: int = 4096

    def update(self, given: dict[str, Any]) -> None:
        """Take the page's values, each checked; a bad one is left as it was."""
        if given.get("contrast") in ("auto", "fixed"):
            self.contrast = given["contrast"]
        for key in ("lo", "hi"):
            value = given.get(key)
            if isinstance(value, (int, float)) and math.isfinite(value):
                setattr(self, key, float(value))
        if given.get("axis") in (0, 2):
            self.axis = int(given["axis"])
        plane = given.get("plane")
        if isinstance(plane, int) and not isinstance(plane, bool):
            self.plane = plane


def why_not_drawn(shape: tuple[int, ...], dtype: np.dtype) -> str | None:
    """Why frames of this shape and dtype have no picture (None: they have one)."""
    if dtype.kind not in DRAWN_KINDS or dtype.fields is not None or dtype.subdtype is not None:
        return (
            f"dtype {dtype} is not drawn (only bool, integer, float and complex "
            "values are); the table and 'shmstream stat' show its counters"
        )
    if len(shape) > 3:
        return (
            f"{len(shape)}-D frames are not drawn (1-D as a line, 2-D as an image, "
            "3-D one plane at a time)"
        )
    if math.prod(shape) == 0:
        return "the frame is empty (a zero in its shape)"
    return None


def select(frame: Any, settings: Settings) -> tuple[np.ndarray, dict[str, Any]]:
    """A private copy of the part of ``frame`` that is shown (one plane of
    a 3-D frame, strided down to the caps), and what was selected. Reads
    only those elements, so it is cheap on a view of a huge frame."""
    info: dict[str, Any] = {"shape": list(frame.shape)}
    if frame.ndim == 3:
        axis = 0 if settings.axis == 0 else 2
        planes = frame.shape[axis]
        plane = min(max(settings.plane, 0), planes - 1)
        frame = frame[plane] if axis == 0 else frame[:, :, plane]
        info.update(axis=axis, plane=plane, planes=planes)
    if frame.ndim == 2:
        step = max(1, math.ceil(max(frame.shape) / settings.max_side))
        part = frame[::step, ::step]
    elif frame.ndim == 1:
        step = max(1, math.ceil(frame.shape[0] / settings.max_points))
        part = frame[::step]
    else:  # 0-D: one value
        step = 1
        part = frame.reshape(1)
    info["step"] = step
    return np.array(part, copy=True), info


def _values(part: np.ndarray) -> np.ndarray:
    """The numbers drawn: |z| for complex, 0/1 for bool."""
    if part.dtype.kind == "c":
        return np.abs(part)
    if part.dtype.kind == "b":
        return part.view(np.uint8)
    return part


def _sample(values: np.ndarray) -> np.ndarray:
    flat = values.reshape(-1)
    sample = flat[:: max(1, flat.size // STAT_SAMPLES)]
    if sample.dtype.kind == "f":
        sample = sample[np.isfinite(sample)]
    return sample


#: The widest range drawn: float32 (the scaling's type) holds its ends and
#: 255 divided by its width.
_FLOAT32_SAFE = 1e37


def _window(lo: float, hi: float) -> tuple[float, float]:
    """``lo``..``hi`` widened where needed so that 64 histogram bins and the
    float32 scaling are distinct and finite: a flat or nearly flat frame
    (values one ulp apart, a complex stream of magnitude 1) has a range
    too narrow for either, and ``np.histogram`` refuses it."""
    lo = min(max(lo, -_FLOAT32_SAFE), _FLOAT32_SAFE)
    hi = min(max(hi, -_FLOAT32_SAFE), _FLOAT32_SAFE)
    # a width float32 resolves at this magnitude, per bin, and never below 1e-30
    least = max(abs(lo), abs(hi)) * 2.0**-16 + 1e-30
    if not hi - lo >= least:
        hi = lo + max(least, 1.0 if abs(lo) < 2.0**16 else least)
    return lo, hi


def render(part: np.ndarray, settings: Settings) -> tuple[dict[str, Any], bytes]:
    """The header and the bytes of one picture of ``part`` (from :func:`select`):
    a 2-D part as ``kind: "image"`` (one uint8 per pixel, row-major), a 1-D
    or 0-D part as ``kind: "line"`` (float32 points). The header carries the
    contrast used (``lo``, ``hi``), the data range and a histogram."""
    values = _values(part)
    sample = _sample(values)
    header: dict[str, Any] = {}
    if sample.size:
        dmin, dmax = float(sample.min()), float(sample.max())
        # statistics on values float32 can scale (a percentile of +-1e308 overflows)
        sample = np.clip(sample.astype(np.float64), -_FLOAT32_SAFE, _FLOAT32_SAFE)
        counts, _ = np.histogram(sample, bins=HIST_BINS, range=_window(dmin, dmax))
        header.update(min=dmin, max=dmax, hist=counts.tolist())
    else:  # nothing finite
        dmin = dmax = 0.0
        header.update(min=None, max=None, hist=[])
    if values.ndim == 1:
        with np.errstate(over="ignore"):
            points = values.astype(np.float32)  # beyond float32: +-inf
        header.update(kind="line", n=int(points.size))
        return header, points.tobytes()
    if settings.contrast == "fixed":
        lo, hi = settings.lo, settings.hi
    elif sample.size:
        lo, hi = (float(v) for v in np.percentile(sample, (0.5, 99.5)))
    else:
        lo, hi = 0.0, 1.0
    lo, hi = _window(lo, hi)
    with np.errstate(invalid="ignore", over="ignore"):
        scaled = values.astype(np.float32)  # beyond float32: +-inf, clipped below
        np.subtract(scaled, np.float32(lo), out=scaled)
        np.multiply(scaled, np.float32(255.0 / (hi - lo)), out=scaled)
        np.clip(scaled, 0.0, 255.0, out=scaled)
        if values.dtype.kind == "f":
            scaled[np.isnan(scaled)] = 0.0
    pixels = scaled.astype(np.uint8)
    header.update(
        kind="image", height=int(pixels.shape[0]), width=int(pixels.shape[1]), lo=lo, hi=hi
    )
    return header, pixels.tobytes()


def pack(header: dict[str, Any], payload: bytes = b"") -> bytes:
    """One WebSocket message: a little-endian uint32 header length, the
    header as JSON padded to 4 bytes (so the payload is a Float32Array's
    aligned buffer), the payload."""
    import json

    text = json.dumps(header, allow_nan=False, default=str).encode()
    text += b" " * (-len(text) % 4)
    return struct.pack("<I", len(text)) + text + payload
