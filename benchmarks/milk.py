"""milk/CACAO streams: ``shmstream.milk`` against milk's own C library
(milk-org/ImageStreamIO) and against shmstream's own streams, in one run.

    python -m benchmarks milk [--shape 240x240] [--hz 2000] [--seconds 3]
                              [--rounds 1] [--read-shape 128x128]
                              [--read-hz 10000] [--rows A,B] [--quick] [--json PATH]

milk's library is used when ``$MILK_IMAGESTREAMIO`` names its install
prefix (``$MILK_IMAGESTREAMIO/include/ImageStreamIO/ImageStreamIO.h``,
``$MILK_IMAGESTREAMIO/lib/libImageStreamIO.so``: what milk's cmake
install makes) or ``pkg-config`` knows ``ImageStreamIO``: benchmarks/c/milk_peer.c is then
built against it. Without it the rows that need it say n/a and the
comparison is with shmstream's own streams.

1. Wake-up. A writer process publishes a float32 frame of ``--shape`` at
   ``--hz`` (absolute schedule) for ``--seconds``; the frame's first 8
   bytes carry CLOCK_MONOTONIC at the write, the rest the frame number.
   A reader in another process takes each new frame; its latency is its
   clock after the wake minus the stamp. Rows: ``shmstream.milk`` (our
   reader: the wait policy's nap or spin on cnt0, then the semaphore wait,
   write flag + cnt0 check, one native call; this process; a line under
   the table says how its waits went and how many reads met a write flag
   held past the busy timeout, which are counted and skipped),
   ``shmstream core C`` (the same call in C, without Python:
   benchmarks/c/milk_core_reader.c, built from this checkout), ``milk C``
   (milk's ImageStreamIO_semtimedwait on the semaphore
   ImageStreamIO_getsemwaitindex gave, then a copy), all on frames our
   writer publishes; the same three ``<- milk C``, on milk's own writer
   (ImageStreamIO_UpdateIm; its stamp is taken after the pixels are
   filled, ours before the write call, so compare readers on the same
   writer); ``stream`` (a shmstream stream: futex wait, seqlock). Every
   frame read is checked whole: torn counts the ones that are not (it must
   stay 0 for ours; milk's C reader has no check of its own, so its count
   is what milk's protocol gives). Each row also gives the reader's CPU
   time over its run, as a share of one core (a nap's spin is paid here).
   ``--rows 'A,B'`` runs only the rows named.
2. Read by milk's library. Our writer (another process) publishes
   ``--read-shape`` float32 frames at ``--read-hz``, then as fast as it
   can, for ``--seconds`` each; milk's C reader wakes on each post and
   copies the frame. Rows: frames written, woken, copied, missed (cnt0
   steps it did not see), the rate it copied at. And ``read(out=buf)``
   in a loop, one process, for shmstream.milk and a stream.
3. Interop (with milk's library): every milk datatype, 1-D to 3-D, with a
   circular buffer of 4: a stream milk makes and writes (5 frames,
   keywords) read by shmstream.milk (pixels, circular buffer frames by
   count, keywords), and one shmstream.milk makes and writes read by milk's
   library (the same). Rows say ok or what differed.
"""

from __future__ import annotations

import argparse
import glob
import math
import multiprocessing as mp
import os
import resource
import shutil
import statistics
import subprocess
import tempfile
import time
import uuid
from typing import Any

import numpy as np

import shmstream
import shmstream.milk
from ._common import JSON_HELP, Results, emit, fmt_hz, latency_summary, progress

SPAWN = mp.get_context("spawn")
HERE = os.path.dirname(os.path.abspath(__file__))
NA = "n/a"


# ---- milk's library ------------------------------------------------------------------


def _milk_flags() -> tuple[list[str], str] | None:
    """Compiler flags for milk's library and where it was found, or None."""
    prefix = os.environ.get("MILK_IMAGESTREAMIO")
    if prefix:
        inc, lib = os.path.join(prefix, "include", "ImageStreamIO"), os.path.join(prefix, "lib")
        if os.path.exists(os.path.join(inc, "ImageStreamIO.h")):
            return [f"-I{inc}", f"-L{lib}", "-lImageStreamIO", f"-Wl,-rpath,{lib}"], prefix
    if shutil.which("pkg-config"):
        r = subprocess.run(
            ["pkg-config", "--cflags", "--libs", "ImageStreamIO"],
            capture_output=True,
            text=True,
            check=False,
        )
        if r.returncode == 0:
            words = r.stdout.split()
            incs = [w[2:] for w in words if w.startswith("-I")]
            libs = [w[2:] for w in words if w.startswith("-L")]
            words += [f"-I{os.path.join(i, 'ImageStreamIO')}" for i in incs]
            words += [f"-Wl,-rpath,{d}" for d in libs]
            return words, "pkg-config ImageStreamIO"
    return None


