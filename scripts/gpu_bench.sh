#!/usr/bin/env bash
# GPU figures of tessera-train on a machine with an NVIDIA GPU, built against
# that machine's own PyTorch (its LibTorch, found through python's
# torch.utils.cmake_prefix_path) as a trainer-only build (no gRPC or protobuf:
# -DTESSERA_TRAINER_ONLY=ON, plus the trainer's tests for the NCCL figures).
# Prints:
#   1. ViT-B/16 training throughput, bf16 autocast, 224 px, batch 128, one GPU
#      (synthetic 28 px single-channel images, resized to 224 on the GPU by the
#      input pipeline; one input channel instead of three changes the patch
#      embedding's FLOPs by under 0.1%), and its MFU at 105 GFLOP per image
#      (forward + backward, 3 x 17.6 GMAC x 2) against PEAK_TFLOPS (default
#      989: H100 SXM bf16 dense);
#   2. NCCL at world size 1: joining the communicator, and one all-reduce of a
#      25 MiB bucket (nccl_communicator_test's FIGURE lines);
#   3. the collective watchdog aborting a collective the script makes hang: a
#      world-of-one all-reduce queued behind a stream held by a blocking host
#      function (nccl_communicator_test), and with two or more GPUs also two
#      tessera-train ranks of which the script stops one (SIGSTOP) mid-run: the
#      other must exit with code 4 naming the pending collective.
# Target: >= 2,800 images/s on one H100.
#
# Needs: an NVIDIA driver and GPU, a python3 whose torch has CUDA and the C++11
# ABI (PyTorch >= 2.7 wheels, or distribution builds), the CUDA toolkit of
# torch's CUDA major (nvcc, for LibTorch's CMake config), NCCL headers and
# library (the wheel's nvidia-nccl package is used when NCCL_HOME is unset),
# cmake, ninja, and the trainer's other build dependencies (abseil, CLI11,
# zlib, GoogleTest, nlohmann-json; scripts/setup.sh). Fails, saying why,
# without a GPU.
#
# Usage: scripts/gpu_bench.sh
#   BUILD=build-gpu PYTHON=python3 PEAK_TFLOPS=989 STEPS=60 COLLECTIVE_TIMEOUT=20s
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$ROOT/build-gpu}
PYTHON=${PYTHON:-python3}
PEAK_TFLOPS=${PEAK_TFLOPS:-989}
GFLOP_PER_IMAGE=105
STEPS=${STEPS:-60}
WARMUP=20
BATCH=128
COLLECTIVE_TIMEOUT=${COLLECTIVE_TIMEOUT:-20s}

die() {
  echo "gpu_bench: FAILED: $*" >&2
  exit 1
}
say() { echo "gpu_bench: $*" >&2; }

# 1. A GPU, and a PyTorch that can use it; nothing is built otherwise.
command -v nvidia-smi >/dev/null 2>&1 ||
  die "no nvidia-smi: this needs a machine with an NVIDIA GPU and its driver (not run)"
gpus=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null || true)
[ -n "$gpus" ] || die "nvidia-smi lists no GPU (not run)"
gpu_count=$(wc -l <<<"$gpus")
command -v "$PYTHON" >/dev/null 2>&1 || die "no $PYTHON (set PYTHON=...)"
torch_info=$("$PYTHON" - <<'EOF'
import sys
try:
    import torch
except ImportError:
    sys.exit("python has no torch")
if not torch.version.cuda:
    sys.exit(f"torch {torch.__version__} was built without CUDA")
if not torch.cuda.is_available():
    sys.exit(f"torch {torch.__version__} sees no CUDA device")
if not torch._C._GLIBCXX_USE_CXX11_ABI:
    sys.exit(f"torch {torch.__version__} uses the pre-C++11 ABI (pip wheels before 2.7); "
             "the trainer links system libraries built with the C++11 ABI")
nccl = ""
try:
    import nvidia.nccl
    nccl = list(nvidia.nccl.__path__)[0]
except Exception:
    pass
print(torch.utils.cmake_prefix_path, torch.__version__, torch.version.cuda, nccl or "-")
EOF
) || die "no usable PyTorch with CUDA"
read -r torch_prefix torch_version torch_cuda wheel_nccl <<<"$torch_info"
if [ -z "${NCCL_HOME:-}" ] && [ "$wheel_nccl" != "-" ]; then export NCCL_HOME=$wheel_nccl; fi
say "$gpu_count GPU(s): $(head -1 <<<"$gpus"); torch $torch_version (CUDA $torch_cuda) at $torch_prefix"

# 2. Build tessera-train and the NCCL tests against that LibTorch.
mkdir -p "$BUILD"
cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTESSERA_TRAINER_ONLY=ON \
  -DTESSERA_TRAINER_TESTS=ON -DCMAKE_PREFIX_PATH="$torch_prefix" >"$BUILD/gpu-configure.log" 2>&1 ||
  { tail -30 "$BUILD/gpu-configure.log" >&2; die "configure failed; see $BUILD/gpu-configure.log"; }
