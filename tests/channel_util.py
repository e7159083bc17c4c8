"""Shared pieces of the channel tests: unique names that are always removed,
spawned children, and the /dev/shm leftover check."""
from __future__ import annotations

import multiprocessing as mp
import os
import uuid

import numpy as np
import pytest

import shmstream
from shmstream import _native

SPAWN = mp.get_context("spawn")
PREFIX = "test-chan-"


def new_name() -> str:
    return f"{PREFIX}{os.getpid()}-{uuid.uuid4().hex[:10]}"


def segfile(name: str) -> str:
    return "/dev/shm" + _native.segment_name(name)


def leftovers() -> list[str]:
    return [f for f in os.listdir("/dev/shm") if f.startswith("shmstream-" + PREFIX)]


def cleanup(name: str) -> None:
    shmstream.unlink_channel(name)


def pattern(i: int, size: int) -> bytes:
    """Message i of a test stream: byte j is (i + j) & 255 (the C examples' pattern)."""
    return ((np.arange(size, dtype=np.int64) + i) & 255).astype(np.uint8).tobytes()


@pytest.fixture
def name():
    """A fresh channel name, removed after the test whatever happened."""
    n = new_name()
    yield n
    cleanup(n)


@pytest.fixture(scope="module", autouse=True)
def no_leftovers():
    """Every test module leaves /dev/shm as it found it."""
    before = set(leftovers())
    yield
    assert set(leftovers()) - before == set()
