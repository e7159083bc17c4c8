"""The benchmarks (top-level ``benchmarks/``, run from a checkout as
``python -m benchmarks``): their shared helpers, a quick smoke run of every
part, and that none of them is installed with the library.

Speed is never asserted here (it lives in BENCHMARKS.md), and neither is a
benchmark's table text: these tests check that the measurement scaffolding
counts what it says, that every part runs with ``--quick`` and writes its
JSON, that results go to benchmarks/results/ named by date and machine, and
that it leaves nothing in /dev/shm. They import ``benchmarks``
from the checkout root (pytest's ``pythonpath``).
"""

from __future__ import annotations

import datetime
import importlib.metadata
import importlib.util
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import benchmarks as _bench
import shmstream
from benchmarks import _common
from benchmarks._stream import peer as stream_peer
from benchmarks._stream.peers import IMPLS, OURS, PIPE, make_peer
from shmstream import cli

from view_util import browser_missing

ROOT = Path(__file__).resolve().parents[2]


class FakeClock:
    """perf_counter / perf_counter_ns for a loop whose iterations take
    exactly ``step`` seconds each."""

    def __init__(self, step: float) -> None:
        self.t = 0.0
        self.step = step

    def perf_counter(self) -> float:
        return self.t

    def perf_counter_ns(self) -> int:
        return round(self.t * 1e9)

    def loop(self, n: int) -> None:
        self.t += n * self.step


def test_calibrate_sizes_the_loop_to_the_requested_time(monkeypatch):
    clock = FakeClock(1e-6)
    monkeypatch.setattr(_common.time, "perf_counter", clock.perf_counter)
    monkeypatch.setattr(_common.time, "perf_counter_ns", clock.perf_counter_ns)
    n = _common.calibrate(clock.loop, 0.2)
    assert n == pytest.approx(200_000, rel=0.01)
    assert _common.time_loop(clock.loop, n) == pytest.approx(0.2, rel=0.01)
    assert _common.loop_rate(clock.loop, 0.2) == pytest.approx(1e6, rel=0.01)


def test_ping_latencies_times_each_round_trip_after_the_warm_up():
    sent, polls = [], []

    def recv():
        # answers every third poll, like a peer that is polled until it replies
        polls.append(1)
        return "ack" if len(polls) % 3 == 0 else None

    lat = _common.ping_latencies(sent.append, "m", recv, 50, warm=7)
    assert sent == ["m"] * 57
    assert len(polls) == 57 * 3
    assert len(lat) == 50 and all(ns >= 0 for ns in lat)


def test_percentiles_and_latency_summary():
    ns = list(range(1, 101))  # 1..100 ns
    assert _common.percentiles(ns, (50, 99)) == pytest.approx(np.percentile(ns, [50, 99]))
    assert _common.latency_summary([1000, 2000, 3000]) == {
        "p50_us": 2.0,
        "p99_us": pytest.approx(2.98),
    }
    assert set(_common.latency_summary(ns, (50, 95, 99), unit="ns")) == {
        "p50_ns",
        "p95_ns",
        "p99_ns",
    }
    assert all(math.isnan(v) for v in _common.percentiles([], (50,)))


def test_formatting_matches_the_tables_in_benchmarks_md():
    assert _common.fmt_hz(220_200) == "220.2 kHz"
    assert _common.fmt_hz(8_300, "/s") == "8.3 k/s"
    assert _common.fmt_hz(947.0, "/s") == "947.0/s"
    assert _common.fmt_ratio(3.0, 1.0) == "x3.00"
    assert _common.fmt_ratio(5.183, 0.290, digits=1) == "x17.9"
    assert _common.fmt_ratio(2.3584, 0.1695, after="×") == "13.91×"
    assert _common.fmt_ratio(1.0, float("nan")) == "-"
    assert _common.fmt_ratio(1.0, None) == "-"
    assert _common.fmt_us(3_800) == "3.8" and _common.fmt_us(138_000) == "138"
    assert [_common.fmt_bytes(n) for n in (64, 64 << 10, 4 << 20, 40_000)] == [
        "64 B",
        "64 KiB",
        "4 MiB",
        "40 kB",
    ]
    assert _common.fmt_fields({"msgs_per_s": 7045535.4, "p50_us": 1.695}) == (
        "msgs_per_s=7,045,535  p50_us=1.70"
    )


