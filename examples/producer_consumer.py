"""A producer process publishes camera-like frames; a consumer takes them with
read_new and reports which frames it missed.

    python examples/producer_consumer.py

A stream holds the latest frame, not a queue: a consumer that falls behind
skips frames instead of building a backlog. This example makes the consumer
slow now and then on purpose, and shows that every skipped frame is
accounted for (frame-id gaps == missed_writes).
"""
import multiprocessing as mp
import os
import sys
import time

import numpy as np

import shmstream

FRAMES = 600
RATE_HZ = 1000.0
SHAPE = (240, 320)


def producer(name: str, go) -> None:
    cam = shmstream.open(name)  # the parent created it: we attach by name
    try:
        frame = np.zeros(SHAPE, np.uint8)
        # The frame id also goes into the first 8 bytes of the image (as many
        # cameras stamp a counter into the picture): a read returns one whole
        # write, so the stamp always matches the pixels around it.
        flat = frame.reshape(-1)  # a view: writing it writes the frame
        stamp = flat[:8].view(np.uint64)
        go.wait()
        period = 1.0 / RATE_HZ
        next_t = time.perf_counter()
        for i in range(FRAMES):
            flat[8:] = i & 0xFF
            stamp[0] = i
            cam.write(frame, frame_id=i)
            next_t += period
            time.sleep(max(0.0, next_t - time.perf_counter()))
    finally:
        cam.close()


def main() -> int:
    name = f"ex-{os.getpid()}-frames"
    cam = shmstream.create(name, shape=SHAPE, dtype=np.uint8)
    ctx = mp.get_context("spawn")
    go = ctx.Event()
    proc = ctx.Process(target=producer, args=(name, go), daemon=True)
    try:
        proc.start()
        # The consumer's handle is open before the first write, so read_new
        # returns frame 0 on; it is level-triggered, so a frame that lands
        # between two calls is returned by the next call, never lost.
        buf = np.empty(SHAPE, np.uint8)
        flat = buf.reshape(-1)
        received = gaps = 0
        last_id = -1
        go.set()
        while last_id < FRAMES - 1:
            cam.read_new(timeout=10.0, out=buf)  # out=: no allocation per frame
            frame_id = int(flat[:8].view(np.uint64)[0])
            if (flat[8:] != (frame_id & 0xFF)).any():
                print(f"torn frame {frame_id}", file=sys.stderr)
                return 1
            gaps += frame_id - last_id - 1
            last_id = frame_id
            received += 1
            if received % 100 == 0:
                time.sleep(0.01)  # a slow step in the consumer: frames are skipped, not queued
        proc.join(timeout=10)
        # Gaps in the frame ids are exactly the writes this handle skipped.
        assert gaps == cam.total_missed_writes, (gaps, cam.total_missed_writes)
        print(
            f"consumer: received {received} of {FRAMES} frames, missed {gaps} "
            f"(total_missed_writes {cam.total_missed_writes}), last frame_id {last_id}"
        )
        return 0
    finally:
        if proc.is_alive():
            proc.terminate()
            proc.join(timeout=5)
        cam.unlink()  # close + destroy the name, even when something failed


if __name__ == "__main__":
    sys.exit(main())
