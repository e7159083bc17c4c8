"""Who may talk to a bridge: Zenoh's user/password authentication and
mutual TLS, set from a password file or a certificate trio, and the rule
that a bridge which listens or connects does so only with one of them
(or when its user says ``insecure``).

A password file holds ``user:password`` lines (Zenoh's dictionary format).
Its first entry is what this bridge proves when it connects; every entry
is someone who may connect to it. Like ssh with a private key, a file that
group or others can read, or that another user owns, is refused.

Nothing here imports zenoh: these functions take a ``zenoh.Config``.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import ssl
import stat
from typing import Any

from ..common import _checks
from ..errors import (
    InsecureBridgeError,
    ShmstreamFileNotFoundError,
    ShmstreamOSError,
    ShmstreamTypeError,
    ShmstreamValueError,
)

log = logging.getLogger("shmstream.bridge")

#: Endpoint protocols that mutual TLS covers (QUIC uses the same TLS settings).
TLS_PROTOCOLS = ("tls", "quic")

#: Status-stream code of each authentication mode (0: a bridge too old to say).
AUTH_CODES = {"none": 1, "tls": 2, "password": 3, "tls+password": 4}

HOW = (
    "give a password file (--password-file FILE, or password_file= in Python; one "
    "'user:password' line, mode 0600, the same file on both hosts), or mutual TLS "
    "(--tls-cert FILE --tls-key FILE --tls-ca FILE, or tls_cert=, tls_key=, tls_ca=), or a "
    "Zenoh --config that sets transport.auth.usrpwd (user, password, dictionary_file) or "
    "TLS with enable_mtls, only tls/ or quic/ endpoints and multicast scouting off; "
    "--insecure (insecure=True) lets anyone who reaches the port in (docs/bridge.md, 'Who "
    "can connect')"
)


def _file(flag: str, path: Any) -> str:
    """An existing, readable regular file named by ``flag``, as a str."""
    if not isinstance(path, (str, os.PathLike)):
        raise ShmstreamTypeError(f"{flag} must be a file path, not {type(path).__name__}")
    path = os.fspath(path)
    if not isinstance(path, str) or not path:
        raise ShmstreamTypeError(f"{flag} must be a non-empty file path")
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise ShmstreamFileNotFoundError(f"{flag}: {path!r} does not exist") from None
    except OSError as exc:
        raise ShmstreamOSError(exc.errno, f"{flag}: cannot stat {path!r}: {exc.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        raise ShmstreamValueError(f"{flag}: {path!r} is not a regular file")
    if not os.access(path, os.R_OK):
        raise ShmstreamOSError(
            errno.EACCES, f"{flag}: {path!r} is not readable by this user (uid {os.geteuid()})"
        )
    return os.path.abspath(path)  # Zenoh reads it when the session opens


def read_password_file(path: Any) -> tuple[str, str]:
    """(user, password) of the first entry of a private ``user:password``
    file, after checking every line as Zenoh will. Errors never quote a
    line: it holds a password."""
    path = _file("password file", path)
    st = os.stat(path)
    if st.st_uid not in (os.geteuid(), 0):
        raise InsecureBridgeError(
            f"password file {path!r} belongs to uid {st.st_uid}, not to this user (uid "
            f"{os.geteuid()}) or root: whoever owns it can change who may connect; use a "
            "file of your own"
        )
    if st.st_mode & 0o077:
        raise InsecureBridgeError(
            f"password file {path!r} is accessible by group or others (mode "
            f"{stat.S_IMODE(st.st_mode):04o}); make it private: chmod 600 {path}"
        )
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except UnicodeDecodeError:
        raise ShmstreamValueError(f"password file {path!r} is not UTF-8 text") from None
    except OSError as exc:
        raise ShmstreamOSError(exc.errno, f"cannot read password file {path!r}: {exc}") from None
    entries = []
    for number, raw in enumerate(text.split("\n"), 1):  # as Zenoh reads it: str::lines, trim
        line = raw.strip()
        if not line:
            continue
        user, sep, password = line.partition(":")
        if not sep or not user.strip() or not password.strip():
            raise ShmstreamValueError(
                f"password file {path!r}, line {number}: expected 'user:password' with a "
                "non-empty user and password"
            )
        entries.append((user.strip(), password.strip()))
    if not entries:
        raise ShmstreamValueError(
            f"password file {path!r} is empty: write one 'user:password' line"
        )
    return entries[0]


def endpoints(cfg: Any, which: tuple[str, ...] = ("listen", "connect")) -> list[str]:
    """Every listen and connect endpoint of ``cfg`` (``which``: only
    those). Zenoh may key them by
    mode ({router: [...], peer: [...]}, as its defaults do, which listen on
    tcp/[::]:0 in peer mode when a file says nothing): those of ``cfg``'s
    mode."""
    node_mode = json.loads(cfg.get_json("mode")) or "peer"
    found: list[str] = []
    for part in which:
        value = json.loads(cfg.get_json(f"{part}/endpoints"))
        if isinstance(value, dict):
            value = value.get(node_mode)
        found.extend(str(e) for e in value or ())
    return found


def _protocol(endpoint: str) -> str:
    return endpoint.split("/", 1)[0].lower()


def apply(
    cfg: Any,
    password_file: Any = None,
    tls_cert: Any = None,
    tls_key: Any = None,
    tls_ca: Any = None,
) -> None:
    """Configure ``cfg`` for a password file and/or mutual TLS. With TLS,
    ``tcp/`` endpoints become ``tls/`` (same address) and only TLS links
    are opened; any other protocol is refused."""
    if password_file is not None:
        user, password = read_password_file(password_file)
        usrpwd = {
            "user": user,
            "password": password,
            "dictionary_file": _file("password file", password_file),
        }
        for key, value in usrpwd.items():
            cfg.insert_json5(f"transport/auth/usrpwd/{key}", json.dumps(value))
    tls = {"--tls-cert": tls_cert, "--tls-key": tls_key, "--tls-ca": tls_ca}
    given = [flag for flag, value in tls.items() if value is not None]
    if not given:
        return
    if len(given) != len(tls):
        missing = [flag for flag in tls if flag not in given]
        raise ShmstreamValueError(
            f"mutual TLS needs --tls-cert, --tls-key and --tls-ca together (tls_cert=, tls_key=, "
            f"tls_ca=); {', '.join(missing)} missing"
        )
    cert, key, ca = (_file(flag, value) for flag, value in tls.items())
    settings: dict[str, str | bool] = {
        "root_ca_certificate": ca,
        "listen_certificate": cert,
        "listen_private_key": key,
        "connect_certificate": cert,
        "connect_private_key": key,
        "enable_mtls": True,
    }
    for name, setting in settings.items():
        cfg.insert_json5(f"transport/link/tls/{name}", json.dumps(setting))
    # Only TLS links, also towards peers learnt by scouting or gossip.
    cfg.insert_json5("transport/link/protocols", json.dumps(list(TLS_PROTOCOLS)))
    for which in ("listen/endpoints", "connect/endpoints"):
        eps: Any = json.loads(cfg.get_json(which))
        if isinstance(eps, dict):  # per mode
            eps = {m: _tls_endpoints(e or []) for m, e in eps.items()}
        else:
            eps = _tls_endpoints(eps or [])
        cfg.insert_json5(which, json.dumps(eps))


def _pem_has(path: str, marker: str) -> bool:
    try:
        with open(path, "rb") as f:
            return marker.encode() in f.read(1 << 20)
    except OSError:
        return False


def check_own_tls(cfg: Any) -> None:
    """Our own certificate, key and CA of ``cfg`` (the --tls-* flags' or a
    Zenoh file's), loaded here as a TLS library does when a session opens:
    a file that is not PEM, or a key that is not the certificate's, is
    refused naming the file. Zenoh would only fail each handshake, and the
    peers would see nobody answering (issue 47)."""

    def setting(name: str) -> Any:
        try:
            return json.loads(cfg.get_json(f"transport/link/tls/{name}"))
        except Exception:  # noqa: BLE001 - a key this Zenoh does not know
            return None

    cert, key, ca = (
        setting(n) for n in ("listen_certificate", "listen_private_key", "root_ca_certificate")
    )
    if not (isinstance(cert, str) and isinstance(key, str) and isinstance(ca, str)):
        return  # not set as files: Zenoh's own checks
    for flag, path, marker, what in (
        ("--tls-cert", cert, "-----BEGIN CERTIFICATE-----", "a PEM certificate"),
        ("--tls-key", key, "PRIVATE KEY-----", "a PEM private key"),
        ("--tls-ca", ca, "-----BEGIN CERTIFICATE-----", "a PEM CA certificate"),
    ):
        if not _pem_has(path, marker):
            raise ShmstreamValueError(
                f"{flag} {path!r} is not {what} (no '{marker}' line): our own TLS files are "
                "unusable; give the PEM files (openssl x509 -outform PEM converts DER)"
            )
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    try:
        ctx.load_verify_locations(cafile=ca)
    except (ssl.SSLError, OSError) as exc:
        raise ShmstreamValueError(
            f"--tls-ca {ca!r} cannot be loaded as a CA certificate ({exc}): our own TLS files "
            "are unusable"
        ) from None
    try:
        ctx.load_cert_chain(cert, key, password=lambda: b"")
    except (ssl.SSLError, OSError) as exc:
        if getattr(exc, "reason", None) == "KEY_VALUES_MISMATCH":
            raise ShmstreamValueError(
                f"--tls-key {key!r} is not the private key of --tls-cert {cert!r}: our own TLS "
                "files are unusable; give the key the certificate was made for"
            ) from None
        raise ShmstreamValueError(
            f"--tls-cert {cert!r} with --tls-key {key!r} cannot be loaded ({exc}): our own TLS "
            "files are unusable (an encrypted key is not supported)"
        ) from None


def _tls_endpoints(eps: list[str]) -> list[str]:
    out = []
    for e in eps:
        proto = _protocol(e)
        if proto not in (*TLS_PROTOCOLS, "tcp"):
            raise ShmstreamValueError(
                f"endpoint {e!r} is not covered by mutual TLS: use tls/ (or tcp/, made tls/) "
                "or quic/ endpoints with --tls-cert/--tls-key/--tls-ca"
            )
        out.append("tls/" + e.split("/", 1)[1] if proto == "tcp" else e)
    return out


def mode(cfg: Any) -> str:
    """How ``cfg`` authenticates peers: "none", "tls", "password" or
    "tls+password". Passwords count when ``cfg`` both proves one (user and
    password) and checks others' (a dictionary file); TLS when client
    certificates are required (enable_mtls), every endpoint is TLS, and
    peers found by multicast scouting are reached over TLS only (scouting
    off, or transport.link.protocols limited to tls and quic)."""
    usrpwd = json.loads(cfg.get_json("transport/auth/usrpwd")) or {}
    password = all(usrpwd.get(k) for k in ("user", "password", "dictionary_file"))
    protocols = json.loads(cfg.get_json("transport/link/protocols"))
    tls_only = bool(protocols) and all(p in TLS_PROTOCOLS for p in protocols)
    scouting = json.loads(cfg.get_json("scouting/multicast/enabled")) is not False
    tls = (
        bool(json.loads(cfg.get_json("transport/link/tls/enable_mtls")))
        and all(_protocol(e) in TLS_PROTOCOLS for e in endpoints(cfg))
        and (tls_only or not scouting)
    )
    if tls and password:
        return "tls+password"
    return "tls" if tls else "password" if password else "none"


def reaches_out(cfg: Any) -> bool:
    """Whether a session of ``cfg`` listens, connects or scouts at all."""
    multicast = json.loads(cfg.get_json("scouting/multicast/enabled"))
    return bool(endpoints(cfg)) or multicast is not False


def require(cfg: Any, insecure: Any, who: str) -> str:
    """The authentication mode of ``cfg``; InsecureBridgeError when it is
    "none" and the session would listen, connect or scout, unless
    ``insecure``."""
    insecure = _checks.check_bool("insecure", insecure)
    found = mode(cfg)
    if found == "none" and reaches_out(cfg) and not insecure:
        where = ", ".join(endpoints(cfg)) or "multicast scouting"
        raise InsecureBridgeError(
            f"{who} refuses to listen or connect ({where}) without authentication: anyone "
            f"who reaches the port could read and forge every stream and channel; {HOW}"
        )
    return found


def warn_insecure(who: str, cfg: Any) -> None:
    log.warning(
        "%s runs WITHOUT authentication (--insecure) at %s: anyone who reaches it can "
        "read, forge and drop what it carries",
        who,
        ", ".join(endpoints(cfg)) or "multicast scouting",
    )
