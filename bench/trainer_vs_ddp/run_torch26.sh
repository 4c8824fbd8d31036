#!/usr/bin/env bash
# tessera-train against the PyTorch 2.6 DDP peer a 2026 user would write, both
# sides on LibTorch 2.6: the peer (ddp_peer.py --attention sdpa --fused-adamw:
# F.scaled_dot_product_attention, AdamW(fused=True), DDP at its defaults, Gloo
# on loopback) runs on Debian trixie's python3-torch 2.6 inside the LibTorch 2.6
# lane's trixie root, against the tessera-train that lane builds against
# trixie's LibTorch 2.6 (scripts/lane-libtorch26.sh). The main build's
# tessera-train (LibTorch 1.13, on this host) runs the same work as a third
# side. Same model, batch, synthetic data, thread count and timing as run.sh
# (which keeps comparing against bookworm's PyTorch 1.13 peer).
#
# Each configuration runs REPEATS rounds; a round runs tessera 2.6, the peer and
# tessera 1.13 one after the other (the order alternates between rounds), and
# each side's best round counts. Prints per (model, world size) images/s per
# rank of the three, the ratios tessera 2.6 / peer (target >= 1.5) and tessera
# 1.13 / peer, and tessera 2.6's exposed-communication share of the step.
#
# Needs root (the lane's chroot) and a LibTorch 2.6 lane that has been run
# once. Installs python3-torch, and OpenBLAS (libopenblas0, which libtorch2.6
# recommends; without it both 2.6 sides run on the reference BLAS), into the
# lane's root through the lane helpers (scripts/lane-common.sh) on first use.
# trixie's PyTorch is built without libuv, so the peer runs with USE_LIBUV=0.
#
# Usage: sudo bench/trainer_vs_ddp/run_torch26.sh [--cache DIR] [--jobs N]
#   MODELS="vit-micro vit-cifar-tiny" WORLDS="1 2" THREADS=1 REPEATS=3
#   BUILD=build (the main build, for tessera on LibTorch 1.13)
set -euo pipefail

BENCH=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$BENCH/../.." && pwd)
BUILD=${BUILD:-$ROOT/build}
case "$BUILD" in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
export BUILD
# shellcheck source=scripts/lane-common.sh
source "$ROOT/scripts/lane-common.sh"
lane_init libtorch26 "$@"

MODELS=${MODELS:-"vit-micro vit-cifar-tiny"}
WORLDS=${WORLDS:-"1 2"}
THREADS=${THREADS:-1}
REPEATS=${REPEATS:-3}
TRAIN_SIZE=20000
TRAIN113=$BUILD/bin/tessera-train
CORES=$(nproc)

[ -x "$TRAIN113" ] || lane_die "no tessera-train at $TRAIN113 (set BUILD=...)"
if [ ! -f "$LANE_ROOT/.tessera-lane-root" ] || [ ! -f "$LANE_DIR/build/build.ninja" ]; then
  lane_die "run scripts/lane-libtorch26.sh first: it builds tessera-train against LibTorch 2.6"
fi
lane_mount_all
# The lane installs without recommends, which leaves LibTorch on the reference
# BLAS; libtorch2.6 recommends OpenBLAS first, as bookworm's host has it.
lane_install python3-torch libopenblas0
lane_chroot "cmake --build /build --target tessera-train -j$LANE_JOBS" \
  >"$LANE_DIR/bench-build.log" 2>&1 ||
  lane_die "building tessera-train failed; see $LANE_DIR/bench-build.log"

