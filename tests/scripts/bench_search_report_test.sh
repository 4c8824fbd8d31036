#!/usr/bin/env bash
# bench/search/report.py over fabricated search reports (as run.sh writes
# them: `tessctl search report -o json` plus seed, wall time and the best
# trial's test accuracy) of two seeds: the steps a search trained are the sum
# of the step each trial reached; the means are over the seeds; the target
# (ASHA within 0.5 points of random's best validation accuracy at no more than
# 40% of its steps) decides the exit code, 0 when met and 1 when missed.
# Usage: bench_search_report_test.sh SOURCE_DIR
set -u
src=${1:?usage: bench_search_report_test.sh SOURCE_DIR}
failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/bench_search_report_test.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# write METHOD SEED BEST_VAL WALL TEST STEPS... : one report, trial 1 the best.
write() {
  local method=$1 seed=$2 best=$3 wall=$4 test=$5
  shift 5
  python3 - "$tmp/search-$method-$seed.json" "$method" "$seed" "$best" "$wall" "$test" \
    "$@" <<'PY'
import json, sys
out, method, seed, best, wall, test = sys.argv[1:7]
steps = [int(s) for s in sys.argv[7:]]
trials = [{"trial": i, "status": "completed" if s == max(steps) else "stopped",
           "steps": s, "best_metric": float(best) if i == 1 else 0.5, "best": i == 1,
           "job_ids": [10 + i]} for i, s in enumerate(steps)]
json.dump({"search_id": int(seed), "method": method, "state": "SUCCEEDED",
           "trials": trials, "seed": int(seed), "wall_seconds": float(wall),
           "best_test_accuracy": float(test)}, open(out, "w"))
PY
}

# asha trains 100 + 100 + 300 + 33 + 33 + 34 = 600 steps a seed, random 6 x 300.
write asha 1 0.74 300 0.73 100 100 300 33 33 34
write asha 2 0.72 200 0.71 100 100 300 33 33 34
write random 1 0.745 800 0.735 300 300 300 300 300 300
write random 2 0.725 900 0.715 300 300 300 300 300 300
out=$(python3 "$src/bench/search/report.py" "$tmp"/search-*.json --out "$tmp/results.json")
rc=$?
[ "$rc" -eq 0 ] || fail "target met (0.5 points below, 33% of the steps), exit $rc: $out"
grep -Eq '^1 +asha +74\.00% +73\.00% +6 +1 +0 +600 +300s$' <<<"$out" || fail "seed 1 asha row: $out"
grep -Eq '^mean +asha +73\.00% +72\.00% +6 +1 +0 +600 +250s$' <<<"$out" || fail "asha mean row: $out"
grep -Eq '^mean +random +73\.50% +72\.50% +6 +6 +0 +1800 +850s$' <<<"$out" ||
  fail "random mean row: $out"
grep -q "0.50 points below random's (target: at most 0.5), at 33.3% of its steps (target: at most 40%): target met" \
  <<<"$out" || fail "verdict: $out"
python3 -c 'import json, sys; r = json.load(open(sys.argv[1]))
sys.exit(0 if r["target_met"] and abs(r["steps_ratio"] - 1 / 3) < 1e-9 else 1)' \
  "$tmp/results.json" || fail "results.json: $(cat "$tmp/results.json")"

# A point more below random's: missed, exit 1.
write asha 2 0.70 200 0.69 100 100 300 33 33 34
out=$(python3 "$src/bench/search/report.py" "$tmp"/search-*.json)
rc=$?
[ "$rc" -eq 1 ] || fail "target missed (1.5 points below), exit $rc: $out"
grep -q "1.50 points below random's .*: target missed" <<<"$out" || fail "verdict: $out"

if [ "$failures" -gt 0 ]; then
  echo "bench_search_report_test: $failures failure(s)"
  exit 1
fi
echo "bench_search_report_test: passed"