def test_tables_padded_and_compact():
    padded = _common.render_table(["impl", "rate"], [["a", "1"], ["bbb", "22"]], "title")
    assert padded.splitlines() == [
        "title",
        "",
        "| impl | rate |",
        "|------|-----:|",
        "| a    |    1 |",
        "| bbb  |   22 |",
    ]
    compact = _common.render_table(["pass", "threads"], [["cold", "1"]], compact=True)
    assert compact.splitlines() == ["| pass | threads |", "|---|---|", "| cold | 1 |"]


def test_results_json_has_the_common_sections_and_the_part_ones(tmp_path):
    res = _common.Results("demo", ["--x"])
    res.add(a=1)
    res.tables.append("| t |")
    path = tmp_path / "r.json"
    res.dump(str(path), raw={"k": [1]})
    doc = json.loads(path.read_text())
    assert set(doc) == {"meta", "records", "errors", "tables", "raw"}
    assert doc["meta"]["command"] == "python -m benchmarks demo --x"
    assert {"date_utc", "python", "cpu_count", "versions", "loadavg_start", "loadavg_end"} <= set(
        doc["meta"]
    )
    assert doc["records"] == [{"a": 1}] and doc["raw"] == {"k": [1]}


# ---- where results go -----------------------------------------------------------

#: A results file's name: DATE-MACHINE-PART[-variant].ext (BENCHMARKS.md).
RESULT_NAME = re.compile(r"\d{4}-\d{2}-\d{2}-[a-z]+\d+c-[a-z0-9-]+(\.(json|txt|png))?")
#: A kept results file: the same, and a run's other repeats as one archive;
#: groups: date, machine and part (with its variant).
KEPT_NAME = re.compile(
    r"(\d{4}-\d{2}-\d{2})-([a-z]+\d+c)-([a-z0-9-]+?)(-latency|-throughput|-epochs)?\.(json|txt|png|tar\.xz)"
)


def test_results_go_to_a_dated_file_per_machine_that_no_later_run_overwrites(tmp_path, monkeypatch):
    monkeypatch.setattr(_common, "RESULTS_DIR", tmp_path / "results")
    monkeypatch.setattr(_common, "machine_description", lambda: "AMD EPYC (2 CPUs), Linux")
    today = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    first = _common.results_path("stream", None, quick=False)
    assert first == str(tmp_path / "results" / f"{today}-epyc2c-stream.json")
    Path(first).write_text("{}")
    assert _common.results_path("stream", None, quick=False).endswith(
        f"{today}-epyc2c-stream-2.json"
    )
    assert _common.results_path("stream", "mine.json", quick=False) == "mine.json"
    assert _common.results_path("stream", None, quick=True) is None  # a smoke run is no result
    assert _common.results_path("stream", "q.json", quick=True) == "q.json"


def test_a_part_run_without_json_writes_its_results_into_benchmarks_results(tmp_path, monkeypatch):
    monkeypatch.setattr(_common, "RESULTS_DIR", tmp_path)
    assert _bench.main(["create", "--gib", "0.0625", "--repeats", "1"]) == 0
    (written,) = tmp_path.iterdir()
    assert RESULT_NAME.fullmatch(written.name) and written.name.endswith("-create.json")
    assert json.loads(written.read_text())["meta"]["part"] == "create"


def test_every_result_file_is_in_benchmarks_results_named_by_date_and_machine():
    stray = [
        p.name for p in (ROOT / "benchmarks").glob("*") if p.suffix in (".json", ".txt", ".png")
    ]
    assert stray == [], "raw results belong in benchmarks/results/"
    results = ROOT / "benchmarks" / "results"
    folders = [p.name for p in results.iterdir() if p.is_dir()]
    assert folders == [], "a run's several files go in one DATE-MACHINE-PART.tar.xz"
    names = [p.name for p in results.iterdir() if p.name != "LOG.md"]
    assert names and [n for n in names if not KEPT_NAME.fullmatch(n)] == []


def test_benchmarks_results_keeps_one_run_per_part_and_machine():
    """BENCHMARKS.md, "Where results are kept": the current run of each
    part on each machine; earlier runs are in the log and in git."""
    dates: dict[tuple[str, str], set[str]] = {}
    for p in (ROOT / "benchmarks" / "results").iterdir():
        m = KEPT_NAME.fullmatch(p.name)
        if m:
            dates.setdefault((m[2], m[3]), set()).add(m[1])
    assert dates, "no results kept"
    several = {key: sorted(d) for key, d in dates.items() if len(d) > 1}
    assert several == {}, "runs of one part and machine on several days"
    repeats = sorted(
        f"{machine} {part}"
        for machine, part in dates
        if re.fullmatch(r".+-\d+", part) and (machine, part.rsplit("-", 1)[0]) in dates
    )
    assert repeats == [], "a repeat beside its run: it goes in the run's .tar.xz"


