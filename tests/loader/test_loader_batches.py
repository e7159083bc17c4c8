"""What a training loop gets from shmstream.torch.DataLoader: batches equal
to torch's, of every dtype and structure, aliasing reused shared-memory
slots; batches that are safe to modify, keep, outgrow their slot or drop
early; and pin_memory.

Workers are real processes (fork, torch's default here); the tests
synchronise on the loader's own batches and on child processes' exits.
Every test checks that /dev/shm holds no pool root or slot file afterwards.
"""

from __future__ import annotations

import collections
import subprocess
import sys
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import loader_cases as lc  # noqa: E402

from shmstream.loader import _batch  # noqa: E402
from shmstream.loader import _loader_pool as lp  # noqa: E402
from shmstream.torch import DataLoader  # noqa: E402

from loader_util import (  # noqa: E402
    GrowingRows,
    Rows,
    first,
    grow_collate,
    list_of_samples,
    slot_backed,
    states,
)

# The pools this module's loaders make are gone when each test ends (conftest.py).
pytestmark = pytest.mark.usefixtures("no_loader_pool_left")


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


# ------------------------------------------------------------ pin_memory


def test_pin_memory_true_works():
    ds = Rows(n=16)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # CPU-only torch: "no accelerator is found"
        got = list(DataLoader(ds, batch_size=4, num_workers=2, pin_memory=True))
    assert all(torch.equal(b["x"], ds.data[b["i"]]) for b in got)
    if lc.accelerator_available():
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
    if not lc.accelerator_available():
        monkeypatch.setattr(torch.Tensor, "pin_memory", lambda self, *a, **k: self.clone())
    b = torch.utils.data._utils.pin_memory.pin_memory(desc)
    assert torch.equal(b["x"], ds.data[:4]) and not slot_backed(b["x"])
    assert states(loader)[desc.k] == lp.FREE
    del it, b, desc, loader
