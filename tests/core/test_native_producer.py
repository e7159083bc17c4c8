"""C programs that include include/shmstream.h write to and read from
streams that Python also uses: the header and the core are the ABI, no
Python involved (examples/c_stream_writer.c, examples/c_stream_reader.c)."""

import os
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

import shmstream

import support

ROOT = support.ROOT


def _compile(tmp_path_factory, example: str) -> str:
    out = str(tmp_path_factory.mktemp("c") / example)
    return support.compile_c(out, [f"examples/{example}.c"])


@pytest.fixture(scope="module")
def c_writer(tmp_path_factory):
    return _compile(tmp_path_factory, "c_stream_writer")


@pytest.fixture(scope="module")
def c_reader(tmp_path_factory):
    return _compile(tmp_path_factory, "c_stream_reader")


def test_c_writer_frames_are_read_whole_by_python(c_writer, name):
    with shmstream.create(name, shape=(64, 32), dtype=np.float32) as reader:
        result = subprocess.run([c_writer, name, "500"], capture_output=True, text=True, check=True)
        assert "wrote 500 frames" in result.stdout
        pub = reader.read_publication()
        assert pub.count == 500
        assert pub.frame_id == 500
        assert np.all(pub.payload == 500.0)
    shmstream.unlink(name)


def test_c_writer_creates_a_stream_python_opens(c_writer, name):
    subprocess.run([c_writer, name, "3", "2", "5"], check=True, capture_output=True)
    try:
        handle = shmstream.open(name)
        assert handle.shape == (2, 5)
        assert handle.dtype == np.float32
        assert handle.count == 3
        assert np.all(handle.read() == 3.0)
        assert not handle.producer_alive()  # the C process has exited
        handle.close()
    finally:
        shmstream.unlink(name)


def test_python_writes_are_seen_by_the_c_core_layout(c_writer, name):
    # The C writer opens the stream Python made and continues its count.
    with shmstream.create(name, shape=(4, 4), dtype=np.float32) as h:
        h.write(np.zeros((4, 4), np.float32))
        subprocess.run([c_writer, name, "2"], check=True, capture_output=True)
        assert h.count == 3
        assert h.frame_id == 2
    shmstream.unlink(name)


def test_c_reader_follows_a_python_writer_with_whole_frames_and_exact_miss_counts(c_reader, name):
    # Python writes frames as fast as it can until the C reader has read 50
    # of them; every frame the reader got was whole (else exit 3) and what
    # it skipped is counted exactly: read + missed = counts advanced.
    with shmstream.create(name, shape=(64, 64), dtype=np.float32) as h:
        reader = subprocess.Popen(
            [c_reader, name, "50"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        try:
            k = 0
            while reader.poll() is None and k < 10_000_000:
                k += 1
                h.write(np.full((64, 64), k, np.float32), frame_id=k)
            out, err = reader.communicate(timeout=60)
        finally:
            reader.kill()
    assert reader.returncode == 0, err
    m = re.match(r"read (\d+) frames from .*, missed (\d+) writes, counts (\d+)\.\.(\d+)", out)
    assert m, out
    got, missed, first, last = (int(g) for g in m.groups())
    assert got == 50
    assert got + missed == last - first
    shmstream.unlink(name)


def test_the_C_examples_and_C_API_md_give_one_build_line_and_it_builds(tmp_path):
    doc = Path(ROOT, "docs", "C-API.md").read_text(encoding="utf-8")
    line = re.search(r"`(cc [^`]*prog\.c[^`]*)`", doc).group(1)
    for example in ("c_stream_writer", "c_stream_reader", "c_producer", "c_consumer"):
        source = Path(ROOT, "examples", f"{example}.c").read_text(encoding="utf-8")
        assert line.replace("prog", f"examples/{example}", 1).replace(
            "-o prog", f"-o {example}"
        ) in " ".join(source.split()), example
    if support.c_compiler() is None:
        pytest.skip("no C compiler on PATH")
    out = str(tmp_path / "prog")
    proc = subprocess.run(  # the documented line itself, from the repository root
        [
            "sh",
            "-c",
            line.replace("prog.c", "examples/c_stream_writer.c").replace("-o prog", f"-o {out}"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0 and os.access(out, os.X_OK), proc.stderr
