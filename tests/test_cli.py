"""The ``shmstream`` command: every subcommand against real streams."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

import numpy as np
import pytest

import shmstream
from shmstream import cli


@pytest.fixture
def name():
    n = f"test-cli-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    yield n
    shmstream.unlink(n)


def test_no_arguments_prints_help_and_returns_1(capsys):
    assert cli.main([]) == 1
    out = capsys.readouterr().out
    assert "usage: shmstream" in out
    for command in ("list", "stat", "unlink", "purge", "watch", "demo", "bench"):
        assert command in out


def test_list_prints_user_visible_names(name, capsys):
    with shmstream.create(name, shape=(2,), dtype=np.float32):
        assert cli.main(["list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert name in lines
    assert not any(line.endswith(("_meta", "_gpu")) for line in lines)


def test_ls_is_an_alias_of_list(name, capsys):
    with shmstream.create(name, shape=(2,)):
        assert cli.main(["ls"]) == 0
    assert name in capsys.readouterr().out.splitlines()


def test_stat_prints_aligned_metadata(name, capsys):
    with shmstream.create(name, shape=(2, 3), dtype=np.float64):
        assert cli.main(["stat", name]) == 0
    out = capsys.readouterr().out
    assert f"name:" in out and name in out
    assert "float64" in out
    assert "(2, 3)" in out
    assert f"creator_pid:" in out and str(os.getpid()) in out


def test_stat_json_is_machine_readable(name, capsys):
    with shmstream.create(name, shape=(4,), dtype=np.int16):
        assert cli.main(["stat", "--json", name]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["name"] == name
    assert info["shape"] == [4]
    assert info["dtype"] == "int16"


def test_stat_of_a_missing_stream_is_one_line_on_stderr(capsys):
    missing = f"test-cli-missing-{uuid.uuid4().hex}"
    assert cli.main(["stat", missing]) != 0
    captured = capsys.readouterr()
    assert captured.out == ""
    err = captured.err.strip()
    assert len(err.splitlines()) == 1
    assert "does not exist" in err
    assert "Traceback" not in err


def test_unlink_destroys_each_name_and_returns_0(capsys):
    names = [f"test-cli-rm-{uuid.uuid4().hex[:8]}" for _ in range(2)]
    for n in names:
        shmstream.create(n, shape=(1,)).close()
    try:
        assert cli.main(["unlink", *names]) == 0
        for n in names:
            with pytest.raises(FileNotFoundError):
                shmstream.open(n)
        # silent for names that do not exist
        assert cli.main(["unlink", *names]) == 0
    finally:
        for n in names:
            shmstream.unlink(n)


def test_purge_passes_the_cuda_flag_and_prints_removed_names(monkeypatch, capsys):
    calls = []

    def fake_purge(*, include_cuda_orphans=False):
        calls.append(include_cuda_orphans)
        return ["a", "b"]

    monkeypatch.setattr(shmstream, "purge", fake_purge)
    assert cli.main(["purge"]) == 0
    assert cli.main(["purge", "--include-cuda-orphans"]) == 0
    assert calls == [False, True]
    out = capsys.readouterr().out
    assert "'a'" in out and "'b'" in out


def test_purge_removes_real_streams(monkeypatch, name, capsys):
    # Only our stream is in scope: other tests' streams must survive.
    real = shmstream.purge

    def scoped_purge(*, include_cuda_orphans=False):
        assert include_cuda_orphans is False
        removed = []
        for n in shmstream.list_streams():
            if n == name:
                shmstream.unlink(n)
                removed.append(n)
        return removed

    assert callable(real)
    monkeypatch.setattr(shmstream, "purge", scoped_purge)
    shmstream.create(name, shape=(1,)).close()
    assert cli.main(["purge"]) == 0
    assert name in capsys.readouterr().out
    assert name not in shmstream.list_streams()


def test_watch_refreshes_count_times_then_exits_0(name, capsys):
    with shmstream.create(name, shape=(8,), dtype=np.float32) as h:
        h.write(np.ones(8, np.float32))
        h.write(np.ones(8, np.float32))
        assert cli.main(["watch", name, "--interval", "0.05", "--count", "2"]) == 0
    lines = [l for l in capsys.readouterr().out.splitlines() if l.strip()]
    assert len(lines) == 2  # not a TTY: one line per refresh
    assert all(name in l and "count 2" in l for l in lines)
    assert "rate" in lines[0] and "missed" in lines[0] and "age" in lines[0]
    assert "producer alive" in lines[0]


def test_watch_sees_a_writer_in_another_process(name, capsys):
    h = shmstream.create(name, shape=(4,), dtype=np.float32)
    try:
        code = (
            "import shmstream, numpy as np, time\n"
            f"h = shmstream.open({name!r})\n"
            "for i in range(200):\n"
            "    h.write(np.full(4, i, np.float32)); time.sleep(0.002)\n"
            "h.close()\n"
        )
        child = subprocess.Popen([sys.executable, "-c", code])
        try:
            h.wait_for_count(after=0, timeout=60)  # the child writes (its start-up is slow under load)
            assert cli.main(["watch", name, "--interval", "0.2", "--count", "2"]) == 0
        finally:
            child.wait(timeout=30)
    finally:
        h.close()
    out = capsys.readouterr().out
    counts = [int(l.split("count ")[1].split()[0]) for l in out.splitlines() if "count " in l]
    assert len(counts) == 2 and counts[-1] > 0


def test_watch_missing_stream_fails_cleanly(capsys):
    assert cli.main(["watch", f"test-cli-missing-{uuid.uuid4().hex}", "--count", "1"]) != 0
    err = capsys.readouterr().err
    assert "does not exist" in err and "Traceback" not in err


def test_demo_runs_and_leaves_no_stream(capsys):
    # Only the demo's own stream is checked: other test sessions on this
    # machine may create and remove streams meanwhile.
    demo_stream = f"shmstream-demo-{os.getpid()}"
    assert cli.main(["demo", "--seconds", "1", "--shape", "64x64"]) == 0
    out = capsys.readouterr().out
    assert "written" in out and "read" in out
    assert "removed" in out and demo_stream in out
    assert demo_stream not in shmstream.list_streams()


def test_bench_unknown_part_lists_known_parts(capsys):
    from shmstream import bench

    assert cli.main(["bench", "no-such-part"]) != 0
    err = capsys.readouterr().err
    assert "no-such-part" in err and "stream" in err
    assert "stream" in bench.known_parts()


def test_bench_stream_quick_prints_every_row(tmp_path, capsys):
    path = tmp_path / "bench.json"
    assert cli.main(["bench", "stream", "--quick", "--json", str(path)]) == 0
    out = capsys.readouterr().out
    for shape in ("100x100", "128x128", "1000x1000"):
        assert shape in out
    for row in ("read()", "read(out=)", "pyshmem", "iceoryx2", "mp.shared_memory"):
        assert row in out
    for payload in ("64 B", "64 KiB", "4 MiB"):
        assert payload in out
    # (b) copy and zero-copy rows for every peer, the wake-up rows;
    # (c) shmstream with its default two slots and with one
    for row in ("copy: read_new(out=)", "zero-copy: read_new_view()",
                "zero-copy: locked() + read(safe=False)",
                "zero-copy: receive, read in place", "zero-copy: read in place",
                "spin_us=0 both ends", "os.pipe() (kernel)", "like-for-like",
                "best vs best", "slots=2 (default)", "slots=1"):
        assert row in out
    assert "(a)" in out and "(b)" in out and "(c)" in out
    assert "shmstream best vs pyshmem" in out
    doc = json.loads(path.read_text())
    sections = {r["section"] for r in doc["records"]}
    assert sections == {"a", "b", "c"}
    assert not doc["errors"]
    # nothing of the benchmark's is left in /dev/shm
    leftovers = [f for f in os.listdir("/dev/shm") if f"shmsb{os.getpid()}" in f]
    assert leftovers == []
    assert not any(n.startswith(f"shmsbench-{os.getpid()}") for n in shmstream.list_streams())


def test_console_entry_runs_as_module():
    proc = subprocess.run(
        [sys.executable, "-m", "shmstream", "list"], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0
    proc = subprocess.run(
        [sys.executable, "-m", "shmstream.bench", "--help"],
        capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 0 and "stream" in proc.stdout


def test_bench_missing_peer_shows_install_hint(monkeypatch, capsys):
    from shmstream.bench import stream

    real = stream.try_import

    def no_pyshmem(module):
        if module == "pyshmem":
            return None, "ModuleNotFoundError: No module named 'pyshmem'"
        return real(module)

    monkeypatch.setattr(stream, "try_import", no_pyshmem)
    assert stream.main(["--quick", "--sections", "a", "--peers", "shmstream,pyshmem"]) == 0
    out = capsys.readouterr().out
    assert "n/a (pip install shmstream[bench])" in out
    assert "shmstream" in out and "kHz" in out
