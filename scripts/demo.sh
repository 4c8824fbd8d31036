#!/usr/bin/env bash
# README command 1: installs what the demo needs (scripts/setup.sh demo), builds,
# then runs the main job on this machine: one tessera-coordinator, two
# tessera-worker daemons (one CPU slot each) and a 2-rank data-parallel ViT
# training job on Fashion-MNIST. Progress (step, loss, images/s) is printed from
# the stored metrics while it runs; the test accuracy is printed at the end.
# Everything started here is stopped on exit.
#
# Usage: scripts/demo.sh [--set key=value]...   (overrides for examples/fmnist-2rank.yaml)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

scripts/setup.sh demo
# Only what the demo runs: the four binaries (the coordinator embeds the web
# dashboard), and tessera-data (check and pack a dataset), which the README's tour
# (step 5, your own images) uses next. README command 2 (scripts/test.sh)
# builds everything.
scripts/build.sh --target tessera-coordinator --target tessera-worker --target tessctl \
  --target tessera-train --target tessera-data

BIN=$ROOT/build/bin
RUN=$ROOT/build/demo
rm -rf "$RUN"
mkdir -p "$RUN"

pids=()
# Stops the workers first (they stop their ranks and report), then the coordinator.
cleanup() {
  local i
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
    kill -TERM "${pids[i]}" 2>/dev/null || true
    wait "${pids[i]}" 2>/dev/null || true
  done
}
trap cleanup EXIT INT TERM

# Tessera is closed by default: a user token for tessctl and the dashboard, a
# join token for the workers (kept in a 0600 file, never on a command line).
# Ranks run as the account the user token is named after, so name it after
# whoever runs the demo.
export TESSERA_TOKEN=$("$BIN/tessera-coordinator" --db "$RUN/tessera.db" token create \
  --name "$(id -un)")
(umask 077 && "$BIN/tessera-coordinator" --db "$RUN/tessera.db" token create --kind join \
  --name demo-workers >"$RUN/join-token")

"$BIN/tessera-coordinator" --listen 127.0.0.1:0 --port-file "$RUN/port" \
  --db "$RUN/tessera.db" --http 127.0.0.1:0 --http-port-file "$RUN/http-port" \
  2>"$RUN/coordinator.log" &
pids+=($!)
for _ in $(seq 100); do [ -s "$RUN/port" ] && break; sleep 0.1; done
if [ ! -s "$RUN/port" ]; then
  echo "demo: coordinator did not start; see $RUN/coordinator.log" >&2
  cat "$RUN/coordinator.log" >&2
  exit 1
fi
export TESSERA_COORDINATOR=127.0.0.1:$(cat "$RUN/port")
echo "demo: coordinator on $TESSERA_COORDINATOR (log $RUN/coordinator.log, db $RUN/tessera.db)"
echo "demo: dashboard on http://127.0.0.1:$(cat "$RUN/http-port")/ (token: \$TESSERA_TOKEN, also in $RUN/user-token)"
(umask 077 && echo "$TESSERA_TOKEN" >"$RUN/user-token")

# A root worker refuses to run jobs as root unless told it may: the demo runs
# them as whoever started it.
worker_flags=()
[ "$(id -u)" = 0 ] && worker_flags+=(--allow-root-jobs)
for w in worker-1 worker-2; do
  # A worker refuses a work or state dir that group or others may write.
  install -d -m 0700 "$RUN/$w" "$RUN/$w-state"
  "$BIN/tessera-worker" --coordinator "$TESSERA_COORDINATOR" --name "$w" --cpu-slots 1 \
    --work-dir "$RUN/$w" --state-dir "$RUN/$w-state" --join-token-file "$RUN/join-token" \
    ${worker_flags[@]+"${worker_flags[@]}"} \
    2>"$RUN/$w.log" &
  pids+=($!)
done
for _ in $(seq 100); do
  [ "$("$BIN/tessctl" workers -o json 2>/dev/null | grep -c '"alive": true')" -ge 2 ] && break
  sleep 0.2
done
"$BIN/tessctl" workers

job=$("$BIN/tessctl" submit examples/fmnist-2rank.yaml "$@" | tail -n 1)
echo "demo: submitted job $job; rank logs under $RUN/worker-*/job-$job/"
set +e
"$BIN/tessctl" wait "$job" --progress
rc=$?
set -e
"$BIN/tessctl" status "$job"
exit $rc
