"""Who may talk to a bridge (issue 32): nobody unless its user says so. A
bridge, ``remote_exports`` and the real ``shmstream bridge`` / ``shmstream
list --remote`` refuse to listen or connect without authentication;
``--insecure`` runs, warns and says so in ``mirror_status``; two bridges
with one password file work end to end; a peer with a wrong password or
none gets nothing; a password file others can read is refused. And a
bridge given a Zenoh configuration file leaves nothing in /dev/shm
(issue 37, bug 2).

Real Zenoh sessions on 127.0.0.1; waits are on the bridges' own events
(an import made, a session opened or refused within its timeout), never
on sleeps.
"""

from __future__ import annotations

import json
import logging
import os
import select
import signal
import socket
import subprocess
import sys
import textwrap
import time
import uuid

import numpy as np
import pytest

zenoh = pytest.importorskip(
    "zenoh", reason="eclipse-zenoh is not installed: pip install 'shmstream[zenoh]'"
)

import shmstream  # noqa: E402
from shmstream.bridge import Bridge, make_config, mirror_status, remote_exports  # noqa: E402

import support  # noqa: E402
from bridge_util import (  # noqa: E402
    BridgeProc,
    auth,
    endpoint,
    free_port,
    password_file,
    write_password_file,
)

WAIT = support.WAIT
FLAGS = ("--password-file", "--tls-cert", "--tls-key", "--tls-ca", "--insecure")
KWARGS = ("password_file=", "tls_cert=", "insecure=True")