def build_milk_peer(workdir: str) -> tuple[str | None, str]:
    """Build benchmarks/c/milk_peer.c against milk's library: (its path, or
    None, and why not)."""
    found = _milk_flags()
    cc = shutil.which("cc") or shutil.which("gcc")
    if found is None:
        return None, "milk's library not found (set MILK_IMAGESTREAMIO to its install prefix)"
    if cc is None:
        return None, "no C compiler"
    flags, where = found
    out = os.path.join(workdir, "milk_peer")
    src = os.path.join(HERE, "c", "milk_peer.c")
    r = subprocess.run(
        [cc, "-O2", src, *flags, "-o", out], capture_output=True, text=True, check=False
    )
    if r.returncode != 0:
        return None, f"building milk_peer.c against {where} failed: {r.stderr.strip()[:300]}"
    return out, where


def build_core_reader(workdir: str) -> str | None:
    """benchmarks/c/milk_core_reader.c built from this checkout's C core
    (src/core/), or None without a compiler or the sources."""
    root = os.path.dirname(HERE)
    core = sorted(glob.glob(os.path.join(root, "src", "core", "*.c")))
    cc = shutil.which("cc") or shutil.which("gcc")
    if not core or cc is None:
        return None
    out = os.path.join(workdir, "milk_core_reader")
    src = os.path.join(HERE, "c", "milk_core_reader.c")
    inc = os.path.join(root, "include")
    cmd = [cc, "-O2", "-std=c11", f"-I{inc}", src, *core, "-o", out, "-lpthread", "-ldl"]
    r = subprocess.run(cmd, capture_output=True, text=True, check=False)
    return out if r.returncode == 0 else None


def _peer(peer: str, directory: str, *args: Any) -> subprocess.Popen:
    return subprocess.Popen(
        [peer, *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "MILK_SHM_DIR": directory},
    )


def _ready(proc: subprocess.Popen) -> None:
    line = proc.stdout.readline() if proc.stdout else ""
    if line.strip() != "ready":
        proc.kill()
        raise RuntimeError(f"milk_peer did not start: {line!r} {proc.communicate()[1]!r}")


# ---- writers (other processes) -----------------------------------------------------------


def _open(kind: str, name: str, directory: str) -> Any:
    if kind == "stream":
        return shmstream.open(name)
    return shmstream.milk.open(name, dir=directory)


def _writer(kind: str, name: str, directory: str, hz: float, seconds: float, go: Any) -> int:
    s = _open(kind, name, directory)
    frame = np.zeros(s.shape, np.float32)
    stamp = frame.reshape(-1).view(np.int64)
    go.wait()
    n = int(hz * seconds) if hz else 1 << 62  # hz 0: as fast as it can, for `seconds`
    start = time.monotonic()
    k = 0
    while k < n:
        k += 1
        due = start + k / hz if hz else start
        while time.monotonic() < due:
            pass  # absolute schedule: a late writer catches up
        if not hz and time.monotonic() - start >= seconds:
            k -= 1
            break
        frame.fill(k)
        stamp[0] = time.monotonic_ns()
        s.write(frame)
    s.close()
    return k


class _Scene:
    """A stream of one kind in a private milk directory, removed at the end."""

    def __init__(self, kind: str, shape: tuple[int, ...]) -> None:
        self.kind = kind
        self.name = f"bench-milk-{uuid.uuid4().hex[:8]}"
        self.dir = tempfile.mkdtemp(prefix="bench-milk-")
        if kind == "stream":
            self.s: Any = shmstream.create(self.name, shape=shape, dtype=np.float32)
        else:
            self.s = shmstream.milk.create(self.name, shape, np.float32, dir=self.dir)

    def close(self) -> None:
        self.s.close()
        if self.kind == "stream":
            shmstream.unlink(self.name)
        else:
            self.s.unlink()
        shutil.rmtree(self.dir, ignore_errors=True)


