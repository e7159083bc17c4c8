"""``shmstream demo``: a producer and a consumer process and the frames
flowing between them.

The producer and consumer are module-level functions so that spawned
children can import them. Children ignore SIGINT; on Ctrl-C, SIGTERM or
SIGHUP the parent sets the stop event, joins them and unlinks the stream,
so nothing outlives the demo.
"""

from __future__ import annotations

import argparse
import os
import signal
import time
from collections.abc import Callable
from typing import Any

from ..errors import DemoFailedError, ShmstreamValueError
from ._common import fmt_rate, number, package, status_line
from ._progress import create_progress

# The consumer's shared counters (one float64 each, written every frame so
# the parent samples them at the same instant as the writer's count).
_FRAMES, _MISSED, _LAT_SUM, _LAT_N = range(4)


def register(sub: Any) -> dict[str, Callable[[argparse.Namespace], int]]:
    demo_p = sub.add_parser(
        "demo",
        help="start a producer and a consumer process and show frames flowing between them",
    )
    demo_p.add_argument(
        "--seconds", type=number(), default=5.0, metavar="S", help="run time (default 5)"
    )
    demo_p.add_argument(
        "--shape",
        type=_shape_option,
        default="480x640x3",
        metavar="HxW[xC]",
        help="frame shape, uint8 (default 480x640x3)",
    )
    demo_p.add_argument(
        "--rate",
        type=number(above=False),
        default=1000.0,
        metavar="HZ",
        help="producer rate in Hz, 0 for as fast as possible (default 1000)",
    )
    return {"demo": cmd_demo}


def parse_shape(text: str) -> tuple[int, ...]:
    try:
        shape = tuple(int(p) for p in text.lower().split("x"))
    except ValueError:
        raise ShmstreamValueError(
            f"bad shape {text!r}: use numbers joined by 'x', e.g. 480x640x3"
        ) from None
    if not shape or any(d <= 0 for d in shape):
        raise ShmstreamValueError(f"bad shape {text!r}: every dimension must be positive")
    return shape


def _shape_option(text: str) -> tuple[int, ...]:
    """--shape as an argparse type: a bad one exits 2 naming the option."""
    try:
        return parse_shape(text)
    except ShmstreamValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _orphaned(parent: int) -> bool:
    """The demo's parent died without stopping us (SIGKILL): stop too."""
    return os.getppid() != parent


def _demo_producer(name: str, rate: float, stop: Any, ready: Any, parent: int) -> None:
    import numpy as np

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    handle = package().open(name)
    try:
        frame = np.zeros(handle.shape, dtype=handle.dtype)
        period = 1.0 / rate if rate > 0 else 0.0
        ready.wait()
        next_t = time.perf_counter()
        i = 0
        while not stop.is_set() and (i & 1023 or not _orphaned(parent)):
            frame.flat[0] = i & 0xFF
            handle.write(frame, frame_id=i)
            i += 1
            if period:
                next_t += period
                delay = next_t - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
                elif delay < -0.1:  # fell behind: do not burst to catch up
                    next_t = time.perf_counter()
    finally:
        handle.close()


def _demo_consumer(name: str, stop: Any, ready: Any, report: Any, parent: int) -> None:
    import numpy as np

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    handle = package().open(name, readonly=True)
    try:
        buf = np.empty(handle.shape, dtype=handle.dtype)
        ready.wait()
        while not stop.is_set():
            try:
                handle.read_new(timeout=0.1, out=buf)
            except TimeoutError:
                if _orphaned(parent):
                    break
                continue
            # Unlocked stores of plain doubles: the parent only displays them.
            report[_FRAMES] += 1
            report[_MISSED] = handle.total_missed_writes
            report[_LAT_SUM] += max(0.0, time.time() - handle.write_time)
            report[_LAT_N] += 1
    finally:
        handle.close()


class _Stop(Exception):
    """SIGTERM or SIGHUP arrived: end the demo as Ctrl-C does."""


def _raise_stop(signum: int, frame: Any) -> None:
    raise _Stop(signal.Signals(signum).name)


