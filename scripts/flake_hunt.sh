#!/usr/bin/env bash
# Hunts flaky tests: runs the ctest suite several times over while other
# processes load the CPUs and the disk, then names every test that failed at
# least once, how often, and the output of its first failure.
#
# Usage: scripts/flake_hunt.sh [--repeat N] [--load K] [--build DIR] [-- CTEST_ARGS...]
#   --repeat N   rounds of the whole suite (default 5); each round is one
#                `ctest -j2` over every selected test
#   --load K     processes that load the machine meanwhile (default 2); each
#                writes and fsyncs a 64 MiB file, hashes it and removes it, in a
#                loop, and stops by itself when this script ends (or after
#                --load-limit seconds)
#   --load-limit S  the longest a load process runs (default 14400)
#   --build DIR  the build tree to test (default build/, made by scripts/build.sh)
#   CTEST_ARGS   passed to ctest, e.g. -L unit or -R 'HttpServer|Fair'
#
# Example, the check the suite is held to on a 2-core machine:
#   scripts/flake_hunt.sh --repeat 5 --load 2
# A quick look at one area under heavier load:
#   scripts/flake_hunt.sh --repeat 20 --load 4 -- -R HttpServerTest
#
# Prints, per test that failed: "FLAKE <name>: failed <f> of <n> runs", then
# its first failure's output; and at the end "flakes: <count of such tests>".
# Exit status: 0 when no test failed, 1 when one did, 2 for a usage error.
# Nothing here touches the network.
set -euo pipefail
cd "$(dirname "$0")/.."

repeat=5
load=2
load_limit=14400
build=build
ctest_args=()
usage() { sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case "$1" in
    --repeat) repeat="${2:?--repeat needs a count}"; shift 2 ;;
    --load) load="${2:?--load needs a count}"; shift 2 ;;
    --load-limit) load_limit="${2:?--load-limit needs seconds}"; shift 2 ;;
    --build) build="${2:?--build needs a directory}"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    --) shift; ctest_args=("$@"); break ;;
    *) echo "flake_hunt: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
for n in "$repeat" "$load" "$load_limit"; do
  [[ "$n" =~ ^[0-9]+$ ]] || { echo "flake_hunt: '$n' is not a count" >&2; exit 2; }
done
[ "$repeat" -ge 1 ] || { echo "flake_hunt: --repeat must be at least 1" >&2; exit 2; }
[ -f "$build/CTestTestfile.cmake" ] || {
  echo "flake_hunt: no ctest tree in $build/; build first (scripts/build.sh)" >&2
  exit 2
}

work="$(mktemp -d "${TMPDIR:-/tmp}/tessera-flake-hunt.XXXXXX")"
load_pids=()
stop_load() {
  for pid in ${load_pids[@]+"${load_pids[@]}"}; do kill -- "-$pid" 2>/dev/null || true; done
  for pid in ${load_pids[@]+"${load_pids[@]}"}; do wait "$pid" 2>/dev/null || true; done
  load_pids=()
}
trap 'stop_load; rm -rf "$work"' EXIT
trap 'exit 130' INT TERM

# One load process: disk (write + fsync) then CPU (hash), until this script's
# process is gone or the limit passes. Its own process group, so that
# stop_load takes its children with it.
start_load() {
  local i="$1"
  setsid bash -c '
    parent="$1"; file="$2"; limit="$3"; end=$(( $(date +%s) + limit ))
    while kill -0 "$parent" 2>/dev/null && [ "$(date +%s)" -lt "$end" ]; do
      dd if=/dev/zero of="$file" bs=1M count=64 conv=fsync status=none
      sha256sum "$file" >/dev/null
      rm -f "$file"
    done' load "$$" "$work/load-$i.bin" "$load_limit" &
  load_pids+=("$!")
}

for ((i = 0; i < load; i++)); do start_load "$i"; done
echo "flake_hunt: $repeat round(s) of ctest -j2 ${ctest_args[*]:-} in $build/ under $load load process(es)"

for ((round = 1; round <= repeat; round++)); do
  start=$(date +%s)
  set +e
  (cd "$build" && ctest -j2 --timeout 600 --output-on-failure \
      --output-junit "$work/round-$round.xml" ${ctest_args[@]+"${ctest_args[@]}"}) \
      >"$work/round-$round.log" 2>&1
  rc=$?
  set -e
  summary=$(grep -E "tests passed|No tests were found" "$work/round-$round.log" | tail -1 || true)
  echo "round $round/$repeat: ${summary:-no summary (ctest exit $rc)} in $(( $(date +%s) - start ))s"
done
stop_load

# Per test: runs, failures, the first failure's output (from the JUnit files).
python3 - "$work" "$repeat" <<'EOF'
import glob, os, sys
import xml.etree.ElementTree as ET

work, repeat = sys.argv[1], int(sys.argv[2])
runs, fails, first = {}, {}, {}
for round_no in range(1, repeat + 1):
    path = os.path.join(work, f"round-{round_no}.xml")
    if not os.path.exists(path):
        print(f"round {round_no}: no JUnit report (ctest did not finish)")
        continue
    for case in ET.parse(path).getroot().iter("testcase"):
        name = case.get("name")
        status = case.get("status", "run")
        if status in ("disabled", "notrun") and case.find("failure") is None:
            continue
        runs[name] = runs.get(name, 0) + 1
        if case.find("failure") is not None or status == "fail":
            fails[name] = fails.get(name, 0) + 1
            if name not in first:
                out = case.findtext("system-out") or ""
                first[name] = (round_no, out)
for name in sorted(fails, key=lambda n: (-fails[n], n)):
    round_no, out = first[name]
    print(f"FLAKE {name}: failed {fails[name]} of {runs[name]} runs "
          f"(first in round {round_no})")
    lines = out.rstrip().splitlines()
    for line in lines[-60:]:
        print(f"    {line}")
print(f"tests run: {len(runs)}, rounds: {repeat}")
print(f"flakes: {len(fails)}")
sys.exit(1 if fails else 0)
EOF
