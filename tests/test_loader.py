"""shmstream.torch.DataLoader: batches through the loader's pool of reused
shared-memory slots.

Each edge case a real loader meets is one test. Workers are real processes
(fork, torch's default here, plus spawn and forkserver tests); the tests
synchronise on the loader's own batches and on child processes' exits.
Every test checks that /dev/shm holds no pool root or slot file afterwards.
"""

from __future__ import annotations

import collections
import gc
import os
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import shmstream.torch as st  # noqa: E402
from shmstream.loader import _batch, _worker  # noqa: E402
from shmstream.loader import _loader_pool as lp  # noqa: E402
from shmstream.torch import DataLoader, ShmTransportWarning  # noqa: E402

from support import private_shm_available, run_in_private_shm  # noqa: E402

SHM = "/dev/shm"


# The pools this module's loaders make are gone when each test ends (conftest.py).
pytestmark = pytest.mark.usefixtures("no_loader_pool_left")


class Rows(torch.utils.data.Dataset):
    """Sample i: a dict with row i of a float tensor, its index, a label."""

    def __init__(self, n: int = 64, dim: int = 256) -> None:
        self.data = torch.arange(n * dim, dtype=torch.float32).reshape(n, dim)

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, i: int):
        return {"x": self.data[i], "i": i, "name": f"s{i}"}


def first(loader):
    return next(iter(loader))


def slot_backed(t: torch.Tensor) -> bool:
    """Does ``t`` alias a loader slot mapped into this process (zero-copy)?
    Read from /proc/self/maps, independent of the loader's bookkeeping."""
    ptr = t.data_ptr()
    with open("/proc/self/maps") as f:
        for line in f:
            if lp.SLOT_FILE_PREFIX in line:
                lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
                if lo <= ptr < hi:
                    return True
    return False


def slot_files(loader) -> list[str]:
    return sorted(lp.list_slot_files(loader._shm_pool.token).get(loader._shm_pool.token, []))


def states(loader) -> list[int]:
    table = loader._shm_pool.table
    with table.locked():
        return [int(table.line(k)[lp._STATE]) for k in range(table.nslots)]


# ---------------------------------------------------------------- basics


def test_batches_equal_torchs_and_alias_reused_slots():
    ds = Rows()
    ours = list(DataLoader(ds, batch_size=4, num_workers=2, shm_slots=3))
    ref = list(torch.utils.data.DataLoader(ds, batch_size=4, num_workers=2))
    assert len(ours) == len(ref) == 16
    for a, b in zip(ours, ref):
        assert (
            torch.equal(a["x"], b["x"]) and torch.equal(a["i"], b["i"]) and a["name"] == b["name"]
        )
    del ours, ref


def test_slots_are_created_once_and_reused():
    ds = Rows(n=200)
    loader = DataLoader(ds, batch_size=4, num_workers=2)  # prefetch_factor 2 + 2 slots each
    aliased = 0
    for n, b in enumerate(loader):
        aliased += slot_backed(b["x"])
        assert torch.equal(b["x"], ds.data[b["i"]])
        assert loader.stats()["slots"] <= 2 * 4  # however many batches went by
    s = loader.stats()
    assert n == 49 and aliased == s["fresh"] + s["reused"] == 50 - s["fallbacks"]
    assert s["fresh"] == s["slots"] <= 8 and s["reused"] >= 42
    del b


def test_num_workers_zero_is_torchs_loader():
    b = first(DataLoader(Rows(), batch_size=4))
    assert torch.equal(b["x"], Rows().data[:4]) and b["name"] == ["s0", "s1", "s2", "s3"]


def test_import_shmstream_does_not_import_torch():
    code = "import sys, shmstream, shmstream.arrays.shared_array; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


# ---------------------------------------------------------------- dtypes

DTYPES = [
    torch.bool,
    torch.uint8,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.float16,
    torch.bfloat16,
    torch.float32,
    torch.float64,
    torch.complex64,
    torch.complex128,
]


