"""Peers that share /dev/shm but not a PID namespace (docs/containers.md,
docs/ABI.md "Liveness leases"): each side runs as pid 1 of its own
namespace (``unshare --pid --fork --mount-proc``), as two containers of a
Kubernetes pod with a memory emptyDir, or ``docker run --ipc=container:``.

Channels judge their ends by leases (OFD locks on the segment file), so
they work across namespaces: every message arrives, a SIGKILLed end is
seen as dead from the other namespace, a live end is never taken over
from there although both ends are pid 1. A fork child's inherited handle
does not keep its dead parent's end alive. A shared array (no word judged
by pid) opens too. Streams (locked by lease) are tested in
test_containers_streams.py, loader pools in test_containers_loader.py.
Skipped where ``unshare --pid`` is not permitted."""

from __future__ import annotations

import os
import signal

import pytest

import shmstream
from shmstream import _native

import support

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="unshare --pid needs root (or a user namespace)"
)

N = 500


@pytest.fixture
def chan(make_name):
    """A channel name, unlinked after the test."""
    name = make_name()
    yield name
    try:
        shmstream.unlink_channel(name)
    except FileNotFoundError:
        pass


def _producer(name: str, create: bool = True) -> str:
    opener = (
        f"shmstream.channel({name!r}, 1 << 16, role='producer')"
        if create
        else f"shmstream.open_channel({name!r}, role='producer')"
    )
    return f"""
        import os, shmstream
        tx = {opener}
        say("pid", os.getpid())
        assert hear() == "send"
        for i in range({N}):
            tx.send(i.to_bytes(4, "little"))
        say("sent")
        hear()  # until the test kills us
    """


@pytest.mark.parametrize("depth", [1, 2], ids=["sibling", "nested"])
def test_a_channel_between_two_pid_namespaces_delivers_every_message_and_sees_the_death(
    chan, children, depth
):
    # the producer's namespace is a sibling of the consumer's, or nested in another one
    prod = children(_producer(chan), depth)
    assert prod.expect("pid") == "1"  # pid 1 of its namespace
    cons = children(f"""
        import os, shmstream
        rx = shmstream.open_channel({chan!r}, role="consumer")
        st = rx.stat()["producer"]
        say("pid", os.getpid(), st["pid"], st["alive"], st["pid_namespace"])
        got = [int.from_bytes(rx.recv(timeout=30).data, "little") for _ in range({N})]
        assert got == list(range({N})), got[:10]
        say("got", len(got))
        try:
            rx.recv()  # no timeout: the producer's death must end it
        except shmstream.ChannelClosedError as exc:
            say("closed", "died" in str(exc))
        say("after", rx.stat()["producer"]["alive"])
    """)
    # both are pid 1; the producer's pid is its own namespace's, and it is alive
    pid, peer_pid, alive, peer_ns = cons.expect("pid").split()
    assert (pid, peer_pid, alive) == ("1", "1", "True")
    assert peer_ns.startswith("pid:[") and peer_ns != f"pid:[{os.stat('/proc/self/ns/pid').st_ino}]"
    prod.tell("send")
    assert cons.expect("got") == str(N)
    prod.expect("sent")
    assert shmstream.stat(chan)["producer"]["alive"] is True  # from a third namespace
    prod.kill()
    assert cons.expect("closed") == "True"
    assert cons.expect("after") == "False"
    cons.finish()
    st = shmstream.stat(chan)
    assert st["producer"]["alive"] is False and st["consumer"]["alive"] is False


def test_a_live_end_in_another_namespace_is_never_taken_over_and_a_dead_one_is(chan, children):
    prod = children(_producer(chan))
    prod.expect("pid")
    # Another pid 1, in another namespace, wants the producer end: it is held.
    rival = children(f"""
        import shmstream
        try:
            shmstream.open_channel({chan!r}, role="producer")
        except shmstream.ChannelBusyError:
            say("busy")
        assert hear() == "again"
        tx = shmstream.open_channel({chan!r}, role="producer")
        say("took", tx.stat()["producer"]["takeovers"])
        tx.send(b"from the new producer")
        hear()
    """)
    assert rival.expect("busy") == ""
    with pytest.raises(shmstream.ChannelBusyError):  # nor from this namespace
        shmstream.open_channel(chan, role="producer")
    rx = shmstream.open_channel(chan, role="consumer")
    try:
        prod.kill()
        rival.tell("again")
        assert rival.expect("took") == "1"
        assert rx.recv(timeout=support.WAIT).data == b"from the new producer"
    finally:
        rx.close()


def test_a_consumer_killed_in_another_namespace_breaks_the_producer_here(chan, children):
    tx = shmstream.channel(chan, 4096, role="producer")
    try:
        cons = children(f"""
            import shmstream
            rx = shmstream.open_channel({chan!r}, role="consumer")
            say("attached")
            hear()
        """)
        cons.expect("attached")
        assert tx.stat()["consumer"]["alive"] is True
        cons.kill()
        assert tx.stat()["consumer"]["alive"] is False
        with pytest.raises(shmstream.ChannelBrokenError):
            for _ in range(4096):  # fills the ring, then must not wait for ever
                tx.send(b"x" * 100)
    finally:
        tx.close()


