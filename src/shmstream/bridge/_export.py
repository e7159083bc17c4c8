"""What every export, stream or channel, is to the bridge's control thread.

Both kinds announce themselves with a liveliness token, are dropped when
their local name comes to hold another object (``source_changed``), and
tell importers whether their producer runs on the status key. Those steps
are the same for both kinds, so they are written once here; what differs
(how frames or messages leave) is in _stream_export.py and
_channel_export.py.
"""

from __future__ import annotations

from typing import Any

import shmstream
from . import _wire


class Export:
    """The base of StreamExport and ChannelExport. A subclass sets
    ``name``, ``meta``, ``_instance`` (the source's instance id),
    ``_session``, ``_zenoh``, ``_live_key``, ``_status_key`` and
    ``_token`` (None until ``announce``)."""

    kind: str
    #: The kind ``shmstream.stat`` reports for the source while it is this
    #: export's: the export's kind, but "milk" for a stream export of
    #: milk's stream ``milk:NAME``.
    source_kind: str
    name: str
    meta: dict[str, Any]
    _instance: str
    _session: Any
    _zenoh: Any
    _live_key: str
    _status_key: str
    _token: Any

    def announce(self) -> None:
        """Declare the liveliness token: importers now find this export."""
        self._token = self._session.liveliness().declare_token(self._live_key)

    # -- the bridge's periodic check (control thread) ----------------------------

    def source_changed(self) -> bool:
        """True if the name now holds another object (or nothing)."""
        try:
            info = shmstream.stat(self.name)
        except (FileNotFoundError, ValueError, shmstream.CorruptStreamError):
            return True
        return info.get("kind") != self.source_kind or info["instance_id"] != self._instance

    def poll(self) -> None:
        """Called at every scan: a stream export reports a change of its
        producer's liveness here; a channel's is its own end of stream
        (ChannelExport._run), so it has nothing to do."""

    def close(self) -> None:
        raise NotImplementedError

    def _put_producer_alive(self, alive: bool) -> None:
        """Tell the importers whether the source's producer runs, reliably."""
        self._session.put(
            self._status_key,
            _wire.dumps({"producer_alive": alive}),
            congestion_control=self._zenoh.CongestionControl.BLOCK,
        )
