#!/usr/bin/env bash
# scripts/build_report.sh over a fabricated .ninja_log that holds three builds:
# a cold one, an incremental one (ninja's clock restarted: an end time drops),
# and the last one, whose first line ends later than the line before it but
# rebuilds an output already built since the drop. Checks that only the last
# build is reported: its wall time, the steps summed, the seconds per target
# (a link step joins its target; protoc's outputs are one step) and per folder,
# the slowest steps, and the CPU time from .build_cpu_seconds; then the errors
# for a missing, a foreign, a malformed and an empty log, and --help.
# Usage: build_report_test.sh SOURCE_DIR
set -u
src=${1:?usage: build_report_test.sh SOURCE_DIR}
report=$src/scripts/build_report.sh
failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/build_report_test.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# Lines: start end mtime output hash (ms, tab-separated), in the order ninja
# writes them (as steps end). @B@ is the build directory: CMake names the
# outputs of some custom commands (protoc's here) both relative and absolute,
# and ninja logs both names.
build=$tmp/build
mkdir -p "$build"
sed -e 's/|/\t/g' -e "s|@B@|$build|" >"$build/.ninja_log" <<'LOG'
# ninja log v5
0|2000|1|proto/tessera/v1/tessera.pb.cc|aa01
0|2000|1|proto/tessera/v1/tessera.pb.h|aa01
0|2000|1|@B@/proto/tessera/v1/tessera.pb.cc|aa01
0|2000|1|@B@/proto/tessera/v1/tessera.pb.h|aa01
100|30100|1|worker/trainer/CMakeFiles/tessera_trainer_torch.dir/cmake_pch.hxx.gch|bb01
2000|40000|1|proto/CMakeFiles/tessera_proto.dir/tessera/v1/tessera.pb.cc.o|cc01
30100|60000|1|worker/trainer/CMakeFiles/tessera_trainer_torch.dir/model/fused_adamw.cc.o|dd01
60000|61000|1|worker/trainer/libtessera_trainer_torch.a|ee01
61000|65000|1|common/CMakeFiles/tessera_base.dir/clock.cc.o|ff01
65000|66000|1|web/CMakeFiles/tessera_web_assets.dir/web_assets.cc.o|0a01
0|5000|2|worker/trainer/CMakeFiles/tessera_trainer_torch.dir/model/fused_adamw.cc.o|dd02
5000|5600|2|worker/trainer/libtessera_trainer_torch.a|ee01
0|7000|3|worker/trainer/CMakeFiles/tessera_trainer_torch.dir/model/fused_adamw.cc.o|dd03
0|8000|3|proto/tessera/v1/tessera.pb.cc|aa03
0|8000|3|proto/tessera/v1/tessera.pb.h|aa03
0|8000|3|proto/tessera/v1/tessera.grpc.pb.cc|aa03
0|8000|3|@B@/proto/tessera/v1/tessera.pb.cc|aa03
0|8000|3|@B@/proto/tessera/v1/tessera.pb.h|aa03
0|8000|3|@B@/proto/tessera/v1/tessera.grpc.pb.cc|aa03
100|9100|3|worker/trainer/CMakeFiles/tessera_trainer_torch.dir/cmake_pch.hxx.gch|bb01
8000|12000|3|proto/CMakeFiles/tessera_proto.dir/tessera/v1/tessera.pb.cc.o|cc01
12000|12300|3|proto/libtessera_proto.a|1b01
9100|12500|3|worker/trainer/CMakeFiles/tessera_trainer_torch.dir/Unity/unity_0_cxx.cxx.o|2c01
12500|13000|3|worker/trainer/libtessera_trainer_torch.a|ee01
7000|14000|3|worker/trainer/CMakeFiles/tessera-train.dir/main.cc.o|3d01
14000|15000|3|bin/tessera-train|4e01
13000|15200|3|web/dist/app.js|5f01
13000|15200|3|web/dist/index.html|5f01
LOG
echo "29.40 2.20 31.60" >"$build/.build_cpu_seconds"
touch -d '2000-01-01 00:00:00' "$build/.ninja_log"

out=$("$report" "$build" 2>&1)
rc=$?
[ "$rc" -eq 0 ] || fail "build_report.sh exited with $rc:"$'\n'"$out"