def _fork_then_die(name: str, forked, die) -> None:
    tx = shmstream.open_channel(name, role="producer")
    pid = os.fork()
    if pid == 0:  # the child keeps the inherited handle (and its fd) and lives on
        signal.pause()
        os._exit(0)
    forked.put(pid)
    die.wait()
    os.kill(os.getpid(), signal.SIGKILL)
    del tx


def test_a_fork_child_does_not_keep_its_dead_parents_end_alive(chan, ctx, spawn):
    rx = shmstream.channel(chan, 4096, role="consumer")
    forked, die = ctx.Queue(), ctx.Event()
    parent = spawn(_fork_then_die, chan, forked, die)
    child_pid = forked.get(timeout=support.WAIT)
    try:
        assert rx.stat()["producer"]["alive"] is True
        die.set()
        # (not join(): the fork child holds the process sentinel's pipe open too)
        support.wait_until(lambda: parent.process.exitcode is not None, what="the parent's death")
        # the fork child still holds the inherited fd: the end is dead all the same
        assert rx.stat()["producer"]["alive"] is False
        with pytest.raises(shmstream.ChannelClosedError, match="died"):
            rx.recv()
    finally:
        os.kill(child_pid, signal.SIGKILL)
        rx.close()


def test_a_shared_array_is_shared_across_pid_namespaces(name, children):
    import numpy as np

    arr = shmstream.share(np.arange(4, dtype=np.int64), name=name)
    try:
        c = children(f"""
            import shmstream
            a = shmstream.SharedArray.open({name!r}, writable=True)
            say("read", a.tolist())
            a[0] = 42
            say("wrote")
            del a
        """)
        assert c.expect("read") == "[0, 1, 2, 3]"
        c.expect("wrote")
        assert arr[0] == 42  # the same memory
        c.finish()
    finally:
        arr.close()


# ---- crash points, the victim in its own namespace ------------------------------------------

K = 50  # messages before the armed point
#: the first message the successor sees after the victim died at each point
PRODUCER_POINTS = {"ring.record": K, "ring.head": K + 1, "ring.detach": K}
CONSUMER_POINTS = {"ring.read": K, "ring.tail": K + 1, "ring.release": K, "ring.detach": K}


def _victim(chan: str, role: str, point: str) -> str:
    # exit=True: pid 1 of a namespace ignores a SIGKILL it sends itself, so the
    # victim dies by _exit(86) at the point; its lease goes with it all the same
    return f"""
        import shmstream
        from shmstream import _testhooks
        role = {role!r}
        ch = shmstream.open_channel({chan!r}, role=role)
        say("attached")
        if role == "producer":
            for i in range({K}):
                ch.send(i.to_bytes(4, "little"))
        else:
            for i in range({K}):
                assert int.from_bytes(ch.recv(timeout=30).data, "little") == i
        _testhooks.fault_arm({point!r}, 1, True)
        if {point!r} == "ring.detach":
            ch.close()
        elif role == "producer":
            ch.send(({K}).to_bytes(4, "little"))
        elif {point!r} == "ring.release":
            with ch.recv_zero_copy(timeout=30) as m:
                pass
        else:
            ch.recv(timeout=30)
        say("survived")
    """


@pytest.mark.parametrize("point", list(PRODUCER_POINTS))
def test_a_producer_dying_at_each_point_in_another_namespace_ends_the_stream_cleanly(
    chan, children, point
):
    pytest.importorskip("shmstream._testhooks", reason="a build without test hooks")
    rx = shmstream.channel(chan, 1 << 16, role="consumer")
    try:
        victim = children(_victim(chan, "producer", point))
        victim.expect("attached")
        got = []
        with pytest.raises(shmstream.ChannelClosedError, match="died"):
            while True:  # no timeout: the dead producer must end the wait
                got.append(int.from_bytes(rx.recv().data, "little"))
        assert victim.proc.wait(support.WAIT) == 86  # _exit(86) at the point
        assert got == list(range(PRODUCER_POINTS[point]))
        successor = children(f"""
            import shmstream
            tx = shmstream.open_channel({chan!r}, role="producer")  # takes the dead end over
            say("takeovers", tx.stat()["producer"]["takeovers"])
            tx.send(b"\\x07\\x00\\x00\\x00")
        """)
        assert successor.expect("takeovers") == "1"
        assert rx.recv(timeout=support.WAIT).data == b"\x07\x00\x00\x00"
        successor.finish()
    finally:
        rx.close()


