"""``python -m benchmarks bridge``: streams through two shmstream bridges over
Eclipse Zenoh, against plain zenoh-python and pyzmq over tcp://, all on
127.0.0.1 in one run, interleaved round by round.

    python -m benchmarks bridge [--rounds N] [--seconds S] [--rate HZ] [--quick] [--json PATH]

Processes: a sender and a receiver worker (spawned once, reused), and for
the "bridged" rows two bridge processes: bridge A exports the sender's
streams and imports the receiver's back; bridge B the other way round. The
"inproc" rows run the same two bridges inside the workers, which write
through ``bridge.publisher(name)`` and read their mirrors as usual. The
"bridged-pw" rows are the "bridged" rows through a second pair of bridge
processes that authenticate each other with a password file (Zenoh's
user/password authentication, as ``--password-file`` sets it); "bridged"
and "inproc" run with ``insecure=True``, the unauthenticated baseline. The
workers' tasks are in bench/_bridge_tasks.py.

Sections
  ping-pong   a request of 64 B / 64 KiB, a 64 B answer; round trips for
              ``--seconds``, p50 / p99 of one round trip.
              bridged: the sender writes stream req, the receiver reads its
              mirror (read_new) and writes stream ack, the sender reads ack's
              mirror: source -> bridge A -> Zenoh -> bridge B -> mirror and
              back. zenoh: a publisher puts the request, the receiver's
              subscriber callback puts the answer, the sender waits with
              ``recv()`` on its subscriber (faster here than a callback and an
              Event). pyzmq: PAIR sockets over tcp://, send / recv.
  one-way     frames of 64 KiB / 4 MiB sent as fast as the sender can for
              ``--seconds``; frames/s and GB/s the receiver gets.
              bridged: the sender writes a stream; the receiver reads its
              mirror with read_new(out=) (latest value: frames the bridge
              could not carry in time are counted as missed, not queued).
              zenoh: put with congestion control DROP, the receiver's
              callback takes each payload out (``to_bytes()``). pyzmq:
              PUSH/PULL over tcp:// (queues, never drops). ``--rate HZ``: every
              sender offers HZ frames/s instead (can the path carry a
              stream of that rate?). Each row also gives the CPU time of all
              its processes (bridges included) per frame received.

Every receiver takes the payload out as bytes or into its own array, and
checks sequence numbers (a mismatch is an error, not a statistic).
Targets (issue 16): bridged ping-pong p50 <= 1.5x zenoh's, bridged one-way
rate >= 0.8x zenoh's, bridged p99 <= 3x its p50. Issue 32: with
authentication on, ping-pong p50 and one-way rate within 5% of the
unauthenticated bridged rows of the same run.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import secrets
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable
from typing import Any

import numpy as np

from . import _bridge_tasks
from ._bridge_tasks import ACK_BYTES, SETUP_S, _run_bridge, _wait
from ._common import (
    JSON_HELP,
    BenchError,
    Results,
    call_quietly,
    fmt_bytes,
    fmt_hz,
    fmt_ratio,
    fmt_us,
    median,
    peer_version,
    progress,
    render_table,
    try_import,
)
from ._workers import Worker

PING_SIZES = (64, 64 << 10)
THR_SIZES = (64 << 10, 4 << 20)
IMPLS = ("bridged", "bridged-pw", "inproc", "zenoh", "pyzmq")
BRIDGED = ("bridged", "bridged-pw", "inproc")  # the rows held to the targets
#: The two pairs of bridge processes: the groups their streams are in (A
#: exports the first, B the second) and the prefixes of their mirrors.
PAIRS = {"bridged": ("a", "b", "mA/", "mB/"), "bridged-pw": ("e", "f", "pA/", "pB/")}
AUTH_SLACK = 1.05  # issue 32: authenticated rows within 5% of the others


def _task(name: str) -> Callable[..., Any]:
    """A worker task by name (workers run module-level functions)."""
    return getattr(_bridge_tasks, name)


# ----------------------------------------------------------------- the run


class Setup:
    """Names, ports, streams and the two bridges for one run."""

    def __init__(self, impls: list[str], spin_us: float | None) -> None:
        import shmstream

        self.base = f"bench-bridge-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self.made: list[str] = []
        self.bridges: list[Any] = []
        self.pair_procs: dict[str, list[Any]] = {}
        self.stop = mp.get_context("spawn").Event()
        self.tmp = tempfile.mkdtemp(prefix="bench-bridge-")
        self.password_file = os.path.join(self.tmp, "pw")
        fd = os.open(self.password_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(f"bench:{secrets.token_urlsafe(24)}\n")
        if "inproc" in impls:  # written through the workers' own bridges
            for size in PING_SIZES:
                self._make(shmstream, self.ireq(size), size)
                self._make(shmstream, self.iack(size), ACK_BYTES)
            for size in THR_SIZES:
                self._make(shmstream, self.ithr(size), size)
        for impl in PAIRS:
            if impl in impls:
                self._pair(shmstream, impl, spin_us)

    def _pair(self, shmstream: Any, impl: str, spin_us: float | None) -> None:
        """The streams and the two bridge processes of the ``impl`` rows."""
        a, b, prefix_a, prefix_b = PAIRS[impl]
        for size in PING_SIZES:
            self._make(shmstream, self.req(size, impl), size)
            self._make(shmstream, self.ack(size, impl), ACK_BYTES)
        for size in THR_SIZES:
            self._make(shmstream, self.thr(size, impl), size)
        ep = f"tcp/127.0.0.1:{_free_port()}"
        auth: dict[str, Any] = (
            {"password_file": self.password_file} if impl == "bridged-pw" else {"insecure": True}
        )
        common = dict(scan_interval=0.5, unlink_on_close=True, spin_us=spin_us, **auth)
        start = len(self.bridges)
        self._bridge(
            dict(
                exports=[f"{self.base}/{a}/*"],
                imports=[f"{self.base}/{b}/*"],
                namespace=f"bench{impl}A",
                local_prefix=prefix_a,
                listen=[ep],
                **common,
            )
        )
        self._bridge(
            dict(
                exports=[f"{self.base}/{b}/*"],
                imports=[f"{self.base}/{a}/*"],
                namespace=f"bench{impl}B",
                local_prefix=prefix_b,
                connect=[ep],
                **common,
            )
        )
        self.pair_procs[impl] = self.bridges[start:]

    def _make(self, shmstream: Any, name: str, size: int) -> None:
        shmstream.create(name, shape=(size,), dtype=np.uint8).close()
        self.made.append(name)

    def _bridge_main(self, kwargs: dict, ready: Any) -> tuple[Callable[..., None], tuple]:
        """What a bridge process runs (a subclass may run a traced one, as the
        removed bridge_hops diagnostic did: benchmarks/results/LOG.md)."""
        return _run_bridge, (kwargs, ready, self.stop)

    def _bridge(self, kwargs: dict) -> None:
        ctx = mp.get_context("spawn")
        ready = ctx.Event()
        target, args = self._bridge_main(kwargs, ready)
        p = ctx.Process(target=target, args=args, daemon=True)
        p.start()
        self.bridges.append(p)
        _wait(lambda: ready.is_set() or not p.is_alive(), "a bridge to start")
        if not p.is_alive():
            raise BenchError(f"a bridge process died at start (exit code {p.exitcode})")

    def req(self, size: int, impl: str = "bridged") -> str:
        return f"{self.base}/{PAIRS[impl][0]}/req{size}"

    def ack(self, size: int, impl: str = "bridged") -> str:
        return f"{self.base}/{PAIRS[impl][1]}/ack{size}"

    def thr(self, size: int, impl: str = "bridged") -> str:
        return f"{self.base}/{PAIRS[impl][0]}/thr{size}"

    def mirror(self, side: str, name: str, impl: str) -> str:
        """The mirror of ``name`` made by bridge ``side`` ("A" or "B") of ``impl``."""
        return PAIRS[impl][2 if side == "A" else 3] + name

    # The in-process rows' streams: under c/ and d/, which the two bridge
    # processes (a/* and b/*) do not export.
    def ireq(self, size: int) -> str:
        return f"{self.base}/c/req{size}"

    def iack(self, size: int) -> str:
        return f"{self.base}/d/ack{size}"

    def ithr(self, size: int) -> str:
        return f"{self.base}/c/thr{size}"

    def close(self) -> None:
        import shmstream

        self.stop.set()
        for p in self.bridges:
            p.join(30)
            if p.is_alive():
                p.kill()
                p.join(5)
        for name in self.made:
            call_quietly(shmstream.unlink, name)
        prefixes = [p for pair in PAIRS.values() for p in pair[2:]] + ["iA/", "iB/"]
        for name in self.made:  # mirrors and status streams a killed bridge left
            for local in (prefix + name for prefix in prefixes):
                call_quietly(shmstream.unlink, local)
                call_quietly(shmstream.unlink, local + "@bridge")
        shutil.rmtree(self.tmp, ignore_errors=True)


def _cpu_seconds(pids: list[int]) -> float | None:
    """CPU time (user + system, all threads) the processes ``pids`` have
    used so far, from /proc; None where /proc is not Linux's."""
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", encoding="ascii") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            return None
        total += int(fields[11]) + int(fields[12])  # utime, stime (man 5 proc)
    return total / tick


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _measure(
    kind: str,
    impl: str,
    size: int,
    cfg: argparse.Namespace,
    setup: Setup,
    sender: Worker,
    receiver: Worker,
) -> dict:
    """One measurement: start the receiving side, then the sending side."""
    recv_args: dict[str, Any]
    send_args: dict[str, Any]
    port = _free_port()
    zep, zaddr = f"tcp/127.0.0.1:{port}", f"tcp://127.0.0.1:{port}"
    task = "bridged" if impl in PAIRS else impl  # both pairs run the same tasks
    if kind == "ping":
        if impl in PAIRS:
            req, ack = setup.req(size, impl), setup.ack(size, impl)
            recv_args = dict(req_mirror=setup.mirror("B", req, impl), ack=ack, size=size)
            send_args = dict(req=req, ack_mirror=setup.mirror("A", ack, impl), size=size)
        elif impl == "inproc":
            names = dict(req=setup.ireq(size), ack=setup.iack(size), size=size)
            recv_args, send_args = dict(listen=zep, **names), dict(connect=zep, **names)
        elif impl == "zenoh":
            recv_args, send_args = dict(listen=zep, size=size), dict(connect=zep, size=size)
        else:
            recv_args, send_args = dict(addr=zaddr, size=size), dict(addr=zaddr, size=size)
        receiver.start(_task(f"pong_{task}"), **recv_args)
        receiver.expect("ready", SETUP_S)
        sender.start(_task(f"ping_{task}"), seconds=cfg.seconds, **send_args)
        sender.expect("ready", SETUP_S)
        out = sender.expect("done", cfg.seconds + SETUP_S)
        receiver.expect("done", SETUP_S)
        return out
    procs = [sender.proc, receiver.proc, *setup.pair_procs.get(impl, [])]
    pids = [p.pid for p in procs if p.pid is not None]
    if impl in PAIRS:
        thr = setup.thr(size, impl)
        recv_args = dict(mirror=setup.mirror("B", thr, impl), size=size)
        send_args = dict(name=thr, size=size)
    elif impl == "inproc":
        recv_args = dict(name=setup.ithr(size), listen=zep, size=size)
        send_args = dict(
            name=setup.ithr(size), mirror=f"iB/{setup.ithr(size)}", connect=zep, size=size
        )
    elif impl == "zenoh":
        recv_args, send_args = dict(listen=zep, size=size), dict(connect=zep, size=size)
    else:
        recv_args, send_args = dict(addr=zaddr, size=size), dict(addr=zaddr, size=size)
    receiver.start(_task(f"recv_{task}"), **recv_args)
    receiver.expect("ready", SETUP_S)
    sender.start(_task(f"send_{task}"), seconds=cfg.seconds, rate=cfg.rate, **send_args)
    sender.expect("ready", SETUP_S)
    cpu0, t0 = _cpu_seconds(pids), time.perf_counter()
    sent = sender.expect("done", cfg.seconds + SETUP_S)
    out = receiver.expect("done", SETUP_S + 30)
    cpu1, t1 = _cpu_seconds(pids), time.perf_counter()
    out["sent"] = sent
    if cpu0 is not None and cpu1 is not None:
        # Every process of the row (bridges included, and the in-process
        # rows' bridges closing), from the sender's start to the receiver's
        # end: CPU per frame the receiver got (all of them: out["frames"]
        # counts those after the first), and how many of the machine's cores
        # the row kept busy.
        out["cpu_s"] = cpu1 - cpu0
        out["cpu_cores"] = (cpu1 - cpu0) / (t1 - t0)
        out["cpu_us_per_frame"] = (cpu1 - cpu0) / (out["frames"] + 1) * 1e6
    return out


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks bridge", description=__doc__.split("\n")[0]
    )
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default 5)")
    ap.add_argument(
        "--seconds", type=float, default=1.0, help="seconds per measurement (default 1)"
    )
    ap.add_argument("--quick", action="store_true", help="1 round of 0.3 s (smoke run)")
    ap.add_argument(
        "--peers", default=",".join(IMPLS), help=f"comma-separated subset of {','.join(IMPLS)}"
    )
    ap.add_argument(
        "--bridge-spin-us",
        type=float,
        default=5.0,
        metavar="US",
        help="the bridges' spin_us (default 5, the bridge's default)",
    )
    ap.add_argument(
        "--rate",
        type=float,
        metavar="HZ",
        help="one-way: senders offer HZ frames/s (sleeping between them) "
        "instead of as many as they can",
    )
    ap.add_argument(
        "--sections",
        default="ping,oneway",
        help="comma-separated subset of ping,oneway (default both)",
    )
    ap.add_argument("--json", metavar="PATH", help=JSON_HELP)
    return ap


