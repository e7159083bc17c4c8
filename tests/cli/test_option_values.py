"""Every numeric option of every subcommand, and the library arguments a
new user met with odd values (issue 23): NaN, infinities where they make no
sense, negatives and zero are refused at once with exit 2 (the CLI) or a
ValueError (the API) whose message names the option and says what it
takes. The CLI cases run the real ``shmstream`` command."""

from __future__ import annotations

import subprocess
import sys
import warnings

import numpy as np
import pytest

import shmstream

#: (arguments, the option the error must name); each must exit 2 at once.
BAD_OPTIONS = [
    (["demo", "--seconds", "nan"], "--seconds"),
    (["demo", "--seconds", "inf"], "--seconds"),
    (["demo", "--seconds", "0"], "--seconds"),
    (["demo", "--rate", "-5"], "--rate"),
    (["demo", "--rate", "nan"], "--rate"),
    (["demo", "--shape", "0x4"], "--shape"),
    (["demo", "--shape", "nanx4"], "--shape"),
    (["watch", "--interval", "nan", "x"], "--interval"),
    (["watch", "--interval", "inf", "x"], "--interval"),
    (["watch", "--interval", "0", "x"], "--interval"),
    (["watch", "--count", "-1", "x"], "--count"),
    (["watch", "--count", "0", "x"], "--count"),  # never stopped (issue 47, bug 11)
    (["watch", "--count", "1.5", "x"], "--count"),
    (["list", "--remote", "--timeout", "nan"], "--timeout"),
    (["list", "--remote", "--timeout", "-1"], "--timeout"),
    (["record", "x", "-o", "out", "--seconds", "nan"], "--seconds"),
    (["record", "x", "-o", "out", "--frames", "0"], "--frames"),
    (["record", "x", "-o", "out", "--interval", "-inf"], "--interval"),
    (["record", "x", "-o", "out", "--wait", "nan"], "--wait"),
    (["record", "x", "-o", "out", "--wait", "-1"], "--wait"),
    (["replay", "dir", "x", "--rate", "-5"], "--rate"),
    (["replay", "dir", "x", "--rate", "nan"], "--rate"),
    (["replay", "dir", "x", "--history", "0"], "--history"),
    (["bridge", "--timeout", "nan"], "--timeout"),
    (["bridge", "--spin-us", "-1"], "--spin-us"),
    (["bridge", "--max-mirrors", "-1"], "--max-mirrors"),
    (["bridge", "--max-mirrors", "1.5"], "--max-mirrors"),
    (["bridge", "--max-mirror-bytes", "nan"], "--max-mirror-bytes"),
]


@pytest.mark.parametrize("args,option", BAD_OPTIONS, ids=[" ".join(a) for a, _ in BAD_OPTIONS])
def test_a_bad_option_value_exits_2_naming_the_option(args, option):
    proc = subprocess.run(
        [sys.executable, "-m", "shmstream", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2, (proc.returncode, proc.stdout[-500:], proc.stderr[-500:])
    assert f"argument {option}" in proc.stderr, proc.stderr
    assert proc.stdout == "", "the command ran before it refused the option"


@pytest.mark.parametrize("rate", [-5, 0, float("nan")])
def test_replay_refuses_a_rate_that_is_not_positive_in_frames_per_second(tmp_path, rate):
    with pytest.raises(ValueError, match="rate must be > 0 frames per second"):
        shmstream.replay(str(tmp_path), "x", rate=rate)


def test_replay_refuses_a_rate_that_is_not_a_number(tmp_path):
    with pytest.raises(TypeError, match="rate must be > 0 frames per second"):
        shmstream.replay(str(tmp_path), "x", rate="fast")


def test_opening_a_cpu_stream_with_a_gpu_device_is_refused(name):
    with shmstream.stream(name, shape=(4,), dtype=np.float32):
        with pytest.raises(ValueError, match="is a CPU stream"):
            shmstream.open(name, gpu_device="cuda:0")
        with shmstream.open(name, gpu_device=None) as h:  # the default still opens it
            assert h.gpu_device is None


def test_sharing_under_a_taken_name_says_how_to_attach_or_remove(name):
    a = shmstream.share(np.arange(4), name=name)
    try:
        with pytest.raises(FileExistsError, match=r"SharedArray.open\(.*unlink"):
            shmstream.share(np.arange(4), name=name)
    finally:
        del a


@pytest.mark.parametrize("slots", [1, 2, 3])
def test_history_with_any_explicit_slots_is_refused(name, slots):
    # history sets the slots itself (history + 1): slots=2 used to pass
    # because it was the default value.
    with pytest.raises(ValueError, match="leave slots out"):
        shmstream.create(name, shape=(4,), dtype=np.float32, history=4, slots=slots)


def test_a_deprecated_dtype_alias_in_a_header_is_refused_without_a_warning():
    from shmstream.common import _dtypes

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # NumPy's DeprecationWarning would escape as an error
        with pytest.raises(ValueError, match="not one shmstream writes"):
            _dtypes.decode("|a8")
