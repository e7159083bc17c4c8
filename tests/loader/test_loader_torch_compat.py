"""The torch releases shmstream.torch.DataLoader supports, and the one place
(``shmstream.loader._torch_compat``) that tells their private iterators
apart: each shape of torch's ``_process_data`` gets the override that fits
it, checked here against fake iterator classes of every shape (no other
torch needed); a torch outside 2.4-2.14, or an iterator of a shape not in
the table, is refused at the loader's construction with
``ExtraVersionError``, never a ``TypeError`` from torch's insides.

The tests that need torch check the table against the installed torch:
tools/torch_matrix.sh runs this file (with the other loader tests) on the
oldest and newest supported releases, so the table is held by each.
"""

from __future__ import annotations

import inspect
import re
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path
from typing import Any

import pytest

from shmstream.errors import ExtraVersionError, ShmstreamError
from shmstream.loader import _torch_compat as tc

ROOT = Path(__file__).resolve().parents[2]


class FakeLoader:
    def _get_iterator(self) -> None: ...

    def check_worker_number_rationality(self) -> None: ...


class IterUpTo26:
    """torch 2.4-2.6's iterator: _process_data(self, data)."""

    def _next_data(self) -> None: ...

    def _shutdown_workers(self) -> None: ...

    def _process_data(self, data: Any) -> Any:
        return ("torch's", data)


class IterFrom27(IterUpTo26):
    """torch 2.7-2.14's: _process_data(self, data, worker_idx)."""

    def _process_data(self, data: Any, worker_idx: int) -> Any:  # type: ignore[override]
        return ("torch's", data, worker_idx)


def unwrap(result: Any) -> Any:
    return ("unwrapped", result)


def subclass(base: type, support: tc.Support) -> Any:
    """What shmstream.torch does: the override as the subclass's method."""
    return type("ShmIter", (base,), {"_process_data": support.process_data})()


def test_each_shape_of_process_data_gets_the_override_that_passes_its_arguments_on():
    one = tc.check("2.6.0+cu124", FakeLoader, IterUpTo26, unwrap)
    two = tc.check("2.7.0", FakeLoader, IterFrom27, unwrap)
    assert one.problem is None and two.problem is None
    assert subclass(IterUpTo26, one)._process_data("d") == ("unwrapped", ("torch's", "d"))
    assert subclass(IterFrom27, two)._process_data("d", 3) == ("unwrapped", ("torch's", "d", 3))
    # the override has the base's own parameters, so torch's call (by
    # position) fits it and a wrong call is the same TypeError as torch's
    with pytest.raises(TypeError, match="worker_idx"):
        subclass(IterFrom27, two)._process_data("d")


def test_the_override_follows_the_iterators_signature_not_its_version_string():
    # a vendor's 2.6 with 2.7's change backported, a nightly whose version
    # string says little: the code that runs decides
    support = tc.check("2.6.0+vendor", FakeLoader, IterFrom27, unwrap)
    assert subclass(IterFrom27, support)._process_data("d", 1) == ("unwrapped", ("torch's", "d", 1))
    support = tc.check("2.14.0a0+git1234", FakeLoader, IterUpTo26, unwrap)
    assert subclass(IterUpTo26, support)._process_data("d") == ("unwrapped", ("torch's", "d"))


@pytest.mark.parametrize(
    "version", ["2.3.1", "2.15.0", "1.13.1", "3.0.0", "2.15.0.dev20260101", ""]
)
def test_a_torch_outside_the_range_is_refused_naming_its_version_and_the_range(version: str):
    support = tc.check(version, FakeLoader, IterFrom27, unwrap)
    with pytest.raises(ExtraVersionError) as info:
        support.require()
    msg = str(info.value)
    assert f"torch {version} is installed" in msg and "torch>=2.4,<2.15" in msg
    assert isinstance(info.value, ShmstreamError) and not isinstance(info.value, TypeError)
    # the stand-in override (never reached: construction raises first) says the same
    with pytest.raises(ExtraVersionError, match=re.escape(msg)):
        subclass(IterFrom27, support)._process_data("d", 0)


class IterWithExtra(IterUpTo26):
    def _process_data(self, data: Any, worker_idx: int, extra: int) -> Any:  # type: ignore[override]
        return data


class IterWithStar(IterUpTo26):
    def _process_data(self, *args: Any) -> Any:  # type: ignore[override]
        return args


class IterKeywordOnly(IterUpTo26):
    def _process_data(self, data: Any, *, worker_idx: int) -> Any:  # type: ignore[override]
        return data


@pytest.mark.parametrize(
    ("base", "shown"),
    [
        (IterWithExtra, "takes (self, data, worker_idx, extra)"),
        (IterWithStar, "takes an unknown signature"),
        (IterKeywordOnly, "takes an unknown signature"),
    ],
)
def test_an_iterator_of_an_unknown_shape_is_refused_in_range_too(base: type, shown: str):
    support = tc.check("2.10.0", FakeLoader, base, unwrap)
    with pytest.raises(ExtraVersionError) as info:
        support.require()
    assert f"_process_data {shown}, which shmstream.torch.DataLoader does not know" in str(
        info.value
    )
    assert "torch>=2.4,<2.15" in str(info.value)


