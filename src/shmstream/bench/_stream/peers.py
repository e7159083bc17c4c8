"""The stream benchmark's peers by name: ``IMPLS`` are the ones ``--peers``
chooses from, in their default order; ``PIPE`` runs in every run (the
wake-up reference)."""
from __future__ import annotations

from .peer import Peer
from .peer_iceoryx2 import Iceoryx2Peer
from .peer_mpshm import MpshmPeer
from .peer_pipe import PipePeer
from .peer_pyshmem import PyshmemPeer
from .peer_shmstream import ShmstreamPeer

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
