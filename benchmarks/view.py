"""The live view (``shmstream view``): does looking slow the pipeline, and
does the page keep up?

    python -m benchmarks view [--shape 480x640] [--hz 1000] [--seconds S]
                              [--rounds N] [--fps 40] [--quick] [--json PATH]

A writer process publishes a uint16 frame of ``--shape`` at ``--hz``
(absolute schedule: a late writer catches up) for ``--seconds`` a phase.
``shmstream view NAME`` runs as a child process, as a user starts it, and a
headless Chromium (Selenium; Debian's ``chromium`` and ``chromium-driver``)
shows its page. Each round has two phases back to back: the page closed
(the browser on about:blank, the server idle) and the page open on the
stream. Reported:

* the writer's rate in each phase, and their ratio (the median of the
  per-round ratios: phases of a round run back to back, so the ratio
  cancels what other processes do meanwhile); target >= 0.95;
* pictures drawn per second, counted by the page itself (its ``pictures``
  counter, read at the start and end of the phase); target >= 30;
* the CPU time of the server process (user + system, all threads, from
  /proc) per second of the phase: the cores it used; target <= 0.5;
* time to first picture: from starting ``shmstream view NAME`` (a fresh
  server each round) to the page's first picture, the browser already
  running (it is the user's); target <= 2 s. It includes starting Python,
  importing the server, loading the page and its first picture.

Chromium's own CPU is not counted: it is the viewer's machine's work, not
the pipeline's; on a 2-core machine it competes with the writer, which the
rate ratio shows.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import shutil
import subprocess
import sys
import time
import uuid
from typing import Any

import numpy as np

from shmstream.viewer import DEFAULT_FPS
from ._common import JSON_HELP, BenchError, Results, emit, median, progress, render_table

TICKS = os.sysconf("SC_CLK_TCK")


def _frames(shape: tuple[int, int], n: int = 8) -> list[np.ndarray]:
    h, w = shape
    base = np.tile(np.linspace(0, 65535, w).astype(np.uint16), (h, 1))
    return [np.roll(base, k * w // n, axis=1) for k in range(n)]


def _writer(name: str, hz: float, seconds: float, ready: Any, start: Any, out: Any) -> None:
    """A paced writer: publishes at ``hz`` for ``seconds`` after ``start``;
    puts its achieved rate on ``out``."""
    import shmstream

    frames = _frames(tuple(shmstream.stat(name)["shape"]))
    s = shmstream.open(name)
    ready.set()
    start.wait()
    period = 1.0 / hz
    t0 = time.perf_counter()
    n = 0
    while True:
        now = time.perf_counter()
        if now - t0 >= seconds:
            break
        target = t0 + n * period
        if now < target:
            time.sleep(target - now)
        s.write(frames[n % len(frames)], frame_id=n)
        n += 1
    out.put(n / (time.perf_counter() - t0))
    s.close()


def _cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime


def _browser() -> Any:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = shutil.which("chromium") or shutil.which("google-chrome") or ""
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--window-size=1600,1000",
        "--disable-dev-shm-usage",
    ):
        opts.add_argument(arg)
    return webdriver.Chrome(options=opts, service=Service(shutil.which("chromedriver")))


def missing() -> str | None:
    """Why this part cannot run here (None: it can)."""
    for module in ("selenium", "starlette", "uvicorn", "websockets"):
        try:
            __import__(module)
        except ImportError:
            return f"{module} is not installed (pip install 'shmstream[view,bench]')"
    if not (shutil.which("chromium") or shutil.which("google-chrome")):
        return "no Chromium (apt-get install chromium chromium-driver)"
    if not shutil.which("chromedriver"):
        return "no chromedriver (apt-get install chromium-driver)"
    return None


def _pictures(driver: Any) -> tuple[int, float]:
    """The page's picture counter and the page's clock (s)."""
    n, t = driver.execute_script(
        "return [parseInt(document.getElementById('pictures').textContent) || 0, performance.now()]"
    )
    return int(n), float(t) / 1e3


def _wait(what: str, predicate: Any, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise BenchError(f"timed out waiting for {what}")
        time.sleep(0.005)


def _phase(
    opts: argparse.Namespace, name: str, driver: Any, server: int, viewed: bool
) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    ready, start, out = ctx.Event(), ctx.Event(), ctx.Queue()
    proc = ctx.Process(target=_writer, args=(name, opts.hz, opts.seconds, ready, start, out))
    proc.start()
    if not ready.wait(60):  # the writer's imports, outside the phase
        raise BenchError("the writer did not start")
    cpu0, t0 = _cpu_s(server), time.monotonic()
    p0 = _pictures(driver) if viewed else (0, 0.0)
    start.set()
    rate = out.get(timeout=opts.seconds + 60)
    p1 = _pictures(driver) if viewed else (0, 0.0)
    cpu1, t1 = _cpu_s(server), time.monotonic()
    proc.join()
    row = {"viewed": viewed, "writer_hz": rate, "server_cores": (cpu1 - cpu0) / (t1 - t0)}
    if viewed:
        row["pictures_per_s"] = (p1[0] - p0[0]) / (p1[1] - p0[1])
        row["pictures"] = p1[0] - p0[0]
    return row


def _start_server(opts: argparse.Namespace, name: str, driver: Any) -> tuple[Any, str, float]:
    """``shmstream view NAME`` started, and the seconds to the page's first
    picture (the browser already running, on about:blank)."""
    driver.get("about:blank")
    t_start = time.monotonic()
    server = subprocess.Popen(
        [sys.executable, "-m", "shmstream", "view", name, "--fps", str(opts.fps)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    line = server.stdout.readline() if server.stdout else ""
    if "http://" not in line:
        server.kill()
        raise BenchError(f"shmstream view printed no URL: {line!r}")
    url = line.split()[2]
    driver.get(url)
    _wait("the first picture", lambda: _pictures(driver)[0] >= 1)
    return server, url, time.monotonic() - t_start


def _stop_server(server: Any) -> None:
    server.terminate()
    server.wait(timeout=30)


def run(opts: argparse.Namespace, res: Results) -> None:
    """Each round: start the server (time to first picture), a phase with
    the page closed, a phase with it open, stop the server."""
    import shmstream

    name = f"bench-view-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    driver = _browser()
    stream = shmstream.create(name, shape=opts.shape, dtype=np.uint16)
    try:
        stream.write(_frames(opts.shape)[0])
        rows = []
        for r in range(opts.rounds):
            server, url, first = _start_server(opts, name, driver)
            try:
                driver.get("about:blank")
                alone = _phase(opts, name, driver, server.pid, viewed=False)
                driver.get(url)
                _wait("the page's first picture", lambda: _pictures(driver)[0] >= 1)
                viewed = _phase(opts, name, driver, server.pid, viewed=True)
            finally:
                _stop_server(server)
            res.add(row="first picture", round=r, seconds=first)
            for row in (alone, viewed):
                res.add(row="phase", round=r, **row)
            rows.append((alone, viewed, first))
            progress(
                f"round {r}: first picture after {first:.2f} s; writer "
                f"{alone['writer_hz']:.0f} Hz alone, {viewed['writer_hz']:.0f} Hz viewed; "
                f"{viewed['pictures_per_s']:.1f} pictures/s; server "
                f"{viewed['server_cores']:.2f} cores"
            )
        _table(opts, res, rows)
    finally:
        driver.quit()
        stream.close()
        shmstream.unlink(name)


def _table(
    opts: argparse.Namespace, res: Results, rows: list[tuple[dict[str, Any], dict[str, Any], float]]
) -> None:
    ratio = median([v["writer_hz"] / a["writer_hz"] for a, v, _ in rows])
    pps = median([v["pictures_per_s"] for _, v, _ in rows])
    cores = median([v["server_cores"] for _, v, _ in rows])
    idle = median([a["server_cores"] for a, _, _ in rows])
    firsts = [f for _, _, f in rows]
    h, w = opts.shape
    table = render_table(
        ["measure", "value", "target"],
        [
            [
                "writer, page closed (median)",
                f"{median([a['writer_hz'] for a, _, _ in rows]):.0f} Hz",
                f"{opts.hz:.0f} Hz asked",
            ],
            [
                "writer, page open (median)",
                f"{median([v['writer_hz'] for _, v, _ in rows]):.0f} Hz",
                "",
            ],
            ["writer rate open / closed (median of rounds)", f"{ratio:.3f}", ">= 0.95"],
            ["pictures per second (the page's counter)", f"{pps:.1f}", ">= 30"],
            ["server CPU, page open", f"{cores:.2f} cores", "<= 0.5"],
            ["server CPU, page closed", f"{idle:.3f} cores", ""],
            ["start to first picture (median)", f"{median(firsts):.2f} s", "<= 2 s"],
            ["start to first picture (slowest round)", f"{max(firsts):.2f} s", ""],
        ],
        title=f"shmstream view: {h}x{w} uint16 at {opts.hz:.0f} Hz, --fps {opts.fps:g}, "
        f"{opts.rounds} round(s) of {opts.seconds:g} s",
    )
    emit(res, table)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks view", description=__doc__.split("\n")[0]
    )
    ap.add_argument("--shape", default="480x640", help="frame shape RxC (default 480x640)")
    ap.add_argument("--hz", type=float, default=1000.0, help="the writer's rate (default 1000)")
    ap.add_argument("--seconds", type=float, default=5.0, help="length of a phase")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument(
        "--fps",
        type=float,
        default=DEFAULT_FPS,
        help=f"the server's cap (default {DEFAULT_FPS:g}, the view's own)",
    )
    ap.add_argument("--quick", action="store_true", help="1 round of 1 s")
    ap.add_argument("--json", metavar="PATH", help=JSON_HELP)
    opts = ap.parse_args(argv)
    opts.shape = tuple(int(d) for d in opts.shape.lower().split("x"))
    if opts.quick:
        opts.rounds, opts.seconds = 1, 1.0
    res = Results("view", argv)
    res.meta.update(
        shape=list(opts.shape), hz=opts.hz, seconds=opts.seconds, rounds=opts.rounds, fps=opts.fps
    )
    why = missing()
    if why:
        print(f"python -m benchmarks view: cannot run: {why}", file=sys.stderr)
        return 2
    status = 0
    try:
        run(opts, res)
    except BenchError as exc:
        res.error(str(exc))
        status = 1
    res.save(opts.json, quick=opts.quick)
    return status
