"""Channels across the bridge: every message, in order, exactly once while
both bridges live; nothing dropped when one of them dies.

The exporting bridge is the local channel's consumer and releases a
message only once the importing bridge acknowledged it in the mirror ring
(_channel_export.py); the importing bridge is the mirror channel's
producer, and acknowledges what it delivered (_channel_import.py).

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
guard (bad ones are counted), and queues at most ``_queue_bytes``: what a
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
