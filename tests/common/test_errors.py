"""One error tree: every exception shmstream raises is a ShmstreamError,
with the built-in a Python user catches as a second base, and each real
failure raises its own class (no caller needs to read the message)."""

from __future__ import annotations

import errno
import inspect
import re
import threading
from pathlib import Path

import numpy as np
import pytest

import shmstream
import shmstream.errors

import support

API_MD = Path(__file__).resolve().parents[2] / "docs" / "API.md"


def _exception_classes():
    """Every exception in shmstream.__all__ and every one errors.py defines."""
    seen = {}
    for obj in [getattr(shmstream, n) for n in shmstream.__all__] + list(
        vars(shmstream.errors).values()
    ):
        if (
            inspect.isclass(obj)
            and issubclass(obj, BaseException)
            and (obj.__module__ == "shmstream.errors" or obj.__name__ in shmstream.__all__)
        ):
            seen[obj.__name__] = obj
    return seen


def test_every_public_exception_is_a_ShmstreamError_importable_from_shmstream():
    classes = _exception_classes()
    assert len(classes) >= 30
    for name, cls in classes.items():
        assert issubclass(cls, shmstream.ShmstreamError), name
        assert name in shmstream.__all__, name
        assert getattr(shmstream, name) is cls, name
    assert set(shmstream.errors.__all__) <= set(shmstream.__all__)


def test_every_class_but_the_root_keeps_a_built_in_base():
    for name, cls in _exception_classes().items():
        if cls is shmstream.ShmstreamError:
            continue
        builtin = [
            b
            for b in cls.__mro__
            if b.__module__ == "builtins" and b not in (Exception, BaseException, object)
        ]
        assert builtin, name


def test_errno_picks_the_subclass_as_OSError_does():
    E = shmstream.ShmstreamOSError
    assert type(E(errno.ENOENT, "x")) is shmstream.ShmstreamFileNotFoundError
    assert type(E(errno.EEXIST, "x")) is shmstream.ShmstreamFileExistsError
    assert type(E(errno.EACCES, "x")) is shmstream.ShmstreamPermissionError
    assert type(E(errno.EAGAIN, "x")) is shmstream.ShmstreamBlockingIOError
    other = E(errno.ENOSPC, "full")
    assert type(other) is E and other.errno == errno.ENOSPC and isinstance(other, OSError)
    with_path = E(errno.ENOENT, "No such file", "/some/path")
    assert with_path.filename == "/some/path" and isinstance(with_path, FileNotFoundError)


def test_a_missing_and_a_duplicate_name(name):
    with pytest.raises(shmstream.ShmstreamFileNotFoundError) as info:
        shmstream.open(name)
    assert isinstance(info.value, FileNotFoundError) and info.value.errno == errno.ENOENT
    h = shmstream.create(name, shape=(4,), dtype=np.int64)
    try:
        with pytest.raises(shmstream.ShmstreamFileExistsError) as info:
            shmstream.create(name, shape=(4,), dtype=np.int64)
        assert isinstance(info.value, FileExistsError)
    finally:
        h.unlink()


def test_an_expired_wait_is_a_ShmstreamTimeoutError(name):
    h = shmstream.create(name, shape=(4,), dtype=np.int64)
    try:
        with pytest.raises(shmstream.ShmstreamTimeoutError) as info:
            h.read_new(timeout=0.01)
        assert isinstance(info.value, TimeoutError)
    finally:
        h.unlink()


def test_bad_arguments_are_ShmstreamValueError_and_ShmstreamTypeError(name):
    with pytest.raises(shmstream.ShmstreamValueError):
        shmstream.create(name, shape=(-1,), dtype=np.int64)
    with pytest.raises(shmstream.ShmstreamTypeError):
        shmstream.create(name, shape=(4,), dtype=object)


def test_a_closed_handle_is_a_HandleClosedError(name):
    h = shmstream.create(name, shape=(4,), dtype=np.int64)
    h.close()
    try:
        with pytest.raises(shmstream.HandleClosedError) as info:
            h.read()
        assert isinstance(info.value, RuntimeError)
    finally:
        shmstream.unlink(name)


def test_a_wait_cut_short_by_close_is_a_WaitCancelledError(name):
    h = shmstream.create(name, shape=(4,), dtype=np.int64)
    got: list[BaseException] = []

    def reader() -> None:
        try:
            h.read_new(timeout=support.WAIT)
        except BaseException as exc:  # noqa: BLE001 - the test looks at it
            got.append(exc)

    t = threading.Thread(target=reader)
    t.start()
    try:
        support.wait_for_waiter(name)
        h.close()
        t.join(support.WAIT)
        assert len(got) == 1 and type(got[0]) is shmstream.WaitCancelledError, got
        assert isinstance(got[0], shmstream.HandleClosedError)
    finally:
        shmstream.unlink(name)


def test_closing_a_handle_whose_lock_another_thread_holds_is_a_LockHeldError(name):
    h = shmstream.create(name, shape=(4,), dtype=np.int64)
    try:
        with support.lock_held_by_another_thread(h):
            with pytest.raises(shmstream.LockHeldError) as info:
                h.close()
            assert isinstance(info.value, RuntimeError)
    finally:
        h.unlink()


def test_releasing_a_lock_not_held_is_a_NotLockOwnerError(name):
    h = shmstream.create(name, shape=(4,), dtype=np.int64)
    try:
        with pytest.raises(shmstream.NotLockOwnerError):
            h.release()
        with pytest.raises(shmstream.NotLockOwnerError):
            h.write_locked(np.zeros(4, np.int64))
    finally:
        h.unlink()


def test_a_send_on_the_consumer_end_is_a_ChannelRoleError(name):
    tx = shmstream.channel(name, capacity=4096)
    rx = shmstream.open_channel(name)
    try:
        for send in (lambda: rx.send(b"x"), lambda: rx._ch.send(b"x")):  # Python, native
            with pytest.raises(shmstream.ChannelRoleError) as info:
                send()
            assert isinstance(info.value, AttributeError)
    finally:
        rx.close()
        tx.close()
        shmstream.unlink_channel(name)


def test_a_closed_channel_end_is_a_HandleClosedError(name):
    tx = shmstream.channel(name, capacity=4096)
    tx.close()
    try:
        with pytest.raises(shmstream.HandleClosedError):
            tx.send(b"x")
    finally:
        shmstream.unlink_channel(name)


@pytest.mark.skipif(shmstream.gpu_available(), reason="this process has CUDA")
def test_a_GPU_stream_without_CUDA_is_a_CudaUnavailableError(name):
    with pytest.raises(shmstream.CudaUnavailableError) as info:
        shmstream.create(name, shape=(4,), dtype=np.float32, gpu_device="cuda:0")
    assert isinstance(info.value, RuntimeError)


def _documented_exceptions() -> dict[str, list[str]]:
    """docs/API.md's exception table: class name -> its bases, as written."""
    text = API_MD.read_text(encoding="utf-8")
    section = text.split("\n## Exceptions\n", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for m in re.finditer(r"^\| `(\w+)` \| ([^|]+) \|", section, re.M):
        rows[m.group(1)] = re.findall(r"`(\w+)`", m.group(2))
    return rows


def test_docs_API_md_has_a_row_with_the_true_bases_for_every_exception():
    rows = _documented_exceptions()
    assert set(rows) == set(shmstream.errors.__all__)
    for name, bases in rows.items():
        cls = getattr(shmstream, name)
        assert bases == [b.__name__ for b in cls.__bases__], name
