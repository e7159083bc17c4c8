"""A full /dev/shm is an OSError(ENOSPC) at create, not a SIGBUS on some
later write, and a failed create leaves nothing behind.

Each test runs a child in a private mount namespace (``unshare -m``) whose
/dev/shm is a small fresh tmpfs, so the real /dev/shm is never filled.
"""

from __future__ import annotations

import pytest

from support import private_shm_available, run_in_private_shm

pytestmark = pytest.mark.root


@pytest.fixture(scope="module", autouse=True)
def private_shm():
    reason = private_shm_available()
    if reason:
        pytest.skip(f"a full /dev/shm is simulated in a private mount namespace; {reason}")


def run(script: str, size: str = "1m") -> str:
    proc = run_in_private_shm(script, size=size)
    assert proc.returncode == 0, f"child failed:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout.strip()


def test_creating_a_stream_larger_than_dev_shm_raises_ENOSPC_and_leaves_nothing():
    out = run(
        """
        import errno, os
        import numpy as np
        import shmstream
        try:
            shmstream.create("too big", shape=(1024, 1024), dtype=np.float32)  # 4 MiB > 1 MiB
        except OSError as exc:
            assert exc.errno == errno.ENOSPC, exc
            assert not isinstance(exc, (FileExistsError, FileNotFoundError)), exc
        else:
            raise AssertionError("create did not fail on a full /dev/shm")
        assert os.listdir("/dev/shm") == [], os.listdir("/dev/shm")
        assert shmstream.list_streams() == []
        try:
            shmstream.open("too big")
        except FileNotFoundError:
            pass
        else:
            raise AssertionError("a failed create left an openable stream")
        print("ok")
        """
    )
    assert out == "ok"


def test_a_stream_that_fits_is_fully_backed_and_the_next_that_does_not_fit_fails_cleanly():
    out = run(
        """
        import errno, os
        import numpy as np
        import shmstream
        from shmstream import _native
        # one stream of ~60% of the 1 MiB tmpfs, whatever the slot count;
        # all its pages are reserved at create
        n = (600 * 1024 // _native.DEFAULT_SLOTS) // 4096 * 4096
        a = shmstream.create("fits", shape=(n,), dtype=np.uint8)
        a.write(np.ones(n, np.uint8))
        try:
            shmstream.create("second", shape=(n,), dtype=np.uint8)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC, exc
        else:
            raise AssertionError("the second create should not fit")
        assert os.listdir("/dev/shm") == [os.path.basename(a.segment)], os.listdir("/dev/shm")
        # the first stream is untouched and still works
        assert a.read().sum() == n
        a.write(np.full(n, 2, np.uint8))
        assert (a.read() == 2).all()
        a.unlink()
        assert os.listdir("/dev/shm") == []
        # with the space back, the same create succeeds
        shmstream.create("second", shape=(n,), dtype=np.uint8).unlink()
        print("ok")
        """
    )
    assert out == "ok"


def test_a_create_whose_header_fits_but_not_its_payload_fails_with_ENOSPC():
    out = run(
        """
        import errno, os
        import numpy as np
        import shmstream
        from shmstream import _native
        # fill the 1 MiB tmpfs (256 pages) up to its last ~4 pages
        pages = (256 - 1 - 4) // _native.DEFAULT_SLOTS
        filler = shmstream.create("filler", shape=(pages * 4096,), dtype=np.uint8)
        try:
            shmstream.create("header only", shape=(4 * 4096,), dtype=np.uint8)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC, exc
        else:
            raise AssertionError("expected ENOSPC")
        assert len(os.listdir("/dev/shm")) == 1, os.listdir("/dev/shm")
        filler.unlink()
        print("ok")
        """
    )
    assert out == "ok"


def test_the_enospc_message_says_how_many_bytes_are_needed_and_free():
    out = run(
        """
        import errno
        import numpy as np
        import shmstream
        for make in (
            lambda: shmstream.create("big", shape=(10, 1024, 1024), dtype=np.uint8),  # 2 x 10 MiB
            lambda: shmstream.channel("big ring", 1 << 24),
            lambda: shmstream.share(np.zeros(2 << 20, np.float64), name="big array"),
        ):
            try:
                make()
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
                text = str(exc)
                assert "needs" in text and "bytes free" in text, text
                print(text)
            else:
                raise AssertionError("a create larger than /dev/shm succeeded")
        """,
        size="4m",
    )
    stream_line, channel_line, array_line = out.splitlines()
    assert "needs 20975616 bytes" in stream_line and "2 slot(s) of 10485760 bytes" in stream_line
    assert "needs 16781312 bytes" in channel_line
    assert "needs 16781312 bytes" in array_line
    assert "4194304 bytes free" in stream_line


def test_a_dev_shm_out_of_inodes_says_files_not_bytes():
    # tmpfs counts files apart from bytes: 16 MiB free, room for 4 files.
    out = run(
        """
        import errno
        import numpy as np
        import shmstream
        made = []
        try:
            for i in range(10):
                made.append(shmstream.create(f"s{i}", shape=(4,), dtype=np.float32))
        except OSError as exc:
            assert exc.errno == errno.ENOSPC, exc
            assert "no free inodes" in str(exc) and "nr_inodes" in str(exc), exc
            print(len(made), "ok")
        else:
            raise AssertionError("ten creates fitted in four inodes")
        """,
        size="16m,nr_inodes=4",
    )
    assert out.endswith("ok") and int(out.split()[0]) < 10


def test_a_create_larger_than_the_free_space_is_refused_at_once_for_every_kind():
    # Before the fix a 16 GiB channel on a big /dev/shm took a minute of
    # page reservation first; here the sizes are refused before any file
    # exists, with the sizes in the message.
    out = run(
        """
        import errno, importlib, os
        import numpy as np
        import shmstream
        stream, channel, shared_array = (
            importlib.import_module(f"shmstream.{m}")
            for m in ("streams.shared_memory", "channels.ends", "arrays.shared_array")
        )

        class NoCreate:  # the native module, but a create must not be reached
            def __init__(self, real, cls):
                self.real, self.cls = real, cls
            def __getattr__(self, attr):
                if attr != self.cls:
                    return getattr(self.real, attr)
                def create(*args, **kwargs):
                    raise AssertionError("the create ran: the size was not refused first")
                return type(attr, (), {"create": staticmethod(create)})

        stream._native = NoCreate(stream._native, "Segment")
        shared_array._native = NoCreate(shared_array._native, "Segment")
        channel._channel = NoCreate(channel._channel, "Channel")
        calls = [
            ("stream", lambda: shmstream.create("s", shape=(1 << 20,), dtype=np.float64)),
            ("channel", lambda: shmstream.channel("c", capacity=1 << 24)),
            ("shared array", lambda: shmstream.share(np.zeros(1 << 20), name="a")),
        ]
        for what, call in calls:
            try:
                call()
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
                assert f"cannot create {what}" in str(exc) and "bytes free" in str(exc), exc
            else:
                raise AssertionError(f"{what} larger than /dev/shm was created")
            assert os.listdir("/dev/shm") == [], os.listdir("/dev/shm")
        print("ok")
        """,
        size="1m",
    )
    assert out == "ok"
