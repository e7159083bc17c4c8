"""``python -m benchmarks channel``: channels against iceoryx2 and pyzmq ipc://,
all peers in one run, interleaved round by round (these machines are noisy).

Peers: iceoryx2, pyzmq ipc:// and Tachyon (``import tachyon``, optional:
its rows say "skipped: <why>" when it does not import; peers/_tachyon.py).

Scenarios (each in fresh processes, producer and consumer apart):
  thr32     32-byte messages, Python -> Python, msgs/s. shmstream uses its
            batch APIs (send_many of 256, batch=64, drain); the peers send
            and receive one message per call (they have no batch API).
  thr32-1   the same with shmstream's one-message calls (send / recv).
  ping      32-byte ping-pong round trips, p50/p99 in microseconds.
  frames    1 KiB float32[256] frames, each wrapped by the consumer as a
            torch tensor through DLPack: frames/s and GB/s. shmstream is
            measured with drain_zero_copy (batch), recv_zero_copy (one
            per call) and drain_dlpack (capsules), and with the C producer
            in examples/; against
            torch.from_dlpack of a ready array and of a capsule made
            before the clock starts (the bare import).

Usage: python -m benchmarks channel [--rounds N] [--quick] [--json FILE]
"""

from __future__ import annotations

import argparse
import ctypes
import glob
import multiprocessing as mp
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid

from ._common import JSON_HELP, Results, fmt_fields, latency_summary, median, ping_latencies
from .peers import _tachyon
from .peers._iceoryx2 import node as iox_node
from .peers._iceoryx2 import remove as iox_remove
from .peers._iceoryx2 import run_files as iox_files

SPAWN = mp.get_context("spawn")
MSG32 = b"m" * 32
FRAME_N = 256
CAPSULE_ROW = "bare torch.from_dlpack on a prepared capsule"


def _spawn(target, *args, events: int = 1):
    """Start ``target(*args, *events)`` in a fresh spawned process; returns
    (process, *events)."""
    evs = [SPAWN.Event() for _ in range(events)]
    p = SPAWN.Process(target=target, args=(*args, *evs))
    p.start()
    return (p, *evs)


def _frames_result(rate: float) -> dict[str, float]:
    return {"frames_per_s": rate, "GB_per_s": rate * FRAME_N * 4 / 1e9}


def _name(tag: str) -> str:
    return f"bench-{tag}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


# ---- shmstream ------------------------------------------------------------------


