"""Fixtures for the shmstream suite.

* ``name`` / ``make_name``: unique stream names (a uuid under this session's
  token) that are unlinked after the test, whoever created them.
* ``spawn``: start a function in a child process with the 'spawn' start
  method; children still running at the end of the test are killed.
* ``browser``: a headless Chromium per module, for the live-view tests.
* ``shm`` / ``other``: a 3x3 float32 stream and a second handle on it, for
  the handle tests (tests/streams/test_handle_*.py); ``support.frame`` fills one frame.
* A run-wide check that the suite left no ``shmstream-*`` segment in
  /dev/shm: a segment that exists at the end but did not at the start fails
  the run loudly, unless its creator is another process that still runs (a
  concurrent user of /dev/shm). Segments under this run's names are
  removed; others are only listed. Under pytest-xdist (``-n``) the check runs
  once, in the controller, after every worker has finished: a worker's own
  end would see the segments of tests other workers are still running.
"""

from __future__ import annotations

import os
import re
import sys
import uuid

import pytest

import support

#: An xdist worker: it runs tests, the controller (or a run without -n) checks.
_WORKER = "PYTEST_XDIST_WORKER" in os.environ
#: Every name this run makes starts with this token, so leftovers can be
#: told apart from segments of other processes that use /dev/shm meanwhile.
#: One token for the whole run: xdist's workers inherit it from the
#: controller's environment.
SESSION_TOKEN = os.environ["SHMSTREAM_TEST_RUN"] if _WORKER else f"t{uuid.uuid4().hex[:8]}"
os.environ["SHMSTREAM_TEST_RUN"] = SESSION_TOKEN
#: A name made by another run of this suite (another session's token).
_OTHER_SESSION = re.compile(r"t[0-9a-f]{8}-")


def _segments() -> set[str]:
    try:
        return {n for n in os.listdir(support.SHM_DIR) if n.startswith(support.SEGMENT_PREFIX)}
    except FileNotFoundError:
        return set()


def _header(path: str) -> bytes:
    """The identity up to the user name's end (offsets from _testhooks.layout())."""
    off, size = support.field("name")
    try:
        with open(path, "rb") as f:
            return f.read(off + size)
    except OSError:
        return b""


def _stored_name(head: bytes) -> str:
    """The user name stored in a segment header ('' if unreadable)."""
    name_off, name_size = support.field("name")
    len_off, len_size = support.field("name_len")
    if len(head) < name_off + name_size:
        return ""
    n = int.from_bytes(head[len_off : len_off + len_size], "little")
    return head[name_off : name_off + min(n, name_size - 1)].decode("utf-8", "replace")


def _creator_pid(head: bytes) -> int | None:
    off, size = support.field("creator_pid")
    if len(head) < off + size:
        return None  # truncated: nobody can be using it
    return int.from_bytes(head[off : off + size], "little", signed=True)


def _identity(segname: str) -> tuple[str, int | None]:
    """(stored user name, creator pid) of a leftover segment: read from its
    bytes at the compiled offsets, or, in an install without the suite's
    hooks (the release wheel, tests/repo/test_release.py), from the core's peek."""
    try:
        from shmstream import _testhooks  # noqa: F401 - the offsets' source
    except ImportError:
        from shmstream import _native

        try:
            seg = _native.Segment.peek(segname)
        except Exception:  # noqa: BLE001 - an unreadable leftover: nobody's
            return "", None
        return seg.name, seg.creator_pid
    head = _header(os.path.join(support.SHM_DIR, segname))
    return _stored_name(head), _creator_pid(head)


def _creator_gone_or_me(pid: int | None) -> bool:
    """True if the segment's creator is this process or no longer runs; a
    segment whose creator still runs elsewhere belongs to a concurrent
    process, not to this suite."""
    if pid is None or pid == os.getpid() or pid <= 0:
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


#: /dev/shm's segments when the run started (None in an xdist worker).
_before: set[str] | None = None


def pytest_sessionstart(session):
    global _before
    if not _WORKER:
        _before = _segments()


@pytest.hookimpl(trylast=True)  # after xdist's controller has ended its workers
def pytest_sessionfinish(session, exitstatus):
    if _before is None:
        return
    ours, unattributed = [], []
    for segname in sorted(_segments() - _before):
        stored, creator = _identity(segname)
        if segname.startswith(support.SEGMENT_PREFIX + SESSION_TOKEN) or stored.startswith(
            SESSION_TOKEN
        ):
            ours.append(segname)
        elif _OTHER_SESSION.match(stored) or _OTHER_SESSION.match(
            segname.removeprefix(support.SEGMENT_PREFIX)
        ):
            continue  # a concurrent run of this suite names its segments so
        elif _creator_gone_or_me(creator):
            unattributed.append(segname)
    for segname in ours:  # certainly this run's: clean up
        try:
            os.unlink(os.path.join(support.SHM_DIR, segname))
        except OSError:
            pass
    if ours or unattributed:
        message = (
            "the test suite left shared-memory segments behind in /dev/shm:\n"
            f"  made under this run's names (removed now): {ours}\n"
            "  new since the run started, creator this process or gone "
            f"(left in place in case a concurrent run owns them): {unattributed}"
        )
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write("\n")  # after the progress line, which ends without one
            reporter.write_sep("=", "segments left behind", red=True)
            reporter.write_line(message)
        else:
            sys.stderr.write(message + "\n")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def _unlink_quiet(stream_name: str) -> None:
    import shmstream

    try:
        shmstream.unlink(stream_name)
    except Exception:  # noqa: BLE001 - cleanup of whatever a test left
        # A corrupt segment may refuse a generation check; remove the file.
        try:
            os.unlink(support.segment_path(stream_name))
        except (OSError, UnicodeError):
            pass


