#!/usr/bin/env bash
# tessera-train's ZeRO stages against PyTorch 2.6's equivalents, in one run
# (issue 41's target: at each stage, tessera's peak RSS per rank at least 10%
# below PyTorch 2.6's). tessera-train runs from the main build on this host,
# through bench/zero/run.sh; the PyTorch peer (bench/zero/torch_peer.py:
# torchvision's ViT-B/16 at 32 px, AdamW fp32, Gloo on loopback) runs on Debian
# trixie's python3-torch 2.6 and python3-torchvision 0.21 inside the trixie
# root of the LibTorch 2.6 lane (scripts/lane-common.sh; the lane's LibTorch
# 2.6 build of tessera-train is not needed). The peer's mode per stage:
#   0 ddp, 1 zero1 (ZeroRedundancyOptimizer over DDP), 2 fsdp-grad-op (FSDP
#   SHARD_GRAD_OP), 3 fsdp-full (FSDP FULL_SHARD, one unit per encoder block).
#
# For each world size and stage, REPEATS rounds of the two sides one after the
# other, the side that goes first alternating; of each side, the round with the
# shortest step time counts. Then it prints run.sh's tables and targets for
# tessera, and one table of peak RSS per rank (the maximum over ranks) of both
# sides, their ratio, and the target against PyTorch. Stages that
# tessera-train's --help does not list run on the PyTorch side only.
#
# Needs root (the root's chroot and mounts). Makes the trixie root on first use
# (debootstrap, a few hundred MB from Debian's archive) and installs
# python3-torch, python3-torchvision and OpenBLAS (libopenblas0, which
# libtorch2.6 recommends; without it PyTorch runs on the reference BLAS) into
# it through the lane helpers.
#
# Usage: sudo bench/zero/run_torch26.sh [--cache DIR] [--prepare | --peer-check]
#   --prepare     make the root and install the packages, then stop
#   --peer-check  run only the peer, at a tiny size (--tiny: dim 64, depth 2),
#                 in each mode (STAGES, default 0 1 2 3) at each world size
#                 (WORLDS, default 2), to check it end to end: not a figure
#   WORLDS="2 4" STAGES="0 1 2 3" REPEATS=1 THREADS=1 BATCH=2 WARMUP=2 STEPS=4
#   BUILD=build (the main build: tessera-train) and run.sh's other settings
#   PEER_ARGS="..." adds torch_peer.py flags (PEER_ARGS=--tiny with a small
#   MODEL checks the script's flow quickly; its figures compare nothing)
# Exits 1 when a target is missed, 2 when it cannot run or cannot check one.
set -euo pipefail

BENCH=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$BENCH/../.." && pwd)

# lane_init runs this script again in a mount namespace with --cache and --jobs
# only: this script's own flag travels in ZERO_TORCH26_MODE.
ZERO_TORCH26_MODE=${ZERO_TORCH26_MODE:-bench}
LANE_ARGS=()
for arg in "$@"; do
  case "$arg" in
    --prepare) ZERO_TORCH26_MODE=prepare ;;
    --peer-check) ZERO_TORCH26_MODE=peer-check ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) LANE_ARGS+=("$arg") ;;
  esac
done
export ZERO_TORCH26_MODE
# shellcheck source=scripts/lane-common.sh
source "$ROOT/scripts/lane-common.sh"
# shellcheck source=bench/zero/lib.sh
source "$BENCH/lib.sh"
# This bench's code for "cannot run" is 2, the lane helpers' included.
lane_die() {
  echo "[lane ${LANE_NAME}] FAILED: $*" >&2
  exit 2
}
lane_init libtorch26 ${LANE_ARGS[@]+"${LANE_ARGS[@]}"}

BUILD=${BUILD:-$ROOT/build}
case "$BUILD" in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
export BUILD
TRAIN=${TESSERA_TRAIN:-$BUILD/bin/tessera-train}
CHECK_WORLDS=${WORLDS:-2}  # --peer-check: 2 ranks unless WORLDS is set
WORLDS=${WORLDS:-"2 4"}
CHECK_STAGES=${STAGES:-"0 1 2 3"}  # --peer-check: every mode unless STAGES is set
STAGES=${STAGES:-"0 1 2 3"}
REPEATS=${REPEATS:-1}
THREADS=${THREADS:-1}
BATCH=${BATCH:-2}
WARMUP=${WARMUP:-2}
STEPS=${STEPS:-4}
export WARMUP STEPS BATCH THREADS
PEER=/src/bench/zero/torch_peer.py  # the repository is mounted read-only at /src
read -r -a PEER_ARGS <<< "${PEER_ARGS:-}"

if [ "$ZERO_TORCH26_MODE" = bench ]; then
  [ -x "$TRAIN" ] || { echo "no tessera-train at $TRAIN (set BUILD=...)" >&2; exit 2; }
fi
lane_ensure_root
lane_mount_all
lane_install python3-torch python3-torchvision libopenblas0
read -r TORCH_VERSION VISION_VERSION < <(lane_chroot "python3 -c 'import torch, torchvision; \
  print(torch.__version__, torchvision.__version__)'")
lane_log "trixie root $LANE_ROOT: torch $TORCH_VERSION, torchvision $VISION_VERSION"
[ "$ZERO_TORCH26_MODE" = prepare ] && exit 0

