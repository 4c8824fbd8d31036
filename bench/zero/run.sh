#!/usr/bin/env bash
# ZeRO stages on CPU: tessera-train with 2 Gloo ranks over loopback (ViT-CIFAR-tiny
# on synthetic data, AdamW) at --zero-stage 0, 1 and 2, the same seed, batch and
# steps each time. Prints, per stage and rank, the bytes of optimizer state and of
# gradients the rank holds (the optimizer_state_bytes and gradient_bytes metrics
# every rank reports with its first metrics), the rank's peak RSS (peak_rss_bytes)
# and the mean step time after the warmup interval (time_step_ms), then the
# targets of issue 34:
#   - sharded bytes at 1/N of stage 0's, within 2%: the optimizer state at
#     stages 1 and 2, the gradients at stage 2 (stage 1 keeps them whole);
#   - step time within 10% of stage 0's (not slower than 1.10x).
# Each stage runs REPEATS times and the fastest run counts (the box may be
# shared); the bytes do not change between runs.
#
# Usage: bench/zero/run.sh                 (BUILD=build dir, default build)
#   MODEL=vit-cifar-tiny BATCH=32 WARMUP=5 STEPS=20 THREADS=1 REPEATS=2 STAGES="0 1 2"
#   TESSERA_ARGS="..." adds tessera-train flags (e.g. --optimizer lamb)
# Exits 1 when a target is missed, 2 when it cannot run.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-$ROOT/build}
case "$BUILD" in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
TRAIN=${TESSERA_TRAIN:-$BUILD/bin/tessera-train}
MODEL=${MODEL:-vit-cifar-tiny}
BATCH=${BATCH:-32}
WARMUP=${WARMUP:-5}
STEPS=${STEPS:-20}
THREADS=${THREADS:-1}
REPEATS=${REPEATS:-2}
STAGES=${STAGES:-"0 1 2"}
WORLD=2
read -r -a EXTRA <<< "${TESSERA_ARGS:-}"
CORES=$(nproc)  # before OMP_NUM_THREADS is set: nproc honours it

[ -x "$TRAIN" ] || { echo "no tessera-train at $TRAIN (set BUILD=...)" >&2; exit 2; }
"$TRAIN" --help 2>&1 | grep -q -- '--zero-stage' ||
  { echo "$TRAIN has no --zero-stage flag: build a trainer with ZeRO" >&2; exit 2; }

export OMP_NUM_THREADS=$THREADS OPENBLAS_NUM_THREADS=$THREADS GLOO_SOCKET_IFNAME=lo
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

free_port() { echo $((20000 + RANDOM % 20000)); }

# One run of both ranks at one stage; metrics in $WORK/z<stage>-r<run>-<rank>.jsonl.
run_stage() {
  local stage=$1 run=$2 port pids=() rank
  port=$(free_port)
  for ((rank = 0; rank < WORLD; rank++)); do
    local prefix="$WORK/z$stage-r$run-$rank"
    local args=(--model "$MODEL" --dataset synthetic --train-subset 20000 --test-subset 256
                --batch-size "$BATCH" --max-steps $((WARMUP + STEPS)) --metrics-every "$WARMUP"
                --threads "$THREADS" --data-workers 0 --seed 1 --zero-stage "$stage"
                --world-size "$WORLD" --rank "$rank" --local-rank "$rank"
                --rendezvous-store "127.0.0.1:$port" --metrics-file "$prefix.jsonl"
                ${EXTRA[@]+"${EXTRA[@]}"})
    [ "$rank" -eq 0 ] && echo "$TRAIN ${args[*]}" > "$WORK/command-z$stage"
    "$TRAIN" "${args[@]}" > "$prefix.log" 2>&1 &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do
    wait "$pid" || { tail -n 20 "$WORK"/z"$stage"-r"$run"-*.log >&2; exit 1; }
  done
}

