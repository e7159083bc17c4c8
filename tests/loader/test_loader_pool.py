"""The loader's pool of shared-memory slots: one per loader, reused across
epochs, workers, start methods and iterators; a new slot is reserved but
untouched until its first batch; the pool stays under its memory bound
(batches over it take torch's path, counted in ``stats()``); and it is
removed when the loader is collected, at process exit, or by purge once
its loader is dead.

Workers are real processes (fork, spawn and forkserver); the tests
synchronise on the loader's own batches and on child processes' exits.
Every test checks that /dev/shm holds no pool root or slot file afterwards.
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")

import loader_cases as lc  # noqa: E402

from shmstream.loader import _loader_pool as lp  # noqa: E402
from shmstream.loader import _worker  # noqa: E402
from shmstream.torch import DataLoader  # noqa: E402

from loader_util import (  # noqa: E402
    GrowingRows,
    Rows,
    first,
    grow_collate,
    list_of_samples,
    slot_backed,
)
from support import private_shm_available, run_in_private_shm  # noqa: E402

SHM = "/dev/shm"


# The pools this module's loaders make are gone when each test ends (conftest.py).
pytestmark = pytest.mark.usefixtures("no_loader_pool_left")


def slot_files(loader) -> list[str]:
    return sorted(lp.list_slot_files(loader._shm_pool.token).get(loader._shm_pool.token, []))


# ------------------------------------------- the pool belongs to the loader


def test_the_pool_outlives_the_workers_of_each_epoch():
    ds = Rows(n=64)
    loader = DataLoader(ds, batch_size=8, num_workers=2)  # new workers every epoch
    pids, files = set(), []
    for _ in range(3):
        it = iter(loader)
        pids.update(w.pid for w in it._workers)
        for b in it:
            assert torch.equal(b["x"], ds.data[b["i"]]) and slot_backed(b["x"])
        del it, b
        files.append(slot_files(loader))
    assert len(pids) == 6  # three generations of workers ...
    # ... one pool: later epochs reuse the slots (and may add one if more
    # batches happen to be in flight at once), never replace them
    assert files[0] and set(files[0]) <= set(files[1]) <= set(files[2])
    s = loader.stats()
    assert s["fresh"] == s["slots"] == len(files[2]) <= 2 * 4 and s["fresh"] + s["reused"] == 24
    assert s["fallbacks"] == 0 and s["bytes"] == sum(os.stat(f).st_size for f in files[2])


@pytest.mark.parametrize(
    "context, persistent",
    [("fork", False), ("fork", True), ("spawn", False), ("spawn", True), ("forkserver", False)],
)
def test_start_methods_and_persistence_reuse_one_pool(context, persistent):
    ds = Rows(n=24)
    loader = DataLoader(
        ds,
        batch_size=4,
        num_workers=2,
        multiprocessing_context=context,
        persistent_workers=persistent,
    )
    for _ in range(2):
        got = list(loader)
        assert len(got) == 6 and all(torch.equal(b["x"], ds.data[b["i"]]) for b in got)
        assert all(slot_backed(b["x"]) for b in got)
        del got
    s = loader.stats()
    assert s["fresh"] == s["slots"] and s["fresh"] + s["reused"] == 12 and s["reused"] >= 4
    del loader


def test_two_iterators_of_one_loader_interleaved_do_not_corrupt_each_other():
    ds = Rows(n=48)
    loader = DataLoader(ds, batch_size=4, num_workers=2, shm_slots=3)
    a, b = iter(loader), iter(loader)
    kept = []
    for x, y in zip(a, b):
        kept += [x, y]  # both iterators' workers write while these are held
        assert torch.equal(x["x"], ds.data[x["i"]]) and torch.equal(y["x"], ds.data[y["i"]])
        if len(kept) > 6:
            del kept[:2]
    for batch in kept:
        assert torch.equal(batch["x"], ds.data[batch["i"]])
    s = loader.stats()
    assert s["fresh"] + s["reused"] + s["fallbacks"] == 24 and s["slots"] <= 2 * 3
    del a, b, x, y, kept, batch


def test_two_loaders_in_one_process_keep_their_own_pools():
    ds1, ds2 = Rows(n=32), Rows(n=32, dim=100)
    l1 = DataLoader(ds1, batch_size=4, num_workers=2)
    l2 = DataLoader(ds2, batch_size=4, num_workers=1, collate_fn=list_of_samples)
    for _ in range(2):
        for x, y in zip(l1, l2):
            assert torch.equal(x["x"], ds1.data[x["i"]])
            assert all(torch.equal(s["x"], ds2.data[s["i"]]) for s in y)
    assert l1._shm_pool.token != l2._shm_pool.token
    assert not set(slot_files(l1)) & set(slot_files(l2))
    del l1, l2, x, y


@pytest.mark.skipif(not lc.HAS_IN_ORDER, reason=lc.NO_IN_ORDER)
def test_in_order_false_and_prefetch_factor():
    ds = Rows(n=64)
    loader = DataLoader(ds, batch_size=4, num_workers=2, in_order=False, prefetch_factor=4)
    assert loader._shm_nslots == 2 * (4 + 2)
    got = list(loader)
    seen = sorted(int(i) for b in got for i in b["i"])
    assert seen == list(range(64))
    assert all(torch.equal(b["x"], ds.data[b["i"]]) for b in got)
    del got


# ------------------------------------------------ first use of a slot


def _rss_kb(path: str) -> int:
    """Resident kB of this process's mapping of ``path`` (/proc/self/smaps)."""
    with open("/proc/self/smaps") as f:
        lines = f.read().splitlines()
    for n, line in enumerate(lines):
        if line.endswith(path):
            for follow in lines[n + 1 :]:
                if follow.startswith("Rss:"):
                    return int(follow.split()[1])
    raise AssertionError(f"{path} is not mapped")


