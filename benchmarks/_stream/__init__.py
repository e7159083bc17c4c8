"""The pieces of the stream benchmark (its command line is ``benchmarks/stream.py``):

- ``peer``: the interface every measured implementation provides, the
  records it returns, the protocol constants and the run's names;
- ``peers``: the registry, by name, of the adapters, one per
  implementation (``benchmarks/peers/stream_*.py``: shmstream, pyshmem,
  iceoryx2, the raw ``multiprocessing.shared_memory`` seqlock, os.pipe);
- ``roundtrip``, ``pingpong``, ``fanout``: the scenarios, written once
  against the interface: rows, repeats, timing, checks, tables, records.

Each adapter owns its timed loops (a call per iteration would be timed too),
the scenarios own everything around them.
"""