def test_an_iterator_or_loader_without_a_hook_the_loader_uses_is_refused():
    class NoShutdown:
        def _next_data(self) -> None: ...

        def _process_data(self, data: Any) -> Any: ...

    class NoIterator:
        def check_worker_number_rationality(self) -> None: ...

    msg = tc.check("2.5.1", NoIterator, NoShutdown, unwrap).problem
    assert msg is not None
    assert "has no NoIterator._get_iterator, NoShutdown._shutdown_workers" in msg


def test_the_table_covers_the_supported_range_oldest_first():
    first, below = tc.SUPPORTED
    assert [s.since for s in tc.PROCESS_DATA] == sorted(s.since for s in tc.PROCESS_DATA)
    assert tc.PROCESS_DATA[0].since == first
    assert tc.shape_for((2, 3)) is None and tc.shape_for(below) is None
    assert tc.shape_for((2, 4)).params == tc.shape_for((2, 6)).params == ("data",)  # type: ignore[union-attr]
    assert tc.shape_for((2, 7)).params == tc.shape_for((2, 14)).params == ("data", "worker_idx")  # type: ignore[union-attr]
    assert tc.release("2.6.0+cu124") == (2, 6) and tc.release("2.15.0a0+git") == (2, 15)
    assert tc.release("nightly") is None


def test_the_extra_and_the_docs_state_the_supported_range():
    first, below = tc.SUPPORTED
    spec = f"torch>={first[0]}.{first[1]},<{below[0]}.{below[1]}"
    assert spec in tc.SUPPORTED_TEXT
    pyproject = (ROOT / "pyproject.toml").read_text()
    extra = re.search(r"^torch = \[(.*)\]$", pyproject, re.M)
    assert extra is not None and extra.group(1) == f'"{spec}"'
    assert spec in (ROOT / "docs" / "loader.md").read_text()


def _load_from_bytes(b: bytes) -> bytes:  # the name of torch's storage loader
    return b


def _other(b: bytes) -> bytes:
    return b


def test_a_storage_pickled_by_value_is_loaded_back_by_load_storage():
    class TorchsStorage:
        def __reduce__(self) -> Any:
            return (_load_from_bytes, (b"saved",))

    class OtherStorage:
        def __reduce__(self) -> Any:
            return (_other, (b"saved",))

    assert tc.reduce_storage(TorchsStorage()) == (tc.load_storage, (b"saved",))
    assert tc.reduce_storage(OtherStorage()) == (_other, (b"saved",))  # left as it is


# ---------------------------------------------------- the installed torch


def test_a_storage_loads_back_without_torch_2_4s_futurewarning():
    # torch 2.4 and 2.5's own loader of a pickled storage warns (torch.load
    # without weights_only) where torch's DataLoader gives no warning
    torch = pytest.importorskip("torch")
    # a typed storage, as a nested tensor's pickle holds (torch 2.4 cannot
    # load an untyped one saved this way back at all, by its own loader too)
    storage = torch.arange(4, dtype=torch.float32)._typed_storage()
    fn, args = tc.reduce_storage(storage)
    assert fn is tc.load_storage
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        back = fn(*args)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "TypedStorage is deprecated"
        assert back.tolist() == storage.tolist() == [0.0, 1.0, 2.0, 3.0]


def test_the_table_holds_for_the_installed_torch():
    torch = pytest.importorskip("torch")
    from torch.utils.data.dataloader import _MultiProcessingDataLoaderIter

    import shmstream.loader.torch as st

    rel = tc.release(torch.__version__)
    assert rel is not None and tc.SUPPORTED[0] <= rel < tc.SUPPORTED[1], torch.__version__
    row = tc.shape_for(rel)
    assert row is not None
    real = tc.check(
        torch.__version__, torch.utils.data.DataLoader, _MultiProcessingDataLoaderIter, unwrap
    )
    assert real.problem is None and st._TORCH.problem is None
    params = tuple(inspect.signature(_MultiProcessingDataLoaderIter._process_data).parameters)[1:]
    assert params == row.params, f"torch {torch.__version__}: the table says {row.params}"
    assert tuple(inspect.signature(st._ShmIter._process_data).parameters)[1:] == row.params


_FAKE_RELEASE = """
import torch
torch.__version__ = {version!r}  # before shmstream.torch reads it
{patch}
import shmstream.torch as st
from shmstream.errors import ExtraVersionError
try:
    st.DataLoader(list(range(4)), batch_size=2, num_workers={workers})
except ExtraVersionError as exc:
    print("refused:", exc)
else:
    print("built")
"""


def _construct(version: str, workers: int = 2, patch: str = "") -> str:
    pytest.importorskip("torch")
    script = _FAKE_RELEASE.format(version=version, workers=workers, patch=patch)
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


@pytest.mark.parametrize("workers", [0, 2])
def test_the_loader_refuses_an_unsupported_torch_at_construction(workers: int):
    out = _construct("2.3.1", workers)
    assert out.startswith("refused: torch 2.3.1 is installed. shmstream.torch.DataLoader supports")
    assert "torch>=2.4,<2.15" in out and "torch.utils.data.DataLoader" in out


def test_the_loader_refuses_an_iterator_whose_process_data_it_does_not_know():
    patch = (
        "from torch.utils.data.dataloader import _MultiProcessingDataLoaderIter as It\n"
        "It._process_data = lambda self, data, worker_idx, new: data"
    )
    out = _construct("2.14.1", patch=patch)
    assert out.startswith("refused: torch 2.14.1's _MultiProcessingDataLoaderIter._process_data")
    assert "(self, data, worker_idx, new)" in out
