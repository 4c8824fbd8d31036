#!/usr/bin/env bash
# Where a build's time went, from ninja's log of it (BUILD_DIR/.ninja_log).
#
# Usage: scripts/build_report.sh [BUILD_DIR]   (default: build/ in the repository)
#   Example: scripts/build.sh && scripts/build_report.sh
#            scripts/build_report.sh build-fuzz
#
# It prints, for the last build in the log:
#   - the wall time (first start to last end) against the sum of the steps'
#     durations, and the build's CPU time (user + system of every process,
#     configure included) when scripts/build.sh wrote it to
#     BUILD_DIR/.build_cpu_seconds; that figure does not depend on -j;
#   - seconds per target and per folder (the CMakeLists.txt folder a target is
#     defined in). A step belongs to the target of its object path
#     (worker/trainer/CMakeFiles/tessera_trainer_torch.dir/model/vit.cc.o is
#     tessera_trainer_torch in worker/trainer); a link step joins the target
#     it links (bin/tessera-train is tessera-train, libtessera_base.a is
#     tessera_base) when the log has that target's objects; any other output
#     (generated sources, the dashboard bundle) counts under its own name;
#   - the 25 slowest steps.
# The log keeps the lines of earlier builds. Each build restarts ninja's clock
# and writes a line when a step ends, so the last build starts after the last
# line whose end time is below the line before it, or whose output the lines
# since have already built. A step with several outputs (protoc's) counts once.
set -euo pipefail
export LC_ALL=C

usage() {
  sed -n '4,6p' "$0" | sed 's/^# \{0,1\}//'
}

case "${1:-}" in
  -h | --help)
    sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'
    exit 0
    ;;
  -*)
    echo "build_report.sh: unknown option '$1'" >&2
    usage >&2
    exit 2
    ;;