def test_a_new_slot_is_reserved_but_no_page_is_touched_before_the_batch():
    path = lp.slot_path("t" + os.urandom(4).hex(), 0, 1)
    mm = lp.create_slot_file(path, 1 << 20)
    try:
        # posix_fallocate reserved every page (a full /dev/shm fails here) ...
        assert os.stat(path).st_blocks * 512 >= 1 << 20
        # ... but nothing was zeroed or mapped: the batch goes into fresh pages.
        assert _rss_kb(path) == 0
        t = torch.frombuffer(mm.buffer(), dtype=torch.uint8)
        t.fill_(7)
        assert _rss_kb(path) == 1024
        # A worker that attaches to an existing slot maps every page at once.
        mm2 = lp.map_slot_file(path, 1 << 20, populate=True, owner_uid=os.geteuid())
        assert mm2.buffer()[12345] == 7
        del t, mm2
    finally:
        os.unlink(path)


def test_the_first_batch_of_a_new_slot_is_stacked_straight_into_it():
    ds = Rows(n=8, dim=1000)
    loader = DataLoader(ds, batch_size=8, num_workers=1)
    b = first(loader)
    s = loader.stats()
    assert s["fresh"] == 1 and s["reused"] == 0 and slot_backed(b["x"])
    # The slot was sized from the samples before collating (no private
    # collate then copy): the batch's bytes, whole pages.
    (path,) = slot_files(loader)
    need = _worker._collated_bytes([ds[i] for i in range(8)])
    assert need > 8 * 1000 * 4 and os.stat(path).st_size == lp.capacity_for(need) < need + 4096
    del b


# -------------------------------------------------- memory bound, stats