@pytest.fixture
def make_name(request):
    """Factory of unique stream names; every name it made is unlinked after
    the test. ``make_name("cam/left")`` keeps a readable suffix."""
    made: list[str] = []

    def make(suffix: str = "") -> str:
        stream_name = f"{SESSION_TOKEN}-{uuid.uuid4().hex[:12]}"
        if suffix:
            stream_name += f"-{suffix}"
        made.append(stream_name)
        return stream_name

    yield make
    for stream_name in made:
        _unlink_quiet(stream_name)


@pytest.fixture
def name(make_name) -> str:
    """A unique stream name, unlinked after the test."""
    return make_name()


@pytest.fixture
def spawn():
    """``spawn(target, *args) -> support.Child``: run a module-level function
    in a fresh interpreter ('spawn' start method). Children still alive when
    the test ends are killed."""
    children: list[support.Child] = []

    def start(target, *args) -> support.Child:
        child = support.Child(target, args)
        children.append(child)
        return child

    yield start
    for child in children:
        child.kill()


@pytest.fixture
def ctx():
    """The multiprocessing 'spawn' context, for Events, Barriers, Queues."""
    return support.SPAWN


@pytest.fixture
def channel_pair(name):
    """``(tx, rx)``: a channel of ``support.CHANNEL_PAIR_CAPACITY`` bytes
    under a unique name and its consumer, both closed after the test."""
    import shmstream

    tx = shmstream.channel(name, support.CHANNEL_PAIR_CAPACITY)
    rx = shmstream.open_channel(name)
    yield tx, rx
    tx.close()
    rx.close()


@pytest.fixture
def shm(name):
    """The handle tests' stream (tests/streams/test_handle_*.py): 3x3 float32,
    closed after the test. ``support.frame(value)`` is one frame of it."""
    import numpy as np

    import shmstream

    h = shmstream.create(name, shape=(3, 3), dtype=np.float32)
    yield h
    h.close()


@pytest.fixture
def other(shm):
    """A second handle on the same stream, as another component would hold."""
    import shmstream

    h = shmstream.open(shm.name)
    yield h
    h.close()


def _loader_pool_files(tokens: set[str]) -> set[str]:
    """Files in /dev/shm of the loader pools with these tokens (roots and slots)."""
    from shmstream.loader import _loader_pool as lp

    roots = {lp._native.segment_name(lp.root_name(t)).lstrip("/") for t in tokens}
    return {
        f
        for f in os.listdir(support.SHM_DIR)
        if f in roots
        or (
            f.startswith(lp.SLOT_FILE_PREFIX)
            and f[len(lp.SLOT_FILE_PREFIX) :].split(".")[0] in tokens
        )
    }


@pytest.fixture
def no_loader_pool_left(monkeypatch):
    """The pools the test's DataLoaders (shmstream.torch) made are gone when it
    ends. Scoped to them: other processes (a concurrent test run) use
    /dev/shm meanwhile. The loader modules use it for every test."""
    import gc

    from shmstream.loader import _loader_pool as lp

    made: list[str] = []
    real_init = lp.Pool.__init__

    def recording_init(self, *args, **kwargs):
        real_init(self, *args, **kwargs)
        made.append(self.token)

    monkeypatch.setattr(lp.Pool, "__init__", recording_init)
    yield
    gc.collect()
    left = _loader_pool_files(set(made))
    for f in left:
        os.unlink(os.path.join(support.SHM_DIR, f))
    assert not left, f"loader pool files left in /dev/shm: {sorted(left)}"


@pytest.fixture
def children():
    """``children(code, depth=1)``: a Python child that is pid 1 of its own
    PID namespace (``depth`` nested), cleaned up after the test
    (tests/pidns_util.py)."""
    from pidns_util import NsChild

    made: list[NsChild] = []

    def start(code: str, depth: int = 1) -> NsChild:
        c = NsChild(code, depth)
        made.append(c)
        return c

    yield start
    for c in made:
        c.cleanup()


@pytest.fixture(scope="module")
def browser():
    """One headless Chromium per module of the live-view tests
    (tests/view_util.py), or the test skipped with the reason."""
    from view_util import browser_missing, start_browser

    why = browser_missing()
    if why:
        pytest.skip(why)
    driver = start_browser()
    yield driver
    driver.quit()