def test_every_raw_results_file_benchmarks_md_cites_is_kept_and_every_kept_one_cited():
    text = (ROOT / "BENCHMARKS.md").read_text()
    cited = set(re.findall(r"\(benchmarks/results/([^()\s#]+)\)", text)) - {"LOG.md"}
    kept = {p.name for p in (ROOT / "benchmarks" / "results").iterdir() if p.name != "LOG.md"}
    assert cited - kept == set(), "BENCHMARKS.md links a file that is not kept"
    assert kept - cited == set(), "a kept file no table of BENCHMARKS.md cites: the log's now"


def test_plot_reads_the_newest_plain_run_of_each_part(tmp_path):
    from benchmarks import plot

    for name in (
        "2026-11-22-xeon2c-stream.json",
        "2026-11-24-epyc2c-stream.json",
        "2026-11-24-epyc2c-stream-2.json",
        "2026-11-25-epyc2c-stream-hogs.json",  # a variant, not the plain run
    ):
        (tmp_path / name).write_text("{}")
    assert plot.newest(tmp_path, "stream") == tmp_path / "2026-11-24-epyc2c-stream-2.json"
    assert plot.newest(tmp_path, "channel") is None


def test_every_stream_peer_has_rows_the_scenarios_can_compare():
    for name in IMPLS:
        peer = make_peer(name)
        assert peer.name == name and peer.label()
        # (b)'s "best vs best" is taken over the copy and zero-copy rows
        assert set(peer.pingpong_variants) == {stream_peer.COPY, stream_peer.ZERO_COPY}
        assert peer.roundtrip_variants and peer.fanout_variants
    ours, pipe = make_peer(OURS), make_peer(PIPE)
    assert ours.wakeup_variants and pipe.wakeup_variants  # the wake-up pair
    assert not pipe.pingpong_variants and not pipe.roundtrip_variants
    assert make_peer(OURS, "shmstream_other_build").label() == "shmstream (shmstream_other_build)"


# ---- every part runs ------------------------------------------------------------

#: The smoke run of each part: --quick plus what keeps it to seconds here.
QUICK_ARGS = {
    "arrays": [],
    "bridge": ["--peers", "bridged,bridged-pw,inproc,zenoh"],
    "channel": ["--rounds", "1", "--only", "thr32-1"],
    "create": [],
    "direct": ["--readers", "np.memmap,shmstream.DirectArray"],
    "gpu": [],
    "history": [],
    "loader": [],
    "milk": [],
    "stream": [],
    "view": [],
}

#: What a part needs that the test environment may lack: (module, why).
NEEDS = {"bridge": "zenoh", "loader": "torch", "gpu": "torch"}


def test_every_part_has_a_smoke_run():
    assert set(_bench.known_parts()) == set(QUICK_ARGS)


def _leftovers() -> list[str]:
    """This run's files in /dev/shm, and iceoryx2's default-prefix files
    (which name no process: a peer built without the run's own prefix,
    benchmarks/peers/_iceoryx2.py, leaves them)."""
    pid = str(os.getpid())
    return [
        f
        for f in os.listdir("/dev/shm")
        if (pid in f and ("bench" in f or "shmsb" in f)) or f.startswith("iox2_")
    ]


@pytest.mark.parametrize("part", sorted(QUICK_ARGS))
def test_every_part_runs_quick_and_writes_its_json(part, tmp_path, capsys):
    if part in NEEDS and importlib.util.find_spec(NEEDS[part]) is None:
        pytest.skip(f"the {part} part needs {NEEDS[part]}")
    if part == "view" and browser_missing():
        pytest.skip(f"the view part needs a browser: {browser_missing()}")
    if part == "gpu" and not shmstream.gpu_available():
        assert _bench.main(["gpu", "--quick"]) == 1
        assert "no CUDA device" in capsys.readouterr().err
        return
    path = tmp_path / f"{part}.json"
    extra = []
    if part == "direct":  # its array file, removed at the end
        (tmp_path / "work").mkdir()
        extra = ["--dir", str(tmp_path / "work")]
    before = set(_leftovers())
    assert _bench.main([part, "--quick", *QUICK_ARGS[part], *extra, "--json", str(path)]) == 0
    doc = json.loads(path.read_text())
    assert doc["meta"]["command"].startswith(f"python -m benchmarks {part} --quick")
    assert doc["records"] and not doc.get("errors")
    assert set(_leftovers()) <= before
    if part == "direct":
        assert os.listdir(tmp_path / "work") == []