def test_over_the_bound_batches_take_torchs_path_counted():
    ds = Rows(n=64, dim=1000)  # 16 KB batches of 4 -> 20 KiB slots
    loader = DataLoader(ds, batch_size=4, num_workers=2, shm_max_bytes=45_000)
    kept = []
    for b in loader:
        kept.append(b)  # hold every batch: the pool cannot reuse
        assert loader.stats()["bytes"] <= 45_000
    assert all(torch.equal(b["x"], ds.data[b["i"]]) for b in kept)
    s = loader.stats()
    assert s["slots"] == 2 and s["fallbacks"] == s["fallback_reasons"]["bound"] == 16 - 2
    assert sum(slot_backed(b["x"]) for b in kept) == 2
    del kept, b


def test_a_zero_bound_sends_every_batch_through_torchs_path():
    ds = Rows(n=16)
    loader = DataLoader(ds, batch_size=4, num_workers=2, shm_max_bytes=0)
    got = list(loader)
    assert all(torch.equal(b["x"], ds.data[b["i"]]) and not slot_backed(b["x"]) for b in got)
    assert loader.stats() == {
        "slots": 0,
        "bytes": 0,
        "max_bytes": 0,
        "fresh": 0,
        "reused": 0,
        "fallbacks": 4,
        "fallback_reasons": {"bound": 4, "busy": 0, "error": 0},
    }
    del got


def test_the_default_bound_is_documented_and_checked():
    loader = DataLoader(Rows(), batch_size=4, num_workers=1)
    assert loader.stats()["max_bytes"] == lp.default_max_bytes() <= 1 << 30
    assert DataLoader(Rows(), batch_size=4).stats()["max_bytes"] == 0  # no workers, no pool
    with pytest.raises(ValueError, match="shm_max_bytes"):
        DataLoader(Rows(), num_workers=1, shm_max_bytes=-1)
    with pytest.raises(TypeError, match="shm_max_bytes"):
        DataLoader(Rows(), num_workers=1, shm_max_bytes=1.5)
    with pytest.raises(ValueError, match="shm_slots"):
        DataLoader(Rows(), num_workers=1, shm_slots=0)


def test_growing_batches_under_a_bound_evict_free_slots_and_stay_under_it():
    ref = list(torch.utils.data.DataLoader(GrowingRows(), batch_size=4, collate_fn=grow_collate))
    big = lp.capacity_for(4 * 4 * (1 + 2 * 5000), grow=True)
    # One worker, one batch in flight: at most the batch the loop still holds,
    # the one it gets and the one being written. Room for three big slots,
    # not for them and every smaller slot made before.
    loader = DataLoader(
        GrowingRows(),
        batch_size=4,
        num_workers=1,
        prefetch_factor=1,
        shm_slots=6,
        collate_fn=grow_collate,
        shm_max_bytes=3 * big,
    )
    for _ in range(2):
        for got, want in zip(loader, ref):
            assert torch.equal(got, want) and slot_backed(got)
            assert loader.stats()["bytes"] <= 3 * big
    assert loader.stats()["fallbacks"] == 0
    del got


def test_a_new_slot_evicts_free_smaller_slots_when_the_bound_needs_their_bytes():
    small, big = lp.capacity_for(100), lp.capacity_for(8000)
    pool = lp.Pool(nslots=4, max_bytes=2 * big)
    try:
        client = lp.PoolClient(pool.token, pool.instance_id)
        a, b = client.take(100), client.take(100)
        assert (a.k, b.k, a.capacity, b.capacity) == (0, 1, small, small)
        client.give_back(a)
        client.give_back(b)
        c = client.take(8000)  # room without evicting
        assert c.fresh and c.k == 2 and pool.stats()["bytes"] == 2 * small + big
        d = client.take(8000)  # needs the free small slots' bytes
        assert d.fresh and pool.stats()["slots"] == 2 and pool.stats()["bytes"] == 2 * big
        assert not os.path.exists(lp.slot_path(pool.token, 0, a.gen))
        assert not os.path.exists(lp.slot_path(pool.token, 1, b.gen))
        assert sorted(client.maps) == [2, 3]  # the removed slots' pages are let go
        assert client.take(8000) == "bound"  # c and d are in use
        client.give_back(c)
        e = client.take(100)  # best fit among the free slots
        assert e.k == c.k and not e.fresh
    finally:
        pool.destroy()


