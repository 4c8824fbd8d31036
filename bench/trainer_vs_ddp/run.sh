#!/usr/bin/env bash
# Throughput of tessera-train against PyTorch DistributedDataParallel on the same
# work: the same ViT (ddp_peer.py mirrors worker/trainer/model/vit.cc op for op), the
# same per-rank batch, synthetic data of the same size, AdamW, Gloo over loopback,
# the same intra-op thread count, at world sizes 1 and 2. DDP runs at its
# defaults (bucket_cap_mb=25, gradient copies into its buckets); tessera at its
# own defaults (25 MiB buckets, 1 MiB first bucket; gradients living in the
# buckets; two ranks all-reduce by one pairwise exchange instead of Gloo's
# two-round ring; AdamW fused into one pass per parameter; LayerNorm, GELU and
# the Linear layers on tessera's CPU kernels (one vectorised pass for LayerNorm
# and GELU, oneDNN's sgemm for the Linear products). Attention is the same op on
# both sides: baddbmm (scale as alpha), softmax, bmm, on LibTorch's kernels.
#
# Both sides time only the training steps after a warmup: tessera from its
# per-step breakdown (time_step_ms in --metrics-file, first interval dropped),
# the peer from perf_counter around each step. Each configuration runs REPEATS
# times per side, alternating sides, and the best run counts (the box may be
# shared). Prints the configurations, images/s per rank for both, the ratio
# tessera/ddp and tessera's exposed-communication share of the step
# (time_comm_ms / time_step_ms: all-reduce time backward did not hide).
#
# Usage: bench/trainer_vs_ddp/run.sh            (BUILD=build dir, default build)
#   MODELS="vit-micro vit-cifar-tiny" WORLDS="1 2" THREADS=1 REPEATS=2
#   TESSERA_ARGS="..." adds tessera-train flags, e.g. for an ablation:
#   TESSERA_ARGS="--cpu-kernels aten" (LibTorch's LayerNorm, GELU and Linear)
#   TESSERA_ARGS="--gloo-allreduce ring" (Gloo's ring at two ranks)
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-$ROOT/build}
case "$BUILD" in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
TRAIN=${TESSERA_TRAIN:-$BUILD/bin/tessera-train}
PEER=$ROOT/bench/trainer_vs_ddp/ddp_peer.py
TORCH_PYTHON=/usr/bin/python3  # Debian's python3-torch
MODELS=${MODELS:-"vit-micro vit-cifar-tiny"}
WORLDS=${WORLDS:-"1 2"}
THREADS=${THREADS:-1}
REPEATS=${REPEATS:-2}
TRAIN_SIZE=20000
read -r -a EXTRA <<< "${TESSERA_ARGS:-}"
CORES=$(nproc)  # before OMP_NUM_THREADS is set: nproc honours it

[ -x "$TRAIN" ] || { echo "no tessera-train at $TRAIN (set BUILD=...)" >&2; exit 2; }
"$TORCH_PYTHON" -c 'import torch' 2>/dev/null ||
  { echo "$TORCH_PYTHON has no torch (apt install python3-torch)" >&2; exit 2; }

export OMP_NUM_THREADS=$THREADS OPENBLAS_NUM_THREADS=$THREADS GLOO_SOCKET_IFNAME=lo
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

# Per model: per-rank batch, untimed warmup steps, timed steps (a multiple of
# the warmup, which is also tessera's metrics interval).
settings() {
  case "$1" in
    vit-micro) echo "64 20 100" ;;
    vit-cifar-tiny) echo "32 5 20" ;;
    *) echo "unknown model $1" >&2; exit 2 ;;
  esac
}

free_port() { echo $((20000 + RANDOM % 20000)); }