echo "ZeRO stages on CPU: $MODEL, $WORLD Gloo ranks on loopback, batch $BATCH per rank," \
     "$WARMUP warmup + $STEPS timed steps, $THREADS thread(s) per rank, best of $REPEATS," \
     "$CORES of $(nproc --all) cores usable"
for stage in $STAGES; do
  for ((r = 0; r < REPEATS; r++)); do run_stage "$stage" "$r"; done
  echo "  stage $stage: $(cat "$WORK/command-z$stage")"
done
echo

python3 - "$WORK" "$WORLD" "$WARMUP" "$REPEATS" $STAGES <<'PY'
import json, sys

work, world, warmup, repeats = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
stages = [int(s) for s in sys.argv[5:]]

def mib(b):
    return "-" if b is None else f"{b / 2**20:.2f} MiB"

def read(stage, run, rank):
    """The rank's figures of one run: first bytes reported, peak RSS, mean step ms."""
    fig = {"optimizer_state_bytes": None, "gradient_bytes": None, "peak_rss_bytes": None}
    steps = []
    for line in open(f"{work}/z{stage}-r{run}-{rank}.jsonl"):
        p = json.loads(line)
        name, value = p["name"], p["value"]
        if name in ("optimizer_state_bytes", "gradient_bytes") and fig[name] is None:
            fig[name] = value
        elif name == "peak_rss_bytes":
            fig[name] = max(value, fig[name] or 0)
        elif name == "time_step_ms" and p["step"] > warmup:
            steps.append(value)
    fig["step_ms"] = sum(steps) / len(steps) if steps else None
    return fig

results = {}  # stage -> (per-rank figures of the fastest run, its step ms)
for stage in stages:
    best = None
    for run in range(repeats):
        ranks = [read(stage, run, rank) for rank in range(world)]
        times = [f["step_ms"] for f in ranks if f["step_ms"] is not None]
        step = max(times) if len(times) == world else None  # the slowest rank paces the step
        if best is None or (step is not None and (best[1] is None or step < best[1])):
            best = (ranks, step)
    results[stage] = best

print(f"{'stage':>5} {'rank':>4} {'optimizer_bytes':>16} {'gradient_bytes':>15} "
      f"{'peak_rss':>12} {'step_ms':>8}")
for stage in stages:
    ranks, step = results[stage]
    for rank, f in enumerate(ranks):
        print(f"{stage:>5} {rank:>4} {mib(f['optimizer_state_bytes']):>16} "
              f"{mib(f['gradient_bytes']):>15} {mib(f['peak_rss_bytes']):>12} "
              f"{'-' if f['step_ms'] is None else format(f['step_ms'], '.1f'):>8}")

def mean(stage, name):
    values = [f[name] for f in results[stage][0]]
    return None if any(v is None for v in values) else sum(values) / len(values)

print()
failed = False
if 0 not in results:
    print("no stage 0 run: nothing to check against")
    sys.exit(0)
base_step = results[0][1]
for stage in [s for s in stages if s != 0]:
    checks = []
    for name, sharded in (("optimizer_state_bytes", stage >= 1), ("gradient_bytes", stage >= 2)):
        ours, base = mean(stage, name), mean(0, name)
        label = name.replace("_bytes", "")
        if ours is None or base is None or base <= 0:
            checks.append((False, f"{label}: not reported"))
            continue
        ratio = ours / base
        target = 1 / world if sharded else 1.0
        ok = abs(ratio / target - 1) <= 0.02
        checks.append((ok, f"{label} {ratio:.3f} of stage 0 (target {target:.3f} ± 2%)"))
    step = results[stage][1]
    if step is None or base_step is None:
        checks.append((False, "step time: not reported"))
    else:
        ratio = step / base_step
        checks.append((ratio <= 1.10, f"step time {ratio:.2f}x stage 0 (target ≤ 1.10x)"))
    for ok, text in checks:
        failed |= not ok
        print(f"stage {stage}: {'ok  ' if ok else 'MISS'} {text}")
print()
print("targets met" if not failed else "targets missed")
sys.exit(1 if failed else 0)
PY