def main(argv: list[str]) -> int:
    cfg = _parser().parse_args(argv)
    if cfg.quick:
        cfg.rounds, cfg.seconds = 1, 0.3
    if cfg.rate is not None and not cfg.rate > 0:
        print(
            f"python -m benchmarks bridge: --rate must be a positive number of frames/s, got {cfg.rate}"
        )
        return 2
    impls = [i for i in cfg.peers.split(",") if i]
    bad = [i for i in impls if i not in IMPLS]
    if bad or not impls:
        print(f"python -m benchmarks bridge: unknown peers {bad}; choose from {','.join(IMPLS)}")
        return 2
    zenoh, why = try_import("zenoh")
    if zenoh is None:
        print(
            f"python -m benchmarks bridge: needs eclipse-zenoh ({why}); "
            'pip install "shmstream[zenoh]"'
        )
        return 2
    if "pyzmq" in impls and try_import("zmq")[0] is None:
        progress("pyzmq is not installed: its rows are left out (pip install shmstream[bench])")
        impls.remove("pyzmq")
    res = Results("bridge", argv)
    res.meta["versions"].update({d: peer_version(d) for d in ("eclipse-zenoh", "pyzmq")})
    res.meta.update(
        rounds=cfg.rounds,
        seconds=cfg.seconds,
        bridge_spin_us=cfg.bridge_spin_us,
        rate=cfg.rate,
        shmstream_spin_us=os.environ.get("SHMSTREAM_SPIN_US"),
    )
    setup = Setup(impls, cfg.bridge_spin_us)
    sender, receiver = Worker(), Worker()
    runs: dict[tuple[str, str, int], list[dict]] = {}
    try:
        for rnd in range(cfg.rounds):
            for kind, sizes in (("ping", PING_SIZES), ("oneway", THR_SIZES)):
                if kind not in cfg.sections.split(","):
                    continue
                for size in sizes:
                    # Every other round in reverse, so that no row always
                    # runs right after the same other one.
                    for impl in impls if rnd % 2 == 0 else impls[::-1]:
                        progress(f"round {rnd + 1}/{cfg.rounds}: {kind} {fmt_bytes(size)} {impl}")
                        out = _measure(kind, impl, size, cfg, setup, sender, receiver)
                        runs.setdefault((kind, impl, size), []).append(out)
                        res.add(round=rnd, kind=kind, impl=impl, size=size, **out)
    finally:
        sender.close()
        receiver.close()
        setup.close()
    _report(res, runs, impls, cfg)
    res.save(cfg.json, quick=cfg.quick)
    return 0