# tessera-train: prints "images_per_sec_per_rank comm_share".
run_tessera() {
  local model=$1 world=$2 batch=$3 warmup=$4 steps=$5 port pids=() rank
  port=$(free_port)
  for ((rank = 0; rank < world; rank++)); do
    local args=(--model "$model" --dataset synthetic --train-subset "$TRAIN_SIZE"
                --test-subset 256 --batch-size "$batch" --max-steps $((warmup + steps))
                --metrics-every "$warmup" --threads "$THREADS" --data-workers 0
                --world-size "$world" --rank "$rank" --local-rank "$rank"
                --metrics-file "$WORK/tessera-$rank.jsonl" ${EXTRA[@]+"${EXTRA[@]}"})
    [ "$world" -gt 1 ] && args+=(--rendezvous-store "127.0.0.1:$port")
    [ "$rank" -eq 0 ] && echo "$TRAIN ${args[*]}" > "$WORK/tessera-command"
    "$TRAIN" "${args[@]}" > "$WORK/tessera-$rank.log" 2>&1 &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do wait "$pid" || { cat "$WORK"/tessera-*.log >&2; exit 1; }; done
  python3 - "$WORK" "$world" "$batch" "$warmup" <<'EOF'
import json, sys
work, world, batch, warmup = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
rates, shares = [], []
for rank in range(world):
    step, comm = [], []
    for line in open(f"{work}/tessera-{rank}.jsonl"):
        point = json.loads(line)
        if point["step"] <= warmup:
            continue
        if point["name"] == "time_step_ms":
            step.append(point["value"])
        elif point["name"] == "time_comm_ms":
            comm.append(point["value"])
    mean_step = sum(step) / len(step)
    rates.append(batch * 1000.0 / mean_step)
    shares.append(sum(comm) / len(comm) / mean_step)
print(f"{sum(rates) / world:.1f} {sum(shares) / world:.4f}")
EOF
}

# The DDP peer: prints images/s per rank.
run_ddp() {
  local model=$1 world=$2 batch=$3 warmup=$4 steps=$5 port pids=() rank
  port=$(free_port)
  for ((rank = 0; rank < world; rank++)); do
    local args=(--model "$model" --rank "$rank" --world-size "$world" --port "$port"
                --batch-size "$batch" --warmup-steps "$warmup" --steps "$steps"
                --threads "$THREADS" --train-size "$TRAIN_SIZE")
    [ "$rank" -eq 0 ] && echo "$TORCH_PYTHON $PEER ${args[*]}" > "$WORK/ddp-command"
    "$TORCH_PYTHON" "$PEER" "${args[@]}" > "$WORK/ddp-$rank.json" 2> "$WORK/ddp-$rank.log" &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do wait "$pid" || { cat "$WORK"/ddp-*.log >&2; exit 1; }; done
  python3 - "$WORK" "$world" <<'EOF'
import json, sys
work, world = sys.argv[1], int(sys.argv[2])
rates = [json.loads(open(f"{work}/ddp-{r}.json").read())["images_per_sec"] for r in range(world)]
print(f"{sum(rates) / world:.1f}")
EOF
}

best() { printf '%s\n' "$@" | sort -g | tail -1; }

echo "tessera-train vs PyTorch DDP: $CORES of $(nproc --all) cores usable, $THREADS intra-op thread(s) per rank," \
     "torch $("$TORCH_PYTHON" -c 'import torch; print(torch.__version__)'), Gloo on loopback," \
     "best of $REPEATS"
RESULTS=()
for model in $MODELS; do
  read -r batch warmup steps < <(settings "$model")
  for world in $WORLDS; do
    tessera_runs=() ddp_runs=() tessera_best=""
    for ((r = 0; r < REPEATS; r++)); do
      run=$(run_tessera "$model" "$world" "$batch" "$warmup" "$steps")
      tessera_runs+=("${run% *}")
      tessera_best=$(printf '%s\n' "$run" ${tessera_best:+"$tessera_best"} | sort -g | tail -1)
      ddp_runs+=("$(run_ddp "$model" "$world" "$batch" "$warmup" "$steps")")
    done
    read -r tessera share <<< "$tessera_best"
    ddp=$(best "${ddp_runs[@]}")
    ratio=$(python3 -c "print(f'{$tessera / $ddp:.3f}')")
    echo
    echo "== $model, world size $world: batch $batch per rank, $warmup warmup + $steps timed steps"
    echo "   tessera: $(cat "$WORK/tessera-command")"
    echo "   ddp:     $(cat "$WORK/ddp-command")"
    echo "   runs (images/s per rank): tessera ${tessera_runs[*]}; ddp ${ddp_runs[*]}"
    RESULTS+=("$(printf '%-15s %5s %6s %12s %12s %8s %12s' "$model" "$world" "$batch" \
      "$tessera" "$ddp" "$ratio" "$(python3 -c "print(f'{100 * $share:.1f}%')")")")
  done
done
echo
printf '%-15s %5s %6s %12s %12s %8s %12s\n' model world batch tessera_ips ddp_ips ratio \
  exposed_comm
printf '%s\n' "${RESULTS[@]}"