def _summary(row: str, total: int, lat: list[int], torn: int, cpu: float) -> dict[str, Any]:
    return {
        "reader": row,
        "frames": total,
        "seen": len(lat),
        "missed": total - len(lat),
        "torn": torn,
        "cpu": cpu,
        **(latency_summary(lat) if lat else {"p50_us": float("nan"), "p99_us": float("nan")}),
    }


def _c_latencies(out: str) -> tuple[list[int], int]:
    """milk_peer wakeup's lines: (latencies in ns, torn frames)."""
    pairs = [line.split() for line in out.splitlines() if line.strip()]
    return [int(p[0]) for p in pairs], sum(int(p[1]) for p in pairs)


def _read_python(s: Any, total: int) -> tuple[list[int], int, float, int]:
    """Latencies, torn frames, the share of a core used and the reads that
    raised InconsistentStreamError of a Python reader of ``s`` (its wait
    policy's counters are added to the row by :func:`_policy`)."""
    lat, torn, count, busy = [], 0, 0, 0
    got = np.empty(s.shape, s.dtype)  # one buffer, as milk's C reader copies into one
    cpu, wall = time.thread_time(), time.monotonic()
    while count < total:
        try:
            s.read_new(timeout=10.0, out=got)
        except shmstream.InconsistentStreamError:
            # milk's writer held its write flag past the busy timeout (a
            # writer descheduled mid-write): no frame, and not a torn one;
            # counted (and its frame missed), the run goes on
            busy += 1
            continue
        now = time.monotonic_ns()
        flat = got.reshape(-1)
        lat.append(now - int(flat.view(np.int64)[0]))
        torn += int(not (flat[2:] == flat[2]).all())
        count = int(flat[2])
    return lat, torn, (time.thread_time() - cpu) / (time.monotonic() - wall), busy


def _read_c(reader: subprocess.Popen, seconds: float) -> tuple[list[int], int, float]:
    """The same of a C reader (its output, and its CPU time over its
    life; other children are reaped only after it)."""
    before, wall = _children_cpu(), time.monotonic()
    lat, torn = _c_latencies(reader.communicate(timeout=seconds + 60)[0])
    return lat, torn, (_children_cpu() - before) / (time.monotonic() - wall)


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


_POLICY_KEYS = ("waits", "napped", "spun", "caught", "slept", "slept_at_once", "preempted")


def _policy(s: Any) -> dict[str, int]:
    """How a Python reader's waits went (docs/waiting.md): each wait that
    did not find its frame at once either spun (and caught it, or slept)."""
    p = s.spin_policy
    return {f"policy_{k}": int(p[k]) for k in _POLICY_KEYS}


def _c_reader(row: str, scene: _Scene, total: int, peer: str | None, core: str | None):
    """Start the C reader a row names and wait until it has claimed its
    semaphore: milk's (``milk C``), or the core's, which takes the path."""
    if row.startswith("milk C"):
        reader = _peer(peer, scene.dir, "wakeup", scene.name, total)  # type: ignore[arg-type]
    else:
        reader = _peer(core, scene.dir, scene.s.path, total)  # type: ignore[arg-type]
    _ready(reader)
    return reader


def _wakeup(
    row: str,
    shape: tuple[int, ...],
    hz: float,
    seconds: float,
    peer: str | None,
    core: str | None,
) -> dict[str, Any]:
    """One wake-up row: ``READER`` on our writer, ``READER <- milk C`` on
    milk's own writer (milk_peer's write)."""
    kind = "stream" if row == "stream" else "milk"
    scene = _Scene(kind, shape)
    total = int(hz * seconds)
    in_c = row.split(" <- ", maxsplit=1)[0] in ("milk C", "shmstream core C")
    try:
        reader = _c_reader(row, scene, total, peer, core) if in_c else None
        if row.endswith("<- milk C"):  # milk's own writer
            writer: Any = _peer(peer, scene.dir, "write", scene.name, hz, seconds)  # type: ignore[arg-type]
            finish = lambda: writer.communicate(timeout=30)  # noqa: E731
        else:
            go = SPAWN.Event()
            writer = SPAWN.Process(
                target=_writer, args=(kind, scene.name, scene.dir, hz, seconds, go)
            )
            writer.start()
            go.set()
            finish = lambda: writer.join(30)  # noqa: E731
        if reader is not None:
            lat, torn, cpu = _read_c(reader, seconds)
            finish()
            return _summary(row, total, lat, torn, cpu)
        lat, torn, cpu, busy = _read_python(scene.s, total)
        finish()
        return {**_summary(row, total, lat, torn, cpu), **_policy(scene.s), "busy_errors": busy}
    finally:
        scene.close()


