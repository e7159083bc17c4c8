#!/usr/bin/env bash
# The loader's tests on each torch release named (docs/loader.md, "torch
# versions"): for each, a fresh venv with shmstream's wheel (built once),
# that torch, pytest and NumPy, then every test_loader*.py under tests/ (the
# conformance scenarios against torch's own loader, batches, pool, failures,
# exit, and the table of torch's private iterator shapes).
#
#   tools/torch_matrix.sh [VERSION...]   # default: 2.4.0 2.14.1, the oldest and newest supported
#
# Env: PYTHON (default python3; its interpreter makes the venvs, and it
# must have the build requirements: pip install ".[test]" gives them),
# VENVS (where the venvs go; default a temporary folder, removed at the
# end), KEEP=1 (keep each venv; one whose tests fail is kept in VENVS
# anyway), PYTEST_ARGS (added to pytest's arguments).
#
# Cost: PyPI's torch wheels for Linux are CUDA builds; each release pulls
# its wheel (0.8-0.9 GB) and, through pip, nvidia-* and triton wheels:
# about 3 GB of downloads and 5-7 GB on disk per venv (one venv at a time:
# each is removed after its run unless KEEP=1). Releases whose wheels are in
# pip's find-links or index on this machine are copied, not downloaded. The
# summary prints each release's wheel bytes and times. Not part of the
# default test run: tests/loader/test_torch_matrix.py runs this script only with
# SHMSTREAM_TORCH_MATRIX=1.
set -uo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
python="${PYTHON:-python3}"
versions=("$@")
[ ${#versions[@]} -gt 0 ] || versions=(2.4.0 2.14.1)
if [ -n "${VENVS:-}" ]; then
  mkdir -p "$VENVS" && venvs="$(cd "$VENVS" && pwd)"
else
  venvs="$(mktemp -d)" && trap 'rm -rf "$venvs"' EXIT
fi
summary="$venvs/summary.txt"
: >"$summary"
note() { echo "torch_matrix: $*"; }

# The tests, wherever the suite keeps them (tests/ or tests/<kind>/).
mapfile -t tests < <(cd "$root" && find tests -name 'test_loader*.py' | sort)
[ ${#tests[@]} -gt 0 ] || { note "no test_loader*.py under tests/"; exit 2; }

# shmstream's wheel, built once: torch is not a build requirement, and the
# same wheel goes into every venv.
dist="$venvs/dist"
note "building shmstream's wheel with $("$python" --version 2>&1)"
"$python" -m pip wheel -q --no-deps --no-build-isolation -w "$dist" "$root" || {
  note "the wheel did not build (does PYTHON have scikit-build-core and nanobind?)"
  exit 2
}
wheel="$(ls "$dist"/shmstream-*.whl)"

failed=0
for v in "${versions[@]}"; do
  venv="$venvs/torch-$v"
  log="$venvs/torch-$v.log"
  note "torch $v: $venv (log: $log)"
  start=$(date +%s)
  rm -rf "$venv"
  "$python" -m venv "$venv"
  py="$venv/bin/python"
  {
    # torch and what it pulls in, into a folder of their own: its size is
    # what installing this torch costs
    # (not into pip's cache: gigabytes per release)
    t=$(date +%s)
    "$py" -m pip download -q --no-cache-dir -d "$venv/wheels" "torch==$v" &&
      dl=$(($(date +%s) - t)) &&
      t=$(date +%s) &&
      "$py" -m pip install -q --no-index --find-links "$venv/wheels" "torch==$v" &&
      "$py" -m pip install -q "$wheel" "pytest>=7" numpy &&
      inst=$(($(date +%s) - t))
  } >"$log" 2>&1
  ok=$?
  bytes=$(du -sb "$venv/wheels" 2>/dev/null | cut -f1)
  mib=$(((${bytes:-0} + 1048575) / 1048576))
  if [ $ok -ne 0 ]; then
    note "torch $v: install failed (see $log)"
    echo "torch $v: INSTALL FAILED (wheels ${mib} MiB)" >>"$summary"
    failed=1
    continue
  fi
  ls -lS "$venv/wheels" >>"$log"
  rm -rf "$venv/wheels"
  got="$("$py" -c 'import torch, shmstream; print(torch.__version__, shmstream.__file__)')"
  note "torch $v: installed $got"
  t=$(date +%s)
  # shellcheck disable=SC2086
  (cd "$root" && "$py" -m pytest -p no:cacheprovider -q "${tests[@]}" ${PYTEST_ARGS:-}) >>"$log" 2>&1
  rc=$?
  run=$(($(date +%s) - t))
  result="$(grep -E '^(=+ )?[0-9]+ (passed|failed)|^(=+ )?[0-9]+ error|no tests ran' "$log" | tail -1 | tr -d '=' | sed 's/^ *//;s/ *$//')"
  line="torch $v ($got): ${result:-no pytest summary} [rc $rc]; wheels ${mib} MiB in ${dl}s, install ${inst}s, tests ${run}s, total $(($(date +%s) - start))s"
  echo "$line" >>"$summary"
  note "$line"
  # a failing venv stays while VENVS is kept, to look into
  [ $rc -eq 0 ] || failed=1
  [ "${KEEP:-0}" = 1 ] || [ $rc -ne 0 ] || rm -rf "$venv"
done
echo "== summary ($summary)"
cat "$summary"
exit $failed
