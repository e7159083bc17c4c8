"""A C program that includes include/shmstream.h publishes to a stream that
Python reads: the header and the core are the ABI, no Python involved."""
import glob
import os
import shutil
import subprocess

import numpy as np
import pytest

import shmstream

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def c_writer(tmp_path_factory):
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler on PATH")
    exe = str(tmp_path_factory.mktemp("c") / "c_stream_writer")
    sources = sorted(glob.glob(os.path.join(ROOT, "src", "core", "*.c")))
    subprocess.run(
        [cc, "-O2", "-Wall", "-Werror", "-I", os.path.join(ROOT, "include"),
         os.path.join(ROOT, "examples", "c_stream_writer.c"), *sources,
         "-lpthread", "-o", exe],
        check=True,
    )
    return exe


def test_c_writer_frames_are_read_whole_by_python(c_writer, name):
    with shmstream.create(name, shape=(64, 32), dtype=np.float32) as reader:
        result = subprocess.run([c_writer, name, "500"], capture_output=True,
                                text=True, check=True)
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
