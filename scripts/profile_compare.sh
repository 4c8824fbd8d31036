#!/usr/bin/env bash
# The step, operator by operator: tessera-train against torchvision's
# VisionTransformer of the same shape, both under LibTorch's profiler over the
# same steps, on this machine's CPU (Debian's LibTorch 1.13 and python3-torch).
# Prints bench/step_profile/compare.py's tables: per step wall time and
# operator calls, the top operators of each by self CPU time, the operators by
# kind, and every copy, cast or layout change tessera-train makes more often
# than torchvision. tessera-train runs with --cpu-kernels aten, the aten
# operators its GPU path runs, unless CPU_KERNELS=tessera.
#
# Usage: scripts/profile_compare.sh [MODEL [BATCH]]   (default vit-micro 32)
#   Environment: STEPS=3-5 (the window), IMAGE_SIZE=0 (the preset's),
#   THREADS=1, OUT (default: a temporary folder, kept), BUILD=build,
#   CPU_KERNELS=aten|tessera
# Example: scripts/profile_compare.sh vit-ti16 8
# The GPU comparison, against timm, is scripts/gpu_check.sh --profile.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
MODEL=${1:-vit-micro}
BATCH=${2:-32}
STEPS=${STEPS:-3-5}
IMAGE_SIZE=${IMAGE_SIZE:-0}
THREADS=${THREADS:-1}
CPU_KERNELS=${CPU_KERNELS:-aten}
BUILD=${BUILD:-$ROOT/build}
TRAIN=$BUILD/bin/tessera-train
OUT=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/tessera-profile.XXXXXX")}
mkdir -p "$OUT"
[ -x "$TRAIN" ] || { echo "profile_compare: no $TRAIN (scripts/build.sh --target tessera-train)" >&2; exit 1; }
/usr/bin/python3 -c 'import torch, torchvision' 2>/dev/null ||
  { echo "profile_compare: /usr/bin/python3 lacks torch or torchvision (scripts/setup.sh)" >&2; exit 1; }
last=${STEPS##*-}
image_flag=()
[ "$IMAGE_SIZE" = 0 ] || image_flag=(--image-size "$IMAGE_SIZE")

echo "profile_compare: tessera-train $MODEL, batch $BATCH, steps $STEPS ($OUT/tessera)" >&2
"$TRAIN" --model "$MODEL" --dataset synthetic --train-subset $((BATCH * (last + 2))) \
  --test-subset "$BATCH" --batch-size "$BATCH" --max-steps "$last" --metrics-every "$last" \
  --threads "$THREADS" --cpu-kernels "$CPU_KERNELS" --data-workers 1 "${image_flag[@]}" \
  --profile-steps "$STEPS" --profile-dir "$OUT/tessera" >"$OUT/tessera.log" 2>&1 ||
  { tail -20 "$OUT/tessera.log" >&2; exit 1; }
echo "profile_compare: torchvision VisionTransformer, same shape ($OUT/torchvision)" >&2
/usr/bin/python3 "$ROOT/bench/step_profile/cpu_peer.py" --model "$MODEL" --batch-size "$BATCH" \
  --threads "$THREADS" --profile-steps "$STEPS" --profile-dir "$OUT/torchvision" \
  "${image_flag[@]}" >&2
python3 "$ROOT/bench/step_profile/compare.py" --a "$OUT/tessera" --a-name tessera \
  --b "$OUT/torchvision" --b-name torchvision
echo "profile_compare: traces in $OUT (open trace.json in Perfetto or chrome://tracing)" >&2
