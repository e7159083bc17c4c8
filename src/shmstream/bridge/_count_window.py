"""How a stream mirror numbers the frames it receives: the source's count
plus an offset, inside a window that no frame, forged or not, can break.

Separate from _stream_import.py because it is a rule of numbers alone (no
Zenoh, no shared memory): the one place that decides whether a frame is a
duplicate and which count the mirror writes it with, testable by itself.
"""

from __future__ import annotations

#: A frame whose count is at most this far below the last one mirrored is
#: a re-send or a late frame and is dropped; one further below (or more
#: than MAX_JUMP above) means the counts jumped, and the mirror's count
#: goes on rising by one step of at most MAX_JUMP: no single frame, forged
#: or not, can freeze the mirror or wrap its count.
DUP_WINDOW = 1 << 16
MAX_JUMP = 1 << 32
#: The mirror's count never passes this (a frame that would is bad input).
MAX_MIRROR_COUNT = (1 << 63) - 1


def mirror_count(
    count: int, last: int, current: int, offset: int | None
) -> tuple[int | None, int | None, bool]:
    """Where source frame ``count`` goes in the mirror, given the source
    count ``last`` mirrored before, the mirror's count ``current`` and the
    ``offset`` (mirror count - source count; None: the generation's first
    frame sets it). Returns (the mirror count to write it with, None for a
    duplicate; the offset from now on; whether the counts jumped).

    The offset is set again (rising by one step of at most MAX_JUMP) for the
    generation's first frame, a writer of the mirror beside us, or counts
    that jumped (forged, or a source lost for long). The caller refuses a
    count past MAX_MIRROR_COUNT."""
    if last - DUP_WINDOW < count <= last:
        return None, offset, False  # a re-send, the fetched latest frame, a late one
    target = count + (offset or 0)
    if offset is not None and current < target <= current + MAX_JUMP:
        return target, offset, False
    jumped = offset is not None and (count < last or target > current + MAX_JUMP)
    target = min(max(count, current + 1), current + MAX_JUMP)
    return target, target - count, jumped
