"""Stream benchmark: shmstream vs pyshmem vs iceoryx2 vs a raw
``multiprocessing.shared_memory`` + NumPy baseline, in one run.

    python -m benchmarks stream [--quick] [--repeats N] [--json PATH]

Sections
  (a) round trip in one process: write a float32 array, read it back
      (100x100, 128x128, 1000x1000; 10000x10000 with --huge).
  (b) cross-process ping-pong: request of 64 B / 64 KiB / 4 MiB on stream A,
      the responder waits for it, reads it and writes a 64 B ack on stream B.
      Round trips/s and p50/p95/p99 latency. Two rows per implementation:
      "copy" (the responder copies the request into its own array) and
      "zero-copy" (it reads the sequence words in place: shmstream with
      ``read_new_view()``, pyshmem with ``wait_for_count`` +
      ``with locked(): read(safe=False)``,
      iceoryx2 in the received sample, the raw baseline in the segment with
      a re-check of its published word). For 64 B also two wake-up rows:
      shmstream with ``spin_us=0`` on both ends (futex sleep at once) and a
      plain ``os.pipe()`` ping-pong (blocking 8-byte reads) between the same
      two processes.
  (c) fan-out: one writer, two reader processes, 64 KiB frames: frames/s
      delivered per reader, missed frames (from sequence numbers, checked
      against shmstream's own counter), torn frames (every 8-byte word of a
      frame carries its sequence number). shmstream with its default two
      payload slots and with ``slots=1``.
  (d) pyRTC-style loop: three shmstream processes hand a 64 KiB frame along
      at 200 Hz, without and with one CPU-bound hog per core (interleaved):
      latency p50/p99 and the busiest process's CPU use.

``--hogs`` runs (a)-(c) with one CPU-bound process per online CPU beside
them (benchmarks/_hogs.py): the loaded regime of docs/waiting.md.

Method: every implementation does the same work: the producer's NumPy array
is copied into shared memory, the consumer ends up with its own NumPy array
(a preallocated ``out=`` buffer where the API has one); (b)'s zero-copy rows
are the one exception, labelled as such, and compared zero-copy with
zero-copy. Rows are measured
round-robin (impl A, B, C, D, A, B, ...) ``--repeats`` times and the median
with the range [min-max] is reported, so drift on a noisy machine hits every column alike. Processes are
spawned once per run and reused (start-up is not measured); each measurement
warms up before it is timed. Payloads carry sequence numbers that are checked:
a mismatch is an error, not a statistic.

Peers (one adapter each in ``peers/stream_*.py``): pyshmem 1.4.0 (``read(out=)``,
``wait_for_count`` for ping-pong because its ``read_new`` is edge-triggered and can deadlock request/response);
iceoryx2 (publish-subscribe over a u8 slice, loaned samples, busy-polling
``receive()``, its own file prefix so it leaves nothing behind); the raw
baseline (one seqlock/counter word + payload in a ``SharedMemory`` segment,
busy-polled, relying on x86-64 store ordering, no resource tracker).
"""

from __future__ import annotations

import argparse
import contextlib
import sys

from ._common import JSON_HELP, Results, call_quietly, progress
from ._hogs import hogs
from ._stream import fanout, loop200, pingpong, roundtrip
from ._stream.peer import Names
from ._stream.peers import IMPLS, OURS, Peers
from ._workers import Worker, import_modules


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks stream",
        description=(
            "Stream benchmark: shmstream vs pyshmem vs iceoryx2 vs raw "
            "multiprocessing.shared_memory, interleaved, median of repeats."
        ),
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="short runs (one repeat, ~0.03 s per measurement); checks, not numbers",
    )
    p.add_argument(
        "--repeats",
        type=int,
        default=None,
        metavar="N",
        help="measurements per row, median reported (default 5; 1 with --quick)",
    )
    p.add_argument(
        "--seconds",
        type=float,
        default=None,
        metavar="S",
        help="time per measurement (default 0.4; 0.03 with --quick)",
    )
    p.add_argument("--json", metavar="PATH", help=JSON_HELP)
    p.add_argument(
        "--huge", action="store_true", help="add a 10000x10000 float32 (400 MB) round-trip column"
    )
    p.add_argument(
        "--sections",
        default="abcd",
        metavar="abcd",
        help="which sections to run: any of a, b, c, d (default abcd)",
    )
    p.add_argument(
        "--hogs",
        action="store_true",
        help="run (a)-(c) beside one CPU-bound process per CPU (the loaded regime)",
    )
    p.add_argument(
        "--peers",
        default=",".join(IMPLS),
        metavar="LIST",
        help=f"implementations to run (default {','.join(IMPLS)})",
    )
    p.add_argument("--self-module", default="shmstream", help=argparse.SUPPRESS)
    return p


