#!/usr/bin/env bash
# Installs the Debian packages (and the dashboard's npm packages) that one of
# Tessera's commands needs. Idempotent: when everything is present it returns in
# well under a second.
#
# Usage: scripts/setup.sh [demo|test]
#   demo   what README command 1 (scripts/demo.sh) needs: the toolchain and the
#          libraries that configure and build the demo's binaries, the
#          dashboard's npm packages, and the demo job's data (Fashion-MNIST).
#   test   everything (the default): the demo set and what only the tests,
#          the fuzz build and the developer tools need (scripts/test.sh, .ci/run).
#   Example: scripts/setup.sh demo
set -euo pipefail

usage() {
  sed -n '6,12p' "$0" | sed 's/^# \{0,1\}//'
}

# Configuring the tree and building tessera-coordinator, tessera-worker, tessctl,
# tessera-train and tessera-data, then running the 2-rank CPU job.
DEMO_PACKAGES=(
  build-essential cmake pkg-config ninja-build ccache
  libgrpc++-dev protobuf-compiler-grpc protobuf-compiler libprotobuf-dev libabsl-dev
  libsqlite3-dev libssl-dev libyaml-cpp-dev nlohmann-json3-dev libcli11-dev libspdlog-dev
  libmicrohttpd-dev libsystemd-dev
  # /metrics: prometheus-cpp's registry types and text serializer.
  prometheus-cpp-dev
  # The trainer: LibTorch; OpenBLAS so that LibTorch's BLAS is not the reference
  # one; oneDNN for the CPU Linear layers; Gloo's headers, without which a CPU
  # job of two ranks (the demo's) cannot run.
  libtorch-dev libopenblas0-pthread libdnnl-dev libgloo-dev
  # The image data layer (worker/trainer/data): JPEG, PNG and tar shards.
  libjpeg62-turbo-dev libspng-dev libarchive-dev
  # The top-level CMakeLists.txt finds these whenever TESSERA_BUILD_TESTS is on
  # (the default, which demo.sh keeps so that test.sh reuses its build tree):
  # configuring fails without them, although the demo builds no test.
  libgtest-dev libgmock-dev libcpp-httplib-dev
  # The dashboard is bundled with esbuild (web/node_modules) at build time.
  nodejs
  # The demo job's data.
  dataset-fashion-mnist
)

# Only the tests (scripts/test.sh, .ci/run) and the developer tools.
TEST_ONLY_PACKAGES=(
  # Browser tests (label browser): headless Chromium driven by playwright-core.
  chromium
  # Slurm tests (label slurm) start a real one-node Slurm.
  slurm-wlm munge
  # promtool checks the /metrics page and the alert rules.
  prometheus
  # Fault tests: network namespaces (ip) and the database checked with the CLI.
  iproute2 sqlite3
  # The trainer's tests compare against PyTorch and torchvision.
  python3-torch python3-torchvision
  # The libFuzzer build (tests/fuzz): clang and its fuzzer and sanitizer runtimes.
  clang libclang-rt-14-dev
  # The layering test measures function lengths with universal-ctags.
  universal-ctags
  # Developer tools (no build or test runs them): clang-format for the sources
  # (.clang-format), git (scripts/gpu_check.sh; a clone has it already).
  clang-format git
  # Nothing uses these today (candidates for removal).
  libturbojpeg0-dev libsqlitecpp-dev libbenchmark-dev procps
)

if [ $# -gt 1 ]; then
  echo "setup: one set at most, got: $*" >&2
  usage >&2
  exit 2
fi
set_name=${1:-test}
case "$set_name" in
  demo | test) ;;
  -h | --help)
    usage
    exit 0
    ;;
  *)
    echo "setup: unknown set '$set_name'" >&2
    usage >&2
    exit 2
    ;;
esac

PACKAGES=("${DEMO_PACKAGES[@]}")
if [ "$set_name" = test ]; then PACKAGES+=("${TEST_ONLY_PACKAGES[@]}"); fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

# One dpkg-query for the whole list ("ii" is installed; packages dpkg has never
# seen are not listed at all).
installed=" $(dpkg-query -W -f='${db:Status-Abbrev} ${Package}\n' "${PACKAGES[@]}" 2>/dev/null |
  awk '$1 == "ii" { printf "%s ", $2 }' || true)"
missing=()
for p in "${PACKAGES[@]}"; do
  case "$installed" in
    *" $p "*) ;;
    *) missing+=("$p") ;;
  esac
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup ($set_name): all ${#PACKAGES[@]} packages present"
else
  echo "setup ($set_name): installing ${#missing[@]} of ${#PACKAGES[@]} packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  echo "setup ($set_name): packages done"
fi

# Debian's nodejs ships npm separately; NodeSource's nodejs includes it (and
# conflicts with Debian's npm), so npm is installed only when it is missing.
if ! command -v npm >/dev/null 2>&1; then
  echo "setup ($set_name): installing npm"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends npm >/dev/null
fi

# The dashboard's JavaScript dependencies (chart.js, esbuild, playwright-core),
# pinned by web/package-lock.json; reinstalled only when the lock file changes.
# Both sets need them: esbuild bundles the dashboard that the coordinator embeds.
# (playwright-core, for the browser tests only, is 14 MB of JavaScript and no
# browser; it is a dev dependency like esbuild, so `npm ci --omit=dev` cannot
# leave it out alone.)
WEB="$(dirname "$0")/../web"
if ! cmp -s "$WEB/package-lock.json" "$WEB/node_modules/.package-lock.json.installed" 2>/dev/null; then
  echo "setup ($set_name): installing the dashboard's npm packages"
  (cd "$WEB" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
  cp "$WEB/package-lock.json" "$WEB/node_modules/.package-lock.json.installed"
fi
echo "setup ($set_name): done"
