#!/usr/bin/env bash
# Builds and runs the CPU kernel benchmark: tessera's LayerNorm, GELU and Linear
# (worker/trainer/model/fused_layers.h) against LibTorch's, forward and forward +
# backward, at vit-micro's and vit-cifar-tiny's shapes, one intra-op thread.
#   bench/cpu_kernels/run.sh [--threads N]
set -euo pipefail
cd "$(dirname "$0")/../.."
scripts/build.sh >/dev/null
OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1} \
  build/bench/cpu_kernels_bench "$@"
