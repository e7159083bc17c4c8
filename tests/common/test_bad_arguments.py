"""Every public call checks its arguments before they reach native code
(issue 37): a value of the wrong type, or outside what the binding's C type
holds (2**70, a negative count), is a ShmstreamError subclass whose message
names the argument, never nanobind's "incompatible function arguments"
TypeError or a bare int()/os.fspath() error.

One table: (call, bad value) -> the class and the argument's name."""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest

import shmstream

BIG = 2**70
T, V = shmstream.ShmstreamTypeError, shmstream.ShmstreamValueError


@pytest.fixture
def objs(make_name, tmp_path):
    """A stream with history, a channel's two ends and a 64-byte file."""
    h = shmstream.create(make_name(), shape=(2,), dtype=np.uint8, history=4)
    h.write([1, 2])
    chan = make_name()
    tx = shmstream.channel(chan, 4096)
    rx = shmstream.open_channel(chan)
    path = tmp_path / "a.bin"
    path.write_bytes(bytes(64))
    o = {"h": h, "tx": tx, "rx": rx, "path": str(path), "new": make_name, "dir": tmp_path}
    yield o
    if "milk" in o:
        o["milk"].close()
    tx.close()
    rx.close()
    h.close()


def _record(o, **kw):
    return shmstream.record(o["h"].name, str(o["dir"] / "rec"), frames=1, seconds=0.01, **kw)


def _create(o, **kw):
    """A new stream of shape (2,) made with ``kw``."""
    return shmstream.create(o["new"](), shape=(2,), **kw)


def _milk(o, **kw):
    """A milk stream of shape (2,) in the test's directory."""
    from shmstream import milk

    o["milk"] = milk.create("m", (2,), "u1", dir=str(o["dir"]), **kw)
    return o["milk"]


def _recording(o):
    """A recording (of no frame) of the fixture's stream."""
    _record(o)
    return shmstream.load_recording(o["dir"] / "rec")


def _remote_exports(**kw):
    from shmstream.bridge import remote_exports

    return remote_exports(**kw)


def _bridge(**kw):
    from shmstream.bridge import Bridge

    return Bridge(**kw)


def _on_a_fifo(o, call):
    """call(path of a FIFO) in a thread; one still blocked in the open
    after 60 s is released by a writer's open and fails the test (issue 47,
    bug 1: the open must check the file's type without blocking)."""
    path = str(o["dir"] / "fifo")
    os.mkfifo(path)
    raised: list[BaseException] = []

    def run():
        try:
            call(path)
        except BaseException as exc:  # noqa: BLE001 - handed to the test's thread
            raised.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(60)
    if thread.is_alive():
        os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))  # lets the blocked open go on
        thread.join()
        pytest.fail("opening a FIFO blocked until a writer opened it")
    if raised:
        raise raised[0]


