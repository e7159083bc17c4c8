"""Module paths users may have imported before the package became one folder
per kind keep working (the public ones, as the moved module itself) or
raise an ImportError that names the new place (CHANGELOG.md lists which)."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys

import pytest

import shmstream

KEPT = {
    "shmstream.shared_array": "shmstream.arrays.shared_array",
    "shmstream.direct": "shmstream.arrays.direct",
    "shmstream.publication": "shmstream.streams.publication",
    "shmstream.recorder": "shmstream.recording.live",
}


@pytest.mark.parametrize("old", sorted(KEPT))
def test_an_old_public_path_is_the_moved_module_itself(old):
    module = importlib.import_module(old)
    assert module is importlib.import_module(KEPT[old])
    # an attribute of the package as before, so shmstream.direct.DirectArray works
    assert getattr(shmstream, old.rpartition(".")[2]) is module


def test_the_old_recording_module_still_holds_the_format_and_its_writer():
    from shmstream.recording import FORMAT, Recording, RecordingWriter, load_recording

    assert FORMAT == "shmstream-recording"
    assert Recording is shmstream.Recording and load_recording is shmstream.load_recording
    assert RecordingWriter.__module__ == "shmstream.recording.files"


def test_stream_and_channel_are_functions_and_their_old_modules_name_the_new_place():
    assert callable(shmstream.stream) and callable(shmstream.channel)
    with pytest.raises(ImportError, match=re.escape("shmstream.streams.shared_memory")):
        importlib.import_module("shmstream.stream")
    with pytest.raises(ImportError, match=re.escape("shmstream.channels.ends")):
        importlib.import_module("shmstream.channel")
    with pytest.raises(ImportError, match=re.escape("shmstream.loader._loader_pool")):
        importlib.import_module("shmstream._loader_pool")
    # and a name that never was a module is still plainly missing
    with pytest.raises(ModuleNotFoundError, match=r"^No module named .shmstream\.nothing.$"):
        importlib.import_module("shmstream.nothing")


def test_the_old_torch_path_is_the_dataloader_module_and_import_shmstream_skips_torch():
    code = (
        "import sys, shmstream\n"
        "assert 'torch' not in sys.modules, 'import shmstream imported torch'\n"
        "import shmstream.torch, shmstream.loader.torch as new\n"
        "assert shmstream.torch is new and shmstream.torch.DataLoader is new.DataLoader\n"
    )
    pytest.importorskip("torch")
    proc = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
