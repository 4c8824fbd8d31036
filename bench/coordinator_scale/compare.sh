#!/usr/bin/env bash
# Runs two builds of bench/coordinator_scale side by side, alternating, and
# prints each round's heartbeats/s, metric rows/s, refused rows and GetJob p99
# for both, then the best of each.
#
# Usage: bench/coordinator_scale/compare.sh [--rounds N] BASELINE_BINARY [CANDIDATE_BINARY]
#   CANDIDATE_BINARY defaults to this tree's build/bench/coordinator_scale.
# Example, against the build of an older commit in a worktree:
#   git worktree add /tmp/old 1453f5d && (cd /tmp/old && scripts/build.sh --target coordinator_scale)
#   bench/coordinator_scale/compare.sh --rounds 3 /tmp/old/build/bench/coordinator_scale
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=3
if [ "${1:-}" = "--rounds" ]; then rounds="${2:?--rounds needs a count}"; shift 2; fi
[ $# -ge 1 ] || { sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
baseline="$1"
candidate="${2:-build/bench/coordinator_scale}"
for b in "$baseline" "$candidate"; do
  [ -x "$b" ] || { echo "compare: $b is not an executable" >&2; exit 2; }
done

# One run's figures: heartbeats/s, rows/s, refused rows ("-" when the build
# does not count them), GetJob p99 ms.
figures() {
  local out
  out=$("$1" 2>/dev/null)
  local hb rows refused p99
  hb=$(sed -n 's/^heartbeats: \([0-9.]*\)\/s.*/\1/p' <<<"$out")
  rows=$(sed -n 's/^metrics: \([0-9.]*\) rows\/s.*/\1/p' <<<"$out")
  refused=$(sed -n 's/^metrics: \([0-9]*\) rows refused.*/\1/p' <<<"$out")
  p99=$(sed -n 's/.*GetJob p50 [0-9.]* ms, p99 \([0-9.]*\) ms.*/\1/p' <<<"$out")
  echo "${hb:-?} ${rows:-?} ${refused:--} ${p99:-?}"
}

printf '%-10s %5s %12s %12s %8s %10s\n' build round heartbeats/s rows/s refused p99_ms
declare -A best_hb best_rows best_p99
for ((r = 1; r <= rounds; r++)); do
  for side in baseline candidate; do
    bin=$baseline
    [ "$side" = candidate ] && bin=$candidate
    read -r hb rows refused p99 <<<"$(figures "$bin")"
    printf '%-10s %5d %12s %12s %8s %10s\n' "$side" "$r" "$hb" "$rows" "$refused" "$p99"
    if [ "$hb" != "?" ] && awk "BEGIN{exit !($hb > ${best_hb[$side]:-0})}"; then best_hb[$side]=$hb; fi
    if [ "$rows" != "?" ] && awk "BEGIN{exit !($rows > ${best_rows[$side]:-0})}"; then best_rows[$side]=$rows; fi
    if [ "$p99" != "?" ] && awk "BEGIN{exit !($p99 < ${best_p99[$side]:-1e9})}"; then best_p99[$side]=$p99; fi
  done
done
for side in baseline candidate; do
  printf 'best %-9s heartbeats/s %s, rows/s %s, GetJob p99 %s ms\n' "$side" \
    "${best_hb[$side]:-?}" "${best_rows[$side]:-?}" "${best_p99[$side]:-?}"
done
