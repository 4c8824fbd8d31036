#!/usr/bin/env bash
# Configures and builds Tessera into build/ (binaries in build/bin/).
#
# Usage: scripts/build.sh [--target NAME]... [extra cmake args...]
#   With no --target, everything (binaries, tests, benchmarks) is built.
#   --target builds only the named targets and what they need, e.g. the four
#   binaries of the demo:
#     scripts/build.sh --target tessera-coordinator --target tessera-worker \
#       --target tessctl --target tessera-train
#   Extra arguments go to cmake's configure step (e.g. -DTESSERA_TRAINER_PCH=OFF).
set -euo pipefail
cd "$(dirname "$0")/.."
targets=()
cmake_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --target)
      [ $# -ge 2 ] || { echo "build.sh: --target needs a target name" >&2; exit 2; }
      targets+=(--target "$2")
      shift 2
      ;;
    *)
      cmake_args+=("$1")
      shift
      ;;
  esac
done
GEN=()
if command -v ninja >/dev/null 2>&1; then GEN=(-G Ninja); fi
if [ ! -f build/CMakeCache.txt ]; then
  cmake -S . -B build "${GEN[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo ${cmake_args[@]+"${cmake_args[@]}"}
elif [ ${#cmake_args[@]} -gt 0 ]; then
  cmake -S . -B build "${cmake_args[@]}"
fi
cmake --build build -j "$(nproc)" ${targets[@]+"${targets[@]}"}
