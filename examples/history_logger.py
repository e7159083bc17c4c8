"""A producer publishes frames at 1 kHz into a stream with history; a logger
that stalls now and then (a slow disk) still gets every frame, in batches,
and records them to .npy files that NumPy reads alone.

    python examples/history_logger.py

A latest-value stream skips the frames a slow reader did not get to (see
producer_consumer.py). With ``history=N`` the stream keeps its last N
publications, and ``read_since`` returns every one after the reader's
position: a reader that stays within N of the writer misses nothing, and
one that falls further behind is told exactly how many it missed.
"""
import multiprocessing as mp
import os
import sys
import tempfile
import time

import numpy as np

import shmstream

FRAMES = 600
RATE_HZ = 1000.0
SHAPE = (64, 64)
HISTORY = 1024  # more than the whole run: the logger can stall for 1 s


def producer(name: str, go) -> None:
    cam = shmstream.open(name)
    try:
        frame = np.zeros(SHAPE, np.uint16)
        go.wait()
        period = 1.0 / RATE_HZ
        next_t = time.perf_counter()
        for i in range(FRAMES):
            frame.fill(i)
            cam.write(frame, frame_id=i)
            next_t += period
            time.sleep(max(0.0, next_t - time.perf_counter()))
    finally:
        cam.close()


def main() -> int:
    name = f"ex-{os.getpid()}-wfs"
    cam = shmstream.create(name, shape=SHAPE, dtype=np.uint16, history=HISTORY)
    ctx = mp.get_context("spawn")
    go = ctx.Event()
    proc = ctx.Process(target=producer, args=(name, go), daemon=True)
    out = tempfile.mkdtemp(prefix="history-logger-")
    try:
        proc.start()
        go.set()
        frames, ids, batches, missed = [], [], 0, 0
        while len(ids) + missed < FRAMES:
            batch = cam.read_since(timeout=10.0)  # everything since the last batch
            frames.append(batch.frames)
            ids.extend(batch.frame_ids.tolist())
            missed += batch.missed
            batches += 1
            time.sleep(0.03)  # a stall: 30 frames pile up, none is lost
        proc.join(timeout=10)
        frames = np.concatenate(frames)
        if ids != list(range(FRAMES)) or any((f != i).any() for i, f in enumerate(frames)):
            print("a frame is missing or wrong", file=sys.stderr)
            return 1
        np.save(os.path.join(out, "frames.npy"), frames)  # (shmstream record does this live)
        np.save(os.path.join(out, "frame_ids.npy"), np.array(ids, np.uint64))
        print(f"history: read {len(ids)} of {FRAMES} frames in {batches} batches, missed "
              f"{missed} (the reader stalled 30 ms after each batch)")
        return 0
    finally:
        if proc.is_alive():
            proc.terminate()
            proc.join(timeout=5)
        cam.unlink()
        for f in os.listdir(out):
            os.remove(os.path.join(out, f))
        os.rmdir(out)


if __name__ == "__main__":
    sys.exit(main())
