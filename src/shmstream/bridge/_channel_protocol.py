"""Channels across the bridge: every message, in order, exactly once while
both bridges live; nothing dropped when one of them dies.

Exporter: the bridge is the local channel's consumer. It reads messages in
place (``drain_zero_copy``) and keeps each one *unreleased* until the
importing bridge acknowledges that it is in the mirror ring. So the bytes in
flight never exceed the source ring (a slow link or a slow far consumer
fills the ring, and the local producer's ``send`` waits, bounded by its own
timeout); and if the exporting bridge dies, a restarted one takes over the
consumer end, receives the unacknowledged messages again (the ring's
at-least-once rule for a dead consumer) and the importer drops those it
already delivered by their ring position. Messages go out in batches
(``_wire``) with Zenoh's BLOCK congestion control on a reliable link.

Importer: the bridge is the mirror channel's producer. A Zenoh callback only
queues batches (it never blocks Zenoh); a worker thread sends each record
into the mirror (waiting while the mirror ring is full or its consumer is
away), records the delivered position in the status stream, and acknowledges
it. It sends the acknowledgement again every ``HEARTBEAT_S`` so that a
restarted exporter finds it. When the source producer closes (or dies), the
importer closes the mirror's producer end after the last message: the far
consumer gets ``ChannelClosedError``, as it would locally.

One channel has one consumer: an exporter serves one importing bridge at a
time; a second one is refused (logged) until the first is gone.

What a peer says is input (docs/bridge.md, "Failures and bad input"). The
exporter binds to an importer only on an ack of its channel's generation
from a bridge that holds a live import token for the channel (Zenoh
liveliness; a made-up id holds none), and rebinds only when that token is
gone (the importer's session closed or its lease ran out); an ack never
counts above what this exporter has sent, so no ack can release a message
that was not put on the wire. The importer takes the source generation from
the export's metadata only, closes its mirror only on an end of stream that
the exporter confirms when asked (``verify``), decodes every batch under a
guard (bad ones are counted), and queues at most ``queue_bytes``: what a
full queue drops is counted in ``dropped_samples`` and sent again by the
exporter on request (the ack's RESEND flag).

Each side is a module of its own (_channel_export.py, _channel_import.py):
they run on different hosts and share only the wire format (_wire.py) and
the timings below.
"""

#: How long either side's thread waits for work before it checks whether
#: it should stop.
IDLE_S = 0.1
#: at most one RESEND request (importer) and resend (exporter) this often
RESEND_EVERY_S = 0.05
