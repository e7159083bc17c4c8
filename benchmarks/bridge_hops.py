"""Where a bridged round trip spends its time: the hops of `shmstream bench
bridge`'s ping-pong, one by one.

    python benchmarks/bridge_hops.py [--size BYTES] [--round-trips N] [--json PATH]

The set-up is the benchmark's own (bench/bridge.py: two bridge processes, a
pinger and a ponger, all on 127.0.0.1). Every stage stamps
``time.perf_counter_ns()`` (CLOCK_MONOTONIC, one clock for all processes on
the host) against the round trip's number:

    ping writes req ─► bridge A's export thread has the frame (about to put)
    ─► bridge B's subscriber callback starts ─► B has written the mirror
    ─► the ponger has read it (about to answer) ─► bridge B's export thread has the ack
    ─► bridge A's callback starts ─► A has written the mirror
    ─► the pinger's read returns

and the table gives the median of each hop over the round trips after the
first fifth (warm-up). The "callback → read" hops include the mirror write;
"export → callback" is Zenoh's own hop (put, TCP, its receiving thread, the
call into Python), which plain Zenoh pays too. A reader that spins can see a
mirror's frame before the callback that wrote it returns, so the hop after
"mirror written" can come out near 0 or below.

The stamps are taken by wrapping two private functions of the bridge in its
process (the frame header's packer on the export side, the import's sample
callback), so this is a diagnostic, not a benchmark: its wrappers cost a
few hundred ns a hop.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from typing import Any, Callable

import numpy as np

from shmstream.bench import _bridge_tasks as tasks
from shmstream.bench import bridge as bench
from shmstream.bench._workers import Worker

HOPS = (  # (label, from stamp, to stamp)
    ("ping write -> bridge A export", "ping_write", "A_export"),
    ("A export -> B callback (Zenoh)", "A_export", "B_callback"),
    ("B callback -> mirror written", "B_callback", "B_written"),
    ("B mirror written -> pong has it", "B_written", "pong_read"),
    ("pong write -> bridge B export", "pong_read", "B_export"),
    ("B export -> A callback (Zenoh)", "B_export", "A_callback"),
    ("A callback -> mirror written", "A_callback", "A_written"),
    ("A mirror written -> ping read", "A_written", "ping_read"),
)


def _stamps(n: int) -> np.ndarray:
    return np.zeros(n + 1, np.int64)


def _save(outdir: str, name: str, arr: np.ndarray) -> None:
    np.save(os.path.join(outdir, name + ".npy"), arr)


def _traced_bridge(kwargs: dict, ready: Any, stop: Any, side: str, n: int, outdir: str) -> None:
    """A bridge process whose export and import stamp each round trip."""
    from shmstream.bridge import _streams, _wire

    export, callback, written = _stamps(n), _stamps(n), _stamps(n)
    clock = time.perf_counter_ns
    pack = _wire.pack_frame_head

    def stamped_pack(count: int, frame_id: int, *rest: Any) -> bytes:
        if 0 < frame_id <= n:
            export[frame_id] = clock()
        return pack(count, frame_id, *rest)

    on_sample = _streams.StreamImport._on_sample

    def stamped_on_sample(self: Any, sample: Any) -> None:
        start = clock()
        on_sample(self, sample)
        done = clock()
        frame_id = _wire.unpack_frame_head(sample.attachment.to_bytes())[1]
        if 0 < frame_id <= n:
            callback[frame_id], written[frame_id] = start, done

    _streams._wire.pack_frame_head = stamped_pack  # the module the export calls it through
    _streams.StreamImport._on_sample = stamped_on_sample
    try:
        tasks._run_bridge(kwargs, ready, stop)
    finally:
        _save(outdir, f"{side}_export", export)
        _save(outdir, f"{side}_callback", callback)
        _save(outdir, f"{side}_written", written)


def ping(ready: Callable[[], None], req: str, ack_mirror: str, size: int, n: int,
         outdir: str) -> int:
    import shmstream

    h = shmstream.open(req)
    a = tasks._open_when_there(ack_mirror, readonly=True)
    buf = np.zeros(size, np.uint8)
    got = np.empty(tasks.ACK_BYTES, np.uint8)
    sent, back = _stamps(n), _stamps(n)
    clock = time.perf_counter_ns
    ready()
    try:
        for k in range(1, n + 1):
            buf[:8].view(np.uint64)[0] = k
            sent[k] = clock()
            h.write(buf, frame_id=k)
            a.read_new(timeout=10, out=got)
            back[k] = clock()
            if got[:8].view(np.uint64)[0] != k:
                raise tasks.BenchError(f"round trip {k}: the answer carries another number")
        buf[:8].view(np.uint64)[0] = tasks.STOP
        h.write(buf)
    finally:
        h.close()
        a.close()
    _save(outdir, "ping_write", sent)
    _save(outdir, "ping_read", back)
    return n


def pong(ready: Callable[[], None], req_mirror: str, ack: str, size: int, n: int,
         outdir: str) -> int:
    """The benchmark's ponger (``_answer``), stamping each request as it
    answers it and writing the answer with the request's number as frame id
    (which the traced export stamps by)."""
    import shmstream

    seen = _stamps(n)
    clock = time.perf_counter_ns

    with tasks._open_when_there(req_mirror, readonly=True) as r, shmstream.open(ack) as h:
        def answer(out: np.ndarray) -> None:
            k = int(out[:8].view(np.uint64)[0])
            if 0 < k <= n:
                seen[k] = clock()
            h.write(out, frame_id=k)

        ready()
        answered = tasks._answer(r, answer, size)
    _save(outdir, "pong_read", seen)
    return answered


class _TracedSetup(bench.Setup):
    """The benchmark's set-up with traced bridge processes."""

    def __init__(self, n: int, outdir: str) -> None:
        self.n, self.outdir = n, outdir
        super().__init__(["bridged"], 5.0)

    def _bridge_main(self, kwargs: dict, ready: Any) -> tuple[Callable[..., None], tuple]:
        side = "A" if kwargs["namespace"] == "benchA" else "B"
        return _traced_bridge, (kwargs, ready, self.stop, side, self.n, self.outdir)