# -------------------------------------------------------------- lifetime


def test_the_pool_goes_when_the_loader_is_garbage_collected():
    loader = DataLoader(Rows(), batch_size=4, num_workers=2)
    for b in loader:
        pass
    root = loader._shm_pool.table.seg.segname
    files = slot_files(loader)
    assert files and os.path.exists(SHM + root)
    del loader
    gc.collect()
    assert not any(os.path.exists(f) for f in files) and not os.path.exists(SHM + root)
    assert torch.equal(b["x"], Rows().data[b["i"]])  # a batch kept is still valid
    del b


SCRIPT_EXIT = """
import os, sys, torch
from shmstream.torch import DataLoader

class DS(torch.utils.data.Dataset):
    def __len__(self): return 16
    def __getitem__(self, i): return torch.full((1000,), float(i))

loader = DataLoader(DS(), batch_size=4, num_workers=2{extra})
batches = list(loader)          # held at exit, like a script's globals
print(loader._shm_pool.token, flush=True)
{end}
"""


def run_exit_script(extra: str, end: str) -> str:
    """Run SCRIPT_EXIT in a fresh interpreter; the token of its loader's pool."""
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT_EXIT.format(extra=extra, end=end)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return out.stdout.strip()


def test_the_pool_goes_at_normal_process_exit():
    token = run_exit_script(", persistent_workers=True", "")
    assert len(token) == 16 and not lp.list_slot_files(token)
    assert not os.path.exists(SHM + lp._native.segment_name(lp.root_name(token)))


def test_purge_removes_the_pool_of_a_dead_loader_and_keeps_live_ones():
    dead = run_exit_script("", "os._exit(0)")
    assert lp.list_slot_files(dead)  # killed: nothing removed its pool
    live = DataLoader(Rows(), batch_size=4, num_workers=1)
    for b in live:
        pass
    live_files = slot_files(live)
    removed = lp.purge_dead_loader_pools()
    assert lp.root_name(dead) in removed and lp.root_name(live._shm_pool.token) not in removed
    assert not lp.list_slot_files(dead)
    assert not os.path.exists(SHM + lp._native.segment_name(lp.root_name(dead)))
    assert slot_files(live) == live_files
    for b in live:  # still works
        assert torch.equal(b["x"], Rows().data[b["i"]])
    del live, b


@pytest.mark.root
def test_shmstream_purge_command_removes_dead_loaders_pools():
    reason = private_shm_available()
    if reason:
        pytest.skip(reason)
    script = f"""
        import io, os, subprocess, sys, contextlib
        from shmstream import cli
        script = {SCRIPT_EXIT.format(extra="", end="os._exit(0)")!r}
        out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                             check=True)
        token = out.stdout.strip()
        assert any(token in f for f in os.listdir("/dev/shm")), os.listdir("/dev/shm")
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            assert cli.main(["purge"]) == 0
        assert f"purged 'loader-{{token}}'" in buf.getvalue(), buf.getvalue()
        assert os.listdir("/dev/shm") == [], os.listdir("/dev/shm")
        print("ok")
    """
    proc = run_in_private_shm(textwrap.dedent(script), size="64m")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().endswith("ok")


@pytest.mark.root
def test_a_slot_bigger_than_dev_shm_is_ENOSPC_at_create_and_leaves_nothing():
    reason = private_shm_available()
    if reason:
        pytest.skip(reason)
    script = """
        import errno, os
        from shmstream.loader import _loader_pool as lp
        try:
            lp.create_slot_file(lp.slot_path("t", 0, 1), 4 << 20)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC, exc
        else:
            raise AssertionError("a slot bigger than /dev/shm was created")
        assert os.listdir("/dev/shm") == [], os.listdir("/dev/shm")
        print("ok")
    """
    proc = run_in_private_shm(textwrap.dedent(script), size="1m")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip() == "ok"