WORK=$(mktemp -d)
trap 'zero_stop_all; rm -rf "$WORK"; lane_unmount_all' EXIT

# "${IN_ROOT[@]}" CMD...: CMD in the trixie root, with the bench's environment only.
IN_ROOT=(chroot "$LANE_ROOT" /usr/bin/env -i PATH=/usr/local/bin:/usr/bin:/bin HOME=/root
         LANG=C.UTF-8 OMP_NUM_THREADS="$THREADS" OPENBLAS_NUM_THREADS="$THREADS"
         GLOO_SOCKET_IFNAME=lo USE_LIBUV=0)

peer_mode() {
  case "$1" in
    0) echo ddp ;; 1) echo zero1 ;; 2) echo fsdp-grad-op ;; 3) echo fsdp-full ;; *) echo "" ;;
  esac
}

# run_peer WORLD STAGE REPEAT [PEER ARGS...]: every rank of the peer at one
# stage; its line in $WORK/pytorch.jsonl.
run_peer() {
  local world=$1 stage=$2 repeat=$3 port rank dir="$WORK/peer-w$1-z$2-r$3" command=""
  shift 3
  mkdir -p "$dir"
  port=$(zero_free_port)
  for ((rank = 0; rank < world; rank++)); do
    local args=(--mode "$(peer_mode "$stage")" --rank "$rank" --world-size "$world"
                --port "$port" --batch-size "$BATCH" --warmup-steps "$WARMUP" --steps "$STEPS"
                --threads "$THREADS" "$@")
    [ "$rank" -eq 0 ] && command="USE_LIBUV=0 python3 $PEER ${args[*]}"
    zero_start "${IN_ROOT[@]}" python3 "$PEER" "${args[@]}" >"$dir/r$rank.json" 2>"$dir/r$rank.log"
  done
  if ! zero_wait_all; then
    tail -n 30 "$dir"/r*.log >&2
    lane_die "the PyTorch peer failed at world size $world, stage $stage (logs above)"
  fi
  python3 "$BENCH/report.py" collect-pytorch --world "$world" --stage "$stage" \
    --repeat "$repeat" --command "$command" "$dir"/r*.json >>"$WORK/pytorch.jsonl"
}

if [ "$ZERO_TORCH26_MODE" = peer-check ]; then
  echo "PyTorch peer check (--tiny: not a figure): world sizes $CHECK_WORLDS, stages" \
    "$CHECK_STAGES, $THREADS thread(s) per rank"
  for world in $CHECK_WORLDS; do
    for stage in $CHECK_STAGES; do
      [ -n "$(peer_mode "$stage")" ] || lane_die "the peer has no mode for stage $stage"
      run_peer "$world" "$stage" 0 --tiny
      cat "$WORK/peer-w$world-z$stage-r0"/r*.json
    done
  done
  echo "peer check done: each mode ran and every rank printed its line"
  exit 0
fi

LISTED=$(zero_listed_stages "$TRAIN")
echo "ZeRO: tessera-train ($TRAIN) against PyTorch $TORCH_VERSION with torchvision" \
  "$VISION_VERSION in $LANE_ROOT; $(nproc) of $(nproc --all) cores usable, $THREADS thread(s) per rank," \
  "world sizes $WORLDS, stages $STAGES, best of $REPEATS round(s), sides alternating"
round=0
for world in $WORLDS; do
  for stage in $STAGES; do
    tessera=1
    if [[ " $LISTED " != *" $stage "* ]]; then
      echo "stage $stage: tessera-train --help lists stages ${LISTED:-none}; PyTorch side only"
      tessera=0
    fi
    if [ -z "$(peer_mode "$stage")" ]; then
      echo "stage $stage: the PyTorch peer has no mode for it; tessera side only"
    fi
    for ((r = 0; r < REPEATS; r++)); do
      sides=(tessera pytorch)
      ((round % 2 == 1)) && sides=(pytorch tessera)
      round=$((round + 1))
      for side in "${sides[@]}"; do
        if [ "$side" = tessera ] && [ "$tessera" = 1 ]; then
          WORLDS=$world STAGES=$stage REPEATS=1 REPORT=0 RESULTS="$WORK/tessera.jsonl" \
            TESSERA_TRAIN="$TRAIN" "$BENCH/run.sh" >"$WORK/run-w$world-z$stage.log" 2>&1 || {
            cat "$WORK/run-w$world-z$stage.log" >&2
            lane_die "bench/zero/run.sh failed at world size $world, stage $stage"
          }
        elif [ "$side" = pytorch ] && [ -n "$(peer_mode "$stage")" ]; then
          run_peer "$world" "$stage" "$r" ${PEER_ARGS[@]+"${PEER_ARGS[@]}"}
        fi
      done
    done
  done
done
touch "$WORK/tessera.jsonl" "$WORK/pytorch.jsonl"

status=0
python3 "$BENCH/report.py" tessera "$WORK/tessera.jsonl" || status=$?
compare=0
python3 "$BENCH/report.py" compare "$WORK/tessera.jsonl" "$WORK/pytorch.jsonl" || compare=$?
# A miss (1) outweighs a target that could not be checked (2).
if [ "$status" = 1 ] || [ "$compare" = 1 ]; then exit 1; fi
if [ "$status" != 0 ] || [ "$compare" != 0 ]; then exit 2; fi
exit 0
