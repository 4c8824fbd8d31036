#!/usr/bin/env bash
# Installs the Debian packages Tessera needs to build, test and run its demo.
# Idempotent: when every package is already installed it returns in well under a second.
set -euo pipefail

PACKAGES=(
  build-essential cmake pkg-config ninja-build ccache git
  libgrpc++-dev protobuf-compiler-grpc protobuf-compiler libprotobuf-dev libabsl-dev
  libsqlite3-dev sqlite3 libgtest-dev libgmock-dev libtorch-dev libopenblas0-pthread
  libgloo-dev libyaml-cpp-dev nlohmann-json3-dev libcli11-dev libspdlog-dev
  libcpp-httplib-dev libsystemd-dev libsqlitecpp-dev libbenchmark-dev
  dataset-fashion-mnist python3-torch clang-format iproute2 procps
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#PACKAGES[@]} packages present"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "setup: installing ${#missing[@]} packages: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "setup: done"
