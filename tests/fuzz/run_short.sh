#!/usr/bin/env bash
# The short fuzz run of the test suite (scripts/test.sh): builds the libFuzzer
# targets with clang in their own build directory (only the targets and the
# libraries they need), replays every saved regression input, then fuzzes each
# target for a short while from its seed corpus. Fails on any crash, sanitizer
# report or broken invariant, leaving the input under <build-dir>/fuzz-artifacts/.
#
# Usage: tests/fuzz/run_short.sh [--seconds N] [--build-dir DIR] [--parallel N]
#   --seconds N     fuzzing time per target (default 30)
#   --build-dir DIR clang build directory (default build-fuzz/ in the repository)
#   --parallel N    targets fuzzed at once (default: the number of CPUs, at most 4)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
SECONDS_PER_TARGET=30
BUILD_DIR="$ROOT/build-fuzz"
PARALLEL=$(nproc)
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) SECONDS_PER_TARGET="$2"; shift 2 ;;
    --build-dir) BUILD_DIR="$2"; shift 2 ;;
    --parallel) PARALLEL="$2"; shift 2 ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) echo "run_short.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
FUZZ_DIR="$ROOT/tests/fuzz"
start=$(date +%s)

"$FUZZ_DIR/build.sh" "$BUILD_DIR"
build_end=$(date +%s)

mapfile -t TARGETS < <(cd "$BUILD_DIR/fuzz" && ls -- *_fuzzer 2>/dev/null)
if [ ${#TARGETS[@]} -eq 0 ]; then
  echo "run_short.sh: no fuzz targets were built in $BUILD_DIR/fuzz" >&2
  exit 1
fi

# 1. Saved regressions: each input once; every failing one is listed.
failed=()
for t in "${TARGETS[@]}"; do
  [ -d "$FUZZ_DIR/regressions/$t" ] || continue
  for input in "$FUZZ_DIR/regressions/$t"/*; do
    [ -f "$input" ] || continue
    log="$BUILD_DIR/fuzz-$t-regression-$(basename "$input").log"
    if ! "$BUILD_DIR/fuzz/$t" "$input" >"$log" 2>&1; then
      failed+=("$t/$(basename "$input")")
      echo "fuzz: $t fails on regressions/$t/$(basename "$input") (log: $log):" >&2
      grep -a -m3 -e '==== ' -e 'runtime error' -e 'what()' -e 'ERROR: AddressSanitizer' "$log" \
        | cut -c1-300 >&2 || true
    fi
  done
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: FAILED: ${#failed[@]} saved regression inputs crash: ${failed[*]}" >&2
  exit 1
fi
echo "fuzz: regression inputs pass"

# 2. Fuzz each target from its seeds; new inputs go to a scratch directory.
ARTIFACTS="$BUILD_DIR/fuzz-artifacts"
mkdir -p "$ARTIFACTS"
run_one() {
  local t="$1"
  local scratch="$BUILD_DIR/fuzz-scratch/$t"
  rm -rf "$scratch"
  mkdir -p "$scratch"
  # A fixed seed (FUZZ_SEED, default 1) makes the CI run repeat the same inputs
  # in the same order; scripts/fuzz.sh explores with random seeds.
  local args=(-seed="${FUZZ_SEED:-1}" -max_total_time="$SECONDS_PER_TARGET" -timeout=20
              -print_final_stats=1
              -artifact_prefix="$ARTIFACTS/$t-")
  [ -f "$FUZZ_DIR/$t.dict" ] && args+=(-dict="$FUZZ_DIR/$t.dict")
  if [ -f "$FUZZ_DIR/$t.options" ]; then
    mapfile -t extra < <(grep -v -e '^#' -e '^$' "$FUZZ_DIR/$t.options")
    args+=("${extra[@]}")
  fi
  "$BUILD_DIR/fuzz/$t" "${args[@]}" "$scratch" "$FUZZ_DIR/corpus/$t" \
    >"$BUILD_DIR/fuzz-$t.log" 2>&1
}
pids=()
status=0
for t in "${TARGETS[@]}"; do
  run_one "$t" &
  pids+=($!)
  if [ ${#pids[@]} -ge "$PARALLEL" ]; then
    wait "${pids[0]}" || status=1
    pids=("${pids[@]:1}")
  fi
done
for p in "${pids[@]}"; do wait "$p" || status=1; done

printf '\n%-20s %10s %8s %8s %s\n' target execs exec/s cov result
for t in "${TARGETS[@]}"; do
  log="$BUILD_DIR/fuzz-$t.log"
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  cov=$(grep -ao 'cov: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
  if grep -aq -e '^SUMMARY: ' -e '==== fuzz invariant broken' -e 'ERROR: libFuzzer' "$log"; then
    result="CRASH ($(grep -ao 'Test unit written to .*' "$log" | tail -1 | sed 's/Test unit written to //'))"
  else
    result=ok
  fi
  printf '%-20s %10s %8s %8s %s\n' "$t" "${execs:-?}" "${rate:-?}" "${cov:-?}" "$result"
done
end=$(date +%s)
echo "fuzz: build $((build_end - start))s, fuzzing $((end - build_end))s"
if [ $status -ne 0 ]; then
  for t in "${TARGETS[@]}"; do
    if grep -aq -e '^SUMMARY: ' -e '==== fuzz invariant broken' "$BUILD_DIR/fuzz-$t.log"; then
      echo "---- $t (log: $BUILD_DIR/fuzz-$t.log)" >&2
      grep -a -A3 -e '==== fuzz invariant broken' -e 'ERROR: ' "$BUILD_DIR/fuzz-$t.log" | head -20 >&2
    fi
  done
  echo "fuzz: FAILED; reproduce with $BUILD_DIR/fuzz/TARGET ARTIFACT, see tests/fuzz/README.md" >&2
  exit 1
fi
echo "fuzz: passed"
