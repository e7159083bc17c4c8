"""Zero-copy views of milk streams (docs/milk.md, "Zero-copy views"):
``read_view`` and ``read_new_view`` give the pixels in place, and the
block's end says whether a writer in another process touched them. Writers
are other processes, synchronised on events and counts.
"""

from __future__ import annotations

import mmap
import os
import signal

import numpy as np
import pytest

import shmstream
from shmstream import milk

import support

WRITE_OFFSET = 288  # IMAGE_METADATA.write (docs/milk.md)


def child_write_one(directory: str, name: str, value: int) -> None:
    with milk.open(name, dir=directory) as s:
        s.write(np.full(s.shape, value, s.dtype))


def child_raise_write_flag_and_die(path: str) -> None:
    with open(path, "r+b") as f, mmap.mmap(f.fileno(), 0) as m:
        m[WRITE_OFFSET] = 1
        os.kill(os.getpid(), signal.SIGKILL)


def test_a_view_is_the_frame_in_place_and_read_only(tmp_path):
    d = str(tmp_path)
    with milk.create("v", (3, 4), "i2", dir=d) as s:
        support.Child(child_write_one, (d, "v", 7)).result()
        with s.read_view() as pub:
            assert pub.count == 1 and (pub.payload == 7).all()
            assert pub.payload.shape == (3, 4) and pub.payload.dtype == np.int16
            assert not pub.payload.flags.writeable
            with pytest.raises(ValueError):
                pub.payload[0, 0] = 1
            first = pub.payload
        with s.read_view() as pub:  # the same memory: no copy was made
            assert np.shares_memory(pub.payload, first)
        s.unlink()


def test_a_write_from_another_process_during_the_block_is_reported(tmp_path):
    d = str(tmp_path)
    with milk.create("v", (16,), "f4", dir=d) as s:
        s.write(np.zeros(16, np.float32))
        with pytest.raises(shmstream.FrameOverwrittenError, match="written while its view"):
            with s.read_view() as pub:
                assert (pub.payload == 0).all()
                support.Child(child_write_one, (d, "v", 3)).result()
        with s.read_view() as pub:  # the next view sees the new frame, valid
            assert pub.count == 2 and (pub.payload == 3).all()
        s.unlink()


def test_read_new_view_waits_for_a_newer_frame(tmp_path):
    d = str(tmp_path)
    with milk.create("v", (2, 2), "u1", dir=d) as s, milk.open("v", dir=d) as r:
        with pytest.raises(TimeoutError):
            with r.read_new_view(timeout=0.01):
                pass
        r.claim()  # the writer's post reaches this reader's semaphore
        child = support.Child(child_write_one, (d, "v", 5))
        with r.read_new_view(timeout=support.WAIT) as pub:
            assert pub.count == 1 and (pub.payload == 5).all()
        child.result()
        s.unlink()


def test_a_dead_writers_flag_makes_a_view_inconsistent_until_the_next_write(tmp_path):
    d = str(tmp_path)
    with milk.create("v", (8,), "f8", dir=d) as w:
        w.write(np.ones(8))
        child = support.Child(child_raise_write_flag_and_die, (w.path,))
        assert child.join() == -signal.SIGKILL
        with milk.open("v", dir=d, busy_timeout=0.01) as r:
            with pytest.raises(shmstream.InconsistentStreamError):
                with r.read_view():
                    pass
            w.write(np.full(8, 2.0))  # the next write clears the flag
            with r.read_view() as pub:
                assert pub.count == 2 and (pub.payload == 2).all()
        w.unlink()


def test_a_view_kept_past_close_stays_mapped(tmp_path):
    d = str(tmp_path)
    with milk.create("v", (1000,), "u2", dir=d) as w:
        w.write(np.full(1000, 9, np.uint16))
        r = milk.open("v", dir=d)
        with r.read_view() as pub:
            kept = pub.payload
        r.close()
        assert r.closed and int(kept.sum()) == 9000  # mapped until the view is gone
        with pytest.raises(shmstream.HandleClosedError):
            with r.read_view():
                pass
        del kept, pub
        w.unlink()


def test_a_view_used_after_its_block_raises_ViewEndedError(tmp_path):
    d = str(tmp_path)
    with milk.create("v", (4,), "u1", dir=d) as s:
        s.write(np.full(4, 1, np.uint8))
        with s.read_view() as pub:
            assert (pub.payload == 1).all()
        support.Child(child_write_one, (d, "v", 2)).result()
        with pytest.raises(shmstream.ViewEndedError, match="milk stream 'v'"):
            np.asarray(pub.payload)
        s.unlink()
