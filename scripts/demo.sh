#!/usr/bin/env bash
# README command 1: installs what the demo needs (scripts/setup.sh demo), builds,
# then runs the main job on this machine: one tessera-coordinator, two
# tessera-worker daemons (one CPU slot each) and a 2-rank data-parallel ViT
# training job on Fashion-MNIST. Progress (step, loss, images/s) is printed from
# the stored metrics while it runs; the test accuracy is printed at the end.
# Everything started here is stopped on exit.
#
# Usage: scripts/demo.sh [--set key=value]...   (overrides for examples/fmnist-2rank.yaml)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

scripts/setup.sh demo
# Only what the demo runs: the four binaries (the coordinator embeds the web
# dashboard), and tessera-data (check and pack a dataset), which the README's tour
# (step 5, your own images) uses next. README command 2 (scripts/test.sh)
# builds everything.
scripts/build.sh --target tessera-coordinator --target tessera-worker --target tessctl \
  --target tessera-train --target tessera-data

BIN=$ROOT/build/bin
RUN=$ROOT/build/demo
# A coordinator and two one-slot workers under $RUN, stopped when this script exits.
source scripts/local_cluster.sh
local_cluster_start "$BIN" "$RUN" 2
"$BIN/tessctl" workers

job=$("$BIN/tessctl" submit examples/fmnist-2rank.yaml "$@" | tail -n 1)
echo "demo: submitted job $job; rank logs under $RUN/worker-*/job-$job/"
set +e
"$BIN/tessctl" wait "$job" --progress
rc=$?
set -e
"$BIN/tessctl" status "$job"
exit $rc
