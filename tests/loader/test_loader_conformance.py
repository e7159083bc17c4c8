"""shmstream.torch.DataLoader behaves as torch.utils.data.DataLoader.

Every scenario runs once with torch's loader and once with ours (the
``kind`` parameter) and must give the same observable result: the batches
(types, dtypes, shapes, strides, grad flags, values) in the same order, the
errors (type, first and last line of the message), the warnings, the
workers' exit codes, and what code outside torch reads from the iterator.
A scenario also asserts what torch's documentation promises (the spec),
for both loaders; ours is then compared with torch's result of the same
run. Nothing here depends on timing: waits are on the loaders' own
batches, errors and process exits.

The datasets and collate functions live in tests/loader_cases.py, where
spawn and forkserver workers can import them. docs/loader.md lists the
differences that remain (each with its reason); the only one visible here
is our ShmTransportWarning when /dev/shm is full.
"""

from __future__ import annotations

import dataclasses
import gc
import json
import multiprocessing as mp
import textwrap
import typing
import warnings
from collections.abc import Callable
from typing import Any

import pytest

torch = pytest.importorskip("torch")

import loader_cases as lc  # noqa: E402
from torch.utils.data.dataloader import (  # noqa: E402
    _MultiProcessingDataLoaderIter,
    _SingleProcessDataLoaderIter,
)

import shmstream.torch as st  # noqa: E402
from shmstream.loader import _pool_client  # noqa: E402  (the worker side makes slot files)

from support import TESTS_DIR, private_shm_available, run_in_private_shm  # noqa: E402

pytestmark = pytest.mark.usefixtures("no_loader_pool_left")

KINDS: dict[str, Any] = {"torch": torch.utils.data.DataLoader, "shmstream": st.DataLoader}
#: Scenarios where ours, and only ours, adds one ShmTransportWarning.
OURS_WARN: set[str] = set()
SCENARIOS: dict[str, Callable[[Any], Any]] = {}