#: (id, call(objs, bad), bad value, expected class, the argument's name)
CASES = [
    # -- streams
    ("write None", lambda o, v: o["h"].write(v), None, T, "value"),
    ("write timeout str", lambda o, v: o["h"].write([1, 2], timeout=v), "x", T, "timeout"),
    ("write timeout < 0", lambda o, v: o["h"].write([1, 2], timeout=v), -1, V, "timeout"),
    ("clear timeout str", lambda o, v: o["h"].clear(timeout=v), "x", T, "timeout"),
    ("read_after 2**70", lambda o, v: o["h"].read_after(v, timeout=0), BIG, V, "after"),
    ("read_after str", lambda o, v: o["h"].read_after(v, timeout=0), "x", T, "after"),
    ("read_since str", lambda o, v: o["h"].read_since(v, timeout=0), "a", T, "count"),
    (
        "wait_for_count 2**70",
        lambda o, v: o["h"].wait_for_count(after=v, timeout=0),
        BIG,
        V,
        "after",
    ),
    (
        "read_after_publication",
        lambda o, v: o["h"].read_after_publication(v, timeout=0),
        BIG,
        V,
        "after",
    ),
    ("casting", lambda o, v: setattr(o["h"], "casting", v), "bogus", V, "casting"),
    ("casting not str", lambda o, v: setattr(o["h"], "casting", v), 3, V, "casting"),
    ("is_stale str", lambda o, v: o["h"].is_stale(v), "x", T, "max_age"),
    (
        "create size str",
        lambda o, v: shmstream.create(o["new"](), shape=(2,), size=v),
        "abc",
        T,
        "size",
    ),
    (
        "create size '8'",
        lambda o, v: shmstream.create(o["new"](), shape=(2,), size=v),
        "8",
        T,
        "size",
    ),
    (
        "config not a dict",
        lambda o, v: shmstream.SharedMemory.create_from_config(v),
        [1],
        T,
        "config",
    ),
    (
        "config without name",
        lambda o, v: shmstream.SharedMemory.create_from_config(v),
        {"shape": (2,)},
        V,
        "'name'",
    ),
    (
        "config unknown key",
        lambda o, v: shmstream.SharedMemory.create_from_config(
            {"name": o["new"](), "shape": (2,), **v}
        ),
        {"shapes": 1},
        V,
        "'shapes'",
    ),
    (
        "locked_many not handles",
        lambda o, v: shmstream.locked_many(v).__enter__(),
        [1],
        T,
        "streams",
    ),
    (
        "locked_many poll_interval",
        lambda o, v: shmstream.locked_many([o["h"]], poll_interval=v).__enter__(),
        "x",
        T,
        "poll_interval",
    ),
    # -- booleans (issue 47, bug 4): "no" is truthy, never read as true
    ("open readonly", lambda o, v: shmstream.open(o["h"].name, readonly=v), "no", T, "readonly"),
    ("create auto_unlink", lambda o, v: _create(o, auto_unlink=v), "no", T, "auto_unlink"),
    ("create notify", lambda o, v: _create(o, notify=v), 1, T, "notify"),
    ("create cpu_mirror", lambda o, v: _create(o, cpu_mirror=v), "no", T, "cpu_mirror"),
    ("read safe", lambda o, v: o["h"].read(safe=v), "no", T, "safe"),
    ("read_publication safe", lambda o, v: o["h"].read_publication(safe=v), "no", T, "safe"),
    ("read_new safe", lambda o, v: o["h"].read_new(safe=v, timeout=0), "no", T, "safe"),
    ("read_after safe", lambda o, v: o["h"].read_after(0, safe=v, timeout=0), "no", T, "safe"),
    (
        "share writable",
        lambda o, v: shmstream.share(np.arange(3), name=o["new"](), writable=v),
        "no",
        T,
        "writable",
    ),
    (
        "SharedArray.open writable",
        lambda o, v: shmstream.SharedArray.open(o["new"](), writable=v),
        "no",
        T,
        "writable",
    ),
    (
        "DirectArray use_page_cache",
        lambda o, v: shmstream.DirectArray(o["path"], (8,), "u8", use_page_cache=v),
        "no",
        T,
        "use_page_cache",
    ),
    ("record overwrite", lambda o, v: _record(o, overwrite=v), "no", T, "overwrite"),
    ("record handle_signals", lambda o, v: _record(o, handle_signals=v), "no", T, "handle_signals"),
    (
        "replay renumber",
        lambda o, v: shmstream.replay(o["dir"], "x", renumber=v),
        "no",
        T,
        "renumber",
    ),
    (
        "purge include_cuda_orphans",
        lambda o, v: shmstream.purge(include_cuda_orphans=v),
        "no",
        T,
        "cuda",
    ),
    ("Bridge unlink_on_close", lambda o, v: _bridge(unlink_on_close=v), "no", T, "unlink_on_close"),
    ("view block", lambda o, v: shmstream.view(o["h"].name, port=-1, block=v), "no", T, "block"),
    # -- channels
    ("send type_id -1", lambda o, v: o["tx"].send(b"x", type_id=v), -1, V, "type_id"),
    ("send type_id 2**32", lambda o, v: o["tx"].send(b"x", type_id=v), 2**32, V, "type_id"),
    ("send type_id 1.5", lambda o, v: o["tx"].send(b"x", type_id=v), 1.5, T, "type_id"),
    ("send type_id str", lambda o, v: o["tx"].send(b"x", type_id=v), "a", T, "type_id"),
    ("send array type_id", lambda o, v: o["tx"].send(np.zeros(2), type_id=v), -1, V, "type_id"),
    ("send_many type_id", lambda o, v: o["tx"].send_many([b"x"], type_id=v), 2**32, V, "type_id"),
    ("send_many items", lambda o, v: o["tx"].send_many(v), None, T, "items"),
    ("send_many item", lambda o, v: o["tx"].send_many(v), ["x"], T, "items"),
    ("send_zero_copy type_id", lambda o, v: o["tx"].send_zero_copy(4, type_id=v), -1, V, "type_id"),
    ("batch 2**70", lambda o, v: setattr(o["tx"], "batch", v), BIG, V, "batch"),
    ("spin_ns str", lambda o, v: setattr(o["tx"], "spin_ns", v), "x", T, "spin_ns"),
    ("spin_ns 2**70", lambda o, v: setattr(o["tx"], "spin_ns", v), BIG, V, "spin_ns"),
    ("drain -1", lambda o, v: o["rx"].drain(v), -1, V, "max_messages"),
    ("drain str", lambda o, v: o["rx"].drain(v), "x", T, "max_messages"),
    ("drain_dlpack -1", lambda o, v: o["rx"].drain_dlpack(v), -1, V, "max_messages"),
    ("drain_zero_copy -1", lambda o, v: o["rx"].drain_zero_copy(v), -1, V, "max_messages"),
    ("channel capacity 2**70", lambda o, v: shmstream.channel(o["new"](), v), BIG, V, "capacity"),
    ("channel mode str", lambda o, v: shmstream.channel(o["new"](), mode=v), "x", V, "mode"),
    # -- shared arrays
    (
        "share mode str",
        lambda o, v: shmstream.share(np.arange(3), name=o["new"](), mode=v),
        "x",
        V,
        "mode",
    ),
    # -- DirectArray
    (
        "DirectArray offset 2**70",
        lambda o, v: shmstream.DirectArray(o["path"], (8,), "u8", v),
        BIG,
        V,
        "offset",
    ),
    (
        "DirectArray shape 2**70",
        lambda o, v: shmstream.DirectArray(o["path"], (v,), "u8"),
        BIG,
        V,
        "shape",
    ),
    ("DirectArray path None", lambda o, v: shmstream.DirectArray(v, (8,), "u8"), None, T, "path"),
    (
        "DirectArray path FIFO",
        lambda o, v: _on_a_fifo(o, lambda p: shmstream.DirectArray(p, v, "u1")),
        (0,),
        V,
        "not a regular file",
    ),
    ("direct_mmap path int", lambda o, v: shmstream.direct_mmap(v, (8,), "u8"), 3, T, "path"),
    # -- recording
    ("record path None", lambda o, v: shmstream.record(o["h"].name, v, frames=1), None, T, "path"),
    ("record since 2**70", lambda o, v: _record(o, since=v), BIG, V, "since"),
    ("replay path None", lambda o, v: shmstream.replay(v, o["new"]()), None, T, "path"),
    ("load_recording path", lambda o, v: shmstream.load_recording(v), 1.5, T, "path"),
    # -- milk streams (issue 47, bug 7)
    ("milk cb_size -1", lambda o, v: _milk(o, cb_size=v), -1, V, "cb_size"),
    ("milk cb_size 2**32", lambda o, v: _milk(o, cb_size=v), 2**32, V, "cb_size"),
    ("milk nsem -1", lambda o, v: _milk(o, nsem=v), -1, V, "nsem"),
    ("milk nsem 10**6", lambda o, v: _milk(o, nsem=v), 10**6, V, "nsem"),
    ("milk nkw -1", lambda o, v: _milk(o, nkw=v), -1, V, "nkw"),
    ("milk nkw str", lambda o, v: _milk(o, nkw=v), "4", T, "nkw"),
    ("milk mode", lambda o, v: _milk(o, mode=v), 0o7777, V, "mode must be"),
    (
        "create mode octal",
        lambda o, v: _create(o, mode=v),
        0o7777,
        V,
        "got 0o7777",
    ),
    (
        "milk keyword comment",
        lambda o, v: _milk(o).set_keyword("k", 1, v),
        "c" * 200,
        V,
        "comment is at most 79 bytes",
    ),
    ("milk keyword comment int", lambda o, v: _milk(o).set_keyword("k", 1, v), 5, T, "comment"),
    ("milk write None", lambda o, v: _milk(o).write(v), None, T, "array"),
    # -- errors that were plain built-ins (issue 47, bug 8)
    (
        "record path unwritable",
        lambda o, v: shmstream.record(o["h"].name, v, frames=1),
        "/proc/no-such-dir/rec",
        shmstream.ShmstreamFileNotFoundError,
        "recording directory '/proc/no-such-dir/rec'",
    ),
    (
        "Recording.frame 10**6",
        lambda o, v: _recording(o).frame(v),
        10**6,
        shmstream.ShmstreamIndexError,
        "frame index i=1000000",
    ),
    ("Recording.frame str", lambda o, v: _recording(o).frame(v), "0", T, "frame index"),
    (
        "remote_exports timeout -1",
        lambda o, v: _remote_exports(timeout=v, insecure=True),
        -1,
        V,
        "timeout",
    ),
]


