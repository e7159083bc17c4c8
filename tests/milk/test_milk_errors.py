"""What a new user meets first with milk streams says what to do next
(docs/milk.md, "Where streams live" and "Errors"): a MILK_SHM_DIR that
names no directory, a missing directory at create, a file the user may not
write (milk's readers write into it), a directory the user may not write,
something that is not a file in a stream's place. The permission cases run
as a second local user in a child process, against real files.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid

import pytest

import shmstream
from shmstream import milk

OTHER_UID = 65534  # a second local user (tests/common/test_owner.py's)


@pytest.fixture
def shared_dir():
    """A directory under /tmp that the second user can reach (mode 0755,
    root's), removed afterwards."""
    if os.geteuid() != 0:
        pytest.skip("needs root to act as a second local user")
    d = tempfile.mkdtemp(prefix="milk-errors-")
    os.chmod(d, 0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _as_other_user(what: str, name: str, directory: str) -> str:
    """milk.open or milk.create as uid OTHER_UID: the error's type and text."""
    os.setgid(OTHER_UID)
    os.setuid(OTHER_UID)
    try:
        if what == "open":
            milk.open(name, dir=directory).close()
        else:
            milk.create(name, (2,), "f4", dir=directory).close()
    except OSError as exc:
        return f"{type(exc).__name__}: {exc}"
    return "no error"


def test_a_milk_shm_dir_that_names_no_directory_is_named_with_the_fix(tmp_path, monkeypatch):
    missing = str(tmp_path / "not-made")
    monkeypatch.setenv("MILK_SHM_DIR", missing)
    name = f"absent-{uuid.uuid4().hex[:8]}"
    with pytest.raises(shmstream.ShmstreamFileNotFoundError) as exc:
        milk.open(name)
    text = str(exc.value)
    assert f"no milk stream '{name}'" in text
    assert f"MILK_SHM_DIR is '{missing}', which is not a directory" in text
    assert f"mkdir -p {missing}" in text


def test_create_in_a_missing_directory_says_to_make_it(tmp_path):
    absent = str(tmp_path / "absent")
    with pytest.raises(shmstream.ShmstreamFileNotFoundError) as exc:
        milk.create("wfs", (2,), "f4", dir=absent)
    assert f"directory {absent} does not exist" in str(exc.value)
    assert f"mkdir -p {absent}" in str(exc.value)
    assert not os.path.exists(absent)


def test_open_without_write_access_says_milk_readers_write_into_the_file(shared_dir, spawn):
    with milk.create("ro", (2,), "f4", dir=shared_dir, mode=0o644):
        pass
    got = spawn(_as_other_user, "open", "ro", shared_dir).result()
    assert got.startswith("ShmstreamPermissionError"), got
    assert "needs read and write access" in got and "mode 0o644, owner uid 0" in got
    assert f"chmod 666 {os.path.join(shared_dir, 'ro.im.shm')}" in got


def _stat_as_other_user(name: str, directory: str) -> str:
    """shmstream.stat("milk:NAME") as uid OTHER_UID: the error's type and text."""
    os.environ["MILK_SHM_DIR"] = directory
    os.setgid(OTHER_UID)
    os.setuid(OTHER_UID)
    try:
        shmstream.stat("milk:" + name)
    except OSError as exc:
        return f"{type(exc).__name__}: {exc}"
    return "no error"


def test_stat_of_a_stream_one_may_not_read_says_read_access_is_enough(shared_dir, spawn):
    with milk.create("private", (2,), "f4", dir=shared_dir, mode=0o600):
        pass
    got = spawn(_stat_as_other_user, "private", shared_dir).result()
    assert got.startswith("ShmstreamPermissionError"), got
    assert "cannot read milk stream 'private'" in got and "mode 0o600, owner uid 0" in got
    assert "read access is enough" in got
    assert f"chmod 644 {os.path.join(shared_dir, 'private.im.shm')}" in got


def test_create_in_a_directory_one_may_not_write_says_so(shared_dir, spawn):
    got = spawn(_as_other_user, "create", "new", shared_dir).result()
    assert got.startswith("ShmstreamPermissionError"), got
    assert f"in {shared_dir} (mode 0o755, owner uid 0)" in got
    assert f"not writable by you (uid {OTHER_UID})" in got and "MILK_SHM_DIR" in got
    assert os.listdir(shared_dir) == []  # nothing left behind


def test_what_is_not_a_file_in_a_stream_s_place_is_named(tmp_path):
    os.mkfifo(tmp_path / "fifo.im.shm")
    os.mkdir(tmp_path / "dir.im.shm")
    for name in ("fifo", "dir"):
        with pytest.raises(shmstream.ShmstreamOSError) as exc:
            milk.open(name, dir=str(tmp_path))
        text = str(exc.value)
        assert f"{tmp_path / (name + '.im.shm')} is not a regular file" in text, text
        assert "remove it" in text
