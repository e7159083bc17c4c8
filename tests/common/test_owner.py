"""Who may open a segment (docs/ABI.md, "Owner and PID namespace").

* A segment whose file belongs to another uid than the opener's effective
  uid is refused by every open (stream, channel, shared array by name and
  by handle, loader pool) with SegmentOwnerError naming the owner and the
  opt-in; ``allow_owner=`` (uid, user name, or a collection) and
  SHMSTREAM_ALLOW_OWNERS let it open. ``stat`` reports the owner and
  whether others may write the file.
* A channel created in another PID namespace, judged by leases, opens
  (tests/common/test_containers.py has the rest), and ``stat`` and purge judge
  its ends from any namespace.

The other user is ``nobody`` (uid 65534): a segment made here as root is
handed to it with chown, or made by a child that dropped to it. These tests
need root; the PID-namespace ones need ``unshare``.
"""

from __future__ import annotations

import glob
import os
import pickle
import pwd
import shutil
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest

import shmstream
from shmstream import _native, registry
from shmstream.loader import _loader_pool as lp

import support

OTHER_UID = 65534

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="handing a segment to another uid (chown, setuid) needs root"
)


def give_away(name: str, uid: int = OTHER_UID) -> None:
    """Make ``name``'s file belong to ``uid``, as if that user had made it."""
    os.chown(support.SHM_DIR + _native.segment_name(name), uid, -1)


def other_user_name() -> str:
    try:
        return pwd.getpwuid(OTHER_UID).pw_name
    except KeyError:
        pytest.skip(f"uid {OTHER_UID} has no user name here")


# ---- owner: refused by default, for every kind ---------------------------------------


def test_a_stream_of_another_uid_is_refused_naming_the_owner_and_the_opt_in(name):
    h = shmstream.create(name, shape=(4,), dtype=np.int32, mode=0o666)
    try:
        give_away(name)
        for readonly in (False, True):
            with pytest.raises(shmstream.SegmentOwnerError) as err:
                shmstream.open(name, readonly=readonly)
            assert isinstance(err.value, PermissionError)
            text = str(err.value)
            assert f"uid {OTHER_UID}" in text and name in text
            assert "allow_owner=" in text and "SHMSTREAM_ALLOW_OWNERS" in text
    finally:
        h.close()


def test_a_stream_of_another_uid_opens_with_allow_owner_as_uid_name_or_collection(name):
    h = shmstream.create(name, shape=(4,), dtype=np.int32)
    try:
        give_away(name)
        h.write(np.arange(4, dtype=np.int32))
        for allow in (OTHER_UID, other_user_name(), [1234, OTHER_UID], {other_user_name()}):
            g = shmstream.open(name, allow_owner=allow)
            assert g.read().tolist() == [0, 1, 2, 3]
            g.close()
        with pytest.raises(shmstream.SegmentOwnerError):  # another uid is not enough
            shmstream.open(name, allow_owner=1234)
    finally:
        h.close()


@pytest.mark.parametrize(
    "bad, exc",
    [(True, TypeError), (1.5, TypeError), (-1, ValueError), ("no-such-user-xyz", ValueError)],
)
def test_allow_owner_rejects_what_is_not_a_uid_or_user_name(name, bad, exc):
    h = shmstream.create(name, shape=(1,), dtype=np.int32)
    try:
        with pytest.raises(exc, match="allow_owner"):
            shmstream.open(name, allow_owner=bad)
    finally:
        h.close()


def test_shmstream_allow_owners_in_the_environment_lets_unchanged_code_open(name, monkeypatch):
    h = shmstream.create(name, shape=(2,), dtype=np.int32)
    try:
        give_away(name)
        monkeypatch.setenv("SHMSTREAM_ALLOW_OWNERS", "1234")
        with pytest.raises(shmstream.SegmentOwnerError):
            shmstream.open(name)
        for value in (f"1234,{OTHER_UID}", f"1234 {other_user_name()}"):
            monkeypatch.setenv("SHMSTREAM_ALLOW_OWNERS", value)
            shmstream.open(name).close()
    finally:
        h.close()


def test_the_creator_still_uses_its_own_stream_after_opening_is_refused(name):
    # Root's own segments (created and opened as root) are untouched by the rule.
    h = shmstream.create(name, shape=(2,), dtype=np.int32)
    try:
        g = shmstream.open(name)
        g.write(np.array([7, 8], np.int32))
        assert h.read().tolist() == [7, 8]
        g.close()
    finally:
        h.close()