esac
if [ $# -gt 1 ]; then
  echo "build_report.sh: one build directory at most" >&2
  usage >&2
  exit 2
fi
build_dir=${1:-$(cd "$(dirname "$0")/.." && pwd)/build}
log=$build_dir/.ninja_log
cpu_file=$build_dir/.build_cpu_seconds
if [ ! -f "$log" ]; then
  echo "build_report.sh: no ninja log at $log: build there with Ninja first" \
    "(scripts/build.sh uses Ninja when ninja is installed)" >&2
  exit 1
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/tessera-build-report.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# Writes summary (key value lines), targets and folders (ms, steps, name) and
# steps (ms, first output, further outputs), tab-separated, into $tmp.
build_abs=$(cd "$build_dir" && pwd)
awk -F '\t' -v dir="$tmp" -v build="$build_abs/" '
function fail(msg) { print "build_report.sh: " FILENAME ": " msg > "/dev/stderr"; failed = 1; exit 1 }
# The CMake target and folder of an output path: sets T and F.
function classify(out,   base) {
  if (match(out, /CMakeFiles\/[^\/]+\.dir\//)) {
    T = substr(out, RSTART + 11, RLENGTH - 16)
    F = RSTART > 1 ? substr(out, 1, RSTART - 2) : "."
    return 1
  }
  base = out
  sub(/.*\//, "", base)
  if (base ~ /^lib.+\.(a|so)(\.[0-9.]+)?$/) {
    sub(/^lib/, "", base)
    sub(/\.(a|so)(\.[0-9.]+)?$/, "", base)
  }
  if (base in target_folder) {
    T = base
    F = target_folder[base]
    return 1
  }
  T = out
  F = folder_above(out)
  return 0
}
# The deepest folder above path that holds a target.
function folder_above(path) {
  while (path ~ /\//) {
    sub(/\/[^\/]*$/, "", path)
    if (path in known_folder) return path
  }
  return "."
}
function start_build() {
  builds++
  split("", seen)
  n = 0
}
NR == 1 {
  if ($0 !~ /^# ninja log v[0-9]+$/) fail("not a ninja log (its first line is not \"# ninja log vN\")")
  version = substr($0, 14) + 0
  if (version < 5) fail("ninja log v" version "; this script reads v5 and later")
  next
}
/^#/ { next }
{
  if (NF != 5 || $1 !~ /^[0-9]+$/ || $2 !~ /^[0-9]+$/) fail("line " NR " is not \"start end mtime output hash\"")
  out = $4
  # Read the outputs that CMake names by their absolute path as relative ones.
  if (substr(out, 1, length(build)) == build) out = substr(out, length(build) + 1)
  if (classify(out)) { target_folder[T] = F; known_folder[F] = 1 }
  key = $1 "\t" $2 "\t" $5
  if (n == 0 || $2 + 0 < prev_end || (out in seen && seen[out] != key)) start_build()
  prev_end = $2 + 0
  # The same output twice in one step: CMake lists the outputs of some custom
  # commands both relative and absolute, and ninja logs both names.
  if (out in seen) next
  seen[out] = key
  n++
  line_out[n] = out
  line_step[n] = key
}
END {
  if (failed) exit 1
  if (n == 0) { print "build_report.sh: " FILENAME ": no steps in the log" > "/dev/stderr"; exit 1 }
  steps = 0; sum = 0; first = -1; last = 0
  for (i = 1; i <= n; i++) {
    key = line_step[i]
    if (key in step_out) { step_more[key]++; continue }
    split(key, f, "\t")
    ms = f[2] - f[1]
    step_out[key] = line_out[i]
    step_more[key] = 0
    step_ms[key] = ms
    steps++
    sum += ms
    if (first < 0 || f[1] + 0 < first) first = f[1] + 0
    if (f[2] + 0 > last) last = f[2] + 0
    classify(line_out[i])
    target_ms[T] += ms; target_steps[T]++
    folder_ms[F] += ms; folder_steps[F]++
  }
  for (key in step_out) printf "%d\t%s\t%d\n", step_ms[key], step_out[key], step_more[key] > (dir "/steps")
  for (t in target_ms) printf "%d\t%d\t%s\n", target_ms[t], target_steps[t], t > (dir "/targets")
  for (d in folder_ms) printf "%d\t%d\t%s\n", folder_ms[d], folder_steps[d], d > (dir "/folders")
  printf "version %d\nbuilds %d\nsteps %d\noutputs %d\nwall_ms %d\nsum_ms %d\n",
    version, builds, steps, n, last - first, sum > (dir "/summary")
}' "$log"

summary() { awk -v k="$1" '$1 == k { print $2 }' "$tmp/summary"; }
builds=$(summary builds)
wall_ms=$(summary wall_ms)
sum_ms=$(summary sum_ms)
if [ "$builds" -eq 1 ]; then
  which="the only build in it"
else
  which="the last of $builds builds in it"
fi
echo "$log (ninja log v$(summary version)): $which"
awk -v steps="$(summary steps)" -v outputs="$(summary outputs)" -v wall="$wall_ms" -v sum="$sum_ms" '
BEGIN {
  printf "  steps:      %d (%d outputs)\n", steps, outputs
  printf "  wall time:  %.1f s (first start to last end)\n", wall / 1000
  printf "  step time:  %.1f s (the steps\47 durations summed", sum / 1000
  if (wall > 0) printf "; %.2f steps at a time on average", sum / wall
  printf ")\n"
}'
if [ -f "$cpu_file" ]; then
  read -r cpu_user cpu_sys cpu_total _ <"$cpu_file" || true
  if [[ "${cpu_user:-}" =~ ^[0-9.]+$ && "${cpu_sys:-}" =~ ^[0-9.]+$ && "${cpu_total:-}" =~ ^[0-9.]+$ ]]; then
    stale=""
    if [ "$log" -nt "$cpu_file" ]; then
      stale="; a build outside scripts/build.sh has written the log since"
    fi
    printf '  CPU time:   %.0f CPU-seconds (user %.0f + system %.0f; configure and build, from %s%s)\n' \
      "$cpu_total" "$cpu_user" "$cpu_sys" "$cpu_file" "$stale"
  else
    echo "  CPU time:   $cpu_file is not \"user system total\" seconds"
  fi
else
  echo "  CPU time:   unknown ($cpu_file is written by scripts/build.sh)"
fi

# Rows (ms, steps, name) sorted by time, then name.
table() {
  sort -t "$(printf '\t')" -k1,1nr -k3,3 "$1" |
    awk -F '\t' -v sum="$sum_ms" '{
      share = sum > 0 ? 100 * $1 / sum : 0
      printf "  %8.1f %5.1f%% %5d  %s\n", $1 / 1000, share, $2, $3
    }'
}
echo
echo "seconds per target (share of the steps summed, steps):"
table "$tmp/targets"
echo
echo "seconds per folder (share of the steps summed, steps):"
table "$tmp/folders"
echo
echo "the 25 slowest steps (seconds):"
# (awk, not head, takes the first 25, so that sort never meets a closed pipe.)
sort -t "$(printf '\t')" -k1,1nr -k2,2 "$tmp/steps" |
  awk -F '\t' 'NR <= 25 {
    printf "  %8.1f  %s", $1 / 1000, $2
    if ($3 > 0) printf " (and %d more output%s)", $3, ($3 > 1 ? "s" : "")
    printf "\n"
  }'
