#!/usr/bin/env bash
# The GPU checklist of docs/gpu.md in one run: build, gpu_available(), the
# device tests, the fake-driver tests, the benchmark beside pyshmem, the
# ping-pong floors, and the device memory and /dev/shm before and after. For a GPU machine that may
# have no network: wheels in .whl/ (pyshmem, nanobind) are installed first.
#
#   tools/gpu_check.sh [OUTDIR]      # logs and bench-gpu.json go to OUTDIR
#
# Env: PYTHON (default python3), SHMSTREAM_GPU_RACE_REPEAT (default 3),
# BENCH_SECONDS (default 1), SKIP_BENCH=1, SKIP_TESTS=1, SKIP_FAKE=1 (the
# fake-driver tests, which also run on CPU machines).
set -u
out=${1:-${OUT:-/tmp/gpu-check}}
mkdir -p "$out"
py=${PYTHON:-python3}
site=/tmp/shmstream-site
export PYTHONUNBUFFERED=1 PYTHONPATH=$site${PYTHONPATH:+:$PYTHONPATH}
export SHMSTREAM_GPU_RACE_REPEAT=${SHMSTREAM_GPU_RACE_REPEAT:-3}
step() { echo "== $(date +%T) $*"; }

{
  step environment
  nvidia-smi || echo "no nvidia-smi"
  $py -c 'import sys, numpy; print(sys.version); print("numpy", numpy.__version__)'
  $py -c 'import torch; print("torch", torch.__version__, torch.version.cuda, torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")' || true
  $py -c 'import cupy; print("cupy", cupy.__version__)' || true
  ls /dev/shm | wc -l
} >"$out/env.log" 2>&1
cat "$out/env.log"

step build | tee "$out/build.log"
rm -rf "$site"
if ls .whl/*.whl >/dev/null 2>&1; then
  $py -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$site" .whl/*.whl >>"$out/build.log" 2>&1
fi
if ! $py -m pip install --no-build-isolation --no-deps --no-cache-dir --target "$site" . >>"$out/build.log" 2>&1; then
  tail -40 "$out/build.log"
  echo "BUILD FAILED"
  exit 1
fi
tail -2 "$out/build.log"
$py -c 'import shmstream, pyshmem; print("shmstream gpu_available:", shmstream.gpu_available(), "| pyshmem", pyshmem.__version__, "gpu_available:", pyshmem.gpu_available())' 2>&1 | tee -a "$out/build.log"

if [ "${SKIP_TESTS:-0}" != 1 ]; then
  step "device tests (pytest -m gpu)"
  per_test=""  # a hung test fails alone where pytest-timeout is installed
  $py -c 'import pytest_timeout' 2>/dev/null && per_test="--timeout=120"
  timeout 300 $py -m pytest -m gpu -v -p no:cacheprovider $per_test \
    tests/gpu/test_gpu_device.py tests/gpu/test_gpu.py >"$out/pytest-gpu.log" 2>&1
  echo "rc=$?" >>"$out/pytest-gpu.log"
  grep -E "PASSED|FAILED|ERROR|SKIPPED" "$out/pytest-gpu.log" | sed 's/^tests\///' | cut -c1-150
  tail -3 "$out/pytest-gpu.log"
fi
if [ "${SKIP_TESTS:-0}" != 1 ] && [ "${SKIP_FAKE:-0}" != 1 ]; then
  step "fake-driver and attach-rule tests"
  timeout 240 $py -m pytest -q -p no:cacheprovider tests/gpu/test_gpu_fake.py tests/gpu/test_gpu_attach_rule.py >"$out/pytest-cpu.log" 2>&1
  echo "rc=$?" >>"$out/pytest-cpu.log"
  tail -3 "$out/pytest-cpu.log"
fi

if [ "${SKIP_BENCH:-0}" != 1 ]; then
  step "benchmark (python -m benchmarks gpu)"
  timeout 240 $py -m benchmarks gpu --seconds "${BENCH_SECONDS:-1}" --json "$out/bench-gpu.json" >"$out/bench-gpu.log" 2>&1
  echo "rc=$?" >>"$out/bench-gpu.log"
  cat "$out/bench-gpu.log"
fi

if [ "${SKIP_BENCH:-0}" != 1 ]; then
  step "round-trip profile (benchmarks/gpu_probes/roundtrip_profile.py)"
  timeout 120 $py benchmarks/gpu_probes/roundtrip_profile.py >"$out/profile.log" 2>&1
  head -6 "$out/profile.log"
  step "ping-pong floor with torch alone (benchmarks/gpu_probes/pingpong_floor.py)"
  timeout 120 $py benchmarks/gpu_probes/pingpong_floor.py >"$out/pingpong-floor.log" 2>&1
  cat "$out/pingpong-floor.log"
  if command -v nvcc >/dev/null; then
    step "ping-pong floor by copy method, driver API (benchmarks/c/gpu_pingpong_engines.c)"
    nvcc -O2 -o /tmp/gpu_pingpong_engines benchmarks/c/gpu_pingpong_engines.c -lcuda &&
      timeout 120 /tmp/gpu_pingpong_engines >"$out/engines.log" 2>&1
    cat "$out/engines.log"
  fi
fi

step "after"
{
  nvidia-smi --query-gpu=memory.used,memory.total --format=csv
  nvidia-smi --query-compute-apps=pid,used_memory --format=csv
  echo "/dev/shm shmstream segments left:"; ls /dev/shm | grep -c '^shmstream' || true
} 2>&1 | tee "$out/after.log"
