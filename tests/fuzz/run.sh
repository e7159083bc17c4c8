#!/usr/bin/env bash
# Fuzz campaign: build the libFuzzer harnesses, run every harness for a
# bounded time from its seed corpus, merge what is new back into the corpus.
#
#   tests/fuzz/run.sh [SECONDS_PER_HARNESS] [HARNESS...]
#
# SECONDS_PER_HARNESS defaults to 60 (0: no fuzzing, only merge what the last
# run left in $SS_FUZZ_OUT/new/<harness> into the corpus); HARNESS names (fuzz_header, fuzz_py_open,
# ...) pick some, default all. Environment: PYTHON (the interpreter that
# imports shmstream and atheris; default python3), CLANG (default clang-19),
# SS_FUZZ_OUT (build, logs and scratch; default build/fuzz, gitignored).
# Prints per harness the executions run and any crash, hang or sanitizer
# report (the input is under $SS_FUZZ_OUT/artifacts/). See README.md.
set -u
SECS=${1:-60}
[ $# -gt 0 ] && shift
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
FUZZ=$ROOT/tests/fuzz
OUT=${SS_FUZZ_OUT:-$ROOT/build/fuzz}
PY=${PYTHON:-python3}
export PATH=$PATH:/usr/lib/llvm-19/bin
CLANG=${CLANG:-clang-19}
C_HARNESSES="fuzz_header fuzz_open fuzz_ring fuzz_history fuzz_live fuzz_milk"
PY_HARNESSES="fuzz_py_open fuzz_py_stat fuzz_py_recv fuzz_py_shared_array fuzz_py_loader fuzz_py_bridge_wire fuzz_py_milk"
WANT=${*:-$C_HARNESSES $PY_HARNESSES}

# Every segment a harness makes carries this tag (fz_name, fuzzlib.fuzz_name):
# whatever a crashed or killed run left is removed on exit.
export SS_FUZZ_TAG=run$$
cleanup() { rm -f /dev/shm/shmstream-fuzz-"$SS_FUZZ_TAG"-*; }
trap cleanup EXIT
trap 'exit 130' INT TERM

mkdir -p "$OUT/bin" "$OUT/logs" "$OUT/artifacts" "$OUT/new"
wanted() { case " $WANT " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }

build() {
  "$CLANG" -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
    -I"$ROOT/include" -I"$ROOT/src/core" "$FUZZ/$1.c" "$ROOT"/src/core/*.c \
    -o "$OUT/bin/$1" -lpthread -ldl
}

# run NAME COMMAND...: fuzz with the libFuzzer flags, then merge.
run() {
  local h=$1; shift
  local log=$OUT/logs/$h.log scratch=$OUT/new/$h
  local before; before=$(ls "$OUT/artifacts" | grep -c "^$h-" || true)
  local rc=0
  if [ "$SECS" = 0 ]; then
    # merge only: fold what an earlier run left in the scratch dir into the corpus
    mkdir -p "$scratch" "$FUZZ/corpus/$h"
    : >"$log"
  else
    rm -rf "$scratch"; mkdir -p "$scratch" "$FUZZ/corpus/$h"
    nice -n 19 "$@" -max_total_time="$SECS" -timeout=5 -rss_limit_mb=4096 \
      -artifact_prefix="$OUT/artifacts/$h-" -print_final_stats=1 \
      "$scratch" "$FUZZ/corpus/$h" >"$log" 2>&1
    rc=$?
  fi
  # The kept corpus: seeds, regression inputs, and a minimal set of the rest
  # that covers what corpus and scratch cover together (it stays small).
  local min=$OUT/min/$h
  rm -rf "$min"; mkdir -p "$min"
  if ! nice -n 19 "$@" -merge=1 -timeout=5 -artifact_prefix="$OUT/artifacts/merge-$h-" \
      "$min" "$FUZZ/corpus/$h" "$scratch" >>"$log" 2>&1; then
    echo "$h: merge failed, corpus left as it was (new inputs in $scratch; see $log)" >&2
    return
  fi
  local keep; keep=$(cd "$FUZZ/corpus/$h" && sha1sum seed-* regress-* 2>/dev/null | cut -d' ' -f1)
  find "$FUZZ/corpus/$h" -type f ! -name 'seed-*' ! -name 'regress-*' -delete
  for f in "$min"/*; do
    [ -e "$f" ] || continue
    case " $(echo $keep) " in *" $(basename "$f") "*) continue ;; esac
    cp "$f" "$FUZZ/corpus/$h/"
  done
  local execs; execs=$(grep -o 'number_of_executed_units: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*$')
  local after; after=$(ls "$OUT/artifacts" | grep -c "^$h-" || true)
  local found=$((after - before))
  printf '%-22s %6ss  executions %10s  corpus %3s files  findings %s%s\n' "$h" "$SECS" \
    "${execs:-?}" "$(ls "$FUZZ/corpus/$h" | wc -l)" "$found" \
    "$([ "$rc" -ne 0 ] && echo "  (exit $rc: see $log)")"
  cleanup
}

for h in $C_HARNESSES; do
  wanted "$h" || continue
  build "$h" || { echo "$h: build failed" >&2; exit 1; }
  run "$h" "$OUT/bin/$h"
done
# atheris merges by running the script itself (argv[0]) in a child: its
# shebang (env python3) must find PYTHON's interpreter first on PATH.
case $PY in */*) export PATH=$(dirname "$PY"):$PATH ;; esac
for h in $PY_HARNESSES; do
  wanted "$h" || continue
  run "$h" "$PY" "$FUZZ/$h.py"
done
