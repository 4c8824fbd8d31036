#!/usr/bin/env bash
# Builds and runs the coordinator load benchmark (real proto, real loopback sockets).
set -euo pipefail
cd "$(dirname "$0")/../.."
scripts/build.sh >/dev/null
build/bench/coordinator_scale
