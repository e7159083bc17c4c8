"""The benchmarks' shared helpers and the shape of what each part writes.

Speed is never asserted here (it lives in BENCHMARKS.md); these tests check
that the measurement scaffolding counts what it says, that the formatting is
the one BENCHMARKS.md shows, and that each part's JSON keeps the sections its
readers use. The stream part's full run is in test_cli.py, the direct part's
in test_direct.py.
"""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

import shmstream
import shmstream.bench as _bench
from shmstream.bench import _common, arrays, channel, gpu
from shmstream.bench._stream import peer as stream_peer
from shmstream.bench._stream.peers import IMPLS, OURS, PIPE, make_peer


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
    assert _common.latency_summary([1000, 2000, 3000]) == {"p50_us": 2.0,
                                                           "p99_us": pytest.approx(2.98)}
    assert set(_common.latency_summary(ns, (50, 95, 99), unit="ns")) == {
        "p50_ns", "p95_ns", "p99_ns"}
    assert all(v != v for v in _common.percentiles([], (50,)))  # NaN


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
        "64 B", "64 KiB", "4 MiB", "40 kB"]
    assert _common.fmt_fields({"msgs_per_s": 7045535.4, "p50_us": 1.695}) == (
        "msgs_per_s=7,045,535  p50_us=1.70")


def test_tables_padded_and_compact():
    padded = _common.render_table(["impl", "rate"], [["a", "1"], ["bbb", "22"]], "title")
    assert padded.splitlines() == [
        "title", "", "| impl | rate |", "|------|-----:|", "| a    |    1 |", "| bbb  |   22 |"]
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
    assert doc["meta"]["command"] == "python -m shmstream.bench demo --x"
    assert {"date_utc", "python", "cpu_count", "versions", "loadavg_start",
            "loadavg_end"} <= set(doc["meta"])
    assert doc["records"] == [{"a": 1}] and doc["raw"] == {"k": [1]}


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


def test_channel_json_keeps_raw_and_median(tmp_path, capsys):
    path = tmp_path / "channel.json"
    assert channel.main(["--quick", "--rounds", "1", "--only", "thr32-1",
                         "--json", str(path)]) == 0
    out = capsys.readouterr().out
    assert "round 1: thr32-1 shmstream (send/recv)" in out and "msgs_per_s=" in out
    doc = json.loads(path.read_text())
    assert {"raw", "median", "meta", "records"} <= set(doc)
    assert list(doc["raw"]) == ["thr32-1|shmstream (send/recv)"]
    assert doc["median"]["thr32-1|shmstream (send/recv)"]["msgs_per_s"] > 0
    assert doc["records"][0]["scenario"] == "thr32-1" and not doc["errors"]


def test_arrays_json_and_table(tmp_path, capsys):
    path = tmp_path / "arrays.json"
    assert arrays.main(["--rows", "20000", "--workers", "1", "--repeats", "1",
                        "--json", str(path)]) == 0
    out = capsys.readouterr().out
    for row in ("| shmstream ", "| pickled ", "| stdlib shm "):
        assert row in out
    doc = json.loads(path.read_text())
    assert {r["method"] for r in doc["records"]} == set(arrays.METHODS)
    assert doc["tables"] and not doc["errors"]
    assert not [f for f in os.listdir("/dev/shm") if f == f"bench-arrays-stdlib-{os.getpid()}"]


@pytest.mark.skipif(shmstream.gpu_available(), reason="runs the real benchmark on a GPU")
def test_gpu_bench_without_a_device_says_why(capsys):
    assert gpu.main(["--quick"]) == 1
    assert "no CUDA device" in capsys.readouterr().err


@pytest.mark.parametrize("part", _bench.known_parts())
def test_every_part_imports_and_shows_its_options(part, capsys):
    # a part whose module no longer imports (a helper renamed or moved) is
    # found here, not by the next person who runs it
    assert _bench.main([part, "--help"]) == 0
    assert "usage:" in capsys.readouterr().out


def test_history_quick_run_records_every_row(tmp_path, capsys):
    path = tmp_path / "history.json"
    assert _bench.main(["history", "--quick", "--json", str(path)]) == 0
    data = json.loads(path.read_text())
    sections = {r["section"] for r in data["records"]}
    assert {"recorder"} <= sections and not data["errors"]
