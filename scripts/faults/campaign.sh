#!/usr/bin/env bash
# Fault campaign: runs the fault tests (tests/faults/) at full size and prints a
# table of what they measured. CI runs the same tests with small counts.
#
# Needs root (network namespaces, a tmpfs mount), iproute2 and sqlite3, and a
# build that has the tests (scripts/build.sh).
#
# Usage: scripts/faults/campaign.sh [options]
#   --kills N         coordinator SIGKILLs during metric ingestion (default 200)
#   --partitions N    worker partitions, one job pair each (default 10)
#   --downtimes LIST  coordinator downtimes in seconds, comma-separated (default 0,20,60)
#   --seed N          seed for the moments of the kills (default: random)
#   --build DIR       build directory with bin/ and tests/fault_test (default: build)
#   --only NAME       run only this experiment: crash, partition, lease, restart or
#                     disk (repeatable)
#   --known-failures  also run the disabled tests that reproduce known bugs
#                     (tests/faults/README.md, "Known failures")
#
# Example (about ten minutes on two cores):
#   sudo scripts/faults/campaign.sh --kills 20 --partitions 3 --downtimes 0,20,60
#
# Every experiment's output, and the daemons' and ranks' logs, stay in a
# directory printed at the end. Exit status: 0 when every experiment passed.
set -euo pipefail
cd "$(dirname "$0")/../.."

kills=200
partitions=10
downtimes=0,20,60
seed=$(( (RANDOM << 15 | RANDOM) % 1000000 ))
build=build
only=()
known_failures=0
while [ $# -gt 0 ]; do
  case "$1" in
    --kills) kills=$2; shift 2 ;;
    --partitions) partitions=$2; shift 2 ;;
    --downtimes) downtimes=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --only) only+=("$2"); shift 2 ;;
    --known-failures) known_failures=1; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "campaign: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done

build=$(cd "$build" && pwd)
binary="$build/tests/fault_test"
if [ ! -x "$binary" ]; then
  echo "campaign: $binary is missing; build the tests first (scripts/build.sh)" >&2
  exit 2
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "campaign: needs root (network namespaces and a tmpfs mount)" >&2
  exit 2
fi

out=$(mktemp -d "${TMPDIR:-/tmp}/tessera-fault-campaign-XXXXXX")
export TESSERA_BIN_DIR="$build/bin" TESSERA_SOURCE_DIR="$PWD"
export TESSERA_FAULT_KILLS="$kills" TESSERA_FAULT_PARTITIONS="$partitions"
export TESSERA_FAULT_DOWNTIMES="$downtimes" TESSERA_FAULT_SEED="$seed"
export TESSERA_FAULT_LOG_DIR="$out/logs"

wanted() {
  [ ${#only[@]} -eq 0 ] && return 0
  local o
  for o in "${only[@]}"; do [ "$o" = "$1" ] && return 0; done
  return 1
}

# run NAME FILTER [gtest flags...]: one experiment; its result in $out/NAME.result.
run() {
  local name=$1 filter=$2
  shift 2
  local start rc=0
  start=$(date +%s)
  echo "campaign: $name ($filter) ..." >&2
  "$binary" --gtest_filter="$filter" "$@" >"$out/$name.log" 2>&1 || rc=$?
  local result=PASS
  if grep -q '^\[  SKIPPED \]' "$out/$name.log"; then result=SKIP; fi
  if [ "$rc" -ne 0 ]; then result=FAIL; fi
  echo "$result $(( $(date +%s) - start ))" >"$out/$name.result"
  echo "campaign: $name $result in $(( $(date +%s) - start ))s" >&2
}

total_start=$(date +%s)
wanted crash && run crash 'FaultTest.CoordinatorKilledDuringMetricIngestion*'
wanted partition && run partition 'PartitionTest.PartitionedWorker*'
# The trainer lease: restarts wait for a cut-off rank (tests/faults/README.md).
wanted lease && run lease 'PartitionTest.RestartWaits*:PartitionTest.CutOff*'
wanted restart && run restart 'RestartTest.CoordinatorRestartedAfterDowntime*'
wanted disk && run disk 'FaultTest.FullDisk*'
if [ "$known_failures" -eq 1 ]; then
  run known-failures '*DISABLED_*' --gtest_also_run_disabled_tests
fi
total=$(( $(date +%s) - total_start ))

echo
echo "Tessera fault campaign: $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores," \
  "kills=$kills partitions=$partitions downtimes=$downtimes seed=$seed"
printf '%-15s %-6s %7s  %-44s %s\n' experiment result time figure value
for result_file in "$out"/*.result; do
  name=$(basename "$result_file" .result)
  read -r result seconds <"$result_file"
  first=1
  # Per-cycle figures stay in the log; the table shows the summaries.
  while IFS= read -r line; do
    test=$(awk '{print $2}' <<<"$line")
    kv=$(awk '{print $3}' <<<"$line")
    key=${kv%%=*}
    value=${kv#*=}
    case "$key" in cycle*) continue ;; esac
    if [ "$name" = known-failures ]; then key="${test#DISABLED_}: $key"; fi
    if [ $first -eq 1 ]; then
      printf '%-15s %-6s %6ss  %-44s %s\n' "$name" "$result" "$seconds" "$key" "$value"
      first=0
    else
      printf '%-15s %-6s %7s  %-44s %s\n' "" "" "" "$key" "$value"
    fi
  done < <(grep '^FAULT-FIGURE ' "$out/$name.log" || true)
  if [ $first -eq 1 ]; then
    printf '%-15s %-6s %6ss  %s\n' "$name" "$result" "$seconds" "(no figures; see the log)"
  fi
done
echo "total ${total}s; outputs and logs in $out"

status=0
for result_file in "$out"/*.result; do
  [ "$(basename "$result_file")" = known-failures.result ] && continue
  read -r result _ <"$result_file"
  [ "$result" = FAIL ] && status=1
done
exit $status