def _shmstream(*argv: str, timeout: float = WAIT) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "shmstream", *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _nothing_listens(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


def _strict(cfg, timeout_ms: int):
    """``cfg`` whose zenoh.open raises unless a connect endpoint lets it in
    within ``timeout_ms`` (Zenoh retries until then)."""
    cfg.insert_json5("connect/exit_on_failure", "true")
    cfg.insert_json5("connect/timeout_ms", str(timeout_ms))
    return cfg


# ---- refused by default ------------------------------------------------------------


def test_a_bridge_without_authentication_refuses_to_listen_or_connect(tmp_path):
    port = free_port()
    ep = endpoint(port)
    for kwargs in (
        dict(exports="x", listen=[ep]),
        dict(imports="x", connect=[ep]),
        dict(exports="x", listen=[ep], insecure=False),
    ):
        with pytest.raises(shmstream.InsecureBridgeError) as info:
            Bridge(**kwargs)
        assert isinstance(info.value, ValueError)
        for flag in FLAGS + KWARGS:
            assert flag in str(info.value), (flag, str(info.value))
    with pytest.raises(shmstream.InsecureBridgeError, match="--password-file"):
        remote_exports(connect=[ep], timeout=0.5)
    # Zenoh configuration files that let anyone in count as no authentication:
    # plain tcp; mutual TLS asked for but a tcp endpoint beside it; and mutual
    # TLS with multicast scouting on, which reaches scouted peers over tcp.
    mtls = "transport: { link: { tls: { enable_mtls: true } } },"
    tls_ep = f"tls/127.0.0.1:{port}"
    for extra, eps, scouting in (
        ("", ep, "false"),
        (mtls, ep, "false"),
        (mtls, tls_ep, "true"),
    ):
        cfg = tmp_path / "z.json5"
        cfg.write_text(
            f'{{ mode: "peer", {extra} listen: {{ endpoints: ["{eps}"] }}, '
            f"scouting: {{ multicast: {{ enabled: {scouting} }} }} }}"
        )
        with pytest.raises(shmstream.InsecureBridgeError):
            Bridge(exports="x", config=cfg)
    with pytest.raises(TypeError, match="insecure"):
        Bridge(exports="x", listen=[ep], insecure="yes")
    assert _nothing_listens(port)
    # A bridge that neither listens, connects nor scouts reaches nobody: allowed.
    assert Bridge(exports="x").auth == "none"


def test_the_commands_refuse_to_start_without_authentication():
    port = free_port()
    ep = endpoint(port)
    for argv in (
        ["bridge", "--export", "x", "--listen", ep],
        ["bridge", "--import", "x", "--connect", ep],
        ["list", "--remote", "--connect", ep, "--timeout", "0.5"],
        ["bridge", "--list", "--connect", ep, "--timeout", "0.5"],
    ):
        r = _shmstream(*argv)
        assert r.returncode == 1, (argv, r.stdout, r.stderr)
        assert "without authentication" in r.stderr, (argv, r.stderr)
        assert "Traceback" not in r.stderr
        for flag in FLAGS:
            assert flag in r.stderr, (argv, flag, r.stderr)
    assert _nothing_listens(port)
    # --help names the flags too.
    r = _shmstream("bridge", "--help")
    for flag in FLAGS:
        assert flag in r.stdout
    r = _shmstream("list", "--help")
    for flag in FLAGS:
        assert flag in r.stdout


# ---- --insecure -----------------------------------------------------------------------


def test_insecure_bridges_run_warn_and_say_so_in_mirror_status(make_name, caplog):
    group, prefix = make_name("ins"), make_name("m") + "/"
    name, local = f"{group}/cam", f"{prefix}{group}/cam"
    ns, ep = f"ins{uuid.uuid4().hex[:6]}", endpoint(free_port())
    src = shmstream.create(name, shape=(4,), dtype=np.int32)
    src.write(np.arange(4, dtype=np.int32))
    exporter = BridgeProc(exports=[f"{group}/*"], namespace=ns, listen=[ep], insecure=True)
    try:
        with caplog.at_level(logging.WARNING, logger="shmstream.bridge"):
            bridge = Bridge(
                imports=[f"{group}/*"],
                remote_namespace=ns,
                local_prefix=prefix,
                connect=[ep],
                insecure=True,
                unlink_on_close=True,
            ).start()
        try:
            assert "WITHOUT authentication" in caplog.text and ep in caplog.text
            assert bridge.auth == "none"
            bridge.wait_for_import(local, timeout=WAIT)
            m = shmstream.open(local, readonly=True)
            assert (m.read_after(0, timeout=WAIT) == np.arange(4)).all()
            m.close()
            st = mirror_status(local)
            assert st["auth"] == "none" and st["insecure"] is True
        finally:
            bridge.close()
    finally:
        exporter.stop()
        src.unlink()


def test_the_command_with_insecure_runs_and_warns_at_start():
    ep = endpoint(free_port())
    proc = subprocess.Popen(
        [
            *(sys.executable, "-m", "shmstream", "bridge", "--export", "x", "--listen", ep),
            *("--insecure", "--namespace", f"ins{os.getpid()}"),
        ],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        seen = []
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:  # reads until the warning or the end
            if not select.select([proc.stderr], [], [], deadline - time.monotonic())[0]:
                break
            line = proc.stderr.readline()
            if not line:
                break
            seen.append(line)
            if "WITHOUT authentication" in line:
                break
        assert any("WARNING" in ln and "WITHOUT authentication" in ln for ln in seen), seen
        assert proc.poll() is None  # it runs
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=WAIT)
    assert proc.returncode == 0


# ---- a password ------------------------------------------------------------------------


def test_two_bridges_with_one_password_file_carry_streams_and_channels(make_name):
    """The exporter is the real command with --password-file; the importer a
    Bridge with password_file=."""
    group, prefix = make_name("pw"), make_name("m") + "/"
    s_name, c_name = f"{group}/cam", f"{group}/cmd"
    s_local, c_local = prefix + s_name, prefix + c_name
    ns, ep = f"pw{uuid.uuid4().hex[:6]}", endpoint(free_port())
    src = shmstream.create(s_name, shape=(8,), dtype=np.float32)
    src.write(np.full(8, 3, np.float32), frame_id=3)
    tx = shmstream.channel(c_name, 4096)
    proc = subprocess.Popen(
        [
            *(sys.executable, "-m", "shmstream", "bridge", "--export", f"{group}/*"),
            *("--listen", ep, "--namespace", ns, "--password-file", password_file(), "--quiet"),
        ],
        stderr=subprocess.PIPE,
        text=True,
    )
    rx = None
    try:
        with Bridge(
            imports=[f"{group}/*"],
            remote_namespace=ns,
            local_prefix=prefix,
            connect=[ep],
            unlink_on_close=True,
            **auth(),
        ) as bridge:
            assert bridge.auth == "password"
            bridge.wait_for_import(s_local, timeout=WAIT)
            bridge.wait_for_import(c_local, timeout=WAIT)
            m = shmstream.open(s_local, readonly=True)
            pub = m.read_after_publication(0, timeout=WAIT)
            assert (pub.payload == 3).all() and pub.frame_id == 3
            src.write(np.full(8, 4, np.float32), frame_id=4)
            assert m.read_after_publication(1, timeout=WAIT).frame_id == 4
            m.close()
            tx.send(b"over a password", type_id=7)
            rx = shmstream.open_channel(c_local)
            msg = rx.recv(timeout=WAIT)
            assert (msg.type_id, bytes(msg.data)) == (7, b"over a password")
            for local in (s_local, c_local):
                st = mirror_status(local)
                assert st["auth"] == "password" and st["insecure"] is False, st
                assert st["source_alive"]
            rx.close()
            rx = None
    finally:
        if rx is not None:
            rx.close()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=WAIT)
        tx.close()
        shmstream.unlink(c_name)
        src.unlink()
    assert proc.returncode == 0, err