def _shm_thr_producer(name, n, batched, ready):
    import shmstream

    ready.wait()
    tx = shmstream.open_channel(name, role="producer", batch=64 if batched else 1)
    if batched:
        chunk = [MSG32] * 256
        for _ in range(n // 256):
            tx.send_many(chunk)
    else:
        send = tx.send
        for _ in range(n):
            send(MSG32)
    tx.close()


def shm_thr(n, batched):
    import shmstream

    n -= n % 256
    name = _name("thr")
    rx = shmstream.channel(name, 1 << 20, role="consumer")
    p, ready = _spawn(_shm_thr_producer, name, n, batched)
    try:
        ready.set()
        got = 0
        if batched:
            got += len(rx.drain(4096, timeout=60))
            t0 = time.perf_counter()
            first = got
            drain = rx.drain
            while got < n:
                got += len(drain(4096, None))
        else:
            rx.recv(timeout=60)
            got = first = 1
            t0 = time.perf_counter()
            recv = rx.recv
            while got < n:
                recv()
                got += 1
        dt = time.perf_counter() - t0
        p.join(60)
        return {"msgs_per_s": (n - first) / dt}
    finally:
        p.kill()
        rx.close()
        shmstream.unlink_channel(name)


def _shm_pong(name_ping, name_pong, ready):
    import shmstream

    rx = shmstream.open_channel(name_ping)
    tx = shmstream.open_channel(name_pong, role="producer")
    ready.set()
    try:
        while True:
            m = rx.recv()
            tx.send(m.data)
    except EOFError:
        pass
    tx.close()
    rx.close()


def shm_ping(n):
    import shmstream

    a, b = _name("ping"), _name("pong")
    tx = shmstream.channel(a, 1 << 16)
    rx = shmstream.channel(b, 1 << 16, role="consumer")
    p, ready = _spawn(_shm_pong, a, b)
    try:
        ready.wait(60)
        return latency_summary(ping_latencies(tx.send, MSG32, rx.recv, n))
    finally:
        tx.close()
        p.join(10)
        p.kill()
        rx.close()
        shmstream.unlink_channel(a)
        shmstream.unlink_channel(b)


def _shm_frames_producer(name, n, ready):
    import numpy as np

    import shmstream

    ready.wait()
    tx = shmstream.open_channel(name, role="producer", batch=64)
    frames = [np.full(FRAME_N, i, np.float32) for i in range(256)]
    for _ in range(n // 256):
        tx.send_many(frames)
    tx.close()


def _frames_consume(rx, n, batched, proc=None):
    import torch

    from_dlpack = torch.from_dlpack
    got = 0
    if batched == "capsules":  # drain_dlpack: capsules straight into torch
        for c in rx.drain_dlpack(256, timeout=60):
            from_dlpack(c)
            got += 1
        first = got
        t0 = time.perf_counter()
        drain = rx.drain_dlpack
        while got < n:
            caps = drain(256, None)
            for c in caps:
                from_dlpack(c)
            got += len(caps)
    elif batched:
        with rx.drain_zero_copy(256, timeout=60) as msgs:
            for m in msgs:
                from_dlpack(m)
                got += 1
        first = got
        t0 = time.perf_counter()
        drain = rx.drain_zero_copy
        while got < n:
            with drain(256, None) as msgs:
                for m in msgs:
                    from_dlpack(m)
                got += len(msgs)
    else:
        with rx.recv_zero_copy(timeout=60) as m:
            from_dlpack(m)
        got = first = 1
        t0 = time.perf_counter()
        recv = rx.recv_zero_copy
        while got < n:
            with recv() as m:
                from_dlpack(m)
            got += 1
    return _frames_result((n - first) / (time.perf_counter() - t0))


def shm_frames(n, batched):
    import shmstream

    n -= n % 256
    name = _name("frames")
    rx = shmstream.channel(name, 1 << 22, role="consumer")
    p, ready = _spawn(_shm_frames_producer, name, n)
    try:
        ready.set()
        return _frames_consume(rx, n, batched)
    finally:
        p.join(60)
        p.kill()
        rx.close()
        shmstream.unlink_channel(name)


def _repo_root() -> str | None:
    """The checkout with examples/c_producer.c: the one this module runs
    from (in-tree), else the current directory (an installed package run
    from its checkout)."""
    here = os.path.dirname(os.path.abspath(__file__))
    for root in (os.path.abspath(os.path.join(here, "..", "..", "..")), os.getcwd()):
        if os.path.exists(os.path.join(root, "examples", "c_producer.c")):
            return root
    return None


_C_PRODUCER: list = []


def c_producer_path() -> str | None:
    if _C_PRODUCER:
        return _C_PRODUCER[0]
    root, cc = _repo_root(), shutil.which("cc") or shutil.which("gcc")
    path = None
    if root and cc:
        path = os.path.join(tempfile.mkdtemp(prefix="shmstream-bench-"), "c_producer")
        core = sorted(glob.glob(os.path.join(root, "src", "core", "*.c")))
        r = subprocess.run(
            [
                cc,
                "-std=c11",
                "-O2",
                "-I",
                os.path.join(root, "include"),
                os.path.join(root, "examples", "c_producer.c"),
                *core,
                "-o",
                path,
                "-lpthread",
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        if r.returncode != 0:
            print(r.stderr, file=sys.stderr)
            path = None
    _C_PRODUCER.append(path)
    return path


def c_frames(n, batched=True):
    import shmstream

    exe = c_producer_path()
    if exe is None:
        return None
    name = _name("cframes")
    rx = shmstream.channel(name, 1 << 22, role="consumer")
    proc = subprocess.Popen(
        [exe, name, str(n), "--frames", str(FRAME_N), "--batch", "64"], stdout=subprocess.DEVNULL
    )
    try:
        return _frames_consume(rx, n, batched)
    finally:
        proc.wait(60)
        rx.close()
        shmstream.unlink_channel(name)


def dlpack_ceiling(n):
    """torch.from_dlpack of a ready float32[256] array, nothing else: the most
    frames/s any transport can reach when each frame becomes a tensor."""
    import numpy as np
    import torch

    a, from_dlpack = np.zeros(FRAME_N, np.float32), torch.from_dlpack
    t0 = time.perf_counter()
    for _ in range(n):
        from_dlpack(a)
    return _frames_result(n / (time.perf_counter() - t0))


def dlpack_capsule_ceiling(n):
    """torch.from_dlpack of DLPack capsules made before the clock starts
    (NumPy's, of a float32[256] array): the bare import, the cost every
    frames row pays on top of its transport."""
    import numpy as np
    import torch

    a, from_dlpack, chunk, spent = np.zeros(FRAME_N, np.float32), torch.from_dlpack, 10_000, 0.0
    for done in range(0, n, chunk):
        caps = [a.__dlpack__() for _ in range(min(chunk, n - done))]
        t0 = time.perf_counter()
        for c in caps:
            from_dlpack(c)
        spent += time.perf_counter() - t0
    return _frames_result(n / spent)


# ---- pyzmq ipc:// ----------------------------------------------------------------------


def _zmq_push(addr, n, payload, ready):
    import zmq

    ctx = zmq.Context()
    s = ctx.socket(zmq.PUSH)
    s.setsockopt(zmq.SNDHWM, 100000)
    s.connect(addr)
    ready.wait()
    send = s.send
    for _ in range(n):
        send(payload, copy=True)
    s.close(linger=-1)
    ctx.term()


def zmq_thr(n, frames=False):
    import zmq

    addr = f"ipc://{tempfile.gettempdir()}/{_name('zmq')}"
    ctx = zmq.Context()
    s = ctx.socket(zmq.PULL)
    s.setsockopt(zmq.RCVHWM, 100000)
    s.bind(addr)
    payload = bytes(FRAME_N * 4) if frames else MSG32
    p, ready = _spawn(_zmq_push, addr, n, payload)
    try:
        ready.set()
        recv = s.recv
        if frames:
            import numpy as np
            import torch

            frombuffer, from_dlpack, f32 = np.frombuffer, torch.from_dlpack, np.float32
            from_dlpack(frombuffer(recv(), f32))
            t0 = time.perf_counter()
            for _ in range(n - 1):
                from_dlpack(frombuffer(recv(), f32))
        else:
            recv()
            t0 = time.perf_counter()
            for _ in range(n - 1):
                recv()
        dt = time.perf_counter() - t0
        p.join(60)
        rate = (n - 1) / dt
        return _frames_result(rate) if frames else {"msgs_per_s": rate}
    finally:
        p.kill()
        s.close(linger=0)
        ctx.term()
        os.unlink(addr[len("ipc://") :]) if os.path.exists(addr[len("ipc://") :]) else None


def _zmq_pong(addr, ready):
    import zmq

    ctx = zmq.Context()
    s = ctx.socket(zmq.PAIR)
    s.connect(addr)
    ready.set()
    while True:
        m = s.recv()
        if m == b"stop":
            break
        s.send(m)
    s.close(linger=0)
    ctx.term()


def zmq_ping(n):
    import zmq

    addr = f"ipc://{tempfile.gettempdir()}/{_name('zmqp')}"
    ctx = zmq.Context()
    s = ctx.socket(zmq.PAIR)
    s.bind(addr)
    p, ready = _spawn(_zmq_pong, addr)
    try:
        ready.wait(60)
        lat = ping_latencies(s.send, MSG32, s.recv, n)
        s.send(b"stop")
        return latency_summary(lat)
    finally:
        p.join(10)
        p.kill()
        s.close(linger=0)
        ctx.term()
        os.unlink(addr[len("ipc://") :]) if os.path.exists(addr[len("ipc://") :]) else None


# ---- iceoryx2 -----------------------------------------------------------------------------


class _P32(ctypes.Structure):
    _fields_ = [("b", ctypes.c_uint8 * 32)]


class _Frame(ctypes.Structure):
    _fields_ = [("f", ctypes.c_float * FRAME_N)]


def _iox_service(name, payload, depth):
    # the run's own files (benchmarks/peers/_iceoryx2.py): the main process's pid
    # is the third field of every name (_name), in the spawned peers too
    iox2, node = iox_node(*iox_files(int(name.split("-")[2])))
    svc = (
        node.service_builder(iox2.ServiceName.new(name))
        .publish_subscribe(payload)
        .subscriber_max_buffer_size(depth)
        .history_size(0)
        .enable_safe_overflow(False)
        .open_or_create()
    )
    return iox2, node, svc


def _iox_publisher(iox2, svc):
    pb = svc.publisher_builder()
    try:
        pb = pb.backpressure_strategy(iox2.BackpressureStrategy.Block)
    except AttributeError:
        pass
    return pb.create()


def _iox_pub(name, n, frames, ready, go):
    iox2, _node, svc = _iox_service(name, _Frame if frames else _P32, 1024)
    pub = _iox_publisher(iox2, svc)
    ready.set()
    go.wait()
    payload = _Frame() if frames else _P32()
    send = pub.send_copy
    for _ in range(n):
        send(payload)


def iox_thr(n, frames=False):
    import numpy as np

    name = _name("iox")
    _iox2, _node, svc = _iox_service(name, _Frame if frames else _P32, 1024)
    sub = svc.subscriber_builder().buffer_size(1024).create()
    p, ready, go = _spawn(_iox_pub, name, n, frames, events=2)
    try:
        ready.wait(60)
        go.set()
        receive = sub.receive
        got = 0
        t0 = None
        if frames:
            import torch

            from_dlpack, frombuffer, f32 = torch.from_dlpack, np.frombuffer, np.float32
        idle_since = None
        while got < n:
            s = receive()
            if s is None:
                now = time.perf_counter()
                if idle_since is None:
                    idle_since = now
                elif now - idle_since > 2 and not p.is_alive():  # finished, samples missing
                    return {"error": f"iceoryx2 delivered {got} of {n} samples (lost)"}
                continue
            idle_since = None
            if frames:
                from_dlpack(frombuffer(s.payload().contents, f32))
            got += 1
            if t0 is None:
                t0 = time.perf_counter()
        dt = time.perf_counter() - t0
        rate = (n - 1) / dt
        return _frames_result(rate) if frames else {"msgs_per_s": rate}
    finally:
        p.join(30)
        p.kill()


def _iox_pong(a, b, ready, stop):
    iox2, _node, sa = _iox_service(a, _P32, 16)
    _, _, sb = _iox_service(b, _P32, 16)
    sub = sa.subscriber_builder().create()
    pub = _iox_publisher(iox2, sb)
    ready.set()
    receive = sub.receive
    while not stop.is_set():
        s = receive()
        if s is not None:
            pub.send_copy(s.payload().contents)


def iox_ping(n):
    a, b = _name("ioxa"), _name("ioxb")
    iox2, _node, sa = _iox_service(a, _P32, 16)
    _, _, sb = _iox_service(b, _P32, 16)
    pub = _iox_publisher(iox2, sa)
    sub = sb.subscriber_builder().create()
    p, ready, stop = _spawn(_iox_pong, a, b, events=2)
    try:
        ready.wait(60)
        # the untimed first round trips also wait until the pong side is
        # connected (a first ping comes back)
        return latency_summary(ping_latencies(pub.send_copy, _P32(), sub.receive, n))
    finally:
        stop.set()
        p.join(10)
        p.kill()


# ---- driver -----------------------------------------------------------------------------


def _tachyon_row(run):
    """A Tachyon scenario, or its skip reason when tachyon does not import."""

    def row():
        why = _tachyon.unavailable()
        return {"skipped": why} if why else run()

    return row


def _scenarios(quick: bool):
    k = 10 if quick else 1
    return [
        ("thr32", "shmstream (send_many/drain)", lambda: shm_thr(2_000_000 // k, True)),
        ("thr32", "iceoryx2", lambda: iox_thr(300_000 // k)),
        ("thr32", "pyzmq ipc", lambda: zmq_thr(300_000 // k)),
        ("thr32", "tachyon", _tachyon_row(lambda: _tachyon.thr(1_000_000 // k))),
        ("thr32-1", "shmstream (send/recv)", lambda: shm_thr(500_000 // k, False)),
        ("ping", "shmstream", lambda: shm_ping(20_000 // k)),
        ("ping", "iceoryx2", lambda: iox_ping(20_000 // k)),
        ("ping", "pyzmq ipc", lambda: zmq_ping(20_000 // k)),
        ("ping", "tachyon", _tachyon_row(lambda: _tachyon.ping(20_000 // k, MSG32))),
        ("frames", "torch.from_dlpack alone (ceiling)", lambda: dlpack_ceiling(300_000 // k)),
        ("frames", CAPSULE_ROW, lambda: dlpack_capsule_ceiling(300_000 // k)),
        ("frames", "shmstream py->py (drain_zero_copy)", lambda: shm_frames(1_000_000 // k, True)),
        ("frames", "shmstream py->py (recv_zero_copy)", lambda: shm_frames(300_000 // k, False)),
        ("frames", "shmstream C->py (drain_zero_copy)", lambda: c_frames(1_000_000 // k)),
        (
            "frames",
            "shmstream py->py (drain_dlpack)",
            lambda: shm_frames(1_000_000 // k, "capsules"),
        ),
        ("frames", "shmstream C->py (drain_dlpack)", lambda: c_frames(1_000_000 // k, "capsules")),
        ("frames", "iceoryx2", lambda: iox_thr(200_000 // k, frames=True)),
        ("frames", "pyzmq ipc", lambda: zmq_thr(200_000 // k, frames=True)),
        (
            "frames",
            "tachyon",
            _tachyon_row(lambda: _frames_result(_tachyon.frames(300_000 // k, FRAME_N * 4))),
        ),
    ]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks channel", description=__doc__.split("\n")[0]
    )
    ap.add_argument(
        "--rounds", type=int, default=5, help="interleaved rounds (median [min-max] reported)"
    )
    ap.add_argument("--quick", action="store_true", help="10x fewer messages (smoke run)")
    ap.add_argument("--only", default="", help="comma-separated scenario names to run")
    ap.add_argument("--json", metavar="PATH", help=JSON_HELP)
    args = ap.parse_args(argv)
    res = Results("channel", argv or [])
    scen = _scenarios(args.quick)
    if args.only:
        keep = set(args.only.split(","))
        scen = [s for s in scen if s[0] in keep]
    raw: dict = {}
    for r in range(args.rounds):
        for kind, peer, fn in scen:
            try:
                got = fn()
            except Exception as exc:  # noqa: BLE001 - a peer that fails is reported, not fatal
                got = {"error": f"{type(exc).__name__}: {exc}"}
            if got is None:
                got = {"error": "skipped (no C compiler or sources)"}
            raw.setdefault((kind, peer), []).append(got)
            res.add(scenario=kind, peer=peer, round=r, **got)
            if "error" in got:
                res.errors.append(f"{kind} {peer} round {r + 1}: {got['error']}")
            print(f"round {r + 1}: {kind:7s} {peer:36s} {_fields(got)}", flush=True)
    print()
    env = res.meta
    print(
        f"# python -m benchmarks channel ({args.rounds} interleaved rounds, median "
        f"[min-max]) on {env['cpu']}, Python {env['python']}"
    )
    summary = {}
    for (kind, peer), runs in raw.items():
        good = [x for x in runs if "error" not in x and "skipped" not in x]
        if not good:
            summary[(kind, peer)] = runs[-1]
            continue
        summary[(kind, peer)] = {k: median([x[k] for x in good]) for k in good[0]}
    for (kind, peer), med in summary.items():
        good = [x for x in raw[(kind, peer)] if "error" not in x and "skipped" not in x]
        print(f"{kind:7s} {peer:36s} {_fields(med)}")
        if len(good) > 1:
            print(
                f"{'':7s} {'':36s} "
                + "  ".join(
                    f"{k} [{min(x[k] for x in good):,.2f}-{max(x[k] for x in good):,.2f}]"
                    for k in good[0]
                )
            )
    _targets(summary)
    iox_remove(*iox_files(os.getpid()))
    res.save(
        args.json,
        quick=args.quick,
        raw={f"{k[0]}|{k[1]}": v for k, v in raw.items()},
        median={f"{k[0]}|{k[1]}": v for k, v in summary.items()},
    )
    return 0


def _fields(got: dict) -> str:
    """One measurement's fields, or why the peer was skipped."""
    return str(got["skipped"]) if "skipped" in got else fmt_fields(got)


def _targets(s: dict) -> None:
    def get(kind, peer, key):
        return s.get((kind, peer), {}).get(key)

    print("\ntargets:")
    thr = get("thr32", "shmstream (send_many/drain)", "msgs_per_s")
    if thr:
        print(
            f"  32 B Python->Python >= 1 M msgs/s: {thr / 1e6:.2f} M ({'met' if thr >= 1e6 else 'NOT met'})"
        )
    for peer in ("iceoryx2", "pyzmq ipc"):
        o = get("thr32", peer, "msgs_per_s")
        if thr and o:
            print(f"  thr32 shmstream / {peer}: {thr / o:.1f}x")
    p = get("ping", "shmstream", "p50_us")
    i = get("ping", "iceoryx2", "p50_us")
    if p and i:
        print(
            f"  ping-pong p50 <= iceoryx2's: {p:.1f} us vs {i:.1f} us ({'met' if p <= i else 'NOT met'})"
        )
    f = get("frames", "shmstream py->py (drain_zero_copy)", "frames_per_s")
    if f:
        print(
            f"  frames Python->Python >= 500 K/s: {f / 1e3:.0f} K ({'met' if f >= 5e5 else 'NOT met'})"
        )
    ceil = get("frames", "torch.from_dlpack alone (ceiling)", "frames_per_s")
    if f and ceil:
        print(f"  frames py->py / torch.from_dlpack ceiling: {f / ceil:.2f}")
    c = get("frames", "shmstream C->py (drain_zero_copy)", "frames_per_s")
    if c:
        print(
            f"  frames C->Python >= 370 K/s: {c / 1e3:.0f} K ({'met' if c >= 3.7e5 else 'NOT met'})"
        )
    for kind, label, key, better in (
        ("thr32", "32 B throughput", "msgs_per_s", "higher"),
        ("ping", "ping-pong p50", "p50_us", "lower"),
        ("frames", "1 KiB frames into torch", "frames_per_s", "higher"),
    ):
        ours_peer = {
            "thr32": "shmstream (send_many/drain)",
            "ping": "shmstream",
            "frames": "shmstream py->py (drain_zero_copy)",
        }[kind]
        ours, theirs = get(kind, ours_peer, key), get(kind, "tachyon", key)
        if ours and theirs:
            met = ours >= theirs if better == "higher" else ours <= theirs
            ratio = ours / theirs if better == "higher" else theirs / ours
            print(f"  {label} vs Tachyon: x{ratio:.2f} ({'met' if met else 'NOT met'})")
        elif "skipped" in s.get((kind, "tachyon"), {}):
            print(f"  {label} vs Tachyon: {s[(kind, 'tachyon')]['skipped']}")
    cap = get("frames", CAPSULE_ROW, "frames_per_s")
    for label, side in (("Python->Python", "py->py"), ("C->Python", "C->py")):
        for api in ("drain_zero_copy", "drain_dlpack"):
            rate = get("frames", f"shmstream {side} ({api})", "frames_per_s")
            if rate and cap:
                print(
                    f"  frames {label} ({api}) >= 0.8x bare torch.from_dlpack on a prepared "
                    f"capsule: {rate / cap:.2f}x ({'met' if rate >= 0.8 * cap else 'NOT met'})"
                )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