# ---- read by milk's library ----------------------------------------------------------------


def _read_by_milk(shape: tuple[int, ...], hz: float, seconds: float, peer: str) -> dict:
    scene = _Scene("milk", shape)
    try:
        go = SPAWN.Event()
        proc = SPAWN.Process(target=_writer, args=("milk", scene.name, scene.dir, hz, seconds, go))
        proc.start()
        reader = _peer(peer, scene.dir, "follow", scene.name, seconds)
        _ready(reader)
        go.set()
        out, _ = reader.communicate(timeout=seconds + 60)
        proc.join(30)
        woken, copied, missed, took = out.split()
        return {
            "writer_hz": hz,
            "written": scene.s.count,
            "woken": int(woken),
            "copied": int(copied),
            "missed": int(missed),
            "seconds": float(took),
            "hz": int(copied) / float(took) if float(took) else float("nan"),
        }
    finally:
        scene.close()


def _read_rate(kind: str, shape: tuple[int, ...], seconds: float) -> float:
    scene = _Scene(kind, shape)
    s = scene.s
    try:
        s.write(np.ones(shape, np.float32))
        buf = np.empty(shape, np.float32)
        n, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            for _ in range(100):
                s.read(out=buf)
            n += 100
        return n / (time.perf_counter() - start)
    finally:
        scene.close()


# ---- interop ---------------------------------------------------------------------------


def _pattern(nbytes: int, k: int) -> np.ndarray:
    """Frame k's bytes as milk_peer's ``make`` writes them."""
    return ((np.arange(nbytes) * 7 + k * 13 + 1) % 256).astype(np.uint8)


def _milk_to_us(peer: str, directory: str, code: int, shape: tuple[int, ...]) -> str:
    name = f"io{code}x{len(shape)}"
    size = [*shape[::-1], 1, 1][:3]
    r = subprocess.run(
        [peer, "make", name, str(code), str(len(shape)), *map(str, size), "4", "5"],
        capture_output=True,
        text=True,
        env={**os.environ, "MILK_SHM_DIR": directory},
        check=False,
    )
    if r.returncode != 0:
        return f"milk could not make it: {r.stderr.strip()}"
    with shmstream.milk.open(name, dir=directory) as s:
        if s.shape != shape or s.dtype != shmstream.milk.CODE_TO_DTYPE[code]:
            return f"shape/dtype {s.shape} {s.dtype}"
        if s.read().view(np.uint8).tobytes() != _pattern(s.nbytes, 5).tobytes():
            return "pixels differ"
        batch = s.read_since(0)
        want = [_pattern(s.nbytes, k).tobytes() for k in (3, 4, 5)]
        if (
            batch.counts.tolist() != [3, 4, 5]
            or [f.view(np.uint8).tobytes() for f in batch.frames] != want
        ):
            return f"circular buffer: counts {batch.counts.tolist()}"
        if s.keywords != {"KL": (42, "an int64"), "KD": (1.5, ""), "KS": ("hello", "")}:
            return f"keywords {s.keywords}"
        s.unlink()
    return "ok"