WORK=$(mktemp -d "$LANE_DIR/build/bench.XXXXXX")  # /build/<name> in the root
IN_ROOT=/build/${WORK##*/}
trap 'rm -rf "$WORK"; lane_unmount_all' EXIT
export OMP_NUM_THREADS=$THREADS OPENBLAS_NUM_THREADS=$THREADS GLOO_SOCKET_IFNAME=lo

# in_root CMD...: CMD in the lane's root, with the bench's environment only.
in_root() {
  chroot "$LANE_ROOT" /usr/bin/env -i PATH=/usr/local/bin:/usr/bin:/bin HOME=/root \
    LANG=C.UTF-8 OMP_NUM_THREADS="$THREADS" OPENBLAS_NUM_THREADS="$THREADS" \
    GLOO_SOCKET_IFNAME=lo USE_LIBUV=0 "$@"
}

settings() {  # per model: per-rank batch, warmup steps, timed steps (as run.sh)
  case "$1" in
    vit-micro) echo "64 20 100" ;;
    vit-cifar-tiny) echo "32 5 20" ;;
    *) lane_die "unknown model $1" ;;
  esac
}

free_port() { echo $((20000 + RANDOM % 20000)); }

# run_tessera SIDE MODEL WORLD BATCH WARMUP STEPS: SIDE is t26 (in the root) or
# t113 (the main build, here); prints "images_per_sec_per_rank comm_share".
run_tessera() {
  local side=$1 model=$2 world=$3 batch=$4 warmup=$5 steps=$6 port pids=() rank
  local runner=(in_root /build/bin/tessera-train) dir=$IN_ROOT
  if [ "$side" = t113 ]; then runner=("$TRAIN113"); dir=$WORK; fi
  port=$(free_port)
  for ((rank = 0; rank < world; rank++)); do
    local args=(--model "$model" --dataset synthetic --train-subset "$TRAIN_SIZE"
                --test-subset 256 --batch-size "$batch" --max-steps $((warmup + steps))
                --metrics-every "$warmup" --threads "$THREADS" --data-workers 0
                --world-size "$world" --rank "$rank" --local-rank "$rank"
                --metrics-file "$dir/$side-$rank.jsonl")
    [ "$world" -gt 1 ] && args+=(--rendezvous-store "127.0.0.1:$port")
    [ "$rank" -eq 0 ] && echo "${runner[*]} ${args[*]}" >"$WORK/$side-command"
    "${runner[@]}" "${args[@]}" >"$WORK/$side-$rank.log" 2>&1 &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do
    wait "$pid" || { cat "$WORK/$side"-*.log >&2; lane_die "$side run failed"; }
  done
  python3 - "$WORK" "$side" "$world" "$batch" "$warmup" <<'EOF'
import json, sys
work, side, world, batch, warmup = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:])
rates, shares = [], []
for rank in range(world):
    step, comm = [], []
    for line in open(f"{work}/{side}-{rank}.jsonl"):
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

# run_peer MODEL WORLD BATCH WARMUP STEPS: prints images/s per rank.
run_peer() {
  local model=$1 world=$2 batch=$3 warmup=$4 steps=$5 port pids=() rank
  port=$(free_port)
  for ((rank = 0; rank < world; rank++)); do
    local args=(--model "$model" --rank "$rank" --world-size "$world" --port "$port"
                --batch-size "$batch" --warmup-steps "$warmup" --steps "$steps"
                --threads "$THREADS" --train-size "$TRAIN_SIZE" --attention sdpa
                --fused-adamw)
    [ "$rank" -eq 0 ] &&
      echo "USE_LIBUV=0 python3 /src/bench/trainer_vs_ddp/ddp_peer.py ${args[*]}" \
        >"$WORK/peer-command"
    in_root python3 /src/bench/trainer_vs_ddp/ddp_peer.py "${args[@]}" \
      >"$WORK/peer-$rank.json" 2>"$WORK/peer-$rank.log" &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do
    wait "$pid" || { cat "$WORK"/peer-*.log >&2; lane_die "peer run failed"; }
  done
  python3 - "$WORK" "$world" <<'EOF'
import json, sys
work, world = sys.argv[1], int(sys.argv[2])
runs = [json.loads(open(f"{work}/peer-{r}.json").read()) for r in range(world)]
print(f"{sum(r['images_per_sec'] for r in runs) / world:.1f}")
open(f"{work}/peer-kind", "w").write(
    f"torch {runs[0]['torch']}, attention {runs[0]['attention']}, AdamW {runs[0]['adamw']}")
EOF
}

