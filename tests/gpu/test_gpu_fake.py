"""GPU stream plumbing on a CPU machine, through a fake CUDA driver.

tests/gpu/fake_libcuda.c implements the driver entry points with host shared
memory (synchronous copies, events always complete). These tests run the real
binding, Python layer and slot/seqlock bookkeeping of GPU streams in child
interpreters with SHMSTREAM_LIBCUDA pointing at it. They prove the plumbing,
not CUDA: ordering, IPC lifetime and speed are checked by tests/gpu/test_gpu_device.py
on a real device (marked ``gpu``).
"""

from __future__ import annotations

import glob
import os
import subprocess
import sys
import textwrap
import uuid

import pytest

import support

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(scope="module")
def fake_driver(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("fakecuda") / "libcuda_fake.so")
    support.compile_c(out, [os.path.join(HERE, "fake_libcuda.c")], with_core=False, shared=True)
    yield out
    for path in glob.glob("/dev/shm/fakecuda-*"):
        try:
            pid = int(os.path.basename(path).split("-")[1])
            os.kill(pid, 0)
        except ProcessLookupError:
            os.remove(path)
        except (ValueError, OSError):
            pass


def run(fake_driver: str, body: str) -> str:
    name = f"gpufake-{uuid.uuid4().hex[:10]}"
    script = f"import numpy as np, shmstream, sys, os\nNAME = {name!r}\n"
    script += "try:\n" + textwrap.indent(textwrap.dedent(body), "    ")
    script += "\nfinally:\n    shmstream.unlink(NAME)\n"
    # CUDA_VISIBLE_DEVICES="": on a machine with a real GPU, torch must not
    # use it (the fake driver's "device pointers" are host memory).
    env = dict(os.environ, SHMSTREAM_LIBCUDA=fake_driver, CUDA_VISIBLE_DEVICES="")
    proc = subprocess.run(
        [sys.executable, "-c", script],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def test_a_fake_driver_makes_gpu_available(fake_driver):
    out = run(fake_driver, "print(shmstream.gpu_available())")
    assert out.strip() == "True"


@pytest.mark.parametrize("mirror", [False, True])
def test_write_then_read_round_trips_through_the_device_buffer(fake_driver, mirror):
    run(
        fake_driver,
        f"""
        h = shmstream.create(NAME, shape=(3, 4), gpu_device="cuda:0", cpu_mirror={mirror})
        assert h.gpu_device == "cuda:0" and h.cpu_mirror is {mirror}
        x = np.arange(12, dtype=np.float32).reshape(3, 4)
        h.write(x, frame_id=9)
        r = h.read()
        assert type(r).__name__ == "CudaArray" and r.__dlpack_device__() == (2, 0)
        assert (r.get() == x).all()
        pub = h.read_publication()
        assert (pub.count, pub.frame_id) == (1, 9)
        # torch is imported on the first GPU operation only where installed,
        # and a CPU-only build is not used (results stay CudaArray above)
        torch = sys.modules.get("torch")
        assert torch is None or not torch.cuda.is_available()
        from shmstream.gpu import device as _gpu
        assert _gpu.cuda_torch() is None
    """,
    )


@pytest.mark.parametrize(
    "stage_max, small_staged, large_staged",
    [(None, True, False), ("0", False, False), (str(8 << 20), True, True)],
)
def test_a_read_stages_payloads_up_to_the_limit_through_host_memory(
    fake_driver, stage_max, small_staged, large_staged
):
    # docs/gpu.md, "Staging small payloads": up to SHMSTREAM_GPU_STAGE_MAX
    # bytes (256 KiB by default) a device-to-device copy goes device to host
    # to device (copy engines only); above it, one device-to-device copy.
    env = "" if stage_max is None else f"os.environ['SHMSTREAM_GPU_STAGE_MAX'] = {stage_max!r}"
    run(
        fake_driver,
        f"""
        {env}
        import ctypes
        lib = ctypes.CDLL(os.environ["SHMSTREAM_LIBCUDA"])
        dtod = ctypes.c_long.in_dll(lib, "fake_dtod_copies")
        dtoh = ctypes.c_long.in_dll(lib, "fake_dtoh_copies")
        for name, side, staged in ((NAME, 100, {small_staged}), (NAME + "l", 1000, {large_staged})):
            h = shmstream.create(name, shape=(side, side), gpu_device="cuda:0")
            x = np.arange(side * side, dtype=np.float32).reshape(side, side)
            h.write(x)
            before = (dtod.value, dtoh.value)
            r = h.read()
            moved = (dtod.value - before[0], dtoh.value - before[1])
            h.close()
            if name != NAME:
                shmstream.unlink(name)
            assert moved == ((0, 1) if staged else (1, 0)), (side, moved)
            assert (r.get() == x).all()
    """,
    )


def test_a_numpy_write_and_cpu_streams_do_not_import_torch(fake_driver):
    run(
        fake_driver,
        """
        h = shmstream.create(NAME, shape=(2,), gpu_device="cuda:0")
        h.write(np.ones(2, np.float32))
        c = shmstream.create(NAME + "-cpu", shape=(2,))
        c.write(np.ones(2)); c.read(); c.unlink()
        assert "torch" not in sys.modules
    """,
    )


def test_a_cpu_torch_tensor_writes_and_a_cpu_only_torch_gives_cuda_arrays(fake_driver):
    pytest.importorskip("torch")
    run(
        fake_driver,
        """
        import torch
        if torch.cuda.is_available():
            sys.exit(0)  # a real CUDA torch: covered by the gpu-marked tests
        h = shmstream.create(NAME, shape=(3,), gpu_device="cuda:0", cpu_mirror=True)
        h.write(torch.arange(3, dtype=torch.float32), frame_id=2)
        r = h.read()
        assert type(r).__name__ == "CudaArray" and r.get().tolist() == [0.0, 1.0, 2.0]
        assert shmstream.open(NAME, gpu_device=False).read().tolist() == [0.0, 1.0, 2.0]
    """,
    )


def test_a_gpu_handle_honours_casting_for_numpy_values(fake_driver):
    # the CPU handle's strict casting, through the same check (issue 23)
    run(
        fake_driver,
        """
        h = shmstream.create(NAME, shape=(2,), dtype=np.int32, gpu_device="cuda:0",
                             cpu_mirror=True)
        big = np.array([2**40, 1], dtype=np.int64)
        h.casting = "safe"
        try:
            h.write(big)
        except TypeError as exc:
            assert isinstance(exc, shmstream.ShmstreamError)
            assert "not a 'safe' cast" in str(exc), exc
        else:
            raise AssertionError("a lossy write passed under casting='safe'")
        assert h.count == 0  # nothing was written
        h.write(np.array([7, 8], dtype=np.int16))  # a safe cast goes through
        assert h.read().get().tolist() == [7, 8]
        h.casting = "unsafe"  # the default converts as np.asarray does
        h.write(big)
        assert h.read().get().tolist() == np.asarray(big, np.int32).tolist()
    """,
    )


def test_a_gpu_handle_honours_casting_for_torch_tensors(fake_driver):
    pytest.importorskip("torch")
    run(
        fake_driver,
        """
        import torch
        if torch.cuda.is_available():
            sys.exit(0)  # a real CUDA torch: covered by the gpu-marked tests
        h = shmstream.create(NAME, shape=(2,), dtype=np.float32, gpu_device="cuda:0",
                             cpu_mirror=True)
        wide = torch.tensor([1.5, 1e300], dtype=torch.float64)
        for casting, source in [("safe", wide), ("same_kind", torch.ones(2, dtype=torch.bfloat16))]:
            h.casting = casting
            try:
                h.write(source)
            except TypeError as exc:
                assert f"{source.dtype} to stream" in str(exc), exc
            else:
                raise AssertionError(f"{source.dtype} passed under casting={casting!r}")
        assert h.count == 0
        h.casting = "same_kind"  # float64 to float32 is a same-kind cast
        h.write(wide[:1].repeat(2))
        h.write(torch.tensor([3.0, 4.0], dtype=torch.float32))  # same dtype: no cast
        assert h.read().get().tolist() == [3.0, 4.0] and h.count == 2
    """,
    )


def test_every_supported_dtype_round_trips(fake_driver):
    run(
        fake_driver,
        """
        for i, dt in enumerate(sorted(shmstream.GPU_SUPPORTED_DTYPES, key=str)):
            name = f"{NAME}-{i}"
            h = shmstream.create(name, shape=(5,), dtype=dt, gpu_device=0)
            try:
                x = (np.arange(5) % 2).astype(dt)
                h.write(x)
                assert (h.read().get() == x).all(), dt
            finally:
                h.unlink()
    """,
    )


def test_publication_crosses_processes(fake_driver):
    run(
        fake_driver,
        """
        import subprocess
        h = shmstream.create(NAME, shape=(4,), dtype=np.int64, gpu_device="cuda:0")
        child = (
            "import shmstream, numpy as np\\n"
            f"h = shmstream.open({NAME!r}, gpu_device='cuda:0')\\n"
            "h.write(np.array([1, 2, 3, 4]), frame_id=5)\\n"
            "h.close()\\n"
        )
        subprocess.run([sys.executable, "-c", child], check=True)
        assert h.count == 1 and h.frame_id == 5
        assert h.read().get().tolist() == [1, 2, 3, 4]
    """,
    )


def test_slots_alternate_so_the_published_frame_is_never_the_one_being_written(fake_driver):
    run(
        fake_driver,
        """
        h = shmstream.create(NAME, shape=(2,), dtype=np.int32, gpu_device="cuda:0")
        ptrs = set()
        for i in range(1, 5):
            h.write(np.array([i, -i], dtype=np.int32))
            ptrs.add(h._gs.published_ptr())
            assert h.read().get().tolist() == [i, -i]
        assert len(ptrs) == 2
    """,
    )


def test_write_view_starts_from_the_current_payload_and_publishes(fake_driver):
    run(
        fake_driver,
        """
        h = shmstream.create(NAME, shape=(3,), dtype=np.float64, gpu_device="cuda:0")
        h.write(np.array([1.0, 2.0, 3.0]))
        with h.write_view(frame_id=4) as view:
            assert (view.get() == [1.0, 2.0, 3.0]).all()
        assert h.count == 2 and h.frame_id == 4
        assert h.read().get().tolist() == [1.0, 2.0, 3.0]
    """,
    )


def test_an_aborted_write_view_leaves_the_stream_inconsistent_until_the_next_write(fake_driver):
    run(
        fake_driver,
        """
        h = shmstream.create(NAME, shape=(2,), gpu_device="cuda:0")
        try:
            with h.write_view():
                raise KeyError("boom")
        except KeyError:
            pass
        try:
            h.read(timeout=0.1)
            raise AssertionError("read after an aborted write_view succeeded")
        except shmstream.InconsistentStreamError:
            pass
        h.write(np.ones(2, np.float32))
        assert h.read().get().tolist() == [1.0, 1.0]
    """,
    )


def test_clear_zeroes_the_device_buffer_and_the_mirror(fake_driver):
    run(
        fake_driver,
        """
        h = shmstream.create(NAME, shape=(3,), gpu_device="cuda:0", cpu_mirror=True)
        h.write(np.full(3, 7, np.float32))
        cpu = shmstream.open(NAME, gpu_device=False)
        assert cpu.read().tolist() == [7.0, 7.0, 7.0]
        h.clear()
        assert h.read().get().tolist() == [0.0, 0.0, 0.0]
        assert cpu.read().tolist() == [0.0, 0.0, 0.0] and h.count == 2
    """,
    )


def test_compatibility_mode_keeps_the_mirror_readable_by_cpu_only_handles(fake_driver):
    run(
        fake_driver,
        """
        h = shmstream.create(NAME, shape=(2, 2), gpu_device="cuda:0", cpu_mirror=True)
        cpu = shmstream.open(NAME, gpu_device=False)
        assert cpu.gpu_device is None and cpu.cpu_mirror
        h.write(np.eye(2, dtype=np.float32), frame_id=3)
        assert (cpu.read() == np.eye(2)).all()
        try:
            cpu.write(np.zeros((2, 2)))
            raise AssertionError("a CPU-only handle wrote to a GPU stream")
        except RuntimeError as exc:
            assert "gpu_device" in str(exc)
    """,
    )


def test_read_new_waits_for_a_newer_publication(fake_driver):
    run(
        fake_driver,
        """
        import threading
        h = shmstream.create(NAME, shape=(1,), dtype=np.int32, gpu_device="cuda:0")
        r = shmstream.open(NAME, gpu_device="cuda:0")
        try:
            r.read_new(timeout=0.05)
            raise AssertionError("read_new returned without a write")
        except TimeoutError:
            pass
        t = threading.Timer(0.05, lambda: h.write(np.array([42], np.int32)))
        t.start()
        assert r.read_new(timeout=5).get().tolist() == [42]
        t.join()
    """,
    )


def test_pinned_buffer_writes(fake_driver):
    run(
        fake_driver,
        """
        h = shmstream.create(NAME, shape=(4,), dtype=np.uint16, gpu_device="cuda:0")
        buf = h.pinned_buffer()
        buf[:] = [1, 2, 3, 4]
        h.write(buf)
        assert h.read().get().tolist() == [1, 2, 3, 4]
    """,
    )


def test_a_dead_creator_makes_payload_reads_fail_clearly(fake_driver):
    run(
        fake_driver,
        """
        import subprocess
        child = (
            "import shmstream, numpy as np, sys\\n"
            f"h = shmstream.create({NAME!r}, shape=(2,), gpu_device='cuda:0', cpu_mirror=True)\\n"
            "h.write(np.array([5, 6], np.float32))\\n"
            "print('ready', flush=True)\\n"
            "sys.stdin.read()\\n"  # alive until the parent closes our stdin
        )
        p = subprocess.Popen(
            [sys.executable, "-c", child], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        assert p.stdout.readline() == "ready\\n"
        early = shmstream.open(NAME, gpu_device="cuda:0")  # attached while the creator lives
        p.stdin.close()
        assert p.wait(30) == 0
        from shmstream import GpuStreamGoneError
        try:
            early.read()
            raise AssertionError("read a dead creator's device buffer")
        except GpuStreamGoneError as exc:
            assert "exited" in str(exc)
        try:
            shmstream.open(NAME, gpu_device="cuda:0")
            raise AssertionError("attached to a dead creator's device buffer")
        except GpuStreamGoneError as exc:
            assert "exited" in str(exc)
        cpu = shmstream.open(NAME)          # cannot attach: falls back to the mirror
        assert cpu.gpu_device is None
        assert cpu.count == 1 and cpu.read().tolist() == [5.0, 6.0]
    """,
    )


def test_open_without_gpu_device_attaches_where_cuda_works(fake_driver):
    run(
        fake_driver,
        """
        h = shmstream.create(NAME, shape=(2,), gpu_device="cuda:0")
        h.write(np.array([1, 2], np.float32))
        r = shmstream.open(NAME)
        assert r.gpu_device == "cuda:0" and r.read().get().tolist() == [1.0, 2.0]
    """,
    )


def test_device_mismatch_and_bad_dtype_are_clear_errors(fake_driver):
    run(
        fake_driver,
        """
        try:
            shmstream.create(NAME, shape=(2,), gpu_device="cuda:3")
            raise AssertionError
        except ValueError as exc:
            assert "1 CUDA device" in str(exc)
        try:
            shmstream.create(NAME, shape=(2,), dtype="U4", gpu_device="cuda:0")
            raise AssertionError
        except ValueError as exc:
            assert "not supported for GPU" in str(exc)
        h = shmstream.create(NAME, shape=(2,), gpu_device="cuda:0")
        try:
            h.write(np.zeros(3, np.float32))
            raise AssertionError
        except ValueError as exc:
            assert "shape" in str(exc)
        try:
            shmstream.create(NAME, shape=(2,), gpu_device="cuda:0")
            raise AssertionError
        except FileExistsError as exc:
            assert "already exists" in str(exc)
    """,
    )


def test_a_gpu_segment_has_two_slot_seqlocks_and_the_mirror_two_cpu_slots(fake_driver):
    run(
        fake_driver,
        """
        from shmstream import _native
        h = shmstream.create(NAME, shape=(4,), gpu_device="cuda:0", cpu_mirror=True)
        p = shmstream.create(NAME + "-p", shape=(4,), gpu_device="cuda:0")
        try:
            seg = _native.Segment.open(NAME, _native.KIND_STREAM, True)
            pseg = _native.Segment.open(NAME + "-p", _native.KIND_STREAM, True)
            assert seg.slot_count == 2 and pseg.slot_count == 2
            assert os.stat("/dev/shm" + pseg.segname).st_size == _native.HEADER_BYTES
            assert os.stat("/dev/shm" + seg.segname).st_size == _native.HEADER_BYTES + 2 * 4096
            cpu = shmstream.open(NAME, gpu_device=False)
            slots = set()
            for i in range(1, 6):
                h.write(np.full(4, i, np.float32), frame_id=i)
                slots.add(seg.published_slot)
                assert cpu.read().tolist() == [float(i)] * 4
                assert h.read().get().tolist() == [float(i)] * 4
                assert not seg.write_in_flight
            assert slots == {0, 1}
            try:
                shmstream.create(NAME + "-x", shape=(4,), gpu_device="cuda:0", slots=3)
                raise AssertionError("a GPU stream with 3 slots was made")
            except ValueError as exc:
                assert "2 slots" in str(exc)
            del seg, pseg
        finally:
            p.unlink()
    """,
    )


def test_reads_racing_a_writer_in_another_process_are_never_torn(fake_driver):
    # The fake driver copies on the calling thread, so the writer's copy and
    # the reader's copy really overlap; the slot seqlocks must catch it.
    run(
        fake_driver,
        """
        import subprocess, time
        n = 1 << 18
        h = shmstream.create(NAME, shape=(n,), dtype=np.int32, gpu_device="cuda:0",
                             cpu_mirror=True)
        h.write(np.zeros(n, np.int32))
        child = (
            "import shmstream, numpy as np, time\\n"
            f"w = shmstream.open({NAME!r}, gpu_device='cuda:0')\\n"
            "end = time.monotonic() + 1.5\\n"
            "i = 1\\n"
            "while time.monotonic() < end:\\n"
            f"    w.write(np.full({n}, i, np.int32)); i += 1\\n"
            "w.close()\\n"
        )
        proc = subprocess.Popen([sys.executable, "-c", child])
        cpu = shmstream.open(NAME, gpu_device=False)
        reads = 0
        try:
            while proc.poll() is None:
                a = h.read().get()
                assert (a == a[0]).all(), "torn device read"
                b = cpu.read()
                assert (b == b[0]).all(), "torn mirror read"
                reads += 1
        finally:
            proc.wait()
        assert proc.returncode == 0 and reads > 0 and h.count > 1
    """,
    )


def test_a_gpu_stream_is_recorded_through_its_cpu_mirror_and_one_without_is_refused(
    fake_driver, tmp_path
):
    run(
        fake_driver,
        f"""
        import math
        h = shmstream.create(NAME, shape=(2, 3), gpu_device="cuda:0", cpu_mirror=True)
        for k in range(1, 4):
            h.write(np.full((2, 3), k, np.float32), frame_id=10 + k)
        # through the mirror (two slots, no history): the newest frame, the rest missed
        batch = h.read_since(0)
        assert batch.counts.tolist() == [3] and batch.missed == 2
        assert type(batch.frames).__name__ == "ndarray" and (batch.frames[0] == 3).all()
        st = shmstream.record(NAME, {str(tmp_path / "rec")!r}, since=0, frames=1)
        rec = shmstream.load_recording({str(tmp_path / "rec")!r})
        assert (st.frames, st.missed, rec.frame_ids.tolist()) == (1, 2, [13])
        assert rec.info["gpu"] is True and (rec.frames[0] == 3).all()
        try:
            shmstream.replay({str(tmp_path / "rec")!r}, NAME, rate=math.inf)
            raise AssertionError("replayed into a GPU stream")
        except ValueError as exc:
            assert "replay into a CPU stream" in str(exc)
        bare = shmstream.create(NAME + "-bare", shape=(2,), gpu_device="cuda:0")
        try:
            for call in (lambda: bare.read_since(0),
                         lambda: shmstream.record(NAME + "-bare", {str(tmp_path / "x")!r})):
                try:
                    call()
                    raise AssertionError("a GPU stream without mirror was read on the CPU")
                except ValueError as exc:
                    assert "cpu_mirror=True" in str(exc), exc
        finally:
            bare.unlink()
    """,
    )


@pytest.mark.parametrize("mirror", [False, True])
def test_write_publishes_an_explicit_count_and_write_time_like_a_cpu_stream(fake_driver, mirror):
    # A mirror or a replay writes a GPU stream with the source's metadata,
    # from the host (write_host) or the device (write), as on the CPU.
    run(
        fake_driver,
        f"""
        h = shmstream.create(NAME, shape=(2, 3), gpu_device="cuda:0", cpu_mirror={mirror})
        x = np.arange(6, dtype=np.float32).reshape(2, 3)
        h.write(x, frame_id=4, count=5, write_time_ns=1_500_000_000)
        pub = h.read_publication()
        assert (pub.count, pub.frame_id, pub.write_time) == (5, 4, 1.5), pub
        assert (pub.payload.get() == x).all()
        device = h.read()  # a device source: the write of a device pointer
        h.write(device, count=9, write_time_ns=2_000_000_000)
        pub = h.read_publication()
        assert (pub.count, pub.write_time, pub.missed_publications) == (9, 2.0, 3), pub
        assert (pub.payload.get() == x).all()
        h.write(x + 1)  # no metadata: count + 1 and the clock's time
        pub = h.read_publication()
        assert pub.count == 10 and pub.write_time > 2.0
        for bad in (10, 3):
            try:
                h.write(x, count=bad)
            except ValueError as e:
                assert "does not exceed" in str(e), e
            else:
                raise AssertionError(f"count={{bad}} was accepted")
        for kw in ({{"count": 0}}, {{"write_time_ns": 0}}, {{"count": -1}}):
            try:
                h.write(x, **kw)
            except ValueError:
                pass
            else:
                raise AssertionError(f"{{kw}} was accepted")
        assert h.count == 10
    """,
    )


def test_write_and_clear_time_out_while_another_process_holds_the_lock(fake_driver):
    run(
        fake_driver,
        """
        import subprocess
        h = shmstream.create(NAME, shape=(4,), gpu_device="cuda:0")
        holder = subprocess.Popen(
            [sys.executable, "-c",
             "import shmstream, sys\\n"
             f"h = shmstream.open({NAME!r})\\n"
             "h.acquire()\\n"
             "print('held', flush=True)\\n"
             "sys.stdin.read()\\n"
             "h.release()\\n"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )
        try:
            assert holder.stdout.readline().strip() == "held"
            for call in (lambda: h.write(np.ones(4, np.float32), timeout=0.05),
                         lambda: h.clear(timeout=0.05)):
                try:
                    call()
                except shmstream.ShmstreamTimeoutError as exc:
                    assert "lock of" in str(exc), exc
                else:
                    raise AssertionError("no TimeoutError")
            assert h.count == 0
        finally:
            holder.stdin.close()
            assert holder.wait(30) == 0
        h.write(np.ones(4, np.float32), timeout=5)
        assert h.count == 1
        """,
    )