grep -E '^-- tessera-train:' "$BUILD/gpu-configure.log" >&2 || true
grep -q 'LibTorch has CUDA .*NCCL tensors on' "$BUILD/gpu-configure.log" ||
  die "the build left CUDA or NCCL out; see $BUILD/gpu-configure.log"
cmake --build "$BUILD" --target tessera-train nccl_communicator_test >"$BUILD/gpu-build.log" 2>&1 ||
  { grep -E -A8 'error|FAILED' "$BUILD/gpu-build.log" | head -60 >&2; die "build failed"; }
TRAIN=$BUILD/bin/tessera-train
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

# 3. ViT-B/16 throughput and MFU.
say "ViT-B/16, bf16, 224 px, batch $BATCH: $WARMUP warmup + $((STEPS - WARMUP)) timed steps"
"$TRAIN" --model vit-b16 --dataset synthetic --train-subset $((BATCH * (STEPS + 10))) \
  --test-subset 256 --batch-size "$BATCH" --image-size 224 --precision bf16 --device cuda \
  --max-steps "$STEPS" --metrics-every 10 --data-workers 4 \
  --metrics-file "$WORK/b16.jsonl" >"$WORK/b16.log" 2>&1 ||
  { tail -20 "$WORK/b16.log" >&2; die "the ViT-B/16 run failed"; }
grep -E '^\[rank 0\] vit-b16' "$WORK/b16.log" || true
python3 - "$WORK/b16.jsonl" "$BATCH" "$WARMUP" "$GFLOP_PER_IMAGE" "$PEAK_TFLOPS" \
  "$(head -1 <<<"$gpus")" <<'EOF'
import json, sys
path, batch, warmup, gflop, peak, gpu = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), \
    float(sys.argv[4]), float(sys.argv[5]), sys.argv[6]
steps = [p["value"] for p in map(json.loads, open(path))
         if p["name"] == "time_step_ms" and p["step"] > warmup]
ips = batch * 1000.0 / (sum(steps) / len(steps))
print(f"vit-b16 bf16 224px batch {batch} on {gpu}: {ips:.0f} images/s "
      f"(target >= 2800 on one H100)")
print(f"MFU: {100 * ips * gflop * 1e9 / (peak * 1e12):.1f}% "
      f"({gflop:.0f} GFLOP/image, peak {peak:.0f} TFLOP/s bf16 dense)")
EOF

# 4. NCCL at world size 1, and the watchdog on a collective held back on purpose.
"$BUILD/tests/nccl_communicator_test" \
  --gtest_filter='NcclCommunicatorTest.AWorldOfOneJoinsAndReducesABucketQuickly:NcclCommunicatorTest.TheWatchdogAbortsACollectiveThatNeverFinishes' \
  >"$WORK/nccl.log" 2>&1 || { cat "$WORK/nccl.log" >&2; die "the NCCL tests failed"; }
grep -E '^FIGURE ' "$WORK/nccl.log"

# 5. With two GPUs: two ranks, one of them stopped mid-run; the other's
#    watchdog must end it with exit code 4, naming the collective.
if [ "$gpu_count" -lt 2 ]; then
  say "one GPU: the two-rank watchdog run needs two (skipped)"
  exit 0
fi
port=$((20000 + RANDOM % 20000))
pids=()
for rank in 0 1; do
  "$TRAIN" --model vit-s16 --dataset synthetic --train-subset 20000 --test-subset 256 \
    --batch-size 64 --precision bf16 --device cuda --max-steps 100000 --metrics-every 5 \
    --world-size 2 --rank "$rank" --local-rank "$rank" --rendezvous-store "127.0.0.1:$port" \
    --collective-timeout "$COLLECTIVE_TIMEOUT" --metrics-file "$WORK/hang-$rank.jsonl" \
    >"$WORK/hang-$rank.log" 2>&1 &
  pids+=($!)
done
for _ in $(seq 600); do  # up to 10 minutes for the first metrics
  [ -s "$WORK/hang-1.jsonl" ] && break
  sleep 1
done
[ -s "$WORK/hang-1.jsonl" ] || { kill -9 "${pids[@]}"; die "rank 1 never reported a step"; }
kill -STOP "${pids[1]}"
stopped=$(date +%s.%N)
status=0
wait "${pids[0]}" || status=$?
ended=$(date +%s.%N)
kill -9 "${pids[1]}" 2>/dev/null || true
echo "watchdog, two ranks: rank 1 stopped; rank 0 exited with code $status after" \
  "$(python3 -c "print(f'{$ended - $stopped:.1f}')") s (--collective-timeout $COLLECTIVE_TIMEOUT)"
grep -iE 'collective|watchdog|abort' "$WORK/hang-0.log" | tail -3
[ "$status" = 4 ] || die "rank 0 should have exited with code 4 (collective failure)"