@pytest.mark.parametrize("point", list(CONSUMER_POINTS))
def test_a_consumer_dying_at_each_point_in_another_namespace_loses_no_message(
    chan, children, point
):
    pytest.importorskip("shmstream._testhooks", reason="a build without test hooks")
    tx = shmstream.channel(chan, 1 << 16, role="producer")
    try:
        for i in range(K + 3):
            tx.send(i.to_bytes(4, "little"))
        victim = children(_victim(chan, "consumer", point))
        victim.expect("attached")
        assert victim.proc.wait(support.WAIT) == 86
        rx = shmstream.open_channel(chan, role="consumer")  # takes over, from here
        assert rx.stat()["consumer"]["takeovers"] == 1
        rest = [int.from_bytes(m.data, "little") for m in rx.drain(1000)]
        assert rest == list(range(CONSUMER_POINTS[point], K + 3))
        rx.close()
    finally:
        tx.close()


# ---- lease words are input ----------------------------------------------------------------

PRODUCER_OWNER = 2368  # docs/ABI.md, "Control lines"


def test_an_owner_word_that_names_no_held_lease_is_a_dead_end(chan):
    import mmap
    import struct

    rx = shmstream.channel(chan, 4096, role="consumer")
    path = support.SHM_DIR + _native.segment_name(chan)
    with open(path, "r+b") as f:
        mm = mmap.mmap(f.fileno(), 4096)
    try:
        # a lease number nobody holds, words outside the lease range, a small "pid"
        for word in (2**62 + 12345, 2**63 - 1, 2**63 + 5, 2**64 - 1, 7):
            struct.pack_into("<Q", mm, PRODUCER_OWNER, word)
            assert rx.stat()["producer"]["alive"] is False, hex(word)
        tx = shmstream.open_channel(chan, role="producer")  # takes the forged end over
        assert tx.stat()["producer"]["takeovers"] == 1
        assert rx.stat()["producer"]["alive"] is True
        # a second handle in this same process: the first one's lease is another
        # open file description's, so it conflicts and the end is busy
        with pytest.raises(shmstream.ChannelBusyError):
            shmstream.open_channel(chan, role="producer")
        tx.send(b"ok")
        assert rx.recv(timeout=support.WAIT).data == b"ok"
        tx.close()
    finally:
        mm.close()
        rx.close()


# ---- the C API ------------------------------------------------------------------------------

C_LEASE_PROGRAM = r"""
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "shmstream.h"
#include "shmstream_unstable.h"

static int producer_alive(ss_channel *ch) {
  ss_ring_words w;
  ss_ring_words_get(ss_channel_segment(ch), &w);
  return w.producer.alive;
}

int main(int argc, char **argv) {
  (void)argc;
  const char *name = argv[1];
  size_t len = strlen(name);
  ss_channel *rx = ss_channel_new(), *tx = ss_channel_new(), *tx2 = ss_channel_new();
  int rc = ss_channel_create(rx, name, 4096, SS_ROLE_CONSUMER, 0);
  printf("create %d version %u\n", rc,
         ss_segment_identity(ss_channel_segment(rx))->layout_version);
  printf("open %d\n", ss_channel_open(tx, name, len, SS_ROLE_PRODUCER));
  printf("same process %d\n", ss_channel_open(tx2, name, len, SS_ROLE_PRODUCER));
  printf("alive %d\n", producer_alive(rx));
  fflush(stdout);
  pid_t a = fork(); /* inherits tx: judges its parent's lease like anyone's */
  if (a == 0) _exit(producer_alive(rx) == 1 ? 0 : 1);
  int st;
  waitpid(a, &st, 0);
  printf("fork child sees it alive %d\n", WIFEXITED(st) && WEXITSTATUS(st) == 0);
  ss_channel_close(tx);
  printf("closed %d\n", producer_alive(rx));
  fflush(stdout);
  pid_t b = fork(); /* attaches as the producer, then dies without closing */
  if (b == 0) {
    ss_channel *mine = ss_channel_new();
    _exit(ss_channel_open(mine, name, len, SS_ROLE_PRODUCER) == SS_OK ? 0 : 1);
  }
  waitpid(b, &st, 0);
  int32_t pid = 0;
  int peer = ss_channel_peer_status(rx, &pid);
  printf("dead child %d %d %d\n", WEXITSTATUS(st), peer, pid == b);
  printf("takeover %d\n", ss_channel_open(tx2, name, len, SS_ROLE_PRODUCER));
  ss_channel_free(tx2);
  ss_channel_free(tx);
  ss_channel_free(rx);
  ss_channel_unlink(name, len);
  return 0;
}
"""


def test_the_c_api_judges_channel_ends_by_lease(chan, tmp_path):
    out = support.run_c_program(tmp_path, C_LEASE_PROGRAM, chan)
    assert out == [
        f"create 0 version {_native.LAYOUT_VERSION_CHANNEL}",
        "open 0",
        "same process -14",  # SS_EATTACHED: another handle's lease, even in this process
        "alive 1",
        "fork child sees it alive 1",
        "closed 0",
        "dead child 0 -12 1",  # SS_EPEERDEAD, and the dead end's pid for humans
        "takeover 0",
    ]