def measure(size: int, n: int) -> dict[str, Any]:
    """Median µs of every hop and of the whole round trip."""
    with tempfile.TemporaryDirectory() as outdir:
        setup = _TracedSetup(n, outdir)
        sender, receiver = Worker(), Worker()
        try:
            receiver.start(pong, req_mirror=f"mB/{setup.req(size)}", ack=setup.ack(size),
                           size=size, n=n, outdir=outdir)
            receiver.expect("ready", tasks.SETUP_S)
            sender.start(ping, req=setup.req(size), ack_mirror=f"mA/{setup.ack(size)}",
                         size=size, n=n, outdir=outdir)
            sender.expect("ready", tasks.SETUP_S)
            sender.expect("done", 60 + n * 0.01)
            receiver.expect("done", tasks.SETUP_S)
        finally:
            sender.close()
            receiver.close()
            setup.close()  # the bridges write their stamps as they stop
        stamps = {name: np.load(os.path.join(outdir, name + ".npy"))
                  for name in {s for _, a, b in HOPS for s in (a, b)}}
    ks = np.arange(max(1, n // 5), n + 1)
    if any((stamps[name][ks] == 0).any() for name in stamps):
        raise tasks.BenchError("a stage did not stamp every round trip")

    def med_us(a: str, b: str) -> float:
        return float(np.median(stamps[b][ks] - stamps[a][ks])) / 1e3

    return {"size": size, "round_trips": len(ks),
            "round_trip_us": med_us("ping_write", "ping_read"),
            "hops_us": {label: med_us(a, b) for label, a, b in HOPS}}


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", type=int, default=64, help="request bytes (default 64)")
    ap.add_argument("--round-trips", type=int, default=3000, help="default 3000")
    ap.add_argument("--json", metavar="PATH", help="also write the result as JSON")
    cfg = ap.parse_args(argv)
    if cfg.size < 8 or cfg.round_trips < 10:
        print("bridge_hops: --size must be at least 8 and --round-trips at least 10")
        return 2
    res = measure(cfg.size, cfg.round_trips)
    print(f"bridged ping-pong, {cfg.size} B request, median of {res['round_trips']} round trips")
    width = max(len(label) for label, _, _ in HOPS)
    for label, us in res["hops_us"].items():
        print(f"  {label:<{width}}  {us:8.1f} us")
    print(f"  {'sum of the hops':<{width}}  {sum(res['hops_us'].values()):8.1f} us")
    print(f"  {'round trip':<{width}}  {res['round_trip_us']:8.1f} us")
    if cfg.json:
        with open(cfg.json, "w", encoding="utf-8") as f:
            json.dump(res, f, indent=1)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