def _us_to_milk(peer: str, directory: str, code: int, shape: tuple[int, ...]) -> str:
    name = f"io{code}y{len(shape)}"
    dt = shmstream.milk.CODE_TO_DTYPE[code]
    with shmstream.milk.create(name, shape, dt, dir=directory, cb_size=4, nkw=4) as s:
        for k in range(1, 6):
            s.write(_pattern(s.nbytes, k).view(dt).reshape(shape))
        s.set_keyword("KL", 42, "an int64")
        s.set_keyword("KS", "hello")
        r = subprocess.run(
            [peer, "dump", name],
            capture_output=True,
            text=True,
            env={**os.environ, "MILK_SHM_DIR": directory},
            check=False,
        )
        s.unlink()
    if r.returncode != 0:
        return f"milk could not open it: {r.stderr.strip()}"
    lines = r.stdout.splitlines()
    md = lines[0].split()
    got_size = [int(x) for x in md[3 : 3 + len(shape)]]
    if int(md[1]) != code or int(md[2]) != len(shape) or got_size != list(shape[::-1]):
        return f"metadata {lines[0]}"
    if int(md[6]) != 5 or lines[1] != "px " + _pattern(s.nbytes, 5).tobytes().hex():
        return "pixels or cnt0 differ"
    cb = {int(p[2]): p[3] for p in (line.split() for line in lines if line.startswith("cb "))}
    want = {k: _pattern(s.nbytes, k).tobytes().hex() for k in (2, 3, 4, 5)}
    if cb != want:
        return f"circular buffer records {sorted(cb)}"
    kws = [line for line in lines if line.startswith("kw ")]
    if kws != ["kw KL L 42 an int64", "kw KS S hello "]:
        return f"keywords {kws}"
    return "ok"


def _interop(peer: str) -> list[dict[str, Any]]:
    directory = tempfile.mkdtemp(prefix="bench-milk-io-")
    rows = []
    try:
        for code, dt in sorted(shmstream.milk.CODE_TO_DTYPE.items()):
            for shape in ((7,), (3, 5), (2, 3, 4)):
                rows.append(
                    {
                        "datatype": code,
                        "dtype": str(np.dtype(dt)),
                        "shape": list(shape),
                        "milk_to_shmstream": _milk_to_us(peer, directory, code, shape),
                        "shmstream_to_milk": _us_to_milk(peer, directory, code, shape),
                    }
                )
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    return rows


# ---- the run ---------------------------------------------------------------------------


def _shape(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.lower().split("x"))


