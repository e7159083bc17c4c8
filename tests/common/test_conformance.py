"""One conformance suite for every kind of shared-memory object: streams,
channels, shared arrays and DataLoader slot pools answer the same cases the
same way (iceoryx2's conformance tests are the model).

- A bad name is a ValueError, a name that is not a str a TypeError, with
  the one name rule in the message, whatever the kind.
- An object dtype is a TypeError that says why.
- A creator killed with SIGKILL: nobody hangs, the next user gets what the
  kind promises or a clear error, ``shmstream list`` shows the creator dead,
  ``purge`` removes the object, and nothing is left in /dev/shm. These cases
  run in a private /dev/shm (a mount namespace), so ``purge`` cannot touch
  anything of another program's.
"""

from __future__ import annotations

import gc
import textwrap

import numpy as np
import pytest

import shmstream
from shmstream.common import _checks

from support import private_shm_available, run_in_private_shm

PARTS = ["stream", "channel", "shared array"]

BAD_NAMES = {"empty": "", "NUL": "a\x00b", "256 bytes": "n" * 256, "lone surrogate": "x\ud800"}


def _make(part: str, name: str):
    if part == "stream":
        return shmstream.create(name, shape=(2,))
    if part == "channel":
        return shmstream.channel(name, 4096)
    return shmstream.share(np.arange(3), name=name)


def _attach(part: str, name: str):
    if part == "stream":
        return shmstream.open(name)
    if part == "channel":
        return shmstream.open_channel(name)
    return shmstream.SharedArray.open(name)


@pytest.mark.parametrize("bad", list(BAD_NAMES.values()), ids=list(BAD_NAMES))
@pytest.mark.parametrize("part", PARTS)
def test_a_bad_name_is_a_ValueError_with_the_rule_for_every_kind(part, bad):
    for call in (_make, _attach):
        with pytest.raises(ValueError) as info:
            call(part, bad)
        assert "UTF-8" in str(info.value)
    with pytest.raises(ValueError):
        shmstream.stat(bad)


@pytest.mark.parametrize("bad", [7, b"name", None, ["a"]], ids=repr)
@pytest.mark.parametrize("part", PARTS)
def test_a_name_that_is_not_a_str_is_a_TypeError_for_every_kind(part, bad):
    # share(array, name=None) makes a unique name: None is no bad name there
    calls = (_attach,) if part == "shared array" and bad is None else (_make, _attach)
    for call in calls:
        with pytest.raises(TypeError, match="must be a str"):
            call(part, bad)


def test_the_name_rule_is_the_cores():
    assert _checks.NAME_RULE == shmstream._native.NAME_RULE
    assert "255" in _checks.NAME_RULE


@pytest.mark.parametrize("part", PARTS)
def test_an_object_dtype_is_a_TypeError_for_every_kind(part, make_name):
    objects = np.array([object(), object()], dtype=object)
    name = make_name()
    if part == "stream":
        with pytest.raises(TypeError, match="object"):
            shmstream.create(name, shape=(2,), dtype=object)
    elif part == "channel":
        tx = shmstream.channel(name, 4096)
        try:
            with pytest.raises(TypeError, match="object"):
                tx.send(objects)
        finally:
            tx.close()
    else:
        with pytest.raises(TypeError, match="object"):
            shmstream.share(objects, name=name)


def test_a_loader_batch_of_object_arrays_is_refused_as_torchs_own_loader_refuses_it():
    torch = pytest.importorskip("torch")
    from shmstream.torch import DataLoader

    class Objects(torch.utils.data.Dataset):
        def __len__(self):
            return 4

        def __getitem__(self, i):
            return {"x": torch.full((3,), float(i)), "meta": np.array([{"i": i}], dtype=object)}

    for make in (torch.utils.data.DataLoader, DataLoader):
        loader = make(Objects(), batch_size=2, num_workers=1)
        with pytest.raises(TypeError, match="found object"):
            list(loader)
        del loader
    gc.collect()  # the traceback held our loader: its pool goes with it


# ---- a creator killed: in a private /dev/shm -----------------------------------------

#: Creates one object of each kind from a child process that is then
#: SIGKILLed; the script checks what the next user gets, then purge.
_KILLED_CREATOR = """
import os, select, signal, subprocess, sys, time
import numpy as np
import shmstream
from shmstream import registry

PART = {part!r}
CHILD = r'''
import os, sys, numpy as np, shmstream
part = sys.argv[1]
if part == "stream":
    h = shmstream.create("obj", shape=(3,), dtype=np.int64); h.write(np.array([1, 2, 3]))
elif part == "channel":
    ch = shmstream.channel("obj", 4096); ch.send(b"before the end")
elif part == "shared array":
    a = shmstream.share(np.array([1, 2, 3]), name="obj")
elif part == "loader pool":
    import torch
    from shmstream.torch import DataLoader
    class Rows(torch.utils.data.Dataset):
        def __len__(self): return 8
        def __getitem__(self, i): return torch.full((1024,), float(i))
    it = iter(DataLoader(Rows(), batch_size=4, num_workers=1))
    next(it)  # the pool and a slot exist now
    print("workers", *[w.pid for w in it._workers], flush=True)
print("ready", flush=True)
sys.stdin.read()  # until killed
'''
child = subprocess.Popen([sys.executable, "-c", CHILD, PART], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
line = child.stdout.readline().split()
workers = [os.pidfd_open(int(pid)) for pid in line[1:]] if line[0] == "workers" else []
if workers:
    line = child.stdout.readline().split()
assert line == ["ready"], line
os.kill(child.pid, signal.SIGKILL)
child.wait()
# A loader's workers outlive it until torch's watchdog sees their parent
# gone (it looks every 5 s), and each holds the pool's root (its lease)
# till then: the pool is abandoned when they have exited too.
for fd in workers:
    assert select.select([fd], [], [], 60)[0], "a worker outlived its loader by 60 s"

entries = registry.scan()
kinds = {{e.kind for e in entries}}
assert all(e.creator_alive is False for e in entries), entries
# what the next user gets, without hanging
if PART == "stream":
    h = shmstream.open("obj")
    assert h.read().tolist() == [1, 2, 3] and h.producer_alive() is False
    h.close()
elif PART == "channel":
    rx = shmstream.open_channel("obj")
    assert rx.recv(timeout=30).data == b"before the end"
    try:
        rx.recv()  # no timeout: the dead producer must end the wait
    except shmstream.errors.ChannelClosedError as exc:
        assert "died" in str(exc), exc
    else:
        raise AssertionError("recv after a dead producer returned")
    rx.close()
elif PART == "shared array":
    a = shmstream.SharedArray.open("obj")
    assert a.tolist() == [1, 2, 3]
    del a
removed = shmstream.purge()
assert os.listdir("/dev/shm") == [], (removed, os.listdir("/dev/shm"))
print(sorted(kinds), removed)
"""


@pytest.mark.root
@pytest.mark.parametrize("part", [*PARTS, "loader pool"])
def test_a_creator_killed_leaves_a_usable_or_clearly_ended_object_that_purge_removes(part):
    reason = private_shm_available()
    if reason:
        pytest.skip(reason)
    if part == "loader pool":
        pytest.importorskip("torch")
    proc = run_in_private_shm(textwrap.dedent(_KILLED_CREATOR.format(part=part)), size="64m")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    kinds = {
        "stream": "stream",
        "channel": "channel",
        "shared array": "array",
        "loader pool": "loader-pool",
    }
    assert f"'{kinds[part]}'" in proc.stdout
