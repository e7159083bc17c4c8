"""The stream benchmark's peers by name: ``IMPLS`` are the ones ``--peers``
chooses from, in their default order; ``PIPE`` runs in every run (the
wake-up reference)."""

from __future__ import annotations

from .._common import try_import
from ..peers.stream_iceoryx2 import Iceoryx2Peer
from ..peers.stream_mpshm import MpshmPeer
from ..peers.stream_pipe import PipePeer
from ..peers.stream_pyshmem import PyshmemPeer
from ..peers.stream_shmstream import ShmstreamPeer
from .peer import Peer

_CLASSES: dict[str, type[Peer]] = {
    c.name: c for c in (ShmstreamPeer, PyshmemPeer, Iceoryx2Peer, MpshmPeer, PipePeer)
}
IMPLS = ("shmstream", "pyshmem", "iceoryx2", "mpshm")
PIPE = PipePeer.name
OURS = ShmstreamPeer.name  # the implementation every ratio is about


def make_peer(name: str, self_module: str = "shmstream") -> Peer:
    """The peer called ``name``; ``self_module`` is the build of shmstream
    to measure (``--self-module``)."""
    peer = _CLASSES[name]()
    if name == OURS:
        peer.module = self_module
    return peer


class Peers:
    """The peers of this run (``--peers``, in that order, and the os.pipe
    reference), which of them can run here, and why not."""

    def __init__(self, self_module: str, wanted: list[str]) -> None:
        self.self_module = self_module
        self.wanted: list[Peer] = [make_peer(name, self_module) for name in wanted]
        self.pipe = make_peer(PIPE)
        self.ours = next(p for p in self.wanted if p.name == OURS)
        self.missing: dict[str, str] = {}
        for peer in [*self.wanted, self.pipe]:
            mod, why = try_import(peer.module)
            if mod is not None:
                why = peer.unusable(mod)
            if mod is None or why:
                self.missing[peer.name] = why or "not importable"

    def ok(self, peer: Peer) -> bool:
        return peer.name not in self.missing

    def na(self, peer: Peer) -> str:
        """What a missing peer's cells say."""
        return peer.install_hint or f"n/a ({self.missing.get(peer.name, '')})"

    @property
    def available(self) -> list[Peer]:
        return [p for p in self.wanted if self.ok(p)]
