#!/usr/bin/env bash
# Configures (once) and builds the libFuzzer targets with clang in their own
# build directory: only the targets and the libraries they need.
# Usage: tests/fuzz/build.sh [BUILD_DIR]   (default: build-fuzz/ in the repository)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
BUILD_DIR="${1:-$ROOT/build-fuzz}"

for tool in clang clang++; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "fuzz: $tool not found; install clang and libclang-rt-14-dev (scripts/setup.sh)" >&2
    exit 1
  fi
done
if ! clang++ -print-file-name=libclang_rt.fuzzer-x86_64.a | grep -q /; then
  echo "fuzz: clang has no libFuzzer runtime; install libclang-rt-14-dev" >&2
  exit 1
fi

GEN=()
if command -v ninja >/dev/null 2>&1; then GEN=(-G Ninja); fi
if [ ! -f "$BUILD_DIR/CMakeCache.txt" ]; then
  CC=clang CXX=clang++ cmake -S "$ROOT" -B "$BUILD_DIR" "${GEN[@]}" \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTESSERA_FUZZ=ON -DTESSERA_BUILD_TESTS=OFF >/dev/null
fi
cmake --build "$BUILD_DIR" --target tessera_fuzzers -j "$(nproc)"
