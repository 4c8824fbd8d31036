#!/usr/bin/env bash
# README command 2: installs what is needed, builds everything and runs the whole
# test suite (unit, in-process gRPC and end-to-end tests).
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
scripts/setup.sh
scripts/build.sh
cd build
ctest --output-on-failure --timeout 600 -j 2 "$@"
cd ..
# libFuzzer targets built with clang in build-fuzz/: saved regressions, then
# 30 s of fuzzing per target (scripts/fuzz.sh runs the long campaign).
tests/fuzz/run_short.sh
echo "tests: passed in $(( $(date +%s) - start ))s (setup + build + tests)"