# The whole report. The last build: 10 steps, 13 outputs, from 0 to 15.2 s;
# 7.0 + 8.0 + 9.0 + 4.0 + 0.3 + 3.4 + 0.5 + 7.0 + 1.0 + 2.2 = 42.4 s summed.
# common/ (built by the first build only) is not in it.
expected=$(
  cat <<EOF
$build/.ninja_log (ninja log v5): the last of 3 builds in it
  steps:      10 (13 outputs)
  wall time:  15.2 s (first start to last end)
  step time:  42.4 s (the steps' durations summed; 2.79 steps at a time on average)
  CPU time:   32 CPU-seconds (user 29 + system 2; configure and build, from $build/.build_cpu_seconds)

seconds per target (share of the steps summed, steps):
      19.9  46.9%     4  tessera_trainer_torch
       8.0  18.9%     1  proto/tessera/v1/tessera.pb.cc
       8.0  18.9%     2  tessera-train
       4.3  10.1%     2  tessera_proto
       2.2   5.2%     1  web/dist/app.js

seconds per folder (share of the steps summed, steps):
      27.9  65.8%     6  worker/trainer
      12.3  29.0%     3  proto
       2.2   5.2%     1  web

the 25 slowest steps (seconds):
       9.0  worker/trainer/CMakeFiles/tessera_trainer_torch.dir/cmake_pch.hxx.gch
       8.0  proto/tessera/v1/tessera.pb.cc (and 2 more outputs)
       7.0  worker/trainer/CMakeFiles/tessera-train.dir/main.cc.o
       7.0  worker/trainer/CMakeFiles/tessera_trainer_torch.dir/model/fused_adamw.cc.o
       4.0  proto/CMakeFiles/tessera_proto.dir/tessera/v1/tessera.pb.cc.o
       3.4  worker/trainer/CMakeFiles/tessera_trainer_torch.dir/Unity/unity_0_cxx.cxx.o
       2.2  web/dist/app.js (and 1 more output)
       1.0  bin/tessera-train
       0.5  worker/trainer/libtessera_trainer_torch.a
       0.3  proto/libtessera_proto.a
EOF
)
if [ "$out" != "$expected" ]; then
  fail "the report differs from the expected one (< expected, > printed):"$'\n'"$(diff <(echo "$expected") <(echo "$out"))"
fi

# A log written after the CPU figure: the figure is flagged as another build's.
touch "$build/.ninja_log"
touch -d '2000-01-01 00:00:00' "$build/.build_cpu_seconds"
"$report" "$build" |
  grep -q '^  CPU time:   32 CPU-seconds .*a build outside scripts/build.sh has written the log since)$' ||
  fail "a CPU figure older than the log is not flagged"
rm "$build/.build_cpu_seconds"
"$report" "$build" | grep -qx '  CPU time:   unknown (.*)' ||
  fail "no line saying that the CPU time is unknown without .build_cpu_seconds"

# A log of one build; the link step joins its target.
single=$tmp/single
mkdir -p "$single"
printf '# ninja log v5\n0\t1500\t1\tcli/CMakeFiles/tessctl.dir/main.cc.o\t1\n1500\t2000\t1\tbin/tessctl\t2\n' \
  >"$single/.ninja_log"
out=$("$report" "$single")
echo "$out" | grep -qx '.*: the only build in it' || fail "a one-build log:"$'\n'"$out"
echo "$out" | grep -qx '       2.0 100.0%     2  tessctl' ||
  fail "bin/tessctl does not join target tessctl:"$'\n'"$out"

# Errors: no log, a file that is not a ninja log, a malformed line, no steps,
# two build directories.
bad=$tmp/bad
mkdir -p "$bad"
expect_error() {  # WHAT MESSAGE ARGS...
  local what=$1 message=$2 err
  shift 2
  if err=$("$report" "$@" 2>&1); then
    fail "$what: build_report.sh succeeded"
  elif ! echo "$err" | grep -qF "$message"; then
    fail "$what: no \"$message\" in: $err"
  fi
}
expect_error "missing log" "no ninja log at $bad/.ninja_log" "$bad"
printf 'hello\n' >"$bad/.ninja_log"
expect_error "not a ninja log" "not a ninja log" "$bad"
printf '# ninja log v5\n0\t10\tfoo.o\n' >"$bad/.ninja_log"
expect_error "malformed line" "line 2 is not" "$bad"
printf '# ninja log v5\n' >"$bad/.ninja_log"
expect_error "no steps" "no steps in the log" "$bad"
expect_error "two directories" "one build directory at most" "$build" "$single"

help=$("$report" --help) || fail "--help exited with $?"
echo "$help" | grep -q '^Usage: scripts/build_report.sh \[BUILD_DIR\]' || fail "--help has no usage line"
echo "$help" | grep -q 'Example: ' || fail "--help has no example"

if [ "$failures" -gt 0 ]; then
  echo "build_report_test: $failures failure(s)"
  exit 1
fi
echo "build_report_test: passed"
