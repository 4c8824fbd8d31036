# shellcheck shell=bash
# Shared by bench/zero/run.sh and bench/zero/run_torch26.sh; sourced, not run.
#
# The ranks of a run start in the background, each in a process group of its
# own (setsid), so that when one fails the others, which would wait for it in a
# collective, are stopped with it:
#   zero_start CMD... >LOG   starts one rank (append ZERO_RUNNING)
#   zero_wait_all            waits for them all; 1 as soon as one fails,
#                            after stopping the rest
#   zero_stop_all            stops those still running (also for an EXIT trap)

ZERO_RUNNING=()  # process group ids of the ranks now running

zero_start() {
  # Run in the background, setsid does not fork (the shell has no job control),
  # so $! is the group's id.
  setsid --wait "$@" &
  ZERO_RUNNING+=($!)
}

zero_stop_all() {
  local pid
  for pid in ${ZERO_RUNNING[@]+"${ZERO_RUNNING[@]}"}; do
    kill -- "-$pid" 2>/dev/null || true
  done
  ZERO_RUNNING=()
}

zero_wait_all() {
  local done_pid pid still
  while [ ${#ZERO_RUNNING[@]} -gt 0 ]; do
    if ! wait -n -p done_pid "${ZERO_RUNNING[@]}"; then
      zero_stop_all
      return 1
    fi
    still=()
    for pid in "${ZERO_RUNNING[@]}"; do [ "$pid" = "$done_pid" ] || still+=("$pid"); done
    ZERO_RUNNING=(${still[@]+"${still[@]}"})
  done
}

# zero_listed_stages TRAIN: the ZeRO stages TRAIN's --help lists, space
# separated ("ZeRO stage, one of 0, 1, 2: ..." gives "0 1 2"); empty if none.
zero_listed_stages() {
  { "$1" --help 2>&1 || true; } |
    sed -n 's/.*--zero-stage.*ZeRO stage, one of \([0-9][0-9, ]*\).*/\1/p' | head -1 |
    tr -s ', ' ' ' | sed 's/ *$//'
}

zero_free_port() { echo $((20000 + RANDOM % 20000)); }
