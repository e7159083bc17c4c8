"""Two processes ping-pong over two streams with read_new: a client writes a
request on one stream, a server answers on the other.

    python examples/request_response.py

This is the loop that deadlocks with an edge-triggered read_new (pyshmem's):
when the answer lands before the client calls read_new, an edge-triggered
wait sleeps past it forever. shmstream's read_new returns the first
publication newer than what the handle last saw, so the order of "write
lands" and "reader starts waiting" does not matter.
"""
import multiprocessing as mp
import os
import sys
import time

import numpy as np

import shmstream

SECONDS = 1.0
MAX_ROUND_TRIPS = 50_000
SHAPE = (16,)  # a small message: this measures the wake-up, not the copy
STOP = 2**64 - 1  # frame id that tells the server to quit


def server(req_name: str, resp_name: str, ready) -> None:
    req = shmstream.open(req_name, readonly=True)
    resp = shmstream.open(resp_name)
    try:
        # Opened before we say "ready": read_new now waits for any request
        # written after this point, even one that lands before the call.
        ready.set()
        while True:
            pub = req.read_new_publication(timeout=10.0)  # payload + its frame id
            if pub.frame_id == STOP:
                return
            resp.write(pub.payload * 2, frame_id=pub.frame_id)
    finally:
        req.close()
        resp.close()


def main() -> int:
    pid = os.getpid()
    # stream(): created here, unlinked when the block ends, even on an error.
    with shmstream.stream(f"ex-{pid}-request", shape=SHAPE, dtype=np.float64) as req, \
            shmstream.stream(f"ex-{pid}-response", shape=SHAPE, dtype=np.float64) as resp:
        ctx = mp.get_context("spawn")
        ready = ctx.Event()
        proc = ctx.Process(target=server, args=(req.name, resp.name, ready), daemon=True)
        try:
            proc.start()
            if not ready.wait(timeout=30):
                raise RuntimeError("server did not start")
            msg = np.zeros(SHAPE)
            answer = np.empty(SHAPE)
            latencies = []
            start = time.perf_counter()
            i = 0
            while i < MAX_ROUND_TRIPS and time.perf_counter() - start < SECONDS:
                msg[0] = i
                t0 = time.perf_counter_ns()
                req.write(msg, frame_id=i)
                resp.read_new(timeout=10.0, out=answer)
                latencies.append(time.perf_counter_ns() - t0)
                if answer[0] != 2 * i:  # the answer belongs to this request
                    raise RuntimeError(f"round trip {i}: got {answer[0]}, expected {2 * i}")
                i += 1
            elapsed = time.perf_counter() - start
            req.write(msg, frame_id=STOP)
            proc.join(timeout=10)
        finally:
            if proc.is_alive():
                proc.terminate()
                proc.join(timeout=5)
    p50_us = float(np.median(latencies)) / 1e3
    p99_us = float(np.percentile(latencies, 99)) / 1e3
    print(
        f"request/response: {i} round trips, {i / elapsed:.0f} round trips/s, "
        f"p50 latency {p50_us:.1f} us, p99 {p99_us:.1f} us"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
