#!/usr/bin/env bash
# Search benchmark: ASHA against random search over the same sampled trials, on
# a coordinator and two one-slot CPU workers on this machine (as README command
# 1 starts them).
#
#   bench/search/run.sh [--seeds "1 2 3"] [--out DIR]
#
# The space and data are examples/search-vit-micro-asha.yaml's, with warmups
# of {0, 200} steps instead of {0, 25}: ViT-micro on a 20000-image subset of
# Fashion-MNIST with 10% held out for validation; learning rate log-uniform
# 1e-4 to 1e-2, weight decay {0, 0.05, 0.1}, label smoothing {0, 0.1}, warmup
# {0, 200}; 27 trials, max_length 1 epoch. For each sampler
# seed it runs that ASHA search (eta 3, 3 rungs), then random search with the
# same seed, whose 27 trials are the same draws (trial i is stream i of the
# seed), each trained to max_length. It prints per seed and as means: the best
# validation accuracy, that trial's test accuracy, trials, training steps and
# wall time, and checks the target: ASHA's mean best validation accuracy within
# 0.5 points of random's at no more than 40% of its steps.
#
# Builds nothing: build/bin must hold tessera-coordinator, tessera-worker,
# tessctl and tessera-train (scripts/demo.sh builds them). Nothing else may run
# on the machine for the wall times to mean anything: a seed takes 14-20
# minutes on 2 cores. The cluster's files, each search's report
# (search-METHOD-SEED.json) and results.json stay under --out (default
# build/bench-search).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
BIN=$ROOT/build/bin
SEEDS="1 2 3"
OUT=$ROOT/build/bench-search
EXAMPLE=$ROOT/examples/search-vit-micro-asha.yaml

usage() { sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case $1 in
    --seeds) SEEDS=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    -h | --help) usage; exit 0 ;;
    *) echo "bench/search/run.sh: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
  esac
done
for b in tessera-coordinator tessera-worker tessctl tessera-train; do
  if [ ! -x "$BIN/$b" ]; then
    echo "bench/search/run.sh: $BIN/$b is missing; build it first (scripts/demo.sh does)" >&2
    exit 2
  fi
done
case $OUT in /*) ;; *) OUT=$ROOT/$OUT ;; esac

RUN=$OUT/cluster
CKPT=$OUT/checkpoints
source scripts/local_cluster.sh
LOCAL_CLUSTER_NAME=bench-search
# The workers must accept checkpoints under $CKPT: asha resumes promoted trials.
mkdir -p "$OUT"
rm -rf "$CKPT"
install -d -m 0700 "$CKPT"
local_cluster_start "$BIN" "$RUN" 2 --checkpoint-root "$CKPT"

# The example's spec with the benchmark's warmups, {0, 200} (the example's
# own end within its first rung); the random search's is that less its asha
# block.
sed 's/warmup_steps: {choice: \[0, 25\]}/warmup_steps: {choice: [0, 200]}/' "$EXAMPLE" \
  >"$OUT/search-asha.yaml"
grep -q 'warmup_steps: {choice: \[0, 200\]}' "$OUT/search-asha.yaml" || {
  echo "bench/search/run.sh: $EXAMPLE no longer has the warmups this script replaces" >&2
  exit 2
}
awk '/^  asha:/ {skip = 1; next} skip && /^    / {next} {skip = 0; print}' \
  "$OUT/search-asha.yaml" >"$OUT/search-random.yaml"

# Runs one search to its end, printing its progress; its report goes to
# $OUT/search-METHOD-SEED.json with the wall time and the best trial's test
# accuracy added.
run_search() {
  local method=$1 seed=$2 id state start end
  start=$(date +%s%N)
  id=$("$BIN/tessctl" search "$OUT/search-$method.yaml" --set search.method="$method" \
    --set search.seed="$seed" \
    --set base.trainer.checkpoint_dir="$CKPT/$method-$seed" | tail -n 1)
  echo "bench-search: seed $seed: $method search $id submitted"
  while true; do
    state=$("$BIN/tessctl" search status "$id" -o json |
      python3 -c 'import json, sys; s = json.load(sys.stdin); c = s["counts"]
print(s["state"], "started=%d completed=%d stopped=%d failed=%d" % (
    c["started"], c["completed"], c["stopped"], c["failed"]))')
    case $state in RUNNING*) ;; *) break ;; esac
    printf '\rbench-search: seed %s: %s search %s: %s, %ds ' "$seed" "$method" "$id" \
      "$state" "$((($(date +%s%N) - start) / 1000000000))"
    sleep 5
  done
  end=$(date +%s%N)
  printf '\rbench-search: seed %s: %s search %s: %s\n' "$seed" "$method" "$id" "$state"
  "$BIN/tessctl" search report "$id" -o json >"$OUT/tessctl-report-$method-$seed.json"
  local best_job test
  best_job=$(python3 -c 'import json, sys; r = json.load(open(sys.argv[1]))
best = [t for t in r["trials"] if t["best"]]
print(best[0]["job_ids"][-1] if best else 0)' "$OUT/tessctl-report-$method-$seed.json")
  test=null
  if [ "$best_job" != 0 ]; then
    test=$("$BIN/tessctl" metrics "$best_job" --name test_accuracy -o json |
      python3 -c 'import json, sys; p = json.load(sys.stdin)
print(p[-1]["value"] if p else "null")')
  fi
  python3 - "$OUT/tessctl-report-$method-$seed.json" "$OUT/search-$method-$seed.json" \
    "$seed" "$(((end - start) / 1000000))" "$test" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
report["seed"] = int(sys.argv[3])
report["wall_seconds"] = int(sys.argv[4]) / 1000
report["best_test_accuracy"] = None if sys.argv[5] == "null" else float(sys.argv[5])
json.dump(report, open(sys.argv[2], "w"), indent=1)
PY
}

for seed in $SEEDS; do
  run_search asha "$seed"
  run_search random "$seed"
done
python3 bench/search/report.py "$OUT"/search-asha-*.json "$OUT"/search-random-*.json \
  --out "$OUT/results.json"
