"""The ``shmstream`` command: list, inspect, watch, remove and measure streams.

``main(argv) -> int`` is the console script. Every library call looks its
function up on the package at call time (``_package().purge``), so tests can
monkeypatch it. Errors print one line to stderr and return non-zero; nothing
here prints a traceback for a user mistake.
"""
from __future__ import annotations

import argparse
import importlib
import json
import math
import os
import sys
import time
from typing import Any, Sequence

PROG = "shmstream"

# Exceptions that mean "the user asked for something that cannot be done"
# (missing stream, bad name, read-only, timeout...). Anything else is a bug
# and keeps its traceback.
_USER_ERRORS: tuple[type[BaseException], ...] = (
    OSError,  # FileNotFoundError, FileExistsError, PermissionError, ...
    ValueError,
    TypeError,
    RuntimeError,
    TimeoutError,
)


def _package() -> Any:
    """The library package, imported at call time."""
    return importlib.import_module("shmstream")


def _error(message: str) -> None:
    print(f"{PROG}: error: {message}", file=sys.stderr)


def _one_line(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return " ".join(text.split())


# --------------------------------------------------------------------- parser


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description=(
            "Inspect, watch, remove and benchmark shmstream shared-memory "
            "streams."
        ),
        epilog=(
            "Examples: 'shmstream list', 'shmstream watch cam/left', "
            "'shmstream demo --seconds 3', 'shmstream bench stream --quick'."
        ),
    )
    sub = parser.add_subparsers(dest="command", metavar="command")

    list_p = sub.add_parser(
        "list",
        aliases=["ls"],
        help="print the user-visible names of all streams, one per line",
    )
    from .bridge import cli as bridge_cli  # the bridge's options (no zenoh import)

    bridge_cli.add_remote_arguments(list_p)
    bridge_cli.add_bridge_parser(sub)

    stat_p = sub.add_parser(
        "stat",
        help="print a stream's metadata (read without attaching the payload)",
    )
    stat_p.add_argument("name", metavar="NAME", help="stream name")
    stat_p.add_argument(
        "--json", action="store_true", help="print one JSON object instead"
    )

    unlink_p = sub.add_parser(
        "unlink",
        aliases=["rm"],
        help="destroy one or more streams by name (silent for missing names)",
    )
    unlink_p.add_argument("names", nargs="+", metavar="NAME", help="stream names")

    purge_p = sub.add_parser(
        "purge",
        help=(
            "remove ALL shmstream streams, and the shared arrays and loader slots "
            "whose creating process is dead; print their names"
        ),
    )
    purge_p.add_argument(
        "--include-cuda-orphans",
        action="store_true",
        help=(
            "also remove PyTorch IPC files /dev/shm/cuda.shm.* whose "
            "process is dead"
        ),
    )

    watch_p = sub.add_parser(
        "watch",
        help=(
            "follow a stream live: count, write rate, missed writes, age, "
            "producer liveness (Ctrl-C to stop)"
        ),
    )
    watch_p.add_argument("name", metavar="NAME", help="stream name")
    watch_p.add_argument(
        "--interval",
        type=float,
        default=0.5,
        metavar="S",
        help="seconds between refreshes (default 0.5)",
    )
    watch_p.add_argument(
        "--count",
        type=int,
        default=0,
        metavar="N",
        help="stop after N refreshes (default: run until Ctrl-C)",
    )
    watch_p.add_argument(
        "--no-read",
        action="store_true",
        help=(
            "only sample the counters; do not consume frames (missed is "
            "then not measured)"
        ),
    )

    demo_p = sub.add_parser(
        "demo",
        help=(
            "start a producer and a consumer process and show frames "
            "flowing between them"
        ),
    )
    demo_p.add_argument(
        "--seconds", type=float, default=5.0, metavar="S", help="run time (default 5)"
    )
    demo_p.add_argument(
        "--shape",
        default="480x640x3",
        metavar="HxW[xC]",
        help="frame shape, uint8 (default 480x640x3)",
    )
    demo_p.add_argument(
        "--rate",
        type=float,
        default=1000.0,
        metavar="HZ",
        help="producer rate in Hz, 0 for as fast as possible (default 1000)",
    )

    bench_p = sub.add_parser(
        "bench",
        help=(
            "run a benchmark part against its peers (default part: stream); "
            "'shmstream bench --help' lists the parts"
        ),
        add_help=False,
    )
    bench_p.add_argument("args", nargs=argparse.REMAINDER, help="PART [options]")
    return parser


# ------------------------------------------------------------------- commands


def _cmd_list(args: argparse.Namespace) -> int:
    if getattr(args, "remote", False):
        from .bridge.cli import print_remote

        return print_remote(args)
    names = _package().list_streams()
    for name in names:
        print(name)
    if not names:
        print("no streams found", file=sys.stderr)
    return 0


