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
#
# At the end it prints the CPU time of the configure and build steps, user and
# system of every process they ran (compilers, linkers, code generators), which
# does not depend on the number of parallel jobs, and writes it as
# "user system total" seconds to build/.build_cpu_seconds, where
# scripts/build_report.sh reads it. (The file is left alone when ninja ran no
# step, so that it describes the same build as the last one in build/.ninja_log.)
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

# The CPU time of every child process this shell waits for, with all of
# theirs, from the second line of bash's `times` ("1m2.500s 0m3.250s": user,
# system) before and after. `times` reports the children of the shell it runs
# in, so it runs here, not in a pipe or $(...).
times_file=$(mktemp "${TMPDIR:-/tmp}/tessera-build-times.XXXXXX")
trap 'rm -f "$times_file"' EXIT
times >"$times_file"
wall0=$SECONDS

GEN=()
if command -v ninja >/dev/null 2>&1; then GEN=(-G Ninja); fi
if [ ! -f build/CMakeCache.txt ]; then
  cmake -S . -B build "${GEN[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo ${cmake_args[@]+"${cmake_args[@]}"}
elif [ ${#cmake_args[@]} -gt 0 ]; then
  cmake -S . -B build "${cmake_args[@]}"
fi
# ccache (when installed; CMakeLists.txt) keys its entries by paths relative
# to the repository and not by the folder it builds in, so a clone at another
# path (each CI run's fresh clone) reuses what an earlier build on the machine
# cached. Entries still match only the same sources, flags and compiler, so a
# cached build is the same build; CCACHE_DISABLE=1 gives a cold one.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}"
export CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-true}"
cmake --build build -j "$(nproc)" ${targets[@]+"${targets[@]}"}

times >>"$times_file"
cpu=$(awk 'function sec(t, m) { sub(/s$/, "", t); sub(/,/, ".", t); split(t, m, "m")
                               return m[1] * 60 + m[2] }
           NR == 2 { u0 = sec($1); s0 = sec($2) }
           NR == 4 { u = sec($1) - u0; s = sec($2) - s0; printf "%.2f %.2f %.2f", u, s, u + s }' \
  "$times_file")
read -r user sys total <<<"$cpu"
cpu_file=build/.build_cpu_seconds
if [ ! -e "$cpu_file" ] || [ ! -e build/.ninja_log ] || [ build/.ninja_log -nt "$cpu_file" ]; then
  echo "$cpu" >"$cpu_file"
fi
LC_ALL=C printf 'build: %.0f CPU-seconds (user %.0f + system %.0f), %d s wall\n' \
  "$total" "$user" "$sys" $((SECONDS - wall0))
