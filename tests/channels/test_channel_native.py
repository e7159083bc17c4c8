"""Channels with a native end: the example C producer and consumer in
examples/, compiled here with the system C compiler against
include/shmstream.h and the core's C files."""

from __future__ import annotations

import os
import shutil
import subprocess

import numpy as np
import pytest

import shmstream
from shmstream.errors import ChannelClosedError

import support
from channel_util import pattern

ROOT = support.ROOT


def build(tmp_path_factory, prog: str) -> str:
    out = str(tmp_path_factory.mktemp("cbin") / prog)
    return support.compile_c(out, [f"examples/{prog}.c"])


@pytest.fixture(scope="module")
def c_producer(tmp_path_factory):
    return build(tmp_path_factory, "c_producer")


@pytest.fixture(scope="module")
def c_consumer(tmp_path_factory):
    return build(tmp_path_factory, "c_consumer")


def test_c_producer_to_python_consumer_bytes(name, c_producer):
    rx = shmstream.channel(name, 1 << 14, role="consumer")
    n, size = 3000, 700  # a 16 KiB ring wraps many times
    proc = subprocess.Popen(
        [c_producer, name, str(n), str(size)], stdout=subprocess.PIPE, text=True
    )
    try:
        for i in range(n):
            m = rx.recv(timeout=30)
            assert m.type_id == i and m.data == pattern(i, size)
        with pytest.raises(ChannelClosedError):
            rx.recv(timeout=30)
        assert proc.wait(30) == 0 and proc.stdout.read().startswith(f"sent {n}")
    finally:
        proc.kill()
        proc.wait()
        rx.close()


def test_c_producer_frames_arrive_as_arrays_and_dlpack_tensors(name, c_producer):
    torch = pytest.importorskip("torch")
    rx = shmstream.channel(name, 1 << 16, role="consumer")
    n = 2000
    proc = subprocess.Popen(
        [c_producer, name, str(n), "--frames", "256", "--batch", "8"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        base = np.arange(256, dtype=np.float32)
        i = 0
        while i < n:
            with rx.drain_zero_copy(64, timeout=30) as msgs:
                for m in msgs:
                    t = torch.from_dlpack(m)
                    assert t.dtype == torch.float32 and t.shape == (256,)
                    np.testing.assert_array_equal(t.numpy(), base + i)
                    i += 1
        m = None
        with pytest.raises(ChannelClosedError):
            rx.recv(timeout=30)
        assert proc.wait(30) == 0
    finally:
        proc.kill()
        proc.wait()
        rx.close()


def test_python_producer_to_c_consumer(name, c_consumer):
    tx = shmstream.channel(name, 1 << 13)
    proc = subprocess.Popen([c_consumer, name], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        sizes = [i % 900 for i in range(2500)]
        for i, size in enumerate(sizes):
            tx.send(pattern(i, size), type_id=i, timeout=30)
        tx.close()
        out, _ = proc.communicate(timeout=30)
        assert proc.returncode == 0, out
        assert out.strip() == f"received {len(sizes)} messages, {sum(sizes)} bytes"
    finally:
        proc.kill()
        proc.wait()
        tx.close()


def test_the_c_header_compiles_as_cplusplus(tmp_path):
    cxx = shutil.which("c++") or shutil.which("g++")
    if cxx is None:
        pytest.skip("no C++ compiler")
    src = tmp_path / "h.cpp"
    src.write_text(
        '#include "shmstream.h"\nint main() { ss_channel *c = ss_channel_new(); '
        "ss_channel_free(c); ss_segment *s = ss_segment_new(); ss_segment_free(s); "
        "return 0; }\n"
    )
    subprocess.run(
        [cxx, "-std=c++17", "-fsyntax-only", "-I", os.path.join(ROOT, "include"), str(src)],
        check=True,
        capture_output=True,
        text=True,
    )


@pytest.mark.parametrize("handle", ["ss_segment", "ss_channel"])
def test_the_public_header_keeps_the_handles_opaque(tmp_path, handle):
    # docs/C-API.md: a program cannot depend on a handle's layout.
    cc = support.c_compiler()
    if cc is None:
        pytest.skip("no C compiler on PATH")
    src = tmp_path / "h.c"
    src.write_text(f'#include "shmstream.h"\nunsigned long n = sizeof({handle});\n')
    proc = subprocess.run(
        [cc, "-std=gnu11", "-fsyntax-only", "-I", os.path.join(ROOT, "include"), str(src)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode != 0 and "incomplete" in proc.stderr


C_HOLDS_PROGRAM = r"""
#include <stdio.h>
#include <string.h>
#include "shmstream.h"
#include "shmstream_unstable.h"

int main(int argc, char **argv) {
  (void)argc;
  const char *name = argv[1];
  ss_channel *rx = ss_channel_new(), *tx = ss_channel_new();
  if (ss_channel_create(rx, name, 4096, SS_ROLE_CONSUMER, 0) ||
      ss_channel_open(tx, name, strlen(name), SS_ROLE_PRODUCER))
    return 1;
  for (int i = 0; i < 4; i++) { /* 100-byte messages: 128-byte records */
    void *payload, *meta;
    if (ss_channel_acquire_tx(tx, 100, 0, -1, &payload, &meta)) return 2;
    memset(payload, i, 100);
    ss_channel_commit_tx(tx, 100, (uint32_t)i, 0);
  }
  ss_channel_flush(tx);
  uint64_t end[3];
  ss_msg m;
  for (int i = 0; i < 3; i++) { /* three zero-copy messages, held */
    if (ss_channel_acquire_rx(rx, 0, &m) || ss_channel_hold_rx(rx)) return 3;
    end[i] = m.end;
  }
  printf("held %llu %llu %llu\n", (unsigned long long)end[0], (unsigned long long)end[1],
         (unsigned long long)end[2]);
  ss_channel_unhold_rx(rx, end[1]);
  printf("second given back: tail %llu\n", (unsigned long long)ss_channel_rx_released(rx));
  ss_channel_unhold_rx(rx, end[0]);
  printf("first given back: tail %llu\n", (unsigned long long)ss_channel_rx_released(rx));
  ss_channel_flush_rx(rx);
  printf("flushed: tail %llu\n", (unsigned long long)ss_channel_rx_released(rx));
  if (ss_channel_acquire_rx(rx, 0, &m)) return 4; /* the fourth, copied */
  ss_channel_skip_rx(rx);
  ss_channel_done_rx(rx);
  printf("copied one done: tail %llu\n", (unsigned long long)ss_channel_rx_released(rx));
  ss_channel_unhold_rx(rx, end[2]);
  printf("third given back: tail %llu\n", (unsigned long long)ss_channel_rx_released(rx));
  ss_channel_free(tx);
  ss_channel_free(rx);
  ss_channel_unlink(name, strlen(name));
  return 0;
}
"""


def test_the_core_frees_the_ring_over_the_prefix_of_messages_no_one_holds(name, tmp_path):
    # include/shmstream_channel.h, ss_channel_hold_rx: the rule the binding's
    # zero-copy messages use, held by a C consumer. Records given back out of
    # order free nothing until every earlier one is given back; the tail is
    # published in batches (flush_rx publishes what is given back); a copied
    # message after a held one waits for it.
    out = support.run_c_program(tmp_path, C_HOLDS_PROGRAM, name)
    assert out == [
        "held 128 256 384",
        "second given back: tail 0",
        "first given back: tail 0",  # 256 bytes free: under an eighth of the ring, not published
        "flushed: tail 256",
        "copied one done: tail 256",  # behind the third, still held
        "third given back: tail 512",  # nothing held: the copied one goes with it
    ]