@pytest.mark.parametrize(
    "call,bad,error,argument", [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_a_bad_argument_is_a_ShmstreamError_naming_it(objs, call, bad, error, argument):
    with pytest.raises(shmstream.ShmstreamError) as info:
        call(objs, bad)
    assert isinstance(info.value, error), repr(info.value)
    assert argument in str(info.value), str(info.value)
    assert "incompatible function arguments" not in str(info.value)


def test_the_loader_checks_its_pool_arguments():
    torch_mod = pytest.importorskip("shmstream.torch")
    import torch

    ds = torch.utils.data.TensorDataset(torch.arange(4.0))
    for kw, argument in (
        ({"shm_slots": BIG}, "shm_slots"),
        ({"shm_max_bytes": BIG}, "shm_max_bytes"),
    ):
        with pytest.raises(shmstream.ShmstreamValueError, match=argument):
            torch_mod.DataLoader(ds, num_workers=1, **kw)


# ---- errors that named the wrong thing (issue 37, bug 8) ---------------------------


def test_a_send_while_a_zero_copy_send_is_open_is_a_LoanStateError(channel_pair):
    tx, rx = channel_pair
    with tx.send_zero_copy(4) as buf:
        buf[:] = b"abcd"
        for send in (lambda: tx.send(b"x"), lambda: tx.send_many([b"x"])):
            with pytest.raises(
                shmstream.LoanStateError, match="zero-copy send on it is already open"
            ):
                send()
    assert rx.recv(timeout=0).data == b"abcd"  # the open loan was committed, nothing else sent
    assert rx.drain() == []


def test_a_call_of_the_other_channel_end_is_a_ChannelRoleError_and_an_AttributeError(
    channel_pair,
):
    tx, rx = channel_pair
    for end, call in ((rx, "send"), (rx, "send_zero_copy"), (tx, "recv"), (tx, "drain")):
        with pytest.raises(shmstream.ChannelRoleError, match=f"{call} belongs to the") as info:
            getattr(end, call)
        assert isinstance(info.value, AttributeError) and info.value.name == call
        assert not hasattr(end, call)
    with pytest.raises(AttributeError) as info:
        rx.no_such_thing  # noqa: B018 - the attribute access is the test
    assert not isinstance(info.value, shmstream.ChannelRoleError)


def test_the_same_mistake_in_a_count_is_the_same_class_everywhere(name):
    h = shmstream.create(name, shape=(2,), history=2)
    try:
        errors = []
        for call in (
            lambda: h.read_after("x", timeout=0),
            lambda: h.wait_for_count(after="x", timeout=0),
            lambda: h.read_since("x", timeout=0),
        ):
            with pytest.raises(shmstream.ShmstreamError) as info:
                call()
            errors.append(type(info.value))
        assert errors == [shmstream.ShmstreamTypeError] * 3
    finally:
        h.close()


def test_casting_is_checked_when_set(name):
    h = shmstream.create(name, shape=(2,), dtype=np.int32)
    try:
        with pytest.raises(shmstream.ShmstreamValueError, match="casting must be one of"):
            h.casting = "bogus"
        assert h.casting == "unsafe"
        h.casting = "safe"
        with pytest.raises(TypeError, match="is not a 'safe' cast"):
            h.write(np.array([1.5, 2.5]))
        h.write(np.array([1, 2], np.int16))
        assert h.read().tolist() == [1, 2]
    finally:
        h.close()


def test_create_takes_size_as_an_int_only(name):
    with pytest.raises(shmstream.ShmstreamTypeError, match="size must be an integer"):
        shmstream.create(name, shape=(2,), dtype=np.uint8, size="2")
    assert name not in shmstream.list_streams()
    with shmstream.create(name, shape=(2,), dtype=np.uint8, size=np.int64(2)) as h:
        assert h.size == 2


def test_create_from_config_names_a_missing_or_unknown_key(name):
    with pytest.raises(shmstream.ShmstreamValueError, match="config lacks 'name'"):
        shmstream.SharedMemory.create_from_config({"shape": (2,)})
    with pytest.raises(shmstream.ShmstreamValueError, match=r"unknown key.*'dtpye'"):
        shmstream.SharedMemory.create_from_config({"name": name, "shape": (2,), "dtpye": "u1"})
    assert name not in shmstream.list_streams()
    with shmstream.create(name, shape=(2,), history=3) as h:
        config = h.to_config()
    shmstream.unlink(name)
    h2 = shmstream.SharedMemory.create_from_config(config)  # to_config's keys all pass
    try:
        assert h2.to_config() == config
    finally:
        h2.close()


def test_DirectArray_on_a_missing_short_or_directory_path_says_what_is_wrong(tmp_path):
    with pytest.raises(shmstream.ShmstreamFileNotFoundError, match=r"no file .*tofile") as info:
        shmstream.DirectArray(str(tmp_path / "missing.bin"), (4,), "u8")
    assert info.value.errno == 2
    short = tmp_path / "short.bin"
    short.write_bytes(bytes(10))
    with pytest.raises(shmstream.ShmstreamValueError, match="has 10 bytes, fewer than"):
        shmstream.DirectArray(str(short), (4,), "u8")
    with pytest.raises(shmstream.ShmstreamValueError, match="is not a regular file"):
        shmstream.DirectArray(str(tmp_path), (4,), "u8")
