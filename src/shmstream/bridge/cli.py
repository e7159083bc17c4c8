"""``shmstream bridge`` and ``shmstream list --remote``: their options and
commands, added to the ``shmstream`` parser by shmstream/cli/bridge.py. Importing
this module does not import zenoh; running a command without it prints how
to install the extra."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
import time
from typing import Any

from ..cli._common import number
from ._keys import DEFAULT_PREFIX
from ._session import ZENOH_HINT

PROG = "shmstream"


def add_session_arguments(p: argparse.ArgumentParser) -> None:
    """The Zenoh options shared by ``bridge`` and ``list --remote``."""
    g = p.add_argument_group("Zenoh session")
    g.add_argument(
        "--config",
        metavar="FILE",
        help="Zenoh configuration file (JSON5): TLS, access control, scouting, "
        "routers...; without it the bridge listens on nothing and does not scout",
    )
    g.add_argument(
        "--listen",
        action="append",
        default=[],
        metavar="ENDPOINT",
        help="accept connections on this Zenoh endpoint, e.g. tcp/0.0.0.0:7447 (repeatable)",
    )
    g.add_argument(
        "--connect",
        action="append",
        default=[],
        metavar="ENDPOINT",
        help="connect to a bridge or router at this endpoint, e.g. tcp/camhost:7447 (repeatable)",
    )
    g.add_argument(
        "--key-prefix",
        default=DEFAULT_PREFIX,
        metavar="PREFIX",
        help=f"first chunks of every key (default {DEFAULT_PREFIX})",
    )
    a = p.add_argument_group(
        "who may connect",
        "A bridge that listens or connects authenticates its peers: give --password-file, "
        "the three --tls-* files, or a --config that sets either; else it refuses to start "
        "unless --insecure.",
    )
    a.add_argument(
        "--password-file",
        metavar="FILE",
        help="Zenoh user/password authentication: FILE holds 'user:password' lines (mode "
        "0600); the first is this side's, every line may connect. Use the same file on both "
        "hosts. Not encryption: add TLS across networks you do not trust",
    )
    a.add_argument(
        "--tls-cert",
        metavar="FILE",
        help="mutual TLS: this host's certificate (PEM), signed by the --tls-ca; tcp/ "
        "endpoints become tls/",
    )
    a.add_argument("--tls-key", metavar="FILE", help="mutual TLS: this host's private key (PEM)")
    a.add_argument(
        "--tls-ca",
        metavar="FILE",
        help="mutual TLS: the CA certificate (PEM) that every peer's certificate must chain to",
    )
    a.add_argument(
        "--insecure",
        action="store_true",
        help="listen and connect WITHOUT authentication: anyone who reaches the port can "
        "read, forge and drop what the bridge carries (logged as a warning)",
    )


def add_remote_arguments(list_parser: argparse.ArgumentParser) -> None:
    """``shmstream list --remote [session options]``."""
    list_parser.add_argument(
        "--remote",
        action="store_true",
        help="list what bridges reachable over Zenoh export (needs shmstream[zenoh])",
    )
    list_parser.add_argument(
        "--timeout",
        type=number(),
        default=2.0,
        metavar="S",
        help="with --remote: how long to wait for answers (default 2)",
    )
    add_session_arguments(list_parser)


def add_bridge_parser(sub: Any) -> None:
    p = sub.add_parser(
        "bridge",
        help="export and import streams and channels across machines over Eclipse Zenoh "
        "(needs shmstream[zenoh]; see docs/bridge.md)",
        description="Export local streams and channels to Zenoh keys "
        "<key-prefix>/<namespace>/<name>, and mirror remote ones here. Runs until "
        "Ctrl-C or SIGTERM.",
        epilog='Example: on the camera host \'shmstream bridge --export "cam/*" --listen '
        "tcp/0.0.0.0:7447 --password-file ~/.shmstream-bridge'; on the other 'shmstream "
        'bridge --import "cam/*" --local-prefix remote/ --connect tcp/camhost:7447 '
        "--password-file ~/.shmstream-bridge' (the same private file of one "
        "'user:password' line on both hosts).",
    )
    p.add_argument(
        "--export",
        action="append",
        default=[],
        metavar="NAME|GLOB",
        help="export local streams and channels with this name or glob (repeatable)",
    )
    p.add_argument(
        "--import",
        dest="imports",
        action="append",
        default=[],
        metavar="NAME|GLOB",
        help="mirror remote exports with this name or glob (repeatable)",
    )
    p.add_argument(
        "--namespace",
        metavar="NS",
        help="namespace of this bridge's exports (default: the host name)",
    )
    p.add_argument(
        "--remote-namespace",
        default="*",
        metavar="GLOB",
        help="import only from namespaces matching this glob (default: any)",
    )
    p.add_argument(
        "--local-prefix",
        default="",
        metavar="PREFIX",
        help="mirrors are named PREFIX + remote name; '{namespace}' in PREFIX is "
        "the exporter's namespace (default: no prefix)",
    )
    p.add_argument(
        "--unlink-on-exit",
        action="store_true",
        help="remove the mirrors when the bridge stops (default: keep them)",
    )
    p.add_argument(
        "--list", action="store_true", help="print what reachable bridges export, then exit"
    )
    p.add_argument(
        "--timeout",
        type=number(),
        default=2.0,
        metavar="S",
        help="with --list: how long to wait for answers (default 2)",
    )
    p.add_argument(
        "--spin-us",
        type=number(above=False),
        default=5.0,
        metavar="US",
        help="exports spin this long for the next local write before sleeping (default 5)",
    )
    p.add_argument(
        "--max-mirrors",
        type=number(above=False, kind=int),
        default=64,
        metavar="N",
        help="imports make at most N mirrors here (default 64)",
    )
    p.add_argument(
        "--max-mirror-bytes",
        type=number(above=False, kind=int),
        default=1 << 30,
        metavar="BYTES",
        help="the mirrors made here hold at most BYTES together (default 1073741824, 1 GiB)",
    )
    p.add_argument("--quiet", action="store_true", help="log errors only")
    add_session_arguments(p)


def session_arguments(args: argparse.Namespace) -> dict[str, Any]:
    """The keyword arguments of Bridge / remote_exports for the options of
    add_session_arguments: the Zenoh session's (--config, --listen,
    --connect, --key-prefix) and who may connect (--password-file, --tls-*,
    --insecure)."""
    return {
        "config": args.config,
        "listen": args.listen,
        "connect": args.connect,
        "key_prefix": args.key_prefix,
        "password_file": args.password_file,
        "tls_cert": args.tls_cert,
        "tls_key": args.tls_key,
        "tls_ca": args.tls_ca,
        "insecure": args.insecure,
    }


def _missing_zenoh(exc: ImportError) -> int:
    print(f"{PROG}: error: {ZENOH_HINT}", file=sys.stderr)
    return 1


def print_remote(args: argparse.Namespace) -> int:
    """Exit 0 with what reachable bridges export (an empty list too: they
    export nothing), 1 when nobody answered at all."""
    from ..errors import NoPeerError
    from . import remote_exports

    try:
        found = remote_exports(timeout=args.timeout, **session_arguments(args))
    except ImportError as exc:
        return _missing_zenoh(exc)
    except NoPeerError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 1
    if not found:
        print("no remote exports found: the bridges that answered export nothing", file=sys.stderr)
        return 0
    from ..registry import printable  # names come from other machines: escape them

    cols = ("namespace", "kind", "name", "key", "bridge")
    rows = [{c: printable(str(e[c])) for c in cols} for e in found]
    widths = [max(len(c), *(len(e[c]) for e in rows)) for c in cols]
    print("  ".join(c.ljust(w) for c, w in zip(cols, widths)).rstrip())
    for e in rows:
        print("  ".join(e[c].ljust(w) for c, w in zip(cols, widths)).rstrip())
    return 0


#: With --connect and no peer: the first warning after this many seconds,
#: then one every PEER_WARN_EVERY_S while it lasts.
PEER_WARN_AFTER_S = 3.0
PEER_WARN_EVERY_S = 30.0


def _run_watching_peers(
    bridge: Any, connect: list[str], stop: threading.Event, log: logging.Logger
) -> None:
    """Run until ``stop``; with ``connect`` endpoints, say within seconds,
    and then periodically, that none of them answers (a bridge pointed at a
    wrong address would otherwise run silently for ever), and say when one
    does."""
    started = time.monotonic()
    next_warning = started + PEER_WARN_AFTER_S
    warned = False
    while not stop.wait(0.5):
        if not connect:
            continue
        peers = bridge.peers
        now = time.monotonic()
        if peers == 0 and now >= next_warning:
            log.warning(
                "no Zenoh peer answers at %s after %.0f s; still trying (is a bridge "
                "or router listening there, and the port open?)",
                ", ".join(connect),
                now - started,
            )
            next_warning = now + PEER_WARN_EVERY_S
            warned = True
        elif peers and warned:
            log.info("connected: %d Zenoh peer(s) reachable", peers)
            warned = False
            next_warning = now + PEER_WARN_AFTER_S


def cmd_bridge(args: argparse.Namespace) -> int:
    if args.list:
        return print_remote(args)
    if not args.export and not args.imports:
        print(f"{PROG}: error: nothing to do: give --export, --import or --list", file=sys.stderr)
        return 2
    log = logging.getLogger("shmstream.bridge")
    if not log.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("shmstream bridge: %(levelname)s: %(message)s"))
        log.addHandler(handler)
    log.setLevel(logging.ERROR if args.quiet else logging.INFO)
    from . import Bridge

    try:
        bridge = Bridge(
            args.export,
            args.imports,
            namespace=args.namespace,
            remote_namespace=args.remote_namespace,
            local_prefix=args.local_prefix,
            unlink_on_close=args.unlink_on_exit,
            spin_us=args.spin_us,
            **session_arguments(args),
            max_mirrors=args.max_mirrors,
            max_mirror_bytes=args.max_mirror_bytes,
        )
    except ImportError as exc:
        return _missing_zenoh(exc)
    stop = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        bridge.start()
        _run_watching_peers(bridge, args.connect, stop, log)
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        bridge.close()
    return 0
