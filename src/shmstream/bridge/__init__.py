"""Streams and channels across machines, over Eclipse Zenoh.

    pip install ".[zenoh]"              # from a checkout
    pip install "shmstream[zenoh]"      # once released

    # camera host: offer every cam/* stream to the hosts that know the password
    shmstream bridge --export 'cam/*' --listen tcp/0.0.0.0:7447 --password-file ~/.bridge-pw
    # real-time computer (the same private file): mirror them here as remote/cam/...
    shmstream bridge --import 'cam/*' --local-prefix remote/ --connect tcp/camhost:7447 \
        --password-file ~/.bridge-pw

The same from Python::

    from shmstream.bridge import Bridge
    with Bridge(imports="cam/*", local_prefix="remote/", connect=["tcp/camhost:7447"],
                password_file="/home/me/.bridge-pw") as b:
        b.run()

Without a password file or TLS certificates (or ``insecure=True``) a bridge
that listens or connects refuses to start: docs/bridge.md, "Who can
connect".

A mirror is an ordinary stream or channel: readers open it with
``shmstream.open`` / ``open_channel`` and need no Zenoh. ``mirror_status``
says whether its source is still there. The key layout, what each sample
carries and the semantics are in docs/bridge.md.

Importing this package does not import zenoh; ``Bridge(...)`` and
``remote_exports()`` raise ModuleNotFoundError naming the extra when it is
missing.
"""

from __future__ import annotations

from ._bridge import Bridge
from ._keys import DEFAULT_PREFIX
from ._remote_exports import remote_exports
from ._session import ZENOH_HINT, make_config, zenoh_available
from ._status import STATUS_DTYPE, STATUS_SUFFIX, mirror_status, status_name

__all__ = [
    "Bridge",
    "DEFAULT_PREFIX",
    "STATUS_DTYPE",
    "STATUS_SUFFIX",
    "ZENOH_HINT",
    "make_config",
    "mirror_status",
    "remote_exports",
    "status_name",
    "zenoh_available",
]
