#!/usr/bin/env bash
# ZeRO stages on CPU (issue 41's benchmark): tessera-train ranks over Gloo on
# loopback, joined through --rendezvous-store (no coordinator), ViT-B/16 at
# 32 px on synthetic data, AdamW in fp32, one intra-op thread per rank, at each
# world size of WORLDS and each ZeRO stage of STAGES, the same seed, batch and
# steps each time. Per world size it prints a table of the stages:
#   - peak RSS per rank, measured by the OS: GNU time's %M around each rank
#     (/usr/bin/time), or, without GNU time, the ranks' peak_rss_bytes metric
#     (VmHWM); the header says which;
#   - model-state bytes: the optimizer state and gradients the code counts
#     (optimizer_state_bytes, gradient_bytes, first report);
#   - bytes sent per rank per step: comm_bytes_per_step of the last interval
#     (the first includes the initial parameter broadcast);
#   - step time: time_step_ms, mean over the steps after the warmup;
# each the maximum over the ranks. Then issue 41's targets, PASS or MISS each,
# for every stage against stage 0 at the same world size:
#   - memory: peak RSS per rank below stage 0's by at least 85% of what the
#     stage shards: (1 - 1/N) of stage 0's optimizer state at stage 1, of its
#     optimizer state and gradients at stage 2, and of those and the parameters
#     at stage 3 (bench/zero/report.py computes it from stage 0's counted bytes);
#   - traffic: stages 1 and 2 send no more than stage 0, stage 3 at most 1.5x;
#   - time: stages 1 and 2 within 1.10x of stage 0's step time, stage 3 1.35x.
# A stage that tessera-train's --help does not list is skipped with a message.
#
# Usage: bench/zero/run.sh                 (BUILD=build dir, default build)
#   MODEL=vit-b16 IMAGE_SIZE=32 BATCH=2 WARMUP=2 STEPS=4 WORLDS="2 4"
#   STAGES="0 1 2 3" THREADS=1 REPEATS=1 TRAIN_SUBSET=1024 TEST_SUBSET=64
#   TESSERA_ARGS="..." adds tessera-train flags; TIME_BIN=/usr/bin/time (GNU time)
# With REPEATS > 1 the repeat with the shortest step time counts.
# RESULTS=FILE appends each run's figures to FILE (JSON lines, see report.py)
# and REPORT=0 leaves out the tables and targets: run_torch26.sh uses both.
# Exits 1 when a target is missed, 2 when it cannot run or cannot check one.
set -euo pipefail

BENCH=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$BENCH/../.." && pwd)
# shellcheck source=bench/zero/lib.sh
source "$BENCH/lib.sh"
BUILD=${BUILD:-$ROOT/build}
case "$BUILD" in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
TRAIN=${TESSERA_TRAIN:-$BUILD/bin/tessera-train}
MODEL=${MODEL:-vit-b16}
IMAGE_SIZE=${IMAGE_SIZE:-32}
BATCH=${BATCH:-2}
WARMUP=${WARMUP:-2}
STEPS=${STEPS:-4}
WORLDS=${WORLDS:-"2 4"}
STAGES=${STAGES:-"0 1 2 3"}
THREADS=${THREADS:-1}
REPEATS=${REPEATS:-1}
TRAIN_SUBSET=${TRAIN_SUBSET:-1024}
TEST_SUBSET=${TEST_SUBSET:-64}
REPORT=${REPORT:-1}
read -r -a EXTRA <<< "${TESSERA_ARGS:-}"
CORES=$(nproc)  # before OMP_NUM_THREADS is set: nproc honours it

cannot() { echo "bench/zero/run.sh: $*" >&2; exit 2; }

[ -x "$TRAIN" ] || cannot "no tessera-train at $TRAIN (set BUILD=...)"
for n in BATCH WARMUP STEPS THREADS REPEATS; do
  [[ ${!n} =~ ^[1-9][0-9]*$ ]] || cannot "$n must be a positive integer, not '${!n}'"
done
for world in $WORLDS; do
  if ! [[ $world =~ ^[1-9][0-9]*$ ]] || [ "$world" -lt 2 ]; then
    cannot "WORLDS holds world sizes of 2 or more, not '$world'"
  fi
done