def test_a_peer_with_a_wrong_password_or_none_gets_nothing(make_name, tmp_path):
    group = make_name("pw")
    name = f"{group}/cam"
    ns, ep = f"pw{uuid.uuid4().hex[:6]}", endpoint(free_port())
    wrong = write_password_file(tmp_path / "wrong", "suite", "not-the-password")
    src = shmstream.create(name, shape=(4,))
    src.write(np.ones(4))
    exporter = BridgeProc(exports=[f"{group}/*"], namespace=ns, listen=[ep])  # suite password
    bad_prefix, good_prefix = make_name("bad") + "/", make_name("good") + "/"
    bad = good = None
    try:
        exporter.wait_export(name)
        common = dict(imports=[f"{group}/*"], remote_namespace=ns, connect=[ep])
        bad = Bridge(local_prefix=bad_prefix, password_file=wrong, **common).start()
        # The right password, started after the wrong one, gets the import.
        good = Bridge(local_prefix=good_prefix, unlink_on_close=True, **common, **auth()).start()
        good.wait_for_import(good_prefix + name, timeout=WAIT)
        # Raw sessions that must be let in within 3 s, Zenoh retrying all along:
        # with the password one is; with a wrong one or none, none is.
        ok = zenoh.open(_strict(make_config(connect=[ep], **auth()), int(WAIT * 1000)))
        ok.close()
        for kwargs in ({"password_file": wrong}, {}):
            with pytest.raises(zenoh.ZError, match="Unable to connect"):
                zenoh.open(_strict(make_config(connect=[ep], **kwargs), 3000))
        # The wrong bridge: no peer, no import, no mirror.
        assert bad.peers == 0 and bad.imported == {}
        with pytest.raises(FileNotFoundError):
            shmstream.open(bad_prefix + name)
        # remote_exports: nobody lets it in, which it says.
        for kwargs in ({"password_file": wrong}, {"insecure": True}):
            with pytest.raises(shmstream.NoPeerError, match="let us in"):
                remote_exports(connect=[ep], timeout=1, **kwargs)
        assert [e["name"] for e in remote_exports(connect=[ep], timeout=5, **auth())] == [name]
    finally:
        for b in (good, bad):
            if b is not None:
                b.close()
        exporter.stop()
        src.unlink()


def test_remote_exports_says_whether_nothing_listens_or_our_credentials_were_refused(caplog):
    """issue 47, bug 9: both ended as "nobody answered ... is a bridge
    running there". Nothing listening and a listener that never lets a
    Zenoh session in (a plain socket: what a refused handshake looks like
    from here) are told apart by a TCP connect."""
    port = free_port()
    assert _nothing_listens(port)
    with pytest.raises(shmstream.NoPeerError, match="nothing accepts connections at tcp/"):
        remote_exports(connect=[endpoint(port)], timeout=0.5, **auth())
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        with pytest.raises(shmstream.NoPeerError, match="refused our credentials"):
            remote_exports(connect=[endpoint(listener.getsockname()[1])], timeout=0.5, **auth())
        with caplog.at_level(logging.WARNING, logger="shmstream.bridge"):
            ep = endpoint(listener.getsockname()[1])
            with Bridge(imports=["x"], connect=[ep], **auth()).start(timeout=0.5):
                pass
        assert "refused our credentials" in caplog.text  # a bridge says it in its log


def test_a_password_file_others_can_read_is_refused(tmp_path):
    ep = endpoint(free_port())
    for mode in (0o644, 0o640, 0o604, 0o620):
        f = write_password_file(tmp_path / f"pw{mode:o}", "rig", "s3cret-value", mode=mode)
        with pytest.raises(shmstream.InsecureBridgeError, match="chmod 600") as info:
            Bridge(exports="x", listen=[ep], password_file=f)
        assert f"{mode:04o}" in str(info.value) and "s3cret" not in str(info.value)
        with pytest.raises(shmstream.InsecureBridgeError, match="chmod 600"):
            remote_exports(connect=[ep], password_file=f)
    r = _shmstream("bridge", "--export", "x", "--listen", ep, "--password-file", f)
    assert r.returncode == 1 and "chmod 600" in r.stderr, r.stderr
    assert "s3cret" not in r.stderr and "Traceback" not in r.stderr
    if os.geteuid() == 0:  # a private file that someone else owns
        f = write_password_file(tmp_path / "theirs", "rig", "s3cret-value")
        os.chown(f, 65534, 65534)
        with pytest.raises(shmstream.InsecureBridgeError, match="belongs to uid 65534"):
            Bridge(exports="x", listen=[ep], password_file=f)


