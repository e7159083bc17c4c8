"""A camera process fills frames in place with write_view (no intermediate
array, no second copy); a reader checks that every frame it gets is whole.

    python examples/camera_write_view.py

write_view hands the writer a NumPy view of the next payload slot in shared
memory: a capture routine (or a DMA engine) can fill it directly. Readers
never see the half-filled slot: the frame is published only when the
`with` block ends, and a block that raises publishes nothing (readers get
InconsistentStreamError until the next good frame).
"""
import multiprocessing as mp
import os
import sys
import time

import numpy as np

import shmstream

FRAMES = 400
SHAPE = (480, 640)  # one 8-bit sensor image, 300 kB


def capture_into(view: np.ndarray, frame_id: int) -> None:
    """Stands in for a camera SDK call that writes a frame into a buffer."""
    view[...] = frame_id % 251  # every pixel of frame k holds k % 251


def camera(name: str, go) -> None:
    cam = shmstream.open(name)
    try:
        go.wait()
        for k in range(FRAMES):
            # Holds the stream lock for the block; publishes on exit.
            with cam.write_view(frame_id=k) as view:
                capture_into(view, k)
            time.sleep(0.0005)  # a ~1-2 kHz camera
    finally:
        cam.close()


def main() -> int:
    # stream(): created here, unlinked when the block ends, even on an error.
    with shmstream.stream(f"ex-{os.getpid()}-camera", shape=SHAPE, dtype=np.uint8) as cam:
        reader = shmstream.open(cam.name, readonly=True)  # cannot write or lock
        ctx = mp.get_context("spawn")
        go = ctx.Event()
        proc = ctx.Process(target=camera, args=(cam.name, go), daemon=True)
        try:
            proc.start()
            go.set()
            checked = torn = 0
            frame_id = -1
            while frame_id < FRAMES - 1:
                # read_new_publication: payload and frame id of the same write,
                # so the id can check the pixels (reader.frame_id, read
                # afterwards, may already belong to a newer frame).
                pub = reader.read_new_publication(timeout=10.0)
                frame_id = pub.frame_id
                if not (pub.payload == frame_id % 251).all():
                    torn += 1
                checked += 1
            proc.join(timeout=10)
            print(
                f"camera: {checked} frames checked, {torn} torn, "
                f"{reader.total_missed_writes} skipped by the reader, "
                f"{cam.count} written"
            )
        finally:
            if proc.is_alive():
                proc.terminate()
                proc.join(timeout=5)
            reader.close()
    return 1 if torn else 0


if __name__ == "__main__":
    sys.exit(main())