def run_demo(seconds: float, shape: tuple[int, ...], rate: float) -> int:
    import multiprocessing as mp
    import sys

    import numpy as np

    pkg = package()
    ctx = mp.get_context("spawn")
    name = f"shmstream-demo-{os.getpid()}"
    nbytes = int(np.prod(shape))
    tty = sys.stdout.isatty()
    handle: Any = None
    procs: list[Any] = []
    stop = ctx.Event()
    ready = ctx.Barrier(3)
    report = ctx.Array("d", 4, lock=False)
    interrupted = ""
    # Before the create: a signal while a large stream is created (seconds)
    # must remove it too, not leave it behind.
    previous = {s: signal.signal(s, _raise_stop) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        with create_progress(name, tty=tty):
            handle = pkg.create(name, shape=shape, dtype=np.uint8, notify=True)
        print(
            f"demo: stream {name!r}, frames {'x'.join(map(str, shape))} uint8 "
            f"({nbytes / 1e6:.2f} MB), producer "
            f"{fmt_rate(rate) if rate > 0 else 'as fast as possible'}, {seconds:g} s"
        )
        procs = [
            ctx.Process(
                target=_demo_producer, args=(name, rate, stop, ready, os.getpid()), daemon=True
            ),
            ctx.Process(
                target=_demo_consumer, args=(name, stop, ready, report, os.getpid()), daemon=True
            ),
        ]
        for p in procs:
            p.start()
        ready.wait(timeout=60)  # children are up: start-up is not measured
        t0 = prev_t = time.monotonic()
        prev_count, prev_frames, prev_lat = handle.count, 0.0, (0.0, 0.0)
        while True:
            time.sleep(min(0.5, max(0.0, t0 + seconds - time.monotonic())))
            # the writer's count and the reader's counters at the same instant
            now, count = time.monotonic(), handle.count
            frames, missed = report[_FRAMES], report[_MISSED]
            lat = (report[_LAT_SUM], report[_LAT_N])
            dt = max(now - prev_t, 1e-9)
            n = lat[1] - prev_lat[1]
            latency = (lat[0] - prev_lat[0]) / n if n else 0.0
            status_line(
                f"t={now - t0:4.1f}s  written {count:>8d} ({fmt_rate((count - prev_count) / dt)})"
                f"  read {int(frames):>8d} ({fmt_rate((frames - prev_frames) / dt)})"
                f"  missed {int(missed):>6d}  latency {latency * 1e6:7.1f} us"
                f"  {(count - prev_count) * nbytes / dt / 1e9:5.2f} GB/s",
                tty,
            )
            prev_t, prev_count, prev_frames, prev_lat = now, count, frames, lat
            if now - t0 >= seconds:
                break
            dead = [p for p in procs if not p.is_alive()]
            if dead:
                raise DemoFailedError(f"demo child exited early (exit code {dead[0].exitcode})")
    except KeyboardInterrupt:
        interrupted = "interrupted"
    except _Stop as why:
        interrupted = f"stopped by {why}"
    finally:
        for s in previous:  # a second SIGTERM must not cut the clean-up short
            signal.signal(s, signal.SIG_IGN)
        stop.set()
        ready.abort()  # frees a child still waiting at the barrier
        for p in procs:
            p.join(timeout=5)
            if p.is_alive():
                p.terminate()
                p.join(timeout=5)
        if tty and handle is not None:
            sys.stdout.write("\n")
        if handle is not None:
            handle.close()
        if handle is not None or interrupted:
            # By name: a signal may come between the create and the assignment.
            pkg.unlink(name)
        for s, handler in previous.items():
            signal.signal(s, handler)
    if handle is None:
        print(f"demo: {interrupted} while creating stream {name!r}; stream removed")
        return 0
    print(
        f"demo: {interrupted + '; ' if interrupted else ''}consumer read "
        f"{int(report[_FRAMES])} frames, missed {int(report[_MISSED])}; stream {name!r} removed"
    )
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    return run_demo(args.seconds, args.shape, args.rate)
