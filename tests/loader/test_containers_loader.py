"""DataLoader slot pools between PID namespaces that share /dev/shm
(docs/containers.md, docs/ABI.md "Loader pool by lease"): each side runs as
pid 1 of its own namespace (``unshare --pid --fork --mount-proc``).

A pool names its workers by the leases of their root handles and its owner
by the creator's lease: a worker in another namespace takes slots and is
never taken for dead while it lives (although it is pid 1 there), a worker
SIGKILLed there has its slot reclaimed here, its lock taken over, and
``stat``/``purge`` from a third namespace remove a pool only when neither
its loader nor any worker has it open. Skipped where ``unshare --pid`` is
not permitted."""

from __future__ import annotations

import contextlib
import os

import pytest

import shmstream
from shmstream import _native
from shmstream.loader import _loader_pool as lp

import support

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="unshare --pid needs root (or a user namespace)"
)

# A worker in its own namespace: opens the pool, takes a slot, says which.
_WORKER = """
    from shmstream.loader import _loader_pool as lp
    c = lp.PoolClient({token!r}, {iid!r})
    t = c.take(1000)
    say("took", t.k, int(t.fresh))
    while (line := hear()) == "lock":
        c.table.seg.lock()
        say("locked")
    hear()  # until killed
"""


def _line(pool: lp.Pool, k: int) -> list[int]:
    assert pool.table is not None
    with pool.table.locked():
        return [int(v) for v in pool.table.line(k)]


def _remove_pool(token: str) -> None:
    """Remove what a pool made in a killed namespace left."""
    for path in lp.list_slot_files(token).get(token, []):
        lp.unlink_quiet(path)
    with contextlib.suppress(OSError):
        _native.unlink_segname(_native.segment_name(lp.root_name(token)))


def test_a_worker_in_another_namespace_is_judged_by_its_lease_and_its_slot_reclaimed(children):
    pool = lp.Pool(nslots=2, max_bytes=1 << 20)
    assert pool.table is not None, pool.broken
    try:
        w = children(_WORKER.format(token=pool.token, iid=pool.instance_id))
        k, fresh = (int(v) for v in w.expect("took").split())
        assert fresh == 1
        line = _line(pool, k)
        assert line[lp.STATE] == lp.FILLING and line[lp.PID] == 1  # pid 1 there: humans only
        # Alive in its namespace (its pid, 1, is this namespace's init too):
        # its lease is held, so its slot stays FILLING.
        pool.reclaim_dead()
        assert _line(pool, k)[lp.STATE] == lp.FILLING
        w.kill()
        pool.reclaim_dead()  # its lease is gone: the complete slot is FREE again
        assert _line(pool, k)[lp.STATE] == lp.FREE
        client = lp.PoolClient(pool.token, pool.instance_id)
        again = client.take(1000)
        assert not isinstance(again, str) and again.k == k and not again.fresh
        assert pool.stats()["slots"] == 1
        assert int(pool.table.seg.layout_version) == _native.LAYOUT_VERSION_LOADER_POOL
    finally:
        pool.destroy()


def test_a_worker_killed_holding_the_pool_lock_in_another_namespace_is_taken_over(children):
    pool = lp.Pool(nslots=2, max_bytes=1 << 20)
    assert pool.table is not None, pool.broken
    try:
        w = children(_WORKER.format(token=pool.token, iid=pool.instance_id))
        k = int(w.expect("took").split()[0])
        w.tell("lock")
        w.expect("locked")
        # Held by a live pid 1 of another namespace: not ours, not taken over.
        with pytest.raises(TimeoutError):
            pool.table.seg.lock(timeout=0.0)
        w.kill()
        # The holder's lease is gone: the lock is taken over (True) and the
        # table repaired, the dead worker's slot reclaimed.
        assert pool.table.seg.lock(timeout=support.WAIT) is True
        pool.table.seg.unlock()
        pool.reclaim_dead()
        assert _line(pool, k)[lp.STATE] == lp.FREE
    finally:
        pool.destroy()


# purge of loader pools sweeps every dead pool in /dev/shm (other tests')
@pytest.mark.serial
def test_stat_and_purge_from_a_third_namespace_remove_a_pool_only_when_abandoned(children):
    owner = children("""
        import numpy as np
        from shmstream.loader import _loader_pool as lp
        p = lp.Pool(nslots=2, max_bytes=1 << 20)
        c = lp.PoolClient(p.token, p.instance_id)
        t = c.take(1000)  # a slot file exists
        c.give_back(t)
        say("pool", p.token, p.instance_id)
        hear()  # until killed
    """)
    token, iid = owner.expect("pool").split()
    root = lp.root_name(token)
    try:
        worker = children(_WORKER.format(token=token, iid=iid))
        worker.expect("took")
        st = shmstream.stat(root)
        assert st["pid_namespace"] == "other" and st["creator_alive"] is True
        assert root not in shmstream.purge(kinds=("loader-pool",))
        owner.kill()
        assert shmstream.stat(root)["creator_alive"] is False
        # The loader is gone but a worker still has the pool open: kept.
        assert root not in shmstream.purge(kinds=("loader-pool",))
        assert lp.list_slot_files(token).get(token)
        worker.kill()
        assert root in shmstream.purge(kinds=("loader-pool",))
        assert not lp.list_slot_files(token).get(token)
        with pytest.raises(FileNotFoundError):
            shmstream.stat(root)
    finally:
        _remove_pool(token)
