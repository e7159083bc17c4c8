"""The bridge's Zenoh key layout, and stream names <-> key chunks.

Data of an export travels on ``<prefix>/<namespace>/<name>`` (the key a
plain Zenoh subscriber uses). Everything else the bridge says sits under a
chunk that starts with ``@``: Zenoh treats such chunks as *verbatim* (no
wildcard matches them), so ``<prefix>/**`` sees data only.

    <prefix>/<ns>/<name>                      stream frames, channel batches
    <prefix>/@meta/<ns>/<name>                queryable: what the export is
    <prefix>/@status/<ns>/<name>              exporter -> importers: source producer state
    <prefix>/@ack/<ns>/<name>                 channel importer -> exporter: delivered up to
    <prefix>/@live/<ns>/<bridge>/<kind>/<name>  liveliness token of one export
    <prefix>/@imp/<ns>/<bridge>/<name>        liveliness token of one channel import

A name is any shmstream name (1..255 UTF-8 bytes); a key chunk may not be
empty and may not hold ``* $ ? # @``. So every byte outside
``A-Z a-z 0-9 . _ - ~`` is percent-encoded (UTF-8), ``/`` is kept as the
chunk separator when no chunk would be empty (``cam/left`` stays
``cam/left``), and encoded as ``%2F`` otherwise. The namespace is one chunk,
encoded the same way. Nothing here imports zenoh.
"""

from __future__ import annotations

import fnmatch
import re
from urllib.parse import quote, unquote

from ..errors import ShmstreamValueError

DEFAULT_PREFIX = "shmstream"
KINDS = ("stream", "channel")

_SAFE = "._-~"  # quote() keeps letters and digits; these too
_PREFIX_OK = re.compile(r"^[A-Za-z0-9._~-]+(/[A-Za-z0-9._~-]+)*$")


def encode_name(name: str) -> str:
    """Key chunks for a stream or channel name (see the module doc)."""
    chunks = name.split("/")
    if all(chunks):
        return "/".join(quote(c, safe=_SAFE) for c in chunks)
    return quote(name, safe=_SAFE)  # empty chunk: encode the slashes too


def encode_chunk(text: str) -> str:
    """One key chunk (a namespace, a bridge id) for any text."""
    if not isinstance(text, str) or not text:
        raise ShmstreamValueError(f"a namespace must be a non-empty str, not {text!r}")
    return quote(text, safe=_SAFE)


def decode(text: str) -> str:
    return unquote(text, errors="strict")


def check_prefix(prefix: str) -> str:
    """A key prefix: one or more plain chunks (no wildcard, no ``@``)."""
    if not isinstance(prefix, str) or not _PREFIX_OK.match(prefix):
        raise ShmstreamValueError(
            f"key prefix {prefix!r} must be chunks of letters, digits and '._-~' "
            "joined by '/', e.g. 'shmstream' or 'lab/shmstream'"
        )
    return prefix


class Keys:
    """Key expressions of one bridge (one prefix, one namespace)."""

    def __init__(self, prefix: str, namespace: str) -> None:
        self.prefix = check_prefix(prefix)
        self.namespace = namespace
        self.ns = encode_chunk(namespace)

    # -- keys of this bridge's own exports ---------------------------------

    def data(self, name: str, ns: str | None = None) -> str:
        return f"{self.prefix}/{ns or self.ns}/{encode_name(name)}"

    def meta(self, name: str, ns: str | None = None) -> str:
        return f"{self.prefix}/@meta/{ns or self.ns}/{encode_name(name)}"

    def meta_all(self) -> str:
        return f"{self.prefix}/@meta/{self.ns}/**"

    def status(self, name: str, ns: str | None = None) -> str:
        return f"{self.prefix}/@status/{ns or self.ns}/{encode_name(name)}"

    def ack(self, name: str, ns: str | None = None) -> str:
        return f"{self.prefix}/@ack/{ns or self.ns}/{encode_name(name)}"

    def live(self, bridge_id: str, kind: str, name: str) -> str:
        return f"{self.prefix}/@live/{self.ns}/{bridge_id}/{kind}/{encode_name(name)}"

    def live_all(self) -> str:
        """Every export of every bridge under this prefix."""
        return f"{self.prefix}/@live/**"

    def importer(self, ns: str, bridge_id: str, name: str) -> str:
        return f"{self.prefix}/@imp/{ns}/{bridge_id}/{encode_name(name)}"

    def parse_live(self, key: str) -> tuple[str, str, str, str] | None:
        """(namespace chunk, bridge id, kind, name) of an export token, or
        None for a key that is not one."""
        head = f"{self.prefix}/@live/"
        if not key.startswith(head):
            return None
        parts = key[len(head) :].split("/", 3)
        if len(parts) != 4 or parts[2] not in KINDS:
            return None
        try:
            return parts[0], parts[1], parts[2], decode(parts[3])
        except UnicodeDecodeError:
            return None

    def parse_importer(self, key: str) -> tuple[str, str] | None:
        """(bridge id, name) of a channel-import token on this namespace."""
        head = f"{self.prefix}/@imp/{self.ns}/"
        if not key.startswith(head):
            return None
        parts = key[len(head) :].split("/", 1)
        if len(parts) != 2:
            return None
        try:
            return parts[0], decode(parts[1])
        except UnicodeDecodeError:
            return None


def matches(name: str, pattern: str) -> bool:
    """fnmatch without case folding ('*' also matches '/')."""
    return fnmatch.fnmatchcase(name, pattern)