def main(argv: list[str] | None = None) -> int:
    cfg = _parser().parse_args(argv)
    if cfg.repeats is None:
        cfg.repeats = 1 if cfg.quick else 5
    if cfg.seconds is None:
        cfg.seconds = 0.03 if cfg.quick else 0.4
    if cfg.repeats < 1 or cfg.seconds <= 0:
        print(
            "python -m benchmarks stream: error: --repeats and --seconds must be positive",
            file=sys.stderr,
        )
        return 2
    wanted = [p.strip() for p in cfg.peers.split(",") if p.strip()]
    bad = [p for p in wanted if p not in IMPLS]
    if bad or OURS not in wanted:
        print(
            f"python -m benchmarks stream: error: --peers takes a list of {', '.join(IMPLS)} "
            "including shmstream",
            file=sys.stderr,
        )
        return 2
    sections = set(cfg.sections)
    if not sections <= set("abcd") or not sections:
        print(
            "python -m benchmarks stream: error: --sections takes letters from 'abcd'",
            file=sys.stderr,
        )
        return 2

    res = Results("stream", argv or [])
    peers = Peers(cfg.self_module, wanted)
    res.meta["peers_missing"] = peers.missing
    res.meta["repeats"] = cfg.repeats
    res.meta["seconds_per_measurement"] = cfg.seconds
    res.meta["hogs"] = cfg.hogs
    cfg.regime = ", beside one CPU-bound hog per core" if cfg.hogs else ""
    for impl, why in peers.missing.items():
        progress(f"{impl} not available: {why}")
    print(
        f"# python -m benchmarks stream  ({res.meta['date_utc']}, python {res.meta['python']}, "
        f"{res.meta['cpu']}, repeats {cfg.repeats}, {cfg.seconds:g} s each"
        f"{', --hogs' if cfg.hogs else ''})"
    )
    print()
    names = Names()
    workers: list[Worker] = []
    try:
        if "d" in sections:  # first: its own hogs come and go, (a)-(c)'s stay
            loop200.run(cfg, names, res)
        loaded = hogs() if cfg.hogs else contextlib.nullcontext()
        with loaded:
            _abc(cfg, sections, peers, names, res, workers)
    finally:
        for w in workers:
            call_quietly(w.close)
        names.cleanup()
        res.save(cfg.json, quick=cfg.quick)
    if res.errors:
        print(f"{len(res.errors)} error(s):", file=sys.stderr)
        for e in res.errors:
            print(f"  {e}", file=sys.stderr)
        return 1
    return 0


def _abc(
    cfg: argparse.Namespace,
    sections: set[str],
    peers: Peers,
    names: Names,
    res: Results,
    workers: list[Worker],
) -> None:
    """Sections (a)-(c); the workers it starts are appended to ``workers``
    (the caller closes them)."""
    if "a" in sections:
        roundtrip.run(cfg, peers, names, res)
    if sections & set("bc"):
        workers.extend(Worker() for _ in range(2 if "c" in sections else 1))
        # the workers import numpy, the peers and the scenarios once,
        # here, before timing
        modules = [p.module for p in peers.available] + [pingpong.__name__, fanout.__name__]
        for w in workers:
            w.start(import_modules, modules=modules)
        for w in workers:
            w.expect("done", timeout=120)
    if "b" in sections:
        pingpong.run(cfg, peers, names, res, workers)
    if "c" in sections:
        fanout.run(cfg, peers, names, res, workers)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
