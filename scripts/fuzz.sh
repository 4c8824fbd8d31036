#!/usr/bin/env bash
# A fuzzing campaign: builds the libFuzzer targets (tests/fuzz/build.sh) and runs
# each for N minutes in libFuzzer's fork mode, which goes on past crashes,
# timeouts and out-of-memory inputs and counts them. The corpus grows in
# <build-dir>/fuzz-corpus/<target>/ from one campaign to the next (the seeds in
# tests/fuzz/corpus/ are read, never written); crashing inputs are saved in
# <build-dir>/fuzz-crashes/<target>/. Prints a table of executions and crashes
# per target, and exits non-zero when any target crashed.
#
# Usage: scripts/fuzz.sh [--minutes N] [--jobs N] [--build-dir DIR] [TARGET...]
#   --minutes N     minutes per target (default 10)
#   --jobs N        fuzzing processes per target (default: the number of CPUs)
#   --build-dir DIR clang build directory (default build-fuzz/)
#   TARGET...       only these targets (default: every *_fuzzer built)
# Example: scripts/fuzz.sh --minutes 60 http_api_fuzzer
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
MINUTES=10
JOBS=$(nproc)
BUILD_DIR="$ROOT/build-fuzz"
TARGETS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --minutes) MINUTES="$2"; shift 2 ;;
    --jobs) JOBS="$2"; shift 2 ;;
    --build-dir) BUILD_DIR="$2"; shift 2 ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    -*) echo "fuzz.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
    *) TARGETS+=("$1"); shift ;;
  esac
done
FUZZ_DIR="$ROOT/tests/fuzz"

"$FUZZ_DIR/build.sh" "$BUILD_DIR"
if [ ${#TARGETS[@]} -eq 0 ]; then
  mapfile -t TARGETS < <(cd "$BUILD_DIR/fuzz" && ls -- *_fuzzer)
fi

for t in "${TARGETS[@]}"; do
  if [ ! -x "$BUILD_DIR/fuzz/$t" ]; then
    echo "fuzz.sh: no target '$t' in $BUILD_DIR/fuzz" >&2
    exit 2
  fi
  corpus="$BUILD_DIR/fuzz-corpus/$t"
  crashes="$BUILD_DIR/fuzz-crashes/$t"
  mkdir -p "$corpus" "$crashes"
  args=(-fork="$JOBS" -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1
        -max_total_time=$((MINUTES * 60)) -timeout=20 -artifact_prefix="$crashes/")
  [ -f "$FUZZ_DIR/$t.dict" ] && args+=(-dict="$FUZZ_DIR/$t.dict")
  if [ -f "$FUZZ_DIR/$t.options" ]; then
    mapfile -t extra < <(grep -v -e '^#' -e '^$' "$FUZZ_DIR/$t.options")
    args+=("${extra[@]}")
  fi
  echo "fuzz: $t for $MINUTES min with $JOBS processes (log: $BUILD_DIR/fuzz-$t-campaign.log)"
  before=$(find "$crashes" -type f | wc -l)
  "$BUILD_DIR/fuzz/$t" "${args[@]}" "$corpus" "$FUZZ_DIR/corpus/$t" \
    >"$BUILD_DIR/fuzz-$t-campaign.log" 2>&1 || true
  after=$(find "$crashes" -type f | wc -l)
  echo "$((after - before))" >"$BUILD_DIR/fuzz-$t-campaign.new"
done

status=0
printf '\n%-20s %8s %12s %8s %8s %6s %8s %8s %s\n' target minutes execs exec/s cov corpus crashes timeouts ooms
for t in "${TARGETS[@]}"; do
  log="$BUILD_DIR/fuzz-$t-campaign.log"
  # Fork mode's progress lines: "#RUNS: cov: C ft: F corp: N exec/s E
  # oom/timeout/crash: O/T/K time: Ss job: J dft_time: D".
  last=$(grep -a '^#[0-9]*: cov:' "$log" | tail -1 || true)
  execs=$(sed -n 's/^#\([0-9]*\):.*/\1/p' <<<"$last")
  cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
  corp=$(sed -n 's/.* corp: \([0-9]*\).*/\1/p' <<<"$last")
  rate=$(sed -n 's/.* exec\/s \([0-9]*\).*/\1/p' <<<"$last")
  otc=$(sed -n 's/.*oom\/timeout\/crash: \([0-9]*\/[0-9]*\/[0-9]*\).*/\1/p' <<<"$last")
  IFS=/ read -r ooms timeouts crashes <<<"${otc:-?/?/?}"
  new=$(cat "$BUILD_DIR/fuzz-$t-campaign.new")
  [ "${crashes:-0}" != 0 ] || [ "$new" != 0 ] && status=1
  printf '%-20s %8s %12s %8s %8s %6s %8s %8s %s\n' "$t" "$MINUTES" "${execs:-?}" \
    "${rate:-?}" "${cov:-?}" "${corp:-?}" "${crashes:-?}" "${timeouts:-?}" "${ooms:-?}"
done
echo "fuzz: crashing inputs (if any) are in $BUILD_DIR/fuzz-crashes/; reproduce with" \
  "$BUILD_DIR/fuzz/TARGET FILE"
exit $status
