#!/usr/bin/env python3
"""atheris harness: the DataLoader slot descriptor a worker sends to the
main process (``shmstream.loader._batch.Descriptor``) and its decode path
(``_received`` + ``unwrap``: claim the slot, build tensors over its bytes).

    python tests/fuzz/fuzz_py_loader.py [libFuzzer flags] CORPUS_DIR...

Each input gets a fresh pool (two slots) and a real descriptor made by the
worker's packing path (``_worker.SlotCollate._pack``) for a small batch; the input
then replaces its fields. Input: [control byte: bit 0 slot index, 1
generation, 2 sequence, 3 used bytes, 4 metas, 5 structure are replaced,
bit 6 fresh][k i64][gen i64][seq i64][used i64][nmetas]{pos i64, dtype,
ndim, sizes, strides, flags}*[npids]{pid}*[slot bytes...]. The tensors
unwrap returns are read whole. Allowed: fuzzlib.ALLOWED and the loader's
documented RuntimeError ("shmstream.torch.DataLoader: ...").
"""

from __future__ import annotations

import gc
import io
import os
import pickle
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch
from torch.utils.data import default_collate

import fuzzlib as fl

with fl.instrumented():
    from shmstream.loader import _batch, _loader_pool, _worker

DTYPES = (torch.float32, torch.uint8, torch.int64, torch.float16, torch.bool, torch.complex64)


class _Ref:
    def __init__(self, pid: int) -> None:
        self.pid = pid


class _Structure(pickle.Pickler):
    """A batch structure as the worker's _Packer writes it: tensors as
    persistent ids."""

    def persistent_id(self, obj: object) -> object:
        return obj.pid if isinstance(obj, _Ref) else None


def _metas(r: fl.Reader) -> list:
    out = []
    for _ in range(r.u8() % 4):
        pos, dtype, ndim = r.int(8), DTYPES[r.u8() % len(DTYPES)], r.u8() % 4
        size = tuple(r.u8() % 64 for _ in range(ndim))
        stride = tuple(r.int(1) for _ in range(ndim))
        flags = r.u8()
        out.append((pos, dtype, size, stride, bool(flags & 1), bool(flags & 2)))
    return out


def _structure(r: fl.Reader) -> bytes:
    buf = io.BytesIO()
    _Structure(buf, protocol=pickle.HIGHEST_PROTOCOL).dump(
        [_Ref(r.u8() % 6) for _ in range(r.u8() % 4)]
    )
    return buf.getvalue()


def _touch(obj: object) -> None:
    if isinstance(obj, torch.Tensor):
        obj.detach().clone()
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            _touch(v)


def _unwrap(pool: _loader_pool.Pool, data: bytes) -> None:
    coll = _worker.SlotCollate(default_collate)
    coll.token, coll.instance_id = pool.token, pool.instance_id
    client = coll._attach()
    samples = [torch.arange(4, dtype=torch.float32) + i for i in range(2)]
    d = coll._pack(client, samples)
    r = fl.Reader(data)
    ctl = r.u8()
    k, gen, seq, used = r.int(8), r.int(8), r.int(8), r.int(8)
    metas = _metas(r)
    structure = _structure(r)
    # each bit of ctl replaces one field of the good descriptor by fuzzed bytes
    fuzzed = (k, gen, seq, used, metas, structure)
    for bit, (field, value) in enumerate(
        zip(("k", "gen", "seq", "used", "metas", "structure"), fuzzed)
    ):
        if ctl & (1 << bit):
            setattr(d, field, value)
    d.fresh = bool(ctl & 64)
    rest = r.rest()
    if d.k >= 0 and client.maps.get(0):
        buf = client.maps[0][1]
        n = min(len(rest), buf.numel())
        buf[:n].copy_(torch.frombuffer(bytearray(rest[:n]) or bytearray(1), dtype=torch.uint8)[:n])
    received = pickle.loads(pickle.dumps(d))  # as the worker queue carries it
    d.armed = False
    _touch(received.unwrap())


def _one(data: bytes) -> None:
    pool = _loader_pool.Pool(2, 1 << 20)
    _batch.pools[pool.token] = pool
    try:
        _unwrap(pool, data)
    except RuntimeError as exc:
        if not str(exc).startswith("shmstream.torch.DataLoader:"):
            raise
    finally:
        gc.collect()  # tensors over the slot hand it back
        _worker._clients.pop(pool.token, None)
        pool.destroy()


test_one_input = fl.guarded(_one)

if __name__ == "__main__":
    fl.main(test_one_input)