class AllDtypes(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 8

    def __getitem__(self, i: int):
        g = torch.Generator().manual_seed(i)
        out = {}
        for dt in DTYPES:
            if dt.is_complex:
                out[str(dt)] = torch.randn(3, 5, dtype=dt, generator=g)
            elif dt.is_floating_point:
                out[str(dt)] = (torch.randn(3, 5, generator=g) * 100).to(dt)
            elif dt == torch.bool:
                out[str(dt)] = torch.rand(3, 5, generator=g) > 0.5
            else:
                out[str(dt)] = torch.randint(0, 100, (3, 5), generator=g).to(dt)
            out[str(dt) + "/scalar"] = out[str(dt)][1, 2].clone()  # 0-d
            out[str(dt) + "/empty"] = torch.empty(0, 4, dtype=dt)
        return out


@pytest.mark.parametrize("collate", ["default", "custom"])
def test_every_torch_dtype_scalars_and_empty_tensors(collate):
    ds = AllDtypes()
    kwargs = {} if collate == "default" else {"collate_fn": list_of_samples}
    got = list(DataLoader(ds, batch_size=4, num_workers=2, **kwargs))
    ref = list(torch.utils.data.DataLoader(ds, batch_size=4, num_workers=0, **kwargs))
    for a, b in zip(got, ref):
        for sa, sb in [(a, b)] if collate == "default" else zip(a, b):
            assert sa.keys() == sb.keys()
            for k in sa:
                assert sa[k].dtype == sb[k].dtype and sa[k].shape == sb[k].shape, k
                assert torch.equal(sa[k], sb[k]), k
    if collate == "default":
        assert got[0]["torch.bfloat16"].shape == (4, 3, 5) and slot_backed(got[0]["torch.bfloat16"])
        assert got[0]["torch.int16/scalar"].shape == (4,)
        assert got[0]["torch.int16/empty"].shape == (4, 0, 4)
    else:
        assert got[1][0]["torch.int16/scalar"].shape == ()
        assert slot_backed(got[1][0]["torch.complex128/scalar"])
    del got


def list_of_samples(samples):
    return list(samples)


# --------------------------------------------- structure, identity, grads

Pair = collections.namedtuple("Pair", "left right")


def nested_collate(samples):
    x = torch.stack([s["x"] for s in samples])
    w = torch.ones(3, requires_grad=True)
    p = torch.nn.Parameter(torch.zeros(2))
    return {
        "x": x,
        "same": x,  # the same tensor twice
        "rows": [x[0], x[1:]],  # views of it
        "pair": Pair(left=torch.tensor(7), right=(f"batch of {len(samples)}", 3, None)),
        "np": np.arange(4.0),
        "w": w,
        "p": p,
        "none": None,
    }


def test_nested_structures_identity_and_requires_grad():
    ds = Rows(n=8)
    b = first(DataLoader(ds, batch_size=4, num_workers=1, collate_fn=nested_collate))
    assert b["same"] is b["x"]
    assert torch.equal(b["x"], ds.data[:4]) and slot_backed(b["x"])
    assert torch.equal(b["rows"][1], ds.data[1:4])
    b["x"][1, 0] = -1.0  # aliasing kept: the views see it
    assert b["rows"][1][0, 0] == -1.0
    assert isinstance(b["pair"], Pair) and b["pair"].left.item() == 7
    assert b["pair"].right == ("batch of 4", 3, None)
    assert isinstance(b["np"], np.ndarray) and b["np"].tolist() == [0.0, 1.0, 2.0, 3.0]
    assert b["w"].requires_grad and b["w"].is_leaf and not b["x"].requires_grad
    (b["w"] * 2).sum().backward()
    assert b["w"].grad.tolist() == [2.0, 2.0, 2.0]
    assert isinstance(b["p"], torch.nn.Parameter) and b["p"].requires_grad
    assert b["none"] is None


# ------------------------------------------------------------ lifetime


def test_in_place_ops_on_a_batch_are_safe():
    ds = Rows(n=64)
    for b in DataLoader(ds, batch_size=4, num_workers=2, shm_slots=2):
        expect = ds.data[b["i"]].clone()
        assert torch.equal(b["x"], expect)
        b["x"].mul_(-1).add_(1)  # scribble on the slot
        assert torch.equal(b["x"], 1 - expect)
    assert ds.data[5, 0] == 5 * 256  # the dataset is untouched


def test_a_view_outlives_its_batch_and_pins_its_slot():
    ds = Rows(n=80)
    it = iter(DataLoader(ds, batch_size=4, num_workers=2, shm_slots=2))
    b = next(it)
    view = b["x"][1:3, 10:20]
    expect = view.clone()
    del b
    for b in it:  # many more batches than slots: reuse happens meanwhile
        assert torch.equal(b["x"], ds.data[b["i"]])
    assert torch.equal(view, expect)
    del it, b


def test_keeping_every_batch_falls_back_without_corruption():
    ds = Rows(n=64)
    batches = list(DataLoader(ds, batch_size=2, num_workers=2, shm_slots=2))
    assert len(batches) == 32
    for b in batches:
        assert torch.equal(b["x"], ds.data[b["i"]])
    del batches


class GrowingRows(torch.utils.data.Dataset):
    """Samples get bigger along the epoch (variable-length data)."""

    def __len__(self) -> int:
        return 24

    def __getitem__(self, i: int):
        return torch.full((1 + (i // 8) * 5000,), float(i))


def grow_collate(samples):
    return torch.cat(samples)


def test_a_batch_bigger_than_its_slot_grows_the_slot():
    ref = list(torch.utils.data.DataLoader(GrowingRows(), batch_size=4, collate_fn=grow_collate))
    loader = DataLoader(GrowingRows(), batch_size=4, num_workers=1, collate_fn=grow_collate)
    backed = []
    for got, want in zip(loader, ref):
        assert got.shape == want.shape and torch.equal(got, want)
        backed.append(slot_backed(got))
    assert len(backed) == 6 and all(backed)  # grown slots carried the bigger batches
    del got


# ----------------------------------------------------------- early stop


def test_break_leaves_nothing_in_dev_shm():
    loader = DataLoader(Rows(), batch_size=4, num_workers=2)
    for b in loader:
        break
    del b  # the slot's mapping goes with the last tensor


def test_exception_in_the_loop_leaves_nothing():
    loader = DataLoader(Rows(), batch_size=4, num_workers=2)
    with pytest.raises(KeyError):
        for b in loader:
            raise KeyError("stop")


def test_deleting_the_iterator_leaves_nothing():
    it = iter(DataLoader(Rows(), batch_size=4, num_workers=2))
    b = next(it)
    workers = list(it._workers)
    del it
    assert not any(w.is_alive() for w in workers)
    assert torch.equal(b["x"], Rows().data[:4])  # a batch kept is still valid
    del b


def test_persistent_workers_across_epochs_then_loader_deleted():
    ds = Rows(n=32)
    loader = DataLoader(ds, batch_size=4, num_workers=2, persistent_workers=True)
    for _ in range(3):
        for b in loader:
            assert torch.equal(b["x"], ds.data[b["i"]])
    for b in loader:
        break  # unread batches of this epoch are dropped by the next reset
    for b in loader:
        assert torch.equal(b["x"], ds.data[b["i"]])
    del loader, b


# ------------------------------------------------------------- failures


def no_space_in_worker(worker_id):
    import errno

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device (simulated)")

    lp.create_slot_file = full


def test_a_full_dev_shm_falls_back_to_torchs_path_with_one_warning():
    ds = Rows(n=32)
    loader = DataLoader(ds, batch_size=4, num_workers=2, worker_init_fn=no_space_in_worker)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = list(loader)
    ours = [w for w in caught if issubclass(w.category, ShmTransportWarning)]
    assert len(ours) == 1 and "/dev/shm" in str(ours[0].message)
    assert "simulated" in str(ours[0].message)
    assert len(got) == 8 and all(torch.equal(b["x"], ds.data[b["i"]]) for b in got)
    s = loader.stats()
    assert s["fallbacks"] == s["fallback_reasons"]["error"] == 8 and s["slots"] == 0
    del got


def space_for_one_slot(worker_id):
    import errno

    real = lp.create_slot_file
    made = []

    def then_full(*args, **kwargs):
        if made:
            raise OSError(errno.ENOSPC, "No space left on device (simulated)")
        made.append(1)
        return real(*args, **kwargs)

    lp.create_slot_file = then_full


def test_after_a_full_dev_shm_a_worker_keeps_reusing_the_slots_that_exist():
    ds = Rows(n=64)
    # One batch in flight: while the loop holds batch k, the worker fills
    # k + 1; the one slot is free again for k + 2 if k + 1 did not use it.
    loader = DataLoader(
        ds, batch_size=4, num_workers=1, prefetch_factor=1, worker_init_fn=space_for_one_slot
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        backed = 0
        for b in loader:
            assert torch.equal(b["x"], ds.data[b["i"]])
            backed += slot_backed(b["x"])
            del b
    ours = [w for w in caught if issubclass(w.category, ShmTransportWarning)]
    assert len(ours) == 1 and "simulated" in str(ours[0].message)
    s = loader.stats()
    assert s["slots"] == 1 and s["fresh"] == 1 and s["reused"] >= 1  # the one slot, reused
    assert s["fallbacks"] == s["fallback_reasons"]["error"] == 16 - backed
    assert backed == s["fresh"] + s["reused"]


class Crashing(Rows):
    def __getitem__(self, i: int):
        if i == 13:
            os._exit(3)
        return super().__getitem__(i)


def test_a_worker_crash_is_an_error_in_the_main_process():
    loader = DataLoader(Crashing(), batch_size=4, num_workers=2, timeout=60)
    with pytest.raises(RuntimeError, match="worker"):
        for _ in loader:
            pass


class Raising(Rows):
    def __getitem__(self, i: int):
        if i == 9:
            raise ValueError("bad sample 9")
        return super().__getitem__(i)


def test_a_worker_exception_is_reraised_in_the_main_process():
    with pytest.raises(ValueError, match="bad sample 9"):
        for _ in DataLoader(Raising(), batch_size=4, num_workers=2):
            pass


def test_a_worker_exception_leaves_the_slots_free_and_the_epoch_goes_on():
    # tests/test_loader_conformance.py compares the sequence with torch's;
    # here: the batches after the error still come through the slots.
    ds = Rows(n=32)
    it = iter(DataLoader(Raising(n=32), batch_size=4, num_workers=2))
    got, errors = [], 0
    while True:
        try:
            b = next(it)
        except StopIteration:
            break
        except ValueError:
            errors += 1
            continue
        assert torch.equal(b["x"], ds.data[b["i"]]) and slot_backed(b["x"])
        got.append(int(b["i"][0]))
        del b
    assert errors == 1 and got == [0, 4, 12, 16, 20, 24, 28]
    del it


def nonleaf_collate(samples):
    w = torch.ones(2, requires_grad=True)
    return {"x": torch.stack([s["x"] for s in samples]), "w2": w * 2}


def test_a_non_leaf_tensor_that_requires_grad_is_torchs_error_for_that_batch():
    # torch's queue refuses to pickle it with this message in the worker's
    # queue thread (the batch never comes); here it is raised for the batch.
    it = iter(DataLoader(Rows(n=8), batch_size=4, num_workers=1, collate_fn=nonleaf_collate))
    for _ in range(2):
        with pytest.raises(RuntimeError, match="Cowardly refusing to serialize non-leaf tensor"):
            next(it)
    with pytest.raises(StopIteration):
        next(it)
    del it


def test_pin_memory_true_works():
    ds = Rows(n=16)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # CPU-only torch: "no accelerator is found"
        got = list(DataLoader(ds, batch_size=4, num_workers=2, pin_memory=True))
    assert all(torch.equal(b["x"], ds.data[b["i"]]) for b in got)
    if torch.accelerator.is_available():
        assert all(b["x"].is_pinned() for b in got)
    del got


def test_the_pin_memory_thread_path_builds_the_batch_and_frees_the_slot(monkeypatch):
    # torch's pin thread calls pin_memory(item) on what the workers send;
    # for our descriptor that builds the batch from the slot, pins it (a
    # copy) and frees the slot at once. One batch in all, so that no later
    # batch of the worker can take the freed slot before it is looked at.
    ds = Rows(n=4)
    loader = DataLoader(ds, batch_size=4, num_workers=1)
    it = iter(loader)
    _, desc = it._get_data()  # the raw item from the worker queue (torch's method)
    assert isinstance(desc, _batch.Descriptor)
    if not torch.accelerator.is_available():
        monkeypatch.setattr(torch.Tensor, "pin_memory", lambda self, *a, **k: self.clone())
    b = torch.utils.data._utils.pin_memory.pin_memory(desc)
    assert torch.equal(b["x"], ds.data[:4]) and not slot_backed(b["x"])
    assert states(loader)[desc.k] == lp.FREE
    del it, b, desc, loader


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


def test_the_pool_goes_at_normal_process_exit():
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT_EXIT.format(extra=", persistent_workers=True", end="")],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    token = out.stdout.strip()
    assert len(token) == 16 and not lp.list_slot_files(token)
    assert not os.path.exists(SHM + lp._native.segment_name(lp.root_name(token)))


def test_purge_removes_the_pool_of_a_dead_loader_and_keeps_live_ones():
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT_EXIT.format(extra="", end="os._exit(0)")],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    dead = out.stdout.strip()
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


# ----------------------------------------------- dead workers, dead locks


class KillsWhileCollating(dict):
    """A sample whose collation kills the worker (after it took a slot)."""

    def __iter__(self):
        os._exit(3)


class DiesInCollate(Rows):
    def __getitem__(self, i: int):
        d = super().__getitem__(i)
        return KillsWhileCollating(d) if i == 20 else d


def test_slots_of_a_worker_that_died_holding_them_are_taken_back():
    ds = DiesInCollate(n=40)
    loader = DataLoader(ds, batch_size=4, num_workers=2, timeout=60)
    with pytest.raises(RuntimeError, match="worker"):
        for _ in loader:
            pass
    assert lp.FILLING not in states(loader)  # the dead worker's slot is free again
    ds_ok = Rows(n=40)
    loader.dataset.__class__ = Rows  # the next epoch's workers do not die
    got = list(loader)
    assert len(got) == 10 and all(torch.equal(b["x"], ds_ok.data[b["i"]]) for b in got)
    del got


def _dead_lease(pool: lp.Pool) -> int:
    """The lease of a root handle that was closed: held by nobody any more
    (docs/ABI.md, "Loader pool by lease")."""
    other = lp.PoolClient(pool.token, pool.instance_id)
    lease = other.lease
    del other  # its root handle closes: the kernel drops its lease
    assert pool.table is not None and pool.table.seg.lease_alive(lease) == 0
    return lease


def test_a_batch_whose_slot_was_reclaimed_is_an_error_not_another_batch():
    pool = lp.Pool(nslots=2, max_bytes=1 << 20)
    try:
        client = lp.PoolClient(pool.token, pool.instance_id)
        taken = client.take(1000)
        assert not isinstance(taken, str) and taken.fresh
        with pool.table.locked():  # as if a worker had died with the batch sent
            pool.table.line(taken.k)[lp._LEASE] = _dead_lease(pool)
        pool.reclaim_dead()
        again = client.take(1000)
        assert again.k == taken.k and not again.fresh and again.seq == taken.seq + 1
        with pytest.raises(RuntimeError, match="lost"):
            pool.claim(taken.k, taken.gen, taken.seq, True)
        pool.claim(again.k, again.gen, again.seq, False)  # the live one is fine
    finally:
        pool.destroy()


def _die_holding_the_pool_lock(token: str, instance_id: str) -> None:
    from shmstream.loader import _loader_pool as lp

    client = lp.PoolClient(token, instance_id)
    client.table.seg.lock()
    line = client.table.line(1)  # half-way through creating slot 1
    line[lp._STATE], line[lp._PID], line[lp._READY] = lp.FILLING, os.getpid(), 0
    line[lp._LEASE] = client.lease  # gone when this process exits
    line[lp._CAP] = 1 << 16
    client.table.words[lp._H_TOTAL] = 999_999_999
    os._exit(0)


def test_a_worker_that_died_holding_the_pool_lock_leaves_a_consistent_pool(spawn):
    pool = lp.Pool(nslots=2, max_bytes=1 << 20)
    try:
        client = lp.PoolClient(pool.token, pool.instance_id)
        taken = client.take(1000)
        client.give_back(taken)
        child = spawn(_die_holding_the_pool_lock, pool.token, pool.instance_id)
        child.join()
        s = pool.stats()  # takes the lock over and repairs the table
        assert s["slots"] == 1 and s["bytes"] == taken.capacity
        again = client.take(1000)
        assert again.k == taken.k and not again.fresh
        client.give_back(again)
    finally:
        pool.destroy()


TRUNCATED_SLOT = r"""
import os, subprocess, sys, torch
from shmstream.loader import _loader_pool as lp
from shmstream.errors import CorruptStreamError
from shmstream.torch import DataLoader

class Rows(torch.utils.data.Dataset):
    def __len__(self):
        return 32
    def __getitem__(self, i):
        return torch.full((4096,), float(i))

loader = DataLoader(Rows(), batch_size=4, num_workers=1, persistent_workers=True)
it = iter(loader)
held = next(it)
token = loader._shm_pool.token
paths = lp.list_slot_files(token)[token]
# another process truncates every slot file of the pool
subprocess.run([sys.executable, "-c", "import os, sys\nfor p in sys.argv[1:]: os.truncate(p, 0)",
                *paths], check=True)
print("held", float(held.sum()))  # its pages are gone: zeros, not a SIGBUS
got, lost = [], 0
while True:
    try:
        b = next(it)
    except StopIteration:
        break
    except CorruptStreamError as e:
        lost += 1
        assert "truncated" in str(e) or "another process" in str(e), e
        continue
    got.append(b)
ok = all(torch.equal(b[:, 0], b[:, -1]) and float(b[0, 0]) % 4 == 0 for b in got)
print("epoch1", len(got), lost, ok)
epoch2 = list(loader)
print("epoch2", len(epoch2), all(torch.equal(b, torch.stack([torch.full((4096,), float(4 * k + j))
      for j in range(4)])) for k, b in enumerate(epoch2)))
"""


def test_a_slot_file_truncated_by_another_process_costs_batches_not_the_process():
    # Another process shrinks the slot files while a batch is held and the
    # worker goes on filling slots. The held batch reads zeros (the core's
    # bus-error guard maps them), a batch whose slot was cut is reported as
    # a CorruptStreamError, the truncated slots are replaced, and the next
    # epoch is whole. Run in a child: a regression is its death by SIGBUS.
    r = subprocess.run(
        [sys.executable, "-c", TRUNCATED_SLOT],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert r.returncode == 0, (r.returncode, r.stderr[-2000:])
    lines = dict(line.split(" ", 1) for line in r.stdout.splitlines())
    assert lines["held"] == "0.0"
    n, lost, ok = lines["epoch1"].split()
    assert int(n) + int(lost) == 7 and ok == "True", lines["epoch1"]
    assert lines["epoch2"] == "8 True"


class _Interrupted(BaseException):
    """What torch's SIGCHLD handler or a Ctrl-C raises between two bytecodes."""


def test_an_exception_between_claiming_a_slot_and_leasing_it_frees_the_slot(monkeypatch):
    # The main process claims a batch's slot (HELD), then registers the
    # finalizer that frees it with the batch's last tensor. An asynchronous
    # exception between the two (here raised by that registration itself)
    # must not leave the slot HELD for the life of the loader.
    ds = Rows(n=16)
    loader = DataLoader(ds, batch_size=4, num_workers=1, persistent_workers=True)
    it = iter(loader)
    real = st.weakref.finalize
    raised = []

    def finalize_once(obj, fn, *args):
        if not raised and getattr(fn, "__name__", "") == "release":
            raised.append(args)
            raise _Interrupted
        return real(obj, fn, *args)

    monkeypatch.setattr(st.weakref, "finalize", finalize_once)
    with pytest.raises(_Interrupted):
        next(it)
    monkeypatch.setattr(st.weakref, "finalize", real)
    assert raised, "the batch never reached the lease"
    k = raised[0][0]
    assert states(loader)[k] != lp.HELD
    del it
    for b in loader:  # the next epoch has every slot to use
        assert torch.equal(b["x"], ds.data[b["i"]])
    del b
    assert lp.HELD not in states(loader)
    del loader
