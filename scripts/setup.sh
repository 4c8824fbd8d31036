#!/usr/bin/env bash
# Installs the Debian packages Tessera needs to build, test and run its demo.
# Idempotent: when every package is already installed it returns in well under a second.
set -euo pipefail

PACKAGES=(
  build-essential cmake pkg-config ninja-build ccache git
  libgrpc++-dev protobuf-compiler-grpc protobuf-compiler libprotobuf-dev libabsl-dev
  libsqlite3-dev sqlite3 libgtest-dev libgmock-dev libtorch-dev libopenblas0-pthread libdnnl-dev
  libgloo-dev libyaml-cpp-dev nlohmann-json3-dev libcli11-dev libspdlog-dev
  libcpp-httplib-dev libmicrohttpd-dev libsystemd-dev libsqlitecpp-dev libbenchmark-dev
  dataset-fashion-mnist python3-torch clang-format universal-ctags iproute2 procps libssl-dev
  nodejs chromium clang libclang-rt-14-dev
  slurm-wlm munge
  libturbojpeg0-dev libjpeg62-turbo-dev libspng-dev python3-torchvision
  # The tar shards' reader and writer (worker/trainer/data/tar_*.cc).
  libarchive-dev
  # /metrics: prometheus-cpp's registry types and text serializer; promtool
  # (package prometheus) checks the page and the alert rules in the tests only.
  prometheus-cpp-dev prometheus
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#PACKAGES[@]} packages present"
else
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  echo "setup: installing ${#missing[@]} packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  echo "setup: packages done"
fi

# Debian's nodejs ships npm separately; NodeSource's nodejs includes it (and
# conflicts with Debian's npm), so npm is installed only when it is missing.
if ! command -v npm >/dev/null 2>&1; then
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  echo "setup: installing npm"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends npm >/dev/null
fi

# The dashboard's JavaScript dependencies (chart.js, esbuild, playwright-core),
# pinned by web/package-lock.json; reinstalled only when the lock file changes.
WEB="$(dirname "$0")/../web"
if ! cmp -s "$WEB/package-lock.json" "$WEB/node_modules/.package-lock.json.installed" 2>/dev/null; then
  echo "setup: installing the dashboard's npm packages"
  (cd "$WEB" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
  cp "$WEB/package-lock.json" "$WEB/node_modules/.package-lock.json.installed"
fi
echo "setup: done"