best() { printf '%s\n' "$@" | sort -g | tail -1; }
ratio() { python3 -c "print(f'{$1 / $2:.3f}')"; }

torch_version=$(in_root python3 -c 'import torch; print(torch.__version__)')
blas=$(in_root readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3)
echo "tessera-train (LibTorch 2.6, and 1.13) vs PyTorch $torch_version DDP: $CORES of" \
  "$(nproc --all) cores usable, $THREADS intra-op thread(s) per rank, Gloo on loopback," \
  "best of $REPEATS rounds, sides alternating; BLAS in the trixie root: $blas"
RESULTS=()
for model in $MODELS; do
  read -r batch warmup steps < <(settings "$model")
  # The fp32 matrix-product floor of a step here (bench/trainer_vs_ddp/gemm_floor.cc):
  # batch / floor is the most images/s per rank any fp32 trainer can reach.
  ceiling=-
  if [ -x "$BUILD/bench/gemm_floor" ]; then
    ceiling=$(OMP_NUM_THREADS=$THREADS "$BUILD/bench/gemm_floor" --model "$model" \
      --batch-size "$batch" --threads "$THREADS" | sed -n 's/.*ceiling_images_per_s=//p')
  fi
  for world in $WORLDS; do
    t26_runs=() t113_runs=() peer_runs=() t26_best=""
    for ((r = 0; r < REPEATS; r++)); do
      sides=(t26 peer t113)
      ((r % 2 == 1)) && sides=(t113 peer t26)
      for side in "${sides[@]}"; do
        case $side in
          peer)
            run=$(run_peer "$model" "$world" "$batch" "$warmup" "$steps")
            peer_runs+=("$run")
            ;;
          t113)
            run=$(run_tessera t113 "$model" "$world" "$batch" "$warmup" "$steps")
            t113_runs+=("${run% *}")
            ;;
          t26)
            run=$(run_tessera t26 "$model" "$world" "$batch" "$warmup" "$steps")
            t26_runs+=("${run% *}")
            t26_best=$(printf '%s\n' "$run" ${t26_best:+"$t26_best"} | sort -g | tail -1)
            ;;
        esac
      done
    done
    read -r t26 share <<<"$t26_best"
    t113=$(best "${t113_runs[@]}")
    peer=$(best "${peer_runs[@]}")
    echo
    echo "== $model, world size $world: batch $batch per rank, $warmup warmup + $steps timed steps"
    echo "   tessera 2.6:  $(cat "$WORK/t26-command")"
    echo "   tessera 1.13: $(cat "$WORK/t113-command")"
    echo "   peer:         $(cat "$WORK/peer-command") ($(cat "$WORK/peer-kind"))"
    echo "   runs (images/s per rank): tessera 2.6 ${t26_runs[*]}; peer ${peer_runs[*]};" \
      "tessera 1.13 ${t113_runs[*]}"
    max_ratio=-
    [ "$ceiling" != - ] && max_ratio=$(ratio "$ceiling" "$peer")
    RESULTS+=("$(printf '%-15s %5s %6s %11s %12s %10s %9s %10s %12s %9s %9s' "$model" \
      "$world" "$batch" "$t26" "$t113" "$peer" "$(ratio "$t26" "$peer")" \
      "$(ratio "$t113" "$peer")" "$(python3 -c "print(f'{100 * $share:.1f}%')")" \
      "$ceiling" "$max_ratio")")
  done
done
echo
printf '%-15s %5s %6s %11s %12s %10s %9s %10s %12s %9s %9s\n' model world batch tessera26 \
  tessera113 peer26 ratio26 ratio113 exposed_comm ceiling max_ratio
printf '%s\n' "${RESULTS[@]}"
echo "(ratio26 = tessera on LibTorch 2.6 / the PyTorch 2.6 peer, target >= 1.5;" \
  "ratio113 = tessera on LibTorch 1.13 / the same peer; ceiling = batch / the step's" \
  "fp32 matrix products alone on oneDNN here (gemm_floor), max_ratio = ceiling / peer)"