def _create_as_other_user(stream_name: str) -> None:
    os.setgid(OTHER_UID)
    os.setuid(OTHER_UID)
    h = shmstream.create(stream_name, shape=(2,), dtype=np.int32, mode=0o666)
    h.write(np.array([6, 6], np.int32))
    h.close()


def test_a_name_squatted_by_another_user_is_refused_and_stat_says_who_and_that_others_write(
    name, spawn
):
    spawn(_create_as_other_user, name).result()
    st = shmstream.stat(name)
    assert st["owner_uid"] == OTHER_UID and st["owner"] == other_user_name()
    assert st["writable_by_others"] is True and st["owned_by_caller"] is False
    with pytest.raises(shmstream.SegmentOwnerError, match=str(OTHER_UID)):
        shmstream.open(name)
    g = shmstream.open(name, allow_owner=OTHER_UID)
    assert g.read().tolist() == [6, 6]
    g.close()


def test_stat_reports_the_callers_own_0600_stream_as_not_writable_by_others(name):
    h = shmstream.create(name, shape=(1,), dtype=np.int32)
    try:
        st = shmstream.stat(name)
        assert (st["owner_uid"], st["owner"], st["owned_by_caller"]) == (0, "root", True)
        assert st["writable_by_others"] is False and st["pid_namespace"] == "same"
    finally:
        h.close()


def test_the_stat_command_prints_the_owner_and_writable_by_others(name):
    h = shmstream.create(name, shape=(1,), dtype=np.int32, mode=0o666)
    try:
        give_away(name)
        out = subprocess.run(
            [sys.executable, "-m", "shmstream", "stat", name],
            capture_output=True,
            text=True,
            timeout=support.WAIT,
            check=True,
        ).stdout
        assert "owner_uid" in out and str(OTHER_UID) in out
        assert "writable_by_others" in out and "True" in out
    finally:
        h.close()


def test_a_channel_of_another_uid_is_refused_and_opens_with_the_opt_in(name):
    prod = shmstream.channel(name, 4096, role="producer")
    try:
        give_away(name)
        with pytest.raises(shmstream.SegmentOwnerError, match=str(OTHER_UID)):
            shmstream.open_channel(name, role="consumer")
        cons = shmstream.open_channel(name, role="consumer", allow_owner=OTHER_UID)
        prod.send(b"hi")
        assert cons.recv(timeout=support.WAIT).data == b"hi"
        cons.close()
        st = shmstream.stat(name)
        assert st["owner_uid"] == OTHER_UID and st["writable_by_others"] is False
    finally:
        prod.close()
        shmstream.unlink_channel(name)


def _attach_handle(blob: bytes) -> list:
    return pickle.loads(blob).tolist()


def test_a_shared_array_of_another_uid_is_refused_by_name_and_by_handle(name, spawn, monkeypatch):
    arr = shmstream.share(np.arange(3, dtype=np.int64), name=name)
    try:
        give_away(arr.shm_name)
        with pytest.raises(shmstream.SegmentOwnerError):
            shmstream.SharedArray.open(name)
        opened = shmstream.SharedArray.open(name, allow_owner=OTHER_UID)
        assert opened.tolist() == [0, 1, 2]
        del opened
        blob = pickle.dumps(arr)
        with pytest.raises(support.ChildFailed, match="SegmentOwnerError"):
            spawn(_attach_handle, blob).result()
        monkeypatch.setenv("SHMSTREAM_ALLOW_OWNERS", str(OTHER_UID))  # the child inherits it
        assert spawn(_attach_handle, blob).result() == [0, 1, 2]
    finally:
        arr.close()


def test_a_loader_pool_of_another_uid_is_refused(monkeypatch):
    pool = lp.Pool(nslots=2, max_bytes=1 << 20)
    try:
        give_away(lp.root_name(pool.token))
        with pytest.raises(shmstream.SegmentOwnerError):
            lp.PoolClient(pool.token, pool.instance_id)
        monkeypatch.setenv("SHMSTREAM_ALLOW_OWNERS", str(OTHER_UID))
        lp.PoolClient(pool.token, pool.instance_id)
    finally:
        pool.destroy()


# ---- PID namespaces ----------------------------------------------------------------------