def test_password_and_tls_files_are_checked_at_start(tmp_path):
    ep = endpoint(free_port())
    with pytest.raises(FileNotFoundError, match="does not exist"):
        Bridge(exports="x", listen=[ep], password_file=tmp_path / "none")
    with pytest.raises(ValueError, match="not a regular file"):
        Bridge(exports="x", listen=[ep], password_file=tmp_path)
    f = tmp_path / "pw"
    f.write_text("rig:fine\nno-colon-s3cret\n")
    f.chmod(0o600)
    with pytest.raises(ValueError, match="line 2") as info:
        Bridge(exports="x", listen=[ep], password_file=f)
    assert "s3cret" not in str(info.value)
    f.write_text("\n\n")
    with pytest.raises(ValueError, match="empty"):
        Bridge(exports="x", listen=[ep], password_file=f)
    pem = tmp_path / "x.pem"
    pem.write_text("not checked before the session opens\n")
    with pytest.raises(ValueError, match="--tls-ca"):
        Bridge(exports="x", listen=[ep], tls_cert=pem, tls_key=pem)
    with pytest.raises(FileNotFoundError, match="--tls-key"):
        Bridge(exports="x", listen=[ep], tls_cert=pem, tls_key=tmp_path / "no", tls_ca=pem)
    with pytest.raises(ValueError, match="not covered by mutual TLS"):
        Bridge(exports="x", listen=["udp/127.0.0.1:7447"], tls_cert=pem, tls_key=pem, tls_ca=pem)
    r = _shmstream("bridge", "--export", "x", "--listen", ep, "--tls-cert", str(pem))
    assert r.returncode == 1 and "--tls-key" in r.stderr, r.stderr


def test_configurations_that_authenticate_are_accepted(tmp_path):
    """A password file or TLS certificates, as flags or in the user's own
    Zenoh file, make the bridge's mode; tcp/ endpoints become tls/."""
    ep = endpoint(free_port())
    pw = password_file()
    assert Bridge(exports="x", listen=[ep], password_file=pw).auth == "password"
    pem = tmp_path / "x.pem"
    pem.write_text("checked by Zenoh when the session opens\n")
    tls = dict(tls_cert=pem, tls_key=pem, tls_ca=pem)
    b = Bridge(exports="x", listen=[ep], connect=[ep], **tls)
    assert b.auth == "tls"
    assert json.loads(b._config.get_json("listen/endpoints")) == ["tls/" + ep[4:]]
    assert json.loads(b._config.get_json("connect/endpoints")) == ["tls/" + ep[4:]]
    assert Bridge(exports="x", listen=[ep], password_file=pw, **tls).auth == "tls+password"
    usrpwd = tmp_path / "usrpwd.json5"
    usrpwd.write_text(
        f'{{ mode: "peer", listen: {{ endpoints: ["{ep}"] }}, transport: {{ auth: {{ usrpwd: '
        f'{{ user: "rig", password: "p", dictionary_file: "{pw}" }} }} }} }}'
    )
    assert Bridge(exports="x", config=usrpwd).auth == "password"
    mtls = tmp_path / "mtls.json5"
    mtls.write_text(
        f'{{ mode: "peer", listen: {{ endpoints: ["tls/127.0.0.1:{ep.rsplit(":", 1)[1]}"] }}, '
        "transport: { link: { tls: { enable_mtls: true } } }, "
        "scouting: { multicast: { enabled: false } } }"
    )
    assert Bridge(exports="x", config=mtls).auth == "tls"


# ---- a configuration file leaves nothing in /dev/shm (issue 37, bug 2) ------------------


def test_a_bridge_given_a_zenoh_config_file_leaves_nothing_in_dev_shm(tmp_path):
    why = support.private_shm_available()
    if why:
        pytest.skip(why)
    cfg = tmp_path / "z.json5"
    cfg.write_text(
        '{ mode: "peer", scouting: { multicast: { enabled: false } }, listen: { endpoints: [] } }'
    )
    proc = support.run_in_private_shm(
        textwrap.dedent(f"""
            import os, subprocess, sys
            from shmstream.bridge import Bridge
            def pools():
                return [f for f in os.listdir("/dev/shm") if f.endswith(".zenoh")]
            # Zenoh unlinks its pool file when the session object is freed:
            # never in a killed bridge, and here only once nothing holds it.
            bridge = Bridge(exports="x", config={str(cfg)!r}, namespace="shm").start()
            bridge.close()
            assert not pools(), f"Zenoh's shared-memory pool left behind: {{pools()}}"
            killed = subprocess.run([sys.executable, "-c", (
                "import os, signal; from shmstream.bridge import Bridge; "
                "Bridge(exports='x', config={str(cfg)!r}, namespace='k').start(); "
                "os.kill(os.getpid(), signal.SIGKILL)")])
            assert killed.returncode == -9, killed
            assert not pools(), f"a killed bridge left Zenoh's pool behind: {{pools()}}"
        """),
        size="64m",
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    shm = make_config(config=cfg).get_json("transport/shared_memory/enabled")
    assert json.loads(shm) is False