@pytest.mark.parametrize("part", sorted(QUICK_ARGS))
def test_every_part_imports_and_shows_its_options(part, capsys):
    # a part whose module no longer imports (a helper renamed or moved) is
    # found here, not by the next person who runs it
    assert _bench.main([part, "--help"]) == 0
    assert "usage: python -m benchmarks " + part in capsys.readouterr().out


def test_an_unknown_part_is_refused_with_the_known_ones(capsys):
    assert _bench.main(["no-such-part"]) == 2
    err = capsys.readouterr().err
    assert "no-such-part" in err and "stream" in err


def test_a_missing_peer_is_a_row_that_says_how_to_install_it(monkeypatch, capsys):
    from benchmarks import stream
    from benchmarks._stream import peers

    real = peers.try_import

    def no_pyshmem(module):
        if module == "pyshmem":
            return None, "ModuleNotFoundError: No module named 'pyshmem'"
        return real(module)

    monkeypatch.setattr(peers, "try_import", no_pyshmem)
    assert stream.main(["--quick", "--sections", "a", "--peers", "shmstream,pyshmem"]) == 0
    assert "pip install shmstream[bench]" in capsys.readouterr().out


def test_the_bridge_part_refuses_a_rate_that_is_not_positive():
    assert _bench.main(["bridge", "--rate", "0"]) == 2


# ---- where the benchmarks live -------------------------------------------------------


def test_python_m_benchmarks_runs_from_the_checkout_root():
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "stream" in proc.stdout and "python -m benchmarks" in proc.stdout


def test_shmstream_bench_says_how_to_run_them_even_inside_a_checkout(monkeypatch, capsys):
    # The installed library never needs a checkout: inside one too, the
    # command imports nothing from it and only prints the way.
    monkeypatch.chdir(ROOT / "tests")  # a subfolder of the checkout
    monkeypatch.delitem(sys.modules, "benchmarks", raising=False)
    path = list(sys.path)
    assert cli.main(["bench", "stream", "--quick"]) == 2
    err = capsys.readouterr().err
    assert "python -m benchmarks" in err and "checkout" in err
    assert "benchmarks" not in sys.modules and sys.path == path


def test_the_installed_package_holds_no_benchmark_code():
    """``pip install .`` installs the library only: no ``shmstream.bench``
    module, and no benchmark file in the distribution's installed files."""
    assert importlib.util.find_spec("shmstream.bench") is None
    pkg_dir = Path(shmstream.__file__).resolve().parent
    assert not (pkg_dir / "bench").exists()
    assert Path(_bench.__file__).resolve().parent == ROOT / "benchmarks"  # not an installed copy
    files = importlib.metadata.files("shmstream")
    if files is None:
        pytest.skip("shmstream's installed-files list (RECORD) is not available")
    if pkg_dir.is_relative_to(ROOT / "src"):
        pytest.skip("shmstream is imported from the source tree, not installed")
    paths = [str(f) for f in files]
    assert any(p.startswith("shmstream/") and p.endswith("stream.py") for p in paths), paths[:20]
    bench_files = [
        p
        for p in paths
        if p.startswith(("shmstream/bench/", "benchmarks/"))
        or "/bench/" in p
        or p.startswith("bench")
    ]
    assert bench_files == []


def test_the_docs_list_every_benchmark_part():
    # docs/API.md's `shmstream bench` row and README's `--help` line name the
    # parts; a new part (create, view) must not be missing from either.
    parts = set(_bench.known_parts())
    api = (ROOT / "docs" / "API.md").read_text(encoding="utf-8")
    row = next(line for line in api.splitlines() if line.startswith("| `shmstream bench"))
    listed = re.search(r"against its peers: (.*?) or `all`", row).group(1)
    assert set(re.findall(r"`([a-z]+)`", listed)) == parts
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    line = next(x for x in readme.splitlines() if "python -m benchmarks --help" in x)
    assert set(line.split("the parts:")[1].replace(",", " ").split()) == parts