def _unshare(code: str, stdin_after=None) -> subprocess.CompletedProcess:
    """Run python code in a new PID namespace (and /proc), as a child;
    ``stdin_after()`` runs once it is started."""
    if shutil.which("unshare") is None:
        pytest.skip("unshare(1) is not installed")
    cmd = [
        "unshare",
        "--pid",
        "--fork",
        "--mount-proc",
        sys.executable,
        "-c",
        textwrap.dedent(code),
    ]
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    if stdin_after is not None:
        stdin_after()
    out, err = proc.communicate(timeout=support.WAIT * 2)
    r = subprocess.CompletedProcess(cmd, proc.returncode, out, err)
    if r.returncode != 0 and (
        "Operation not permitted" in r.stderr or "unshare failed" in r.stderr
    ):
        pytest.skip(f"unshare --pid is not permitted here: {r.stderr.strip()[-200:]}")
    return r


def test_a_channel_made_in_another_pid_namespace_is_judged_by_its_ends_leases(
    make_name, monkeypatch, children
):
    chan = make_name()
    held = make_name()
    try:
        r = _unshare(f"""
            import os, shmstream
            producer = shmstream.channel({chan!r}, 4096, role="producer")
            os._exit(0)  # leaves the channel and its producer end behind, gone with the namespace
        """)
        assert r.returncode == 0, r.stderr
        st = shmstream.stat(chan)
        assert st["pid_namespace"] == "other" and st["creator_alive"] is None
        # its producer's pid is from that namespace (pid 1 there, and shown with it);
        # its lease tells from here that it is gone
        assert st["producer"]["pid"] == 1 and st["producer"]["pid_namespace"].startswith("pid:[")
        assert st["producer"]["alive"] is False and st["consumer"]["alive"] is False
        # one whose end is still held there (a child in its own namespace) stays
        holder = children(f"""
            import shmstream
            p = shmstream.channel({held!r}, 4096)
            say("ready")
            hear()
        """)
        holder.expect("ready")
        entries = [registry.entry(_native.segment_name(n)) for n in (chan, held)]
        assert all(e is not None and e.creator_alive is None for e in entries)
        # purge sees only these entries (other users of /dev/shm are left alone)
        monkeypatch.setattr(registry._purge, "survey", lambda kinds=None: (entries, []))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            removed = registry.purge(kinds=("channel",)).removed
        assert [e.name for e in removed] == [chan]
        assert not any("another PID namespace" in str(w.message) for w in caught)
        assert not os.path.exists(support.SHM_DIR + _native.segment_name(chan))
        assert os.path.exists(support.SHM_DIR + _native.segment_name(held))
        holder.finish()  # on a failure above, the children fixture kills it
    finally:
        for n in (chan, held):
            try:
                shmstream.unlink_channel(n)
            except FileNotFoundError:
                pass


# ---- the C API -----------------------------------------------------------------------------

C_OWNER_PROGRAM = r"""
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "shmstream.h"

/* argv[1]: a stream, argv[2]: a channel, both owned by another uid. */
int main(int argc, char **argv) {
  (void)argc;
  ss_segment *seg = ss_segment_new();
  ss_channel *ch = ss_channel_new();
  int rc = ss_segment_open(seg, argv[1], strlen(argv[1]), SS_KIND_STREAM, 0);
  printf("open %d %u\n", rc, ss_segment_owner_uid(seg));
  uint32_t allow[] = {1234, %(uid)d};
  ss_open_opts opts = {allow, 2};
  rc = ss_segment_open_ex(seg, argv[1], strlen(argv[1]), SS_KIND_STREAM, 1, &opts);
  printf("open_ex %d\n", rc);
  if (rc == SS_OK) ss_segment_close(seg);
  rc = ss_channel_open(ch, argv[2], strlen(argv[2]), SS_ROLE_CONSUMER);
  printf("channel_open %d\n", rc);
  rc = ss_channel_open_ex(ch, argv[2], strlen(argv[2]), SS_ROLE_CONSUMER, &opts);
  printf("channel_open_ex %d\n", rc);
  if (rc == SS_OK) ss_channel_close(ch);
  uint32_t dev;
  uint64_t ino;
  rc = ss_pidns_self(&dev, &ino);
  printf("pidns %d %d\n", rc, ino != 0);
  ss_segment_free(seg);
  ss_channel_free(ch);
  return 0;
}
"""


