#!/usr/bin/env bash
# README command 2: installs what is needed (scripts/setup.sh test: everything),
# builds everything and runs the whole test suite (unit, in-process gRPC and
# end-to-end tests).
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
scripts/setup.sh test
scripts/build.sh
log_dir="$(mktemp -d "${TMPDIR:-/tmp}/tessera-test.XXXXXX")"
trap 'rm -rf "$log_dir"' EXIT
cd build
set +e
ctest --output-on-failure --timeout 600 -j 2 "$@" 2>&1 | tee "$log_dir/ctest.log"
ctest_rc=${PIPESTATUS[0]}
set -e
cd ..
ctest_summary=$(grep -E "tests passed|No tests were found" "$log_dir/ctest.log" | tail -1)
if [ "$ctest_rc" -ne 0 ]; then
  echo "tests: FAILED: ${ctest_summary:-ctest exited with $ctest_rc}" >&2
  exit "$ctest_rc"
fi
# libFuzzer targets built with clang in build-fuzz/: saved regressions, then
# 30 s of fuzzing per target (scripts/fuzz.sh runs the long campaign).
tests/fuzz/run_short.sh 2>&1 | tee "$log_dir/fuzz.log"
fuzz_rc=${PIPESTATUS[0]}
fuzz_summary=$(grep -E "^fuzz: (passed|FAILED)" "$log_dir/fuzz.log" | tail -1)
# What ran, last: ctest's summary line and the fuzz line.
echo "ctest: $ctest_summary"
echo "${fuzz_summary:-fuzz: no result (exit $fuzz_rc)}"
[ "$fuzz_rc" -eq 0 ] || exit "$fuzz_rc"
echo "tests: passed in $(( $(date +%s) - start ))s (setup + build + tests)"
