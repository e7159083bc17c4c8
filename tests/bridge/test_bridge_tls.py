"""docs/bridge.md's TLS examples, run: two bridges with mutual TLS
configured the Zenoh way (--config), and the same with --tls-cert /
--tls-key / --tls-ca; throw-away certificates from a throw-away CA, on
127.0.0.1. A peer whose certificate the CA did not sign gets nothing."""

from __future__ import annotations

import shutil
import subprocess
import textwrap
import uuid

import numpy as np
import pytest

pytest.importorskip(
    "zenoh", reason="eclipse-zenoh is not installed: pip install 'shmstream[zenoh]'"
)
if shutil.which("openssl") is None:
    pytest.skip("the openssl command is needed to make test certificates", allow_module_level=True)

import shmstream
from shmstream.bridge import Bridge, mirror_status, remote_exports, status_name

import support
from bridge_util import BridgeProc, free_port


def _openssl(*args: str, cwd) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def _certificates(d) -> None:
    """ca.pem; camhost-{key,cert}.pem (server, for localhost); rtc-{key,cert}.pem (client)."""
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    _openssl(
        "req",
        "-x509",
        *ec,
        "-keyout",
        "ca-key.pem",
        "-out",
        "ca.pem",
        "-days",
        "2",
        "-subj",
        "/CN=shmstream test CA",
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign,cRLSign",
        cwd=d,
    )
    for who, cn in (("camhost", "localhost"), ("rtc", "rtc")):
        (d / f"{who}.ext").write_text(
            f"subjectAltName=DNS:{cn},IP:127.0.0.1\nbasicConstraints=CA:FALSE\n"
            "keyUsage=digitalSignature\nextendedKeyUsage=serverAuth,clientAuth\n"
        )
        _openssl(
            "req",
            *ec,
            "-keyout",
            f"{who}-key.pem",
            "-out",
            f"{who}.csr",
            "-subj",
            f"/CN={cn}",
            cwd=d,
        )
        _openssl(
            "x509",
            "-req",
            "-in",
            f"{who}.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca-key.pem",
            "-CAcreateserial",
            "-out",
            f"{who}-cert.pem",
            "-days",
            "2",
            "-extfile",
            f"{who}.ext",
            cwd=d,
        )


def test_two_bridges_under_mutual_tls(tmp_path, make_name):
    _certificates(tmp_path)
    port = free_port()
    (tmp_path / "camhost.json5").write_text(
        textwrap.dedent(f"""
        {{
          mode: "peer",
          listen: {{ endpoints: ["tls/localhost:{port}"] }},
          scouting: {{ multicast: {{ enabled: false }} }},
          transport: {{
            link: {{
              tx: {{ lease: 3000 }},
              tls: {{
                root_ca_certificate: "{tmp_path}/ca.pem",
                listen_private_key: "{tmp_path}/camhost-key.pem",
                listen_certificate: "{tmp_path}/camhost-cert.pem",
                enable_mtls: true,
              }},
            }},
          }},
        }}""")
    )
    (tmp_path / "rtc.json5").write_text(
        textwrap.dedent(f"""
        {{
          mode: "peer",
          connect: {{ endpoints: ["tls/localhost:{port}"] }},
          listen: {{ endpoints: [] }},
          scouting: {{ multicast: {{ enabled: false }} }},
          transport: {{
            link: {{
              tx: {{ lease: 3000 }},
              tls: {{
                root_ca_certificate: "{tmp_path}/ca.pem",
                connect_private_key: "{tmp_path}/rtc-key.pem",
                connect_certificate: "{tmp_path}/rtc-cert.pem",
                enable_mtls: true,
              }},
            }},
          }},
        }}""")
    )
    group, prefix = make_name("tls"), make_name("m") + "/"
    name, local = f"{group}/cam", f"{prefix}{group}/cam"
    ns = f"tls{uuid.uuid4().hex[:6]}"
    src = shmstream.create(name, shape=(16,), dtype=np.float32)
    src.write(np.arange(16, dtype=np.float32), frame_id=7)
    exporter = importer = None
    try:
        exporter = BridgeProc(
            exports=[f"{group}/*"], namespace=ns, config=str(tmp_path / "camhost.json5")
        )
        importer = BridgeProc(
            imports=[f"{group}/*"],
            remote_namespace=ns,
            local_prefix=prefix,
            config=str(tmp_path / "rtc.json5"),
            unlink_on_close=True,
        )
        importer.wait_import(local)
        m = shmstream.open(local, readonly=True)
        pub = m.read_after_publication(0, timeout=support.WAIT)
        assert (pub.payload == np.arange(16)).all() and pub.frame_id == 7
        src.write(np.ones(16, np.float32), frame_id=8)
        pub = m.read_after_publication(1, timeout=support.WAIT)
        assert (pub.payload == 1).all() and pub.frame_id == 8
        st = mirror_status(local)
        assert st["source_alive"] and st["auth"] == "tls" and not st["insecure"]
        m.close()
    finally:
        for b in (importer, exporter):
            if b is not None:
                b.stop()
        src.unlink()
        for n in (local, status_name(local)):
            shmstream.unlink(n)