def test_the_c_api_refuses_another_uid_and_opens_with_ss_open_opts(name, make_name, tmp_path):
    src = tmp_path / "owner.c"
    src.write_text(C_OWNER_PROGRAM.replace("%(uid)d", str(OTHER_UID)))
    exe = support.compile_c(str(tmp_path / "owner"), [str(src)])
    chan = make_name()
    h = shmstream.create(name, shape=(2,), dtype=np.int32)
    prod = shmstream.channel(chan, 4096, role="producer")
    try:
        give_away(name)
        give_away(chan)
        env = {k: v for k, v in os.environ.items() if k != "SHMSTREAM_ALLOW_OWNERS"}
        out = subprocess.run(
            [exe, name, chan],
            capture_output=True,
            text=True,
            env=env,
            timeout=support.WAIT,
            check=True,
        ).stdout.split("\n")
        eowner = -28  # SS_EOWNER (include/shmstream.h)
        assert out[:5] == [
            f"open {eowner} {OTHER_UID}",
            "open_ex 0",
            f"channel_open {eowner}",
            "channel_open_ex 0",
            "pidns 0 1",
        ]
    finally:
        prod.close()
        shmstream.unlink_channel(chan)
        h.close()


# ---- GPU streams (the fake driver of tests/gpu/fake_libcuda.c) -------------------------------------


def test_a_gpu_stream_of_another_uid_is_refused_and_attaches_with_allow_owner(tmp_path, make_name):
    driver = support.compile_c(
        str(tmp_path / "libcuda_fake.so"),
        [os.path.join(support.ROOT, "tests", "gpu", "fake_libcuda.c")],
        with_core=False,
        shared=True,
    )
    name = make_name()
    body = f"""
        import os, numpy as np, shmstream
        from shmstream import _native
        NAME = {name!r}
        h = shmstream.create(NAME, shape=(3,), gpu_device="cuda:0")
        try:
            os.chown("/dev/shm" + _native.segment_name(NAME), {OTHER_UID}, -1)
            for dev in ("cuda:0", None):
                try:
                    shmstream.open(NAME, gpu_device=dev)
                except shmstream.SegmentOwnerError:
                    pass
                else:
                    raise SystemExit("opened another uid's GPU stream")
            g = shmstream.open(NAME, gpu_device="cuda:0", allow_owner={OTHER_UID})
            assert g.gpu_device == "cuda:0"
            g.close()
            print("ok")
        finally:
            h.close()
            shmstream.unlink(NAME)
    """
    env = {k: v for k, v in os.environ.items() if k != "SHMSTREAM_ALLOW_OWNERS"}
    env["SHMSTREAM_LIBCUDA"] = driver
    proc = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(body)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        out, err = proc.communicate(timeout=support.WAIT * 2)
    finally:
        proc.kill()
        proc.wait()
        for path in glob.glob(f"/dev/shm/fakecuda-{proc.pid}-*"):  # the fake driver's memory
            os.remove(path)
    assert proc.returncode == 0 and out.strip() == "ok", out + err


def test_a_loader_slot_file_of_another_uid_or_not_a_file_is_refused(tmp_path):
    # The pool's root passed the owner check; its slot files are opened by
    # path, so each must belong to the root's owner too.
    import errno as _errno

    path = lp.slot_path(f"owner{os.getpid()}", 0, 1)
    lp.create_slot_file(path, 4096)  # mapped and unmapped again (dropped)
    try:
        lp.map_slot_file(path, 4096, False, owner_uid=os.geteuid())  # ours: maps
        os.chown(path, OTHER_UID, -1)
        with pytest.raises(shmstream.SegmentOwnerError, match=f"uid {OTHER_UID}"):
            lp.map_slot_file(path, 4096, False, owner_uid=os.geteuid())
        os.unlink(path)
        os.mkfifo(path)  # opened without blocking, refused by type
        with pytest.raises(shmstream.ShmstreamOSError) as caught:
            lp.map_slot_file(path, 4096, False, owner_uid=os.geteuid())
        assert caught.value.errno == _errno.ENODEV
    finally:
        os.unlink(path)


def test_an_unusable_allow_owners_entry_is_named_in_a_warning(name, monkeypatch):
    """issue 47, bug 11: "nosuchuser,-3,," was ignored silently."""
    with shmstream.create(name, shape=(2,), dtype=np.int32):
        monkeypatch.setenv("SHMSTREAM_ALLOW_OWNERS", "nosuchuser,-3,,1234")
        with pytest.warns(RuntimeWarning, match=r"'nosuchuser', '-3' is neither a uid"):
            shmstream.open(name).close()
        monkeypatch.setenv("SHMSTREAM_ALLOW_OWNERS", f"1234, root {OTHER_UID}")
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            shmstream.open(name).close()