def _us(v: float) -> str:
    return NA if math.isnan(v) else f"{v:.1f} us"


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks milk", description=__doc__)
    p.add_argument("--shape", type=_shape, default=(240, 240))
    p.add_argument("--hz", type=float, default=2000.0)
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--read-shape", type=_shape, default=(128, 128))
    p.add_argument("--read-hz", type=float, default=10000.0)
    p.add_argument(
        "--rounds", type=int, default=1, help="wake-up rounds, interleaved (medians shown)"
    )
    p.add_argument("--quick", action="store_true", help="1 s per row")
    p.add_argument(
        "--rows",
        type=lambda t: [r.strip() for r in t.split(",")],
        default=[],
        help="wake-up rows to run, comma-separated (default: all); e.g. "
        "'shmstream.milk <- milk C,milk C <- milk C'",
    )
    p.add_argument("--json", metavar="PATH", help=JSON_HELP)
    a = p.parse_args(argv)
    res = Results("milk", argv)
    seconds = 1.0 if a.quick else a.seconds
    workdir = tempfile.mkdtemp(prefix="bench-milk-peer-")
    try:
        peer, where = build_milk_peer(workdir)
        res.add(section="library", found=peer is not None, where=where)
        lines = [
            f"milk's library: {where if peer else NA + ' (' + where + ')'}",
            f"writer {a.hz:.0f} Hz, {a.shape} float32, {os.cpu_count()} CPUs, "
            f"{a.rounds} round(s) of {seconds:g} s a row (p50, p99, reader CPU: medians of the "
            "rounds; CPU in shares of one core)",
            "| reader | frames | seen | missed | torn | wake-up p50 | p99 | reader CPU |",
            "| --- | --- | --- | --- | --- | --- | --- | --- |",
        ]
        core = build_core_reader(workdir)
        rows = (
            "shmstream.milk",
            "shmstream core C",
            "milk C",
            "shmstream.milk <- milk C",
            "shmstream core C <- milk C",
            "milk C <- milk C",
            "stream",
        )
        unknown = sorted(set(a.rows) - set(rows))
        if unknown:
            p.error(f"--rows: no wake-up row {unknown}; the rows are {', '.join(rows)}")

        def needs(row: str) -> list[str | None]:  # the binaries a row runs
            reader, _, writer = row.partition(" <- ")
            return [
                *([core] if reader == "shmstream core C" else []),
                *([peer] if "milk C" in (reader, writer) else []),
            ]

        runs: dict[str, list[dict[str, Any]]] = {
            row: [] for row in rows if None not in needs(row) and (not a.rows or row in a.rows)
        }
        for k in range(a.rounds):  # every other round in reverse: drifting load hits all rows
            for row in list(runs) if k % 2 == 0 else list(runs)[::-1]:
                progress(f"wake-up, {row}, round {k + 1} of {a.rounds}")
                r = _wakeup(row, a.shape, a.hz, seconds, peer, core)
                res.add(section="wakeup", round=k + 1, **r)
                runs[row].append(r)
        for row in rows:
            if a.rows and row not in a.rows:
                continue
            if row not in runs:
                why = where if core is not None else "no C compiler or core sources"
                res.add(section="wakeup", reader=row, skipped=why)
                lines.append(f"| {row} | {NA} | | | | | | |")
                continue
            rs = runs[row]
            total = {key: sum(r[key] for r in rs) for key in ("frames", "seen", "missed", "torn")}
            p50 = statistics.median(r["p50_us"] for r in rs)
            p99 = statistics.median(r["p99_us"] for r in rs)
            cpu = statistics.median(r["cpu"] for r in rs)
            lines.append(
                f"| {row} | {total['frames']} | {total['seen']} | {total['missed']} "
                f"| {total['torn']} | {_us(p50)} | {_us(p99)} | {cpu:.0%} |"
            )
        lines.append("")
        for row, rs in runs.items():  # the Python readers: how their waits went
            if "policy_waits" in rs[0]:
                n = {k: sum(r[f"policy_{k}"] for r in rs) for k in _POLICY_KEYS}
                lines.append(
                    f"{row}: {n['waits']} waits; {n['napped']} napped, {n['spun']} spun "
                    f"({n['caught']} caught after the nap or in the spin, {n['preempted']} cut "
                    f"short), {n['slept_at_once']} slept at once; {n['slept']} slept; "
                    f"{sum(r['busy_errors'] for r in rs)} InconsistentStreamError (a writer "
                    "held its write flag past the busy timeout)"
                )
        emit(res, "\n".join(lines))
        lines = [
            f"shmstream.milk writer (another process), {a.read_shape} float32, read by "
            "milk's library (semaphore wait + copy)",
            "| writer | written | woken | copied | missed | rate |",
            "| --- | --- | --- | --- | --- | --- |",
        ]
        for hz in (a.read_hz, 0.0):
            what = f"{hz:.0f} Hz" if hz else "as fast as it can"
            if peer is None:
                lines.append(f"| {what} | {NA} | | | | |")
                continue
            progress(f"read by milk's library, writer {what}")
            r = _read_by_milk(a.read_shape, hz, seconds, peer)
            res.add(section="read_by_milk", shape=list(a.read_shape), **r)
            lines.append(
                f"| {what} | {r['written']} | {r['woken']} | {r['copied']} | {r['missed']} "
                f"| {fmt_hz(r['hz'])} |"
            )
        lines += [
            "",
            f"| read(out=buf) of {a.read_shape} float32, one process | rate |",
            "| --- | --- |",
        ]
        for kind in ("milk", "stream"):
            progress(f"read rate, {kind}")
            hz = _read_rate(kind, a.read_shape, min(seconds, 1.0))
            res.add(section="read", kind=kind, shape=list(a.read_shape), hz=hz)
            lines.append(f"| {kind} | {fmt_hz(hz)} |")
        emit(res, "\n".join(lines))
        if peer is not None:
            progress("interop, every datatype")
            checks = _interop(peer)
            for c in checks:
                res.add(section="interop", **c)
            bad = [
                c
                for c in checks
                if c["milk_to_shmstream"] != "ok" or c["shmstream_to_milk"] != "ok"
            ]
            lines = [
                f"interop: {len(checks)} streams (13 datatypes x 1-D, 2-D, 3-D, circular buffer "
                f"of 4), each way: {len(checks) - len(bad)} ok",
                *(
                    f"  datatype {c['datatype']} {c['shape']}: milk->shmstream "
                    f"{c['milk_to_shmstream']}, shmstream->milk {c['shmstream_to_milk']}"
                    for c in bad
                ),
            ]
            emit(res, "\n".join(lines))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    res.save(a.json, quick=a.quick)
    return 0