def _format_value(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return "(" + ", ".join(str(v) for v in value) + ("," if len(value) == 1 else "") + ")"
    return str(value)


def _cmd_stat(args: argparse.Namespace) -> int:
    info = dict(_package().stat(args.name))
    if args.json:
        print(json.dumps(info, default=str, sort_keys=False))
        return 0
    width = max((len(k) for k in info), default=0) + 2
    for key, value in info.items():
        print(f"{key + ':':<{width}}{_format_value(value)}")
    return 0


def _cmd_unlink(args: argparse.Namespace) -> int:
    pkg = _package()
    for name in args.names:
        pkg.unlink(name)
        print(f"unlinked {name!r}")
    return 0


def _cmd_purge(args: argparse.Namespace) -> int:
    removed = _package().purge(include_cuda_orphans=args.include_cuda_orphans)
    removed = list(removed or [])
    for name in removed:
        print(f"purged {name!r}")
    # Live owners' arrays are in use; only what dead creators left goes.
    from .shared_array import purge_dead_arrays

    orphans = purge_dead_arrays()
    for name in orphans:
        print(f"purged array {name!r} (its creator is dead)")
    if removed or orphans:
        print(f"removed {len(removed)} stream(s), {len(orphans)} orphaned array(s)",
              file=sys.stderr)
    else:
        print("no streams found", file=sys.stderr)
    return 0


def _fmt_age(age: float) -> str:
    if math.isinf(age):
        return "never written"
    if age < 1e-3:
        return f"{age * 1e6:.0f} us"
    if age < 1.0:
        return f"{age * 1e3:.1f} ms"
    return f"{age:.1f} s"


def _fmt_rate(hz: float) -> str:
    if hz >= 1e6:
        return f"{hz / 1e6:.2f} MHz"
    if hz >= 1e3:
        return f"{hz / 1e3:.2f} kHz"
    return f"{hz:.1f} Hz"


def _cmd_watch(args: argparse.Namespace) -> int:
    if args.interval <= 0:
        _error("--interval must be positive")
        return 2
    pkg = _package()
    handle = pkg.open(args.name, readonly=True)
    tty = sys.stdout.isatty()
    buf = None
    if not args.no_read:
        import numpy as np

        buf = np.empty(handle.shape, dtype=handle.dtype)
    refreshes = 0
    try:
        prev_count = handle.count
        prev_t = time.monotonic()
        missed_base = handle.total_missed_writes if buf is not None else 0
        seen = 0
        while True:
            deadline = prev_t + args.interval
            if buf is None:
                time.sleep(max(0.0, deadline - time.monotonic()))
            else:
                # Consume like a real reader until the refresh is due, so
                # "missed" says whether one Python consumer keeps up.
                while True:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        break
                    try:
                        handle.read_new(timeout=remaining, out=buf)
                    except TimeoutError:
                        break
                    except Exception as exc:  # noqa: BLE001 - aborted write etc.
                        if type(exc).__name__ == "InconsistentStreamError":
                            time.sleep(min(remaining, 0.01))
                            continue
                        raise
                    seen += 1
            now = time.monotonic()
            count = handle.count
            rate = (count - prev_count) / (now - prev_t) if now > prev_t else 0.0
            alive = handle.producer_alive()
            parts = [
                f"{args.name}",
                f"count {count}",
                f"rate {_fmt_rate(rate)}",
            ]
            if buf is not None:
                parts.append(f"read {seen}")
                parts.append(f"missed {handle.total_missed_writes - missed_base}")
            parts.append(f"age {_fmt_age(handle.age)}")
            parts.append(f"producer {'alive' if alive else 'dead'}")
            line = "  ".join(parts)
            if tty:
                sys.stdout.write("\r" + line + "\x1b[K")
            else:
                sys.stdout.write(line + "\n")
            sys.stdout.flush()
            prev_count, prev_t = count, now
            refreshes += 1
            if args.count and refreshes >= args.count:
                break
    except KeyboardInterrupt:
        pass
    finally:
        if tty and refreshes:
            sys.stdout.write("\n")
            sys.stdout.flush()
        handle.close()
    return 0


def _parse_shape(text: str) -> tuple[int, ...]:
    try:
        shape = tuple(int(p) for p in text.lower().split("x"))
    except ValueError:
        raise ValueError(f"bad shape {text!r}: use numbers joined by 'x', e.g. 480x640x3") from None
    if not shape or any(d <= 0 for d in shape):
        raise ValueError(f"bad shape {text!r}: every dimension must be positive")
    return shape


# ----------------------------------------------------------------------- demo
# The producer and consumer are module-level functions so that spawned
# children can import them. Children ignore SIGINT: on Ctrl-C the parent
# sets the stop event, joins them and unlinks the stream.


def _demo_producer(name: str, rate: float, stop: Any, ready: Any) -> None:
    import signal

    import numpy as np

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    handle = _package().open(name)
    try:
        frame = np.zeros(handle.shape, dtype=handle.dtype)
        period = 1.0 / rate if rate > 0 else 0.0
        ready.wait()
        next_t = time.perf_counter()
        i = 0
        while not stop.is_set():
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


def _demo_consumer(name: str, stop: Any, ready: Any, report: Any) -> None:
    import signal

    import numpy as np

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    handle = _package().open(name, readonly=True)
    try:
        buf = np.empty(handle.shape, dtype=handle.dtype)
        frames = 0
        lat_sum = 0.0
        lat_n = 0
        last_report = time.monotonic()
        ready.wait()
        while not stop.is_set():
            try:
                handle.read_new(timeout=0.1, out=buf)
            except TimeoutError:
                continue
            frames += 1
            lat_sum += max(0.0, time.time() - handle.write_time)
            lat_n += 1
            now = time.monotonic()
            if now - last_report >= 0.25:
                with report.get_lock():
                    report[0] = frames
                    report[1] = handle.total_missed_writes
                    report[2] = lat_sum / lat_n if lat_n else 0.0
                lat_sum, lat_n, last_report = 0.0, 0, now
        with report.get_lock():
            report[0] = frames
            report[1] = handle.total_missed_writes
    finally:
        handle.close()


def _run_demo(seconds: float, shape: tuple[int, ...], rate: float) -> int:
    import multiprocessing as mp

    import numpy as np

    pkg = _package()
    ctx = mp.get_context("spawn")
    name = f"shmstream-demo-{os.getpid()}"
    nbytes = int(np.prod(shape))
    tty = sys.stdout.isatty()
    handle = pkg.create(name, shape=shape, dtype=np.uint8, notify=True)
    procs: list[Any] = []
    stop = ctx.Event()
    ready = ctx.Barrier(3)
    report = ctx.Array("d", 3)
    interrupted = False
    try:
        print(
            f"demo: stream {name!r}, frames {'x'.join(map(str, shape))} uint8 "
            f"({nbytes / 1e6:.2f} MB), producer "
            f"{_fmt_rate(rate) if rate > 0 else 'as fast as possible'}, "
            f"{seconds:g} s"
        )
        procs = [
            ctx.Process(target=_demo_producer, args=(name, rate, stop, ready), daemon=True),
            ctx.Process(target=_demo_consumer, args=(name, stop, ready, report), daemon=True),
        ]
        for p in procs:
            p.start()
        ready.wait(timeout=60)  # children are up: start-up is not measured
        t0 = prev_t = time.monotonic()
        prev_count = handle.count
        prev_frames = 0.0
        while True:
            time.sleep(min(0.5, max(0.0, t0 + seconds - time.monotonic())))
            now = time.monotonic()
            count = handle.count
            with report.get_lock():
                frames, missed, latency = report[0], report[1], report[2]
            dt = max(now - prev_t, 1e-9)
            line = (
                f"t={now - t0:4.1f}s  written {count:>8d} ({_fmt_rate((count - prev_count) / dt)})"
                f"  read {int(frames):>8d} ({_fmt_rate((frames - prev_frames) / dt)})"
                f"  missed {int(missed):>6d}  latency {latency * 1e6:7.1f} us"
                f"  {(count - prev_count) * nbytes / dt / 1e9:5.2f} GB/s"
            )
            if tty:
                sys.stdout.write("\r" + line + "\x1b[K")
            else:
                sys.stdout.write(line + "\n")
            sys.stdout.flush()
            prev_t, prev_count, prev_frames = now, count, frames
            if now - t0 >= seconds:
                break
            dead = [p for p in procs if not p.is_alive()]
            if dead:
                raise RuntimeError(
                    f"demo child exited early (exit code {dead[0].exitcode})"
                )
    except KeyboardInterrupt:
        interrupted = True
    finally:
        stop.set()
        ready.abort()  # frees a child still waiting at the barrier
        for p in procs:
            p.join(timeout=5)
            if p.is_alive():
                p.terminate()
                p.join(timeout=5)
        if tty:
            sys.stdout.write("\n")
        handle.close()
        pkg.unlink(name)
    with report.get_lock():
        frames, missed = report[0], report[1]
    print(
        f"demo: {'interrupted; ' if interrupted else ''}consumer read "
        f"{int(frames)} frames, missed {int(missed)}; stream {name!r} removed"
    )
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    if args.seconds <= 0:
        _error("--seconds must be positive")
        return 2
    return _run_demo(args.seconds, _parse_shape(args.shape), args.rate)


_COMMANDS = {
    "list": _cmd_list,
    "ls": _cmd_list,
    "stat": _cmd_stat,
    "unlink": _cmd_unlink,
    "rm": _cmd_unlink,
    "purge": _cmd_purge,
    "watch": _cmd_watch,
    "demo": _cmd_demo,
    "bridge": lambda args: importlib.import_module(".bridge.cli", __package__).cmd_bridge(args),
}


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``shmstream`` command line; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = _build_parser()
    if argv and argv[0] == "bench":
        # The benchmark owns its options; hand everything after "bench" over.
        from . import bench

        try:
            return bench.main(argv[1:])
        except KeyboardInterrupt:
            print(f"{PROG}: interrupted", file=sys.stderr)
            return 130
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse: --help (0) or a usage error (2)
        return int(exc.code or 0)
    command = _COMMANDS.get(args.command or "")
    if command is None:
        parser.print_help()
        return 1
    try:
        return command(args)
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except _USER_ERRORS as exc:
        _error(_one_line(exc))
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
