# shellcheck shell=bash
# Sourced, not run: starts a Tessera cluster on this machine, as README command 1
# (scripts/demo.sh) and bench/search/run.sh use one. One tessera-coordinator
# (gRPC and dashboard on free loopback ports) and N tessera-worker daemons of
# one CPU slot each, all under one run directory; everything started is stopped
# when the calling script exits.
#
#   source scripts/local_cluster.sh
#   local_cluster_start BIN_DIR RUN_DIR WORKERS [extra tessera-worker flags...]
#
# Afterwards TESSERA_TOKEN (a user token named after whoever runs the script)
# and TESSERA_COORDINATOR are exported for tessctl, and LOCAL_CLUSTER_HTTP is
# the dashboard's address. Messages are prefixed with LOCAL_CLUSTER_NAME
# (default: the calling script's name).

local_cluster_pids=()

# Stops the workers first (they stop their ranks and report), then the coordinator.
local_cluster_stop() {
  local i
  for ((i = ${#local_cluster_pids[@]} - 1; i >= 0; i--)); do
    kill -TERM "${local_cluster_pids[i]}" 2>/dev/null || true
    wait "${local_cluster_pids[i]}" 2>/dev/null || true
  done
  local_cluster_pids=()
}

local_cluster_start() {
  local bin=$1 run=$2 workers=$3
  shift 3
  local name=${LOCAL_CLUSTER_NAME:-$(basename "$0" .sh)}
  trap local_cluster_stop EXIT
  trap 'local_cluster_stop; exit 130' INT TERM
  rm -rf "$run"
  mkdir -p "$run"

  # Tessera is closed by default: a user token for tessctl and the dashboard, a
  # join token for the workers (kept in a 0600 file, never on a command line).
  # Ranks run as the account the user token is named after.
  TESSERA_TOKEN=$("$bin/tessera-coordinator" --db "$run/tessera.db" token create \
    --name "$(id -un)")
  export TESSERA_TOKEN
  (umask 077 && "$bin/tessera-coordinator" --db "$run/tessera.db" token create \
    --kind join --name local-workers >"$run/join-token")
  (umask 077 && echo "$TESSERA_TOKEN" >"$run/user-token")

  "$bin/tessera-coordinator" --listen 127.0.0.1:0 --port-file "$run/port" \
    --db "$run/tessera.db" --http 127.0.0.1:0 --http-port-file "$run/http-port" \
    2>"$run/coordinator.log" &
  local_cluster_pids+=($!)
  local _
  for _ in $(seq 100); do [ -s "$run/port" ] && [ -s "$run/http-port" ] && break; sleep 0.1; done
  if [ ! -s "$run/port" ]; then
    echo "$name: coordinator did not start; see $run/coordinator.log" >&2
    cat "$run/coordinator.log" >&2
    return 1
  fi
  export TESSERA_COORDINATOR=127.0.0.1:$(cat "$run/port")
  LOCAL_CLUSTER_HTTP=127.0.0.1:$(cat "$run/http-port")
  echo "$name: coordinator on $TESSERA_COORDINATOR (log $run/coordinator.log, db $run/tessera.db)"
  echo "$name: dashboard on http://$LOCAL_CLUSTER_HTTP/ (token: \$TESSERA_TOKEN, also in $run/user-token)"

  # A root worker refuses to run jobs as root unless told it may: these run
  # them as whoever started the script.
  local worker_flags=("$@") w i
  [ "$(id -u)" = 0 ] && worker_flags+=(--allow-root-jobs)
  for ((i = 1; i <= workers; i++)); do
    w=worker-$i
    # A worker refuses a work or state dir that group or others may write.
    install -d -m 0700 "$run/$w" "$run/$w-state"
    "$bin/tessera-worker" --coordinator "$TESSERA_COORDINATOR" --name "$w" --cpu-slots 1 \
      --work-dir "$run/$w" --state-dir "$run/$w-state" --join-token-file "$run/join-token" \
      "${worker_flags[@]}" 2>"$run/$w.log" &
    local_cluster_pids+=($!)
  done
  for _ in $(seq 100); do
    [ "$("$bin/tessctl" workers -o json 2>/dev/null | grep -c '"alive": true')" -ge "$workers" ] &&
      return 0
    sleep 0.2
  done
  echo "$name: $workers workers did not register in 20 s; see $run/worker-*.log" >&2
  return 1
}
