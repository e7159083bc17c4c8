"""The implementations the benchmarks measure shmstream against, one
adapter each, in one place:

- ``stream_*``: the stream benchmark's peers (shmstream, pyshmem, iceoryx2,
  the raw ``multiprocessing.shared_memory`` seqlock, os.pipe), each
  implementing ``_stream/peer.py``'s interface; ``_stream/peers.py`` is
  their registry by name;
- ``_iceoryx2``: iceoryx2's node and the files a run leaves (the stream
  and channel benchmarks);
- ``_tachyon``: Tachyon's channel, for the channel benchmark;
- ``_rawshm``: a raw ``multiprocessing.shared_memory`` segment, the
  baseline of the stream, arrays and create benchmarks.
"""
