"""A GPU stream's CPU side across PID namespaces (docs/containers.md):
its creator in one namespace, a reader in another. The reader gets the
metadata, the lock, read_new wake-ups and the CPU mirror, as any stream's;
the device buffer itself is refused with the reason (CUDA's IPC handles
cannot be opened across PID namespaces), never mapped. Both sides use
tests/gpu/fake_libcuda.c, so these run without a GPU; each side is pid 1 of
its own namespace."""

from __future__ import annotations

import glob
import os

import pytest

import shmstream

import support

HERE = os.path.dirname(os.path.abspath(__file__))

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="unshare --pid needs root (or a user namespace)"
)


@pytest.fixture(scope="module")
def fake_driver(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("fakecuda") / "libcuda_fake.so")
    support.compile_c(out, [os.path.join(HERE, "fake_libcuda.c")], with_core=False, shared=True)
    # The fake driver names its "device memory" /dev/shm/fakecuda-PID-N; a
    # creator that is pid 1 of its namespace leaves fakecuda-1-N behind.
    _remove_pid1_allocations()
    yield out
    _remove_pid1_allocations()


def _remove_pid1_allocations() -> None:
    for entry in glob.glob("/dev/shm/fakecuda-1-*"):
        os.remove(entry)


def _waiters(name: str) -> int:
    return shmstream.stat(name)["waiters"]


def _with_driver(driver: str, body: str) -> str:
    # The driver is loaded at the first GPU call, so the environment set
    # here, before it, is the one it sees; torch must not see a real GPU.
    return (
        f"import os\nos.environ['SHMSTREAM_LIBCUDA'] = {driver!r}\n"
        "os.environ['CUDA_VISIBLE_DEVICES'] = ''\n" + body
    )


def test_a_gpu_stream_s_cpu_side_works_from_another_namespace_and_its_device_is_refused(
    name, children, fake_driver
):
    creator = children(
        _with_driver(
            fake_driver,
            f"""
import numpy as np, shmstream
h = shmstream.create({name!r}, shape=(4,), dtype=np.float32, gpu_device="cuda:0",
                     cpu_mirror=True)
h.write(np.full(4, 1, np.float32), frame_id=1)
say("created", os.getpid())
while (line := hear()) != "end":
    h.write(np.full(4, int(line), np.float32), frame_id=int(line))
    say("wrote", line)
hear()  # until killed
""",
        )
    )
    assert creator.expect("created") == "1"
    reader = children(
        _with_driver(
            fake_driver,
            f"""
import shmstream
h = shmstream.open({name!r})  # no gpu_device: attach if it can, else CPU side
say("device", h.gpu_device, "alive", h.producer_alive())
say("attach_error", h._attach_error)
say("mirror", h.read().tolist())
try:
    shmstream.open({name!r}, gpu_device="cuda:0")
except shmstream.PidNamespaceError as e:
    say("refused", type(e).__name__, str(e))
assert hear() == "next"
pub = h.read_new_publication(timeout=30)
say("got", pub.count, pub.frame_id, pub.payload.tolist())
assert hear() == "dead?"
say("alive", h.producer_alive())
""",
        )
    )
    assert reader.expect("device") == "None alive True"
    why = reader.expect("attach_error")
    assert "another PID namespace" in why and "CUDA's IPC handles" in why, why
    assert reader.expect("mirror") == "[1.0, 1.0, 1.0, 1.0]"
    refused = reader.expect("refused")
    assert refused.startswith("PidNamespaceError"), refused
    assert "cannot map the device buffer" in refused and "--pid=container:" in refused
    reader.tell("next")
    support.wait_until(lambda: _waiters(name) == 1, what="the reader asleep")
    creator.tell("7")
    assert creator.expect("wrote") == "7"
    assert reader.expect("got") == "2 7 [7.0, 7.0, 7.0, 7.0]"
    creator.kill()
    reader.tell("dead?")
    assert reader.expect("alive") == "False"
    reader.finish()
