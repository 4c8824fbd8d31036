#!/usr/bin/env bash
# Robustness campaign: the hung-rank cases of tests/e2e/robustness_e2e_test.cc
# with the coordinator's DEFAULT thresholds (--rank-silent-after 20 s,
# --stall-after-min 60 s), repeated, and a summary of what they measured:
#   hang_to_restart_s  SIGSTOP of one rank of a 2-rank job -> the event that ends
#                      its attempt (target <= 30)
#   stall_to_kill_s    a rank stuck in data wait (trainer.fault) -> the event
#                      that ends its attempt (target <= 70)
# CI runs the same tests with short thresholds (3 s silent, 10 s stall).
#
# Usage: scripts/robustness_campaign.sh [--runs N] [--build DIR]
#   --runs N     repetitions of each case (default 3)
#   --build DIR  build directory with tests/robustness_e2e_test (default: build)
#
# Example (about six minutes on two cores with --runs 2):
#   scripts/robustness_campaign.sh --runs 2
#
# Each run's full output stays in the directory printed at the end. Exit
# status: 0 when every run passed and met its target.
set -euo pipefail
cd "$(dirname "$0")/.."

runs=3
build=build
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) runs=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
    *) echo "robustness_campaign.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
test_bin="$build/tests/robustness_e2e_test"
if [ ! -x "$test_bin" ]; then
  echo "robustness_campaign.sh: $test_bin not found; build first (scripts/build.sh)" >&2
  exit 2
fi

out=$(mktemp -d /tmp/tessera-robustness.XXXXXX)
status=0
for i in $(seq 1 "$runs"); do
  for case in StoppedRankIsNamedAndTheJobResumesFromItsCheckpoint \
              RankStuckInDataWaitIsNamedWithItsPhaseWhilePeersWait; do
    log="$out/$case.$i.log"
    echo "[$(date +%H:%M:%S)] run $i/$runs: $case (default thresholds)"
    if ! TESSERA_ROBUSTNESS_DEFAULTS=1 TESSERA_BIN_DIR="$PWD/$build/bin" \
        TESSERA_SOURCE_DIR="$PWD" "$test_bin" --gtest_filter="*.$case" >"$log" 2>&1; then
      echo "  FAILED: see $log"
      status=1
    fi
    grep -h '^FIGURE' "$log" | sed 's/^/  /' || true
  done
done

summary() {  # name target
  grep -h "^FIGURE $1=" "$out"/*.log | cut -d= -f2 | sort -n | awk -v name="$1" -v target="$2" '
    { v[NR] = $1 }
    END {
      if (NR == 0) { printf "%-18s no runs\n", name; exit 1 }
      med = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
      printf "%-18s runs %d  min %.1f  median %.1f  max %.1f  (target <= %d: %s)\n",
             name, NR, v[1], med, v[NR], target, (v[NR] <= target) ? "met" : "MISSED"
      exit (v[NR] <= target) ? 0 : 1
    }'
}
echo
echo "summary (seconds):"
summary hang_to_restart_s 30 || status=1
summary stall_to_kill_s 70 || status=1
echo "logs: $out"
exit $status