KNOWN=$(zero_listed_stages "$TRAIN")
[ -n "$KNOWN" ] || cannot "$TRAIN --help lists no ZeRO stages (no --zero-stage flag?)"
RUN_STAGES=()
for stage in $STAGES; do
  if [[ " $KNOWN " == *" $stage "* ]]; then
    RUN_STAGES+=("$stage")
  else
    echo "stage $stage: skipped, $TRAIN --help lists stages $KNOWN only"
  fi
done
[ ${#RUN_STAGES[@]} -gt 0 ] || cannot "none of the stages \"$STAGES\" is listed by $TRAIN --help"

# Peak RSS from GNU time where it is installed (Debian package `time`).
TIME_BIN=${TIME_BIN:-/usr/bin/time}
if [ -x "$TIME_BIN" ] && "$TIME_BIN" --version 2>&1 | grep -q GNU; then
  RSS_SOURCE=gnu-time
else
  RSS_SOURCE=metric
  echo "no GNU time at $TIME_BIN (apt-get install time): peak RSS from the ranks'" \
    "peak_rss_bytes metric (VmHWM) instead"
fi

# Metrics every gcd(WARMUP, STEPS) steps: equal intervals, the warmup's apart.
gcd() { local a=$1 b=$2; while [ "$b" -ne 0 ]; do set -- "$b" $((a % b)); a=$1 b=$2; done; echo "$a"; }
EVERY=$(gcd "$WARMUP" "$STEPS")

export OMP_NUM_THREADS=$THREADS OPENBLAS_NUM_THREADS=$THREADS GLOO_SOCKET_IFNAME=lo
WORK=$(mktemp -d)
RESULTS=${RESULTS:-$WORK/results.jsonl}
trap 'zero_stop_all; rm -rf "$WORK"' EXIT

# run_once WORLD STAGE REPEAT: every rank of one run, then its line in $RESULTS.
run_once() {
  local world=$1 stage=$2 repeat=$3 port rank dir="$WORK/w$1-z$2-r$3" command=""
  mkdir -p "$dir"
  port=$(zero_free_port)
  for ((rank = 0; rank < world; rank++)); do
    local args=(--model "$MODEL" --image-size "$IMAGE_SIZE" --dataset synthetic
                --train-subset "$TRAIN_SUBSET" --test-subset "$TEST_SUBSET"
                --batch-size "$BATCH" --max-steps $((WARMUP + STEPS)) --metrics-every "$EVERY"
                --optimizer adamw --precision fp32 --threads "$THREADS" --data-workers 0
                --seed 1 --zero-stage "$stage" --world-size "$world" --rank "$rank"
                --local-rank "$rank" --rendezvous-store "127.0.0.1:$port"
                --metrics-file "$dir/r$rank.jsonl" ${EXTRA[@]+"${EXTRA[@]}"})
    local runner=()
    [ "$RSS_SOURCE" = gnu-time ] && runner=("$TIME_BIN" -f %M -o "$dir/r$rank.maxrss")
    [ "$rank" -eq 0 ] && command="${runner[*]} $TRAIN ${args[*]}"
    zero_start ${runner[@]+"${runner[@]}"} "$TRAIN" "${args[@]}" >"$dir/r$rank.log" 2>&1
  done
  if ! zero_wait_all; then
    tail -n 20 "$dir"/r*.log >&2
    cannot "world size $world, stage $stage: a rank failed (logs above)"
  fi
  python3 "$BENCH/report.py" collect-tessera --dir "$dir" --world "$world" --stage "$stage" \
    --repeat "$repeat" --warmup "$WARMUP" --rss-source "$RSS_SOURCE" --command "$command" \
    >>"$RESULTS"
}

echo "ZeRO stages on CPU: tessera-train $MODEL at $IMAGE_SIZE px, world sizes $WORLDS," \
     "Gloo on loopback, AdamW fp32, batch $BATCH per rank, $WARMUP warmup + $STEPS timed" \
     "steps, $THREADS thread(s) per rank, $CORES of $(nproc --all) cores usable;" \
     "peak RSS from $RSS_SOURCE; stages ${RUN_STAGES[*]}; best of $REPEATS"
for world in $WORLDS; do
  for stage in "${RUN_STAGES[@]}"; do
    for ((r = 0; r < REPEATS; r++)); do run_once "$world" "$stage" "$r"; done
  done
done
[ "$REPORT" = 0 ] && exit 0
python3 "$BENCH/report.py" tessera "$RESULTS"