def scenario(fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
    SCENARIOS[fn.__name__] = fn
    return fn


def drain(it: Any, stop_on_error: bool = False, limit: int = 100) -> list:
    """Every next(it) until StopIteration: each batch described, each error
    recorded and (like torch) the iteration continued unless told to stop."""
    out: list = []
    for _ in range(limit):
        try:
            b = next(it)
        except StopIteration:
            return out
        except Exception as exc:  # noqa: BLE001 - the error is the result
            out.append(("error", lc.error(exc)))
            if stop_on_error:
                return out
            continue
        out.append(("batch", lc.describe(b)))
        del b
    raise AssertionError(f"more than {limit} batches")


def values(batch: Any, key: str) -> Any:
    """The values of tensor ``key`` in a described dict batch."""
    return dict(batch[1])[key][-1]


def single_process(ds: Any, **kwargs: Any) -> list:
    """What torch's loader gives without workers: the spec of the batches."""
    return [("batch", lc.describe(b)) for b in torch.utils.data.DataLoader(ds, **kwargs)]


def exits(workers: list) -> list:
    """The workers' exit codes once they are joined (torch joins them at
    shutdown; join again to be independent of that)."""
    for w in workers:
        w.join(30)
    return [w.exitcode for w in workers]


# --------------------------------------------------------- datasets, sampling


@scenario
def map_style(DL: Any) -> Any:
    ds = lc.Rows(10)
    it = iter(DL(ds, batch_size=4, num_workers=2))
    got = drain(it)
    assert got == single_process(ds, batch_size=4)
    assert it._shutdown  # the epoch's end shuts the workers down
    return got, exits(it._workers)


@scenario
def iterable_sharded_by_worker_info(DL: Any) -> Any:
    g = torch.Generator().manual_seed(3)
    it = iter(DL(lc.Sharded(10), batch_size=3, num_workers=2, generator=g))
    got = drain(it)
    workers_seen = {w for _, b in got for w in values(b, "worker")}
    assert workers_seen == {0, 1}
    return got, exits(it._workers)


@scenario
def sampler_list(DL: Any) -> Any:
    ds = lc.Rows(10)
    got = drain(iter(DL(ds, batch_size=2, sampler=[7, 2, 5, 0, 9], num_workers=2)))
    assert got == single_process(ds, batch_size=2, sampler=[7, 2, 5, 0, 9])
    return got


@scenario
def batch_sampler_list(DL: Any) -> Any:
    ds, bs = lc.Rows(10), [[3, 1], [0], [8, 9, 4]]
    got = drain(iter(DL(ds, batch_sampler=bs, num_workers=2)))
    assert got == single_process(ds, batch_sampler=bs)
    return got


@scenario
def batch_size_none(DL: Any) -> Any:
    ds = lc.Rows(5)
    got = drain(iter(DL(ds, batch_size=None, num_workers=2)))
    assert got == single_process(ds, batch_size=None)
    return got


@scenario
def drop_last(DL: Any) -> Any:
    ds = lc.Rows(10)
    loader = DL(ds, batch_size=4, drop_last=True, num_workers=2)
    got = drain(iter(loader))
    assert got == single_process(ds, batch_size=4, drop_last=True) and len(got) == len(loader) == 2
    return got


@scenario
def shuffle_with_generator(DL: Any) -> Any:
    ds = lc.Rows(10)
    loader = DL(
        ds, batch_size=3, shuffle=True, num_workers=2, generator=torch.Generator().manual_seed(7)
    )
    epochs = [drain(iter(loader)) for _ in range(2)]
    assert epochs[0] == single_process(
        ds, batch_size=3, shuffle=True, generator=torch.Generator().manual_seed(7)
    )
    assert epochs[0] != epochs[1]  # the generator moved on
    return epochs


@scenario
def worker_init_fn_and_seeds(DL: Any) -> Any:
    loader = DL(
        lc.Tagged(6),
        batch_size=2,
        num_workers=2,
        worker_init_fn=lc.tag_worker,
        generator=torch.Generator().manual_seed(11),
    )
    got = drain(iter(loader))
    tags = [values(b, "tag") for _, b in got]
    assert tags == [[100, 100], [101, 101], [100, 100]]
    return got


@scenario
def prefetch_factor(DL: Any) -> Any:
    it = iter(DL(lc.Rows(12), batch_size=1, num_workers=2, prefetch_factor=3))
    primed = (it._prefetch_factor, it._tasks_outstanding, it._send_idx)
    assert primed == (3, 6, 6)
    return primed, drain(it)


@scenario
def persistent_workers(DL: Any) -> Any:
    ds = lc.Rows(8)
    loader = DL(ds, batch_size=2, num_workers=2, persistent_workers=True)
    it1 = iter(loader)
    first = drain(it1)
    pids = [w.pid for w in it1._workers]
    it2 = iter(loader)
    same = (
        it2 is it1,
        loader._iterator is it1,
        [w.pid for w in it2._workers] == pids,
        all(w.is_alive() for w in it2._workers),
    )
    assert same == (True, True, True, True)
    b = next(it2)  # the rest of this epoch is dropped by the next reset
    again = drain(iter(loader))
    assert first == again == single_process(ds, batch_size=2)
    workers = list(it1._workers)
    del loader, it1, it2, b
    gc.collect()
    return first, same, exits(workers)


@scenario
def timeout_not_reached(DL: Any) -> Any:
    ds = lc.Rows(6)
    got = drain(iter(DL(ds, batch_size=2, num_workers=2, timeout=120)))
    assert got == single_process(ds, batch_size=2)
    return got


@scenario
def timeout_expires(DL: Any) -> Any:
    ctx = mp.get_context("fork")
    release = ctx.Event()  # sample 0 never comes until set: the timeout must expire
    it = iter(
        DL(
            lc.Blocking(release),
            batch_size=2,
            num_workers=1,
            timeout=0.5,
            multiprocessing_context=ctx,
        )
    )
    got = drain(it, stop_on_error=True)
    assert got == [
        (
            "error",
            (
                "RuntimeError",
                "DataLoader timed out after 0.5 seconds",
                "DataLoader timed out after 0.5 seconds",
            ),
        )
    ]
    release.set()
    workers = list(it._workers)
    del it
    gc.collect()
    return got, exits(workers)


def _contexts(DL: Any, method: str) -> Any:
    # forkserver's first worker starts its server too: one worker is enough there
    nw = 1 if method == "forkserver" else 2
    loader = DL(
        lc.Tagged(6),
        batch_size=2,
        num_workers=nw,
        worker_init_fn=lc.tag_worker,
        multiprocessing_context=method,
        generator=torch.Generator().manual_seed(5),
    )
    it = iter(loader)
    got = drain(it)
    return got, exits(it._workers)


for _method in ("fork", "spawn", "forkserver"):

    def _ctx(DL: Any, method: str = _method) -> Any:
        return _contexts(DL, method)

    _ctx.__name__ = f"multiprocessing_context_{_method}"
    scenario(_ctx)


@scenario
def in_order_false(DL: Any) -> Any:
    if not lc.HAS_IN_ORDER:
        pytest.skip(lc.NO_IN_ORDER)
    ds = lc.Rows(12)
    got = drain(iter(DL(ds, batch_size=2, num_workers=2, in_order=False)))
    got.sort(key=lambda r: values(r[1], "i"))
    assert got == single_process(ds, batch_size=2)
    return got


# ------------------------------------------------------------- what batches hold


@scenario
def collate_fn_returning_no_tensors(DL: Any) -> Any:
    ds = lc.Rows(7)
    got = drain(iter(DL(ds, batch_size=3, num_workers=2, collate_fn=lc.to_text)))
    assert got == single_process(ds, batch_size=3, collate_fn=lc.to_text)
    return got


@scenario
def tensors_aliasing_each_other(DL: Any) -> Any:
    b = next(iter(DL(lc.Rows(4), batch_size=3, num_workers=1, collate_fn=lc.aliasing)))
    desc = lc.describe(b)
    same_object = b["same"] is b["x"]
    b["x"][1, 0] = -1.0  # seen through the slice and the transpose if they alias x
    seen = (float(b["rows"][0, 0]), float(b["t"][0, 1]))
    return desc, same_object, seen


@scenario
def empty_zero_d_numpy_and_bools(DL: Any) -> Any:
    ds = lc.Odd()
    got = [
        drain(iter(DL(ds, batch_size=4, num_workers=2, **kw)))
        for kw in ({}, {"collate_fn": lc.as_list})
    ]
    assert got == [
        single_process(ds, batch_size=4),
        single_process(ds, batch_size=4, collate_fn=lc.as_list),
    ]
    return got


@scenario
def requires_grad_with_the_default_collate(DL: Any) -> Any:
    # torch's collate stacks into shared memory with out=, which autograd refuses
    got = drain(iter(DL(lc.Grad(), batch_size=2, num_workers=1)))
    assert [kind for kind, _ in got] == ["error", "error"]
    return got


@scenario
def requires_grad_with_a_custom_collate(DL: Any) -> Any:
    got = drain(iter(DL(lc.Rows(4), batch_size=2, num_workers=1, collate_fn=lc.with_grad)))
    w = dict(got[0][1][1])["w"]
    assert w[0] == "Tensor" and w[4:6] == (True, True)  # a leaf that requires grad
    return got


@scenario
def nested_tensors_with_the_default_collate(DL: Any) -> Any:
    got = drain(iter(DL(lc.Nested(), batch_size=2, num_workers=1)))
    assert got[0][1][2].startswith("RuntimeError: Batches of nested tensors are not currently")
    return got


@scenario
def nested_tensors_without_batching(DL: Any) -> Any:
    got = drain(iter(DL(lc.Nested(), batch_size=None, num_workers=1)))
    assert got == single_process(lc.Nested(), batch_size=None)
    return got


# ------------------------------------------------------------ failures, stops


@scenario
def a_worker_raises_and_the_epoch_goes_on(DL: Any) -> Any:
    it = iter(DL(lc.Failing(12, bad=(5,)), batch_size=2, num_workers=2))
    got = drain(it)
    good = single_process(lc.Rows(12), batch_size=2)
    bad = (
        "error",
        (
            "ValueError",
            "Caught ValueError in DataLoader worker process 0.",
            "ValueError: bad sample 5",
        ),
    )
    assert got == [*good[:2], bad, *good[3:]]  # the batches after it come, as torch's do
    return got, exits(it._workers)


@scenario
def a_worker_raises_with_persistent_workers(DL: Any) -> Any:
    # One worker: after a worker's exception, torch's persistent workers each
    # take its status-check interval (5 s) to exit at shutdown.
    loader = DL(lc.Failing(8, bad=(3,)), batch_size=2, num_workers=1, persistent_workers=True)
    epochs = [drain(iter(loader)) for _ in range(2)]
    assert epochs[0] == epochs[1] and [k for k, _ in epochs[0]] == [
        "batch",
        "error",
        "batch",
        "batch",
    ]
    workers = list(loader._iterator._workers)
    del loader
    gc.collect()
    return epochs, exits(workers)


def _killed(DL: Any, how: str) -> Any:
    """The one worker dies on sample 2, the first of batch 1. With
    ``prefetch_factor=1`` batch 1's index is sent only once batch 0 has
    reached the main process, so the death cannot come during ``iter()``;
    batch 0 holds no tensor, so no file descriptor of a dead worker is left
    to fetch (torch's path would race with the death there). Torch's SIGCHLD
    handler raises wherever the main thread is when the signal comes: in
    ``next()`` or in the loop's body, both inside the ``try`` below."""
    it = iter(
        DL(
            lc.Failing(6, bad=(2,), how=how),
            batch_size=2,
            num_workers=1,
            prefetch_factor=1,
            collate_fn=lc.to_text,
        )
    )
    got, error = [], None
    while error is None:
        try:
            got.append(lc.describe(next(it)))
        except RuntimeError as exc:
            # Not the exception itself: its traceback holds the iterator.
            error = (type(exc).__name__, lc.killed_by(exc))
    good = [b for _, b in single_process(lc.Rows(6), batch_size=2, collate_fn=lc.to_text)]
    assert got == good[: len(got)] and len(got) <= 1  # batch 0, if it came before the signal
    workers = list(it._workers)
    # torch's shutdown unregisters the workers' pids from its SIGCHLD
    # handler; done here, not left to garbage collection, so that no later
    # test meets a dead registered worker.
    it._shutdown_workers()
    del it
    return (*error, exits(workers))


@scenario
def a_worker_segfaults(DL: Any) -> Any:
    got = _killed(DL, "segfault")
    assert got == ("RuntimeError", "Segmentation fault", [-11])
    return got


@scenario
def a_worker_is_killed_by_sigkill(DL: Any) -> Any:
    got = _killed(DL, "sigkill")
    assert got == ("RuntimeError", "Killed", [-9])
    return got


@scenario
def breaking_out_of_an_epoch(DL: Any) -> Any:
    ds = lc.Rows(10)
    loader = DL(ds, batch_size=2, num_workers=2)
    for b in loader:  # noqa: B007 - the batch is kept after the loop
        break
    first = lc.describe(b)
    del b
    again = drain(iter(loader))
    assert again == single_process(ds, batch_size=2) and first == again[0][1]
    return first, again


@scenario
def del_of_a_live_iterator(DL: Any) -> Any:
    it = iter(DL(lc.Rows(20), batch_size=2, num_workers=2))
    b = lc.describe(next(it))
    workers = list(it._workers)
    del it  # workers are told to stop and joined
    gc.collect()
    return b, exits(workers)


@scenario
def pin_memory_without_an_accelerator(DL: Any) -> Any:
    if lc.accelerator_available():
        pytest.skip(
            "this machine has an accelerator: pinning happens (tests/loader/test_loader_batches.py)"
        )
    ds = lc.Rows(6)
    got = drain(iter(DL(ds, batch_size=2, num_workers=2, pin_memory=True)))
    assert got == single_process(ds, batch_size=2)
    return got


# ------------------------------------------ what code outside torch relies on


@scenario
def the_iterator_is_torchs(DL: Any) -> Any:
    loader = DL(lc.Rows(4), batch_size=2, num_workers=2)
    it = iter(loader)
    multi = (
        isinstance(it, _MultiProcessingDataLoaderIter),
        len(it),
        sorted(k for k in dir(it) if not k.startswith("_shm")),
        len(it._workers),
        [w.is_alive() for w in it._workers],
    )
    drain(it)
    single = type(iter(DL(lc.Rows(4), batch_size=2))) is _SingleProcessDataLoaderIter
    return multi, single, loader.collate_fn is torch.utils.data.default_collate


@scenario
def the_loader_is_generic(DL: Any) -> Any:
    @dataclasses.dataclass
    class Config:
        loader: DL[torch.Tensor]  # type: ignore[valid-type]

    hint = typing.get_type_hints(Config, localns={"DL": DL})["loader"]
    return typing.get_origin(hint) is DL, typing.get_args(hint) == (torch.Tensor,)


def _no_room_for_slots(worker_id: int) -> None:
    """worker_init_fn: this worker's slot files fail as on a full /dev/shm
    (a no-op for torch's loader, which has no slots)."""
    import errno

    def full(*args: Any, **kwargs: Any) -> Any:
        raise OSError(errno.ENOSPC, "No space left on device")

    _pool_client.create_slot_file = full


@scenario
def no_room_for_slots_in_dev_shm(DL: Any) -> Any:
    ds = lc.Rows(8)
    got = drain(iter(DL(ds, batch_size=2, num_workers=2, worker_init_fn=_no_room_for_slots)))
    assert got == single_process(ds, batch_size=2)
    return got


OURS_WARN.add("no_room_for_slots_in_dev_shm")


# --------------------------------------------------------------------- the test

_results: dict[tuple[str, str], Any] = {}


def observe(kind: str, name: str) -> dict[str, Any]:
    """The scenario's result with this kind of loader and the warnings it
    gave (once per run: ours is compared with torch's of the same run)."""
    if (kind, name) not in _results:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result = SCENARIOS[name](KINDS[kind])
            gc.collect()
        _results[kind, name] = {
            "result": result,
            # C++ warnings that torch gives once per process (nested tensors'
            # "prototype stage") come with whichever loader runs first
            "warnings": [
                (w.category.__name__, str(w.message))
                for w in caught
                if "Triggered internally" not in str(w.message)
            ],
        }
    return _results[kind, name]


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("name", list(SCENARIOS))
def test_the_same_result_as_torchs_loader(name: str, kind: str) -> None:
    got = observe(kind, name)
    if kind == "torch":
        return  # the scenario's own assertions are torch's spec
    want = observe("torch", name)
    assert got["result"] == want["result"]
    ours = [w for w in got["warnings"] if w[0] == "ShmTransportWarning"]
    assert [w for w in got["warnings"] if w[0] != "ShmTransportWarning"] == want["warnings"]
    assert len(ours) == (name in OURS_WARN)


_FULL_SHM = """
import json, sys, warnings
sys.path.insert(0, {tests!r})
import torch
import loader_cases as lc
if {ours!r}:
    from shmstream.torch import DataLoader
else:
    from torch.utils.data import DataLoader
with open("/dev/shm/filler", "wb", buffering=0) as f:  # fill the private tmpfs to the last byte
    try:
        while True:
            f.write(bytes(4096))
            f.flush()
    except OSError:
        pass
out = []
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    try:
        out.append(["batches", len(list(DataLoader(lc.Rows(6), batch_size=2, num_workers=1)))])
    except Exception as exc:
        out.append(["error", list(lc.error(exc))])
out.append(sorted({{w.category.__name__ for w in caught}}))
print(json.dumps(out))
"""


@pytest.mark.root
@pytest.mark.parametrize("kind", list(KINDS))
def test_a_full_dev_shm_gives_torchs_error_and_ours_warns_first(kind: str) -> None:
    """A /dev/shm without a free byte (a private tmpfs): torch's loader
    cannot even make its worker queues (their semaphores live there); ours
    warns that it could not make its slot pool, falls back to torch's path
    and gives torch's error."""
    reason = private_shm_available()
    if reason:
        pytest.skip(reason)
    script = _FULL_SHM.format(tests=TESTS_DIR, ours=kind == "shmstream")
    proc = run_in_private_shm(textwrap.dedent(script), size="1m")
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got[0] == [
        "error",
        ["OSError", "[Errno 28] No space left on device", "[Errno 28] No space left on device"],
    ]
    assert got[1] == (["ShmTransportWarning"] if kind == "shmstream" else [])
