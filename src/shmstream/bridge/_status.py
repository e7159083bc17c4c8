"""The status stream beside every mirror: ``<mirror>@bridge``.

A mirror is written by the importing bridge, so its own ``producer_alive()``
says whether *that bridge* runs. Whether the *source* is still there (the
exporting bridge reachable, the producer on the far host alive) is written by
the importing bridge into this small stream of one record, rewritten on
every change; readers need no Zenoh to read it (``mirror_status(name)``),
and can wait for a change with ``read_new`` on it. It also keeps what a
restarted importing bridge needs to continue without duplicates: the source
generation, the count offset and, for channels, the delivered position.
Nothing here imports zenoh.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import numpy as np

import shmstream
from ..errors import ShmstreamFileNotFoundError, ShmstreamValueError
from . import _wire
from ._auth import AUTH_CODES

log = logging.getLogger("shmstream.bridge")

STATUS_SUFFIX = "@bridge"
KIND_CODES = {"stream": 1, "channel": 2}

STATUS_DTYPE = np.dtype(
    [
        ("bad_samples", "<u8"),  # samples refused (size, dtype, header) and dropped
        ("lost_messages", "<u8"),  # channel: gaps in the source positions seen
        ("generation", "<u8"),  # source stream's instance id (8 bytes)
        ("count_offset", "<i8"),  # mirror count = source count + offset
        ("delivered", "<u8"),  # channel: end position delivered into the mirror
        ("changed_ns", "<u8"),  # when exporter_alive / producer_alive last changed
        ("dropped_samples", "<u8"),  # good samples dropped: the import's queue was full
        ("exporter_alive", "u1"),  # the exporting bridge is reachable
        ("producer_alive", "u1"),  # the source's producer runs (as its bridge last said)
        ("kind", "u1"),  # 1 stream, 2 channel
        ("eof", "u1"),  # channel: the source producer closed
        ("auth", "u1"),  # how the importing bridge authenticates peers (_auth.AUTH_CODES)
        ("failed", "u1"),  # the import's worker stopped on an unexpected error
    ]
)


def status_name(name: str) -> str:
    return name + STATUS_SUFFIX


def is_status_name(name: str) -> bool:
    return name.endswith(STATUS_SUFFIX)


def is_mirror(name: str, kind: str) -> bool:
    """Whether ``name`` has the status stream of a bridge mirror of ``kind``:
    an import opens an existing segment only then (it never writes into a
    stream or channel that a local producer made)."""
    try:
        h = shmstream.open(status_name(name), readonly=True)
    except (FileNotFoundError, ValueError, shmstream.CorruptStreamError):
        return False
    try:
        return (
            h.dtype == STATUS_DTYPE
            and h.shape == (1,)
            and int(h.read()[0]["kind"]) == KIND_CODES[kind]
        )
    except Exception:  # noqa: BLE001 - unreadable: not a mirror we made
        return False
    finally:
        h.close()


def _describe(rec: np.ndarray, h: Any) -> dict[str, Any]:
    exporter = bool(rec["exporter_alive"])
    producer = bool(rec["producer_alive"])
    kind = {v: k for k, v in KIND_CODES.items()}.get(int(rec["kind"]), "unknown")
    auth = {v: k for k, v in AUTH_CODES.items()}.get(int(rec["auth"]), "unknown")
    return {
        "kind": kind,
        "source_alive": exporter and producer,
        "exporter_alive": exporter,
        "producer_alive": producer,
        "importer_alive": h.producer_alive() and not rec["failed"],
        "failed": bool(rec["failed"]),
        "bad_samples": int(rec["bad_samples"]),
        "dropped_samples": int(rec["dropped_samples"]),
        "lost_messages": int(rec["lost_messages"]),
        "eof": bool(rec["eof"]),
        "changed": int(rec["changed_ns"]) / 1e9,
        "auth": auth,
        "insecure": auth == "none",
        "updates": h.count,
    }


def mirror_status(name: str) -> dict[str, Any]:
    """The bridge's view of the source of mirror ``name``.

    Keys: ``source_alive`` (the exporting bridge is reachable and the
    source's ``producer_alive``), ``exporter_alive``, ``producer_alive``
    (for a stream: its CREATOR process runs, not necessarily its writer,
    as ``creator_alive()``; for a channel: its producer end is held),
    ``importer_alive`` (the bridge that writes the mirror runs, and its
    import of this mirror has not ``failed``: stopped on an unexpected
    error, logged; restart the bridge), ``bad_samples`` (refused and
    dropped), ``dropped_samples`` (good samples dropped because the import's
    bounded queue was full; a channel asks for them again),
    ``lost_messages`` (channels),
    ``eof`` (channels: the source producer closed), ``changed`` (UNIX time of
    the last liveness change), ``updates`` (the status stream's count: wait
    for the next change with ``shmstream.open(name + '@bridge').read_new()``),
    ``auth`` (how the importing bridge authenticates its peers: "none",
    "tls", "password" or "tls+password"), ``insecure`` (``auth == "none"``:
    it was started with ``insecure=True``, and anyone could have sent what
    the mirror holds).
    FileNotFoundError if ``name`` is not a bridge mirror."""
    try:
        h = shmstream.open(status_name(name), readonly=True)
    except FileNotFoundError:
        raise ShmstreamFileNotFoundError(
            f"{name!r} is not a bridge mirror (no status stream {status_name(name)!r}); "
            "mirrors are made by 'shmstream bridge --import'"
        ) from None
    try:
        if h.dtype != STATUS_DTYPE:
            raise ShmstreamValueError(f"{status_name(name)!r} is not a bridge status stream")
        return _describe(h.read()[0], h)
    finally:
        h.close()


class StatusWriter:
    """The importing bridge's end of one status stream."""

    def __init__(self, mirror: str, kind: str) -> None:
        self.name = status_name(mirror)
        self._lock = threading.Lock()
        try:
            self._h = shmstream.create(self.name, shape=(1,), dtype=STATUS_DTYPE)
            self.previous: dict[str, int] | None = None
        except FileExistsError:
            self._h = shmstream.open(self.name)
            if self._h.dtype != STATUS_DTYPE or self._h.shape != (1,):
                self._h.close()
                raise ShmstreamValueError(
                    f"{self.name!r} exists and is not a bridge status stream; remove it "
                    f"with shmstream.unlink({self.name!r}) or import under another prefix"
                ) from None
            old = self._h.read()[0]
            self.previous = {f: int(old[f]) for f in ("generation", "count_offset", "delivered")}
        self._rec = np.zeros(1, STATUS_DTYPE)
        if self.previous:
            for f, v in self.previous.items():
                self._rec[0][f] = v
        self._rec[0]["kind"] = KIND_CODES[kind]
        self._rec[0]["changed_ns"] = time.time_ns()
        self._h.write(self._rec)

    def get(self, field: str) -> int:
        return int(self._rec[0][field])

    def set(self, **fields: int) -> None:
        """Store the fields and publish the record (one write)."""
        with self._lock:
            rec = self._rec[0]
            if any(
                k in fields and int(rec[k]) != int(fields[k])
                for k in ("exporter_alive", "producer_alive")
            ):
                rec["changed_ns"] = time.time_ns()
            for k, v in fields.items():
                rec[k] = v
            if self._h.closed:
                return
            self._h.write(self._rec)

    def add(self, field: str, n: int = 1) -> None:
        with self._lock:
            self._rec[0][field] += n
            if not self._h.closed:
                self._h.write(self._rec)

    def close(self, unlink: bool = False) -> None:
        with self._lock:
            if unlink:
                shmstream.unlink(self.name)
            self._h.close()


class MirrorSide:
    """What both importers (stream and channel) do with the status stream:
    apply the exporter's status messages and count bad samples. Needs
    ``self.status`` (a StatusWriter), ``self.local`` and ``label``."""

    label = "mirror"
    status: StatusWriter
    local: str

    def _on_status(self, sample: Any) -> None:
        try:
            alive = _wire.loads(sample.payload.to_bytes()).get("producer_alive")
            if not isinstance(alive, bool):
                raise _wire.BadSample(f"producer_alive is {alive!r}")
        except _wire.BadSample as exc:
            self._bad(f"bad status message: {exc}")
            return
        self.status.set(producer_alive=int(alive))

    def _bad(self, why: Any, n: int = 1) -> None:
        self._count("bad_samples", n, "dropped bad sample", why)

    def _dropped(self, why: str) -> None:
        self._count("dropped_samples", 1, "dropped sample", why)

    def _count(self, field: str, n: int, what: str, why: Any) -> None:
        self.status.add(field, n)
        total = self.status.get(field)
        if total <= 10 or total % 1000 < n:  # a flood of bad samples must not flood the log
            log.warning("%s %r: %s #%d: %s", self.label, self.local, what, total, why)

    def _failed(self) -> None:
        """The import's worker stopped on an unexpected error (logged by
        _thread): readers of mirror_status see importer_alive False."""
        self.status.set(failed=1)