def test_two_bridges_with_the_tls_flags_and_a_stranger_left_out(tmp_path, make_name):
    """tls_cert/tls_key/tls_ca (the command's --tls-* flags): tcp/ endpoints
    become tls/, each side proves itself with a certificate of the CA; a
    bridge with a certificate of another CA never connects."""
    _certificates(tmp_path)
    stranger = tmp_path / "stranger"
    stranger.mkdir()
    _certificates(stranger)  # a CA of its own, and certificates it signed
    port = free_port()
    group, prefix = make_name("tlsf"), make_name("m") + "/"
    name, local = f"{group}/cam", f"{prefix}{group}/cam"
    ns = f"tlsf{uuid.uuid4().hex[:6]}"
    src = shmstream.create(name, shape=(4,), dtype=np.int16)
    src.write(np.arange(4, dtype=np.int16), frame_id=5)

    def tls(d, who: str) -> dict:
        return dict(
            tls_cert=str(d / f"{who}-cert.pem"),
            tls_key=str(d / f"{who}-key.pem"),
            tls_ca=str(d / "ca.pem"),
        )

    exporter = importer = None
    try:
        exporter = BridgeProc(
            exports=[f"{group}/*"],
            namespace=ns,
            listen=[f"tcp/127.0.0.1:{port}"],
            **tls(tmp_path, "camhost"),
        )
        common = dict(imports=[f"{group}/*"], remote_namespace=ns, local_prefix=prefix)
        with Bridge(
            connect=[f"tcp/localhost:{port}"], **common, **tls(stranger, "rtc")
        ) as outsider:
            importer = BridgeProc(
                connect=[f"tcp/localhost:{port}"],
                unlink_on_close=True,
                **common,
                **tls(tmp_path, "rtc"),
            )
            importer.wait_import(local)
            m = shmstream.open(local, readonly=True)
            pub = m.read_after_publication(0, timeout=support.WAIT)
            assert (pub.payload == np.arange(4)).all() and pub.frame_id == 5
            m.close()
            st = mirror_status(local)
            assert st["auth"] == "tls" and not st["insecure"]
            # The stranger started first; the CA's own importer is in: the
            # stranger is not, and made nothing.
            assert outsider.auth == "tls" and outsider.peers == 0 and outsider.imported == {}
    finally:
        for b in (importer, exporter):
            if b is not None:
                b.stop()
        src.unlink()
        for n in (local, status_name(local)):
            shmstream.unlink(n)


def test_our_own_unusable_tls_files_are_named_before_a_peer_is_asked(tmp_path):
    """issue 47, bug 9: a key of another certificate, a DER certificate or
    a CA file that holds no certificate ended as "nobody answered". They
    are refused when the session would open, naming the file."""
    _certificates(tmp_path)
    other = tmp_path / "other"
    other.mkdir()
    _certificates(other)
    _openssl("x509", "-in", "camhost-cert.pem", "-outform", "DER", "-out", "cert.der", cwd=tmp_path)
    good = dict(
        tls_cert=str(tmp_path / "camhost-cert.pem"),
        tls_key=str(tmp_path / "camhost-key.pem"),
        tls_ca=str(tmp_path / "ca.pem"),
    )
    ep = f"tcp/127.0.0.1:{free_port()}"
    for bad, match in (
        ({"tls_key": str(other / "camhost-key.pem")}, "is not the private key of --tls-cert"),
        ({"tls_cert": str(tmp_path / "cert.der")}, "--tls-cert .* is not a PEM certificate"),
        ({"tls_ca": str(tmp_path / "camhost-key.pem")}, "--tls-ca .* is not a PEM CA cert"),
    ):
        with pytest.raises(shmstream.ShmstreamValueError, match=match):
            remote_exports(connect=[ep], timeout=0.5, **{**good, **bad})
        with pytest.raises(shmstream.ShmstreamValueError, match=match):
            Bridge(exports="x", listen=[ep], **{**good, **bad}).start()