def _fmt_cpu(value: float | None, fmt: str) -> str:
    return "-" if value is None else fmt.format(value)


def _report(res: Results, runs: dict, impls: list[str], cfg: argparse.Namespace) -> None:
    zv, qv = peer_version("eclipse-zenoh"), peer_version("pyzmq")
    label = {
        "bridged": "shmstream bridge x2 (Zenoh)",
        "bridged-pw": "shmstream bridge x2 (Zenoh), password auth",
        "inproc": "shmstream bridge x2 in-process (publisher)",
        "zenoh": f"zenoh-python {zv}",
        "pyzmq": f"pyzmq {qv} tcp://",
    }
    sections = cfg.sections.split(",")
    judged = [i for i in BRIDGED if i in impls] if "zenoh" in impls else []
    name = {
        "bridged": "bridged",
        "bridged-pw": "bridged with password",
        "inproc": "in-process bridged",
    }
    auth_judged = all(i in impls for i in PAIRS)

    def med(kind: str, impl: str, size: int, key: str) -> float:
        return median([r[key] for r in runs.get((kind, impl, size), [])])

    def med_or_none(kind: str, impl: str, size: int, key: str) -> float | None:
        values = [r[key] for r in runs.get((kind, impl, size), []) if key in r]
        return median(values) if values else None

    def vs_zenoh(kind: str, impl: str, size: int, key: str) -> str:
        if impl not in BRIDGED or "zenoh" not in impls:
            return ""
        return fmt_ratio(med(kind, impl, size, key), med(kind, "zenoh", size, key))

    tables, verdict, auth_verdict = [], [], []
    if "ping" in sections:
        rows = []
        for size in PING_SIZES:
            for impl in impls:
                p50, p99 = med("ping", impl, size, "p50_ns"), med("ping", impl, size, "p99_ns")
                rows.append(
                    [
                        fmt_bytes(size),
                        label[impl],
                        fmt_us(p50),
                        fmt_us(p99),
                        f"{p99 / p50:.1f}",
                        vs_zenoh("ping", impl, size, "p50_ns"),
                    ]
                )
            for impl in judged:
                b, z = med("ping", impl, size, "p50_ns"), med("ping", "zenoh", size, "p50_ns")
                b99 = med("ping", impl, size, "p99_ns")
                verdict.append(
                    f"ping-pong {fmt_bytes(size)}: {name[impl]} p50 {b / z:.2f}x "
                    f"zenoh's (target <= 1.5x: {'met' if b <= 1.5 * z else 'MISSED'}); "
                    f"p99/p50 {b99 / b:.1f} (target <= 3: "
                    f"{'met' if b99 <= 3 * b else 'MISSED'})"
                )
            if auth_judged:
                plain, pw = (med("ping", i, size, "p50_ns") for i in ("bridged", "bridged-pw"))
                auth_verdict.append(
                    f"ping-pong {fmt_bytes(size)}: with password p50 {pw / plain:.3f}x "
                    f"without (target <= {AUTH_SLACK}: "
                    f"{'met' if pw <= AUTH_SLACK * plain else 'MISSED'})"
                )
        tables.append(
            render_table(
                ["request", "implementation", "p50 us", "p99 us", "p99/p50", "p50 vs zenoh"],
                rows,
                title=f"ping-pong: request of SIZE, 64 B answer, one round trip; median of "
                f"{cfg.rounds} rounds of {cfg.seconds:g} s",
                left=2,
            )
        )
    if "oneway" in sections:
        rows = []
        for size in THR_SIZES:
            for impl in impls:
                rate = med("oneway", impl, size, "rate")
                rows.append(
                    [
                        fmt_bytes(size),
                        label[impl],
                        fmt_hz(rate, "/s"),
                        f"{rate * size / 1e9:.2f}",
                        _fmt_cpu(med_or_none("oneway", impl, size, "cpu_us_per_frame"), "{:.0f}"),
                        _fmt_cpu(med_or_none("oneway", impl, size, "cpu_cores"), "{:.2f}"),
                        vs_zenoh("oneway", impl, size, "rate"),
                    ]
                )
            for impl in judged:
                b, z = med("oneway", impl, size, "rate"), med("oneway", "zenoh", size, "rate")
                verdict.append(
                    f"one-way {fmt_bytes(size)}: {name[impl]} {b / z:.2f}x zenoh's "
                    f"rate (target >= 0.8x: {'met' if b >= 0.8 * z else 'MISSED'})"
                )
            if auth_judged:
                plain, pw = (med("oneway", i, size, "rate") for i in ("bridged", "bridged-pw"))
                auth_verdict.append(
                    f"one-way {fmt_bytes(size)}: with password {pw / plain:.3f}x the rate "
                    f"without (target >= {1 / AUTH_SLACK:.3f}: "
                    f"{'met' if pw * AUTH_SLACK >= plain else 'MISSED'})"
                )
        tables.append(
            render_table(
                [
                    "frame",
                    "implementation",
                    "frames/s",
                    "GB/s",
                    "CPU us/frame",
                    "cores busy",
                    "vs zenoh",
                ],
                rows,
                title=f"one-way: frames the receiver gets, "
                f"{f'senders offering {cfg.rate:g}/s' if cfg.rate else 'sender as fast as it can'}"
                f"; median of {cfg.rounds} rounds of {cfg.seconds:g} s; CPU of every process "
                f"of the row (bridges included) per frame received, and cores it kept busy "
                f"(of {os.cpu_count()})",
                left=2,
            )
        )
    if verdict:
        tables.append("targets (issue 16):\n" + "\n".join("  " + v for v in verdict))
    if auth_verdict:
        tables.append("authentication (issue 32):\n" + "\n".join("  " + v for v in auth_verdict))
    for table in tables:
        res.tables.append(table)
        print(table + "\n")
