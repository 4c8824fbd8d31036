# shellcheck shell=bash
# Shared by the build lanes (scripts/lane-libtorch26.sh, scripts/lane-cuda.sh);
# sourced, not run. A lane builds the trainer inside a Debian trixie root made
# with debootstrap and kept in a cache folder outside the repository:
#
#   $TESSERA_LANES_CACHE (default /var/cache/tessera-lanes; or --cache DIR)
#     <lane>/root      the lane's trixie root (debootstrap --variant=minbase)
#     <lane>/build     its CMake build folder (mounted at /build)
#     <lane>/...       what the lane extracts (the CUDA lane's LibTorch)
#     apt-archives/    downloaded .debs, shared by the lanes' roots
#     ccache/          compiler cache, shared (mounted at /ccache)
#
# The repository is bind-mounted read-only at /src. Everything comes from
# Debian's archive: the mirror this machine's apt already uses (the first
# Debian main archive in /etc/apt/sources.list or sources.list.d/*.list and
# *.sources), or $TESSERA_LANES_MIRROR. Needs root; runs in a private mount
# namespace, and unmounts on exit.

set -euo pipefail

# The first Debian archive (a URI ending in /debian, not -security) that apt
# is configured with, one-line or deb822 style; empty when there is none.
lane_apt_mirror() {
  local files=()
  [ -f /etc/apt/sources.list ] && files+=(/etc/apt/sources.list)
  for f in /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] && files+=("$f")
  done
  [ ${#files[@]} -gt 0 ] || return 0
  awk '
    /^[[:space:]]*#/ { next }
    $1 == "deb" { for (i = 2; i <= NF; i++) if ($i !~ /^\[/) { print $i; break } }
    tolower($1) == "uris:" { for (i = 2; i <= NF; i++) print $i }
  ' "${files[@]}" | grep -E '^(https?|file)://.*/debian/?$' | head -1 | sed 's:/$::'
}

LANE_MIRROR="${TESSERA_LANES_MIRROR:-$(lane_apt_mirror)}"
LANE_SUITE=trixie
LANE_REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
LANE_MOUNTS=()

lane_log() { echo "[lane ${LANE_NAME}] $*" >&2; }
lane_die() {
  echo "[lane ${LANE_NAME}] FAILED: $*" >&2
  exit 1
}

lane_usage() {
  cat <<EOF
Usage: $0 [--cache DIR] [--jobs N]
  --cache DIR   cache folder (default \$TESSERA_LANES_CACHE or /var/cache/tessera-lanes)
  --jobs N      parallel compile jobs (default 2)
EOF
}

# lane_init NAME "$@": parses the flags, re-runs the script in a private mount
# namespace, takes the lane's lock and sets LANE_CACHE, LANE_DIR, LANE_ROOT.
lane_init() {
  LANE_NAME="$1"
  shift
  LANE_CACHE="${TESSERA_LANES_CACHE:-/var/cache/tessera-lanes}"
  LANE_JOBS=2
  while [ $# -gt 0 ]; do
    case "$1" in
      --cache) LANE_CACHE="$2"; shift 2 ;;
      --cache=*) LANE_CACHE="${1#--cache=}"; shift ;;
      --jobs) LANE_JOBS="$2"; shift 2 ;;
      --jobs=*) LANE_JOBS="${1#--jobs=}"; shift ;;
      -h | --help) lane_usage; exit 0 ;;
      *) lane_usage >&2; exit 2 ;;
    esac
  done
  [ "$(id -u)" = 0 ] || lane_die "needs root (debootstrap, chroot, mounts)"
  for tool in debootstrap unshare chroot flock; do
    command -v "$tool" >/dev/null || lane_die "needs $tool (apt-get install debootstrap util-linux)"
  done
  mkdir -p "$LANE_CACHE"
  LANE_CACHE="$(cd "$LANE_CACHE" && pwd)"
  case "$LANE_CACHE/" in
    "$LANE_REPO"/*) lane_die "the cache folder must be outside the repository" ;;
  esac
  if [ -z "${TESSERA_LANE_UNSHARED:-}" ]; then
    # Mounts made from here on vanish with the namespace, even if killed.
    TESSERA_LANE_UNSHARED=1 TESSERA_LANES_CACHE="$LANE_CACHE" \
      exec unshare --mount --propagation private -- bash "$0" --cache "$LANE_CACHE" \
      --jobs "$LANE_JOBS"
  fi
  LANE_DIR="$LANE_CACHE/$LANE_NAME"
  LANE_ROOT="$LANE_DIR/root"
  mkdir -p "$LANE_DIR" "$LANE_CACHE/apt-archives/partial" "$LANE_CACHE/ccache"
  exec 9>"$LANE_DIR/lock"
  flock -n 9 || lane_die "another run of this lane holds $LANE_DIR/lock"
  trap lane_unmount_all EXIT
}

lane_mount() {  # lane_mount ARGS... TARGET
  mount "$@"
  LANE_MOUNTS+=("${@: -1}")
}

lane_unmount_all() {
  local i
  for ((i = ${#LANE_MOUNTS[@]} - 1; i >= 0; i--)); do
    umount -l "${LANE_MOUNTS[$i]}" 2>/dev/null || true
  done
  LANE_MOUNTS=()
}

# The root's own trixie, with the archive's non-free components (CUDA, NCCL).
lane_write_sources() {
  local root="$1"
  [ -n "$LANE_MIRROR" ] ||
    lane_die "apt has no Debian archive configured; set TESSERA_LANES_MIRROR to one"
  rm -f "$root/etc/apt/sources.list"
  cat >"$root/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $LANE_MIRROR
Suites: $LANE_SUITE ${LANE_SUITE}-updates
Components: main contrib non-free non-free-firmware
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  cat >"$root/etc/apt/apt.conf.d/90tessera-lane" <<EOF
APT::Install-Recommends "false";
APT::Keep-Downloaded-Packages "true";
Binary::apt::APT::Keep-Downloaded-Packages "true";
EOF
  cp /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
}

# Makes LANE_ROOT once; a root that finished bootstrapping is reused as it is.
lane_ensure_root() {
  if [ -f "$LANE_ROOT/.tessera-lane-root" ]; then
    lane_log "reusing the trixie root $LANE_ROOT"
    return
  fi
  local partial="$LANE_ROOT.partial"
  [ -n "$LANE_MIRROR" ] ||
    lane_die "apt has no Debian archive configured; set TESSERA_LANES_MIRROR to one"
  lane_log "debootstrap --variant=minbase $LANE_SUITE from $LANE_MIRROR into $partial"
  rm -rf "$partial"
  mkdir -p "$LANE_CACHE/debootstrap-debs"
  debootstrap --variant=minbase --components=main,contrib,non-free,non-free-firmware \
    --cache-dir="$LANE_CACHE/debootstrap-debs" "$LANE_SUITE" "$partial" "$LANE_MIRROR" \
    >"$LANE_DIR/debootstrap.log" 2>&1 ||
    lane_die "debootstrap failed; see $LANE_DIR/debootstrap.log"
  lane_write_sources "$partial"
  rm -rf "$LANE_ROOT"
  mv "$partial" "$LANE_ROOT"
  touch "$LANE_ROOT/.tessera-lane-root"
}

# Mounts /proc, /dev, the shared apt archives and ccache, the repository (read
# only, at /src) and the lane's build folder (at /build) into the root.
lane_mount_all() {
  local r="$LANE_ROOT"
  mkdir -p "$r/src" "$r/build" "$r/ccache" "$LANE_DIR/build"
  lane_mount -t proc proc "$r/proc"
  lane_mount --rbind /dev "$r/dev"
  lane_mount --bind "$LANE_CACHE/apt-archives" "$r/var/cache/apt/archives"
  lane_mount --bind "$LANE_CACHE/ccache" "$r/ccache"
  lane_mount --bind "$LANE_DIR/build" "$r/build"
  lane_mount --bind "$LANE_REPO" "$r/src"
  mount -o remount,bind,ro "$r/src"
  cp /etc/resolv.conf "$r/etc/resolv.conf" 2>/dev/null || true
}

# lane_chroot COMMAND: runs a bash command line in the root, with a clean env.
lane_chroot() {
  chroot "$LANE_ROOT" /usr/bin/env -i \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    HOME=/root LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive \
    CCACHE_DIR=/ccache CCACHE_MAXSIZE=5G CCACHE_BASEDIR=/src \
    /bin/bash -euo pipefail -c "$1"
}

# lane_install PACKAGES...: installs them in the root unless earlier installs
# (the lane's, a bench's) had them all (so a warm run does not touch the network).
lane_install() {
  local wanted stamp="$LANE_ROOT/.tessera-lane-packages"
  wanted="$(printf '%s\n' "$@" | sort -u)"
  if [ -f "$stamp" ] && [ -z "$(sort -u "$stamp" | comm -23 <(echo "$wanted") -)" ]; then
    lane_log "packages already installed ($# named)"
    return
  fi
  lane_log "apt-get install $*"
  # The lanes share the archive folder; one apt at a time.
  (
    flock 8
    lane_chroot "apt-get update -q >/dev/null && apt-get install -y -q $* >/dev/null"
  ) 8>"$LANE_CACHE/apt.lock" || lane_die "apt-get install failed"
  { echo "$wanted"; cat "$stamp" 2>/dev/null || true; } | sort -u >"$stamp.new"
  mv "$stamp.new" "$stamp"
}

# lane_configure_build CMAKE_ARGS...: configures /build from /src (output in
# $LANE_DIR/configure.log) and builds it.
lane_configure_build() {
  local args
  args="$(printf ' %q' "$@")"
  lane_log "cmake -S /src -B /build$args"
  lane_chroot "cmake -S /src -B /build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DTESSERA_TRAINER_ONLY=ON -DTESSERA_TRAINER_TESTS=ON $args" \
    >"$LANE_DIR/configure.log" 2>&1 || {
    tail -40 "$LANE_DIR/configure.log" >&2
    lane_die "configure failed; see $LANE_DIR/configure.log"
  }
  grep -E '^-- tessera-train:' "$LANE_DIR/configure.log" >&2 || true
  lane_log "cmake --build /build -j$LANE_JOBS"
  lane_chroot "ccache -z >/dev/null; cmake --build /build -j$LANE_JOBS" \
    >"$LANE_DIR/build.log" 2>&1 || {
    grep -E -B2 -A12 'error|FAILED' "$LANE_DIR/build.log" | head -120 >&2
    lane_die "build failed; see $LANE_DIR/build.log"
  }
  lane_chroot "ccache -s" | grep -Ei 'hits|misses' >&2 || true
}

# lane_expect_configured REGEX WHAT: fails unless the configure output has REGEX.
lane_expect_configured() {
  grep -Eq "$1" "$LANE_DIR/configure.log" ||
    lane_die "configure output lacks \"$1\": $2 (see $LANE_DIR/configure.log)"
}

# Trixie's LibTorch 2.6 with CUDA (contrib). libtorch-cuda-2.6 depends on
# nvidia-cudnn, whose package downloads cuDNN from NVIDIA at install time (it
# fails offline), so the two LibTorch packages are fetched with `apt-get
# download` and unpacked with `dpkg -x` at LANE_TORCH_CUDA (from
# $LANE_DIR/extract, which the caller mounts there); their other dependencies
# are installed. Used by lane-cuda.sh and gpu_check_rehearsal.sh.
LANE_TORCH_CUDA_PACKAGES=(libtorch-cuda-2.6 libtorch-cuda-dev)
LANE_TORCH_CUDA=/opt/libtorch-cuda

# lane_torch_cuda_deps: the LibTorch packages' dependencies, first alternative
# of each, less the cuDNN downloader, the driver's libcuda (a user's machine
# has its own) and LibTorch itself. Needs the root's package lists.
lane_torch_cuda_deps() {
  if ! ls "$LANE_ROOT"/var/lib/apt/lists/*_Packages >/dev/null 2>&1; then
    (flock 8 && lane_chroot "apt-get update -q >/dev/null") 8>"$LANE_CACHE/apt.lock"
  fi
  lane_chroot "apt-cache depends ${LANE_TORCH_CUDA_PACKAGES[*]}" | awk '
    /^ *\|Depends:/ { if (!alt) print $2; alt = 1; next }
    /^ *Depends:/ { if (!alt) print $2; alt = 0 }' |
    grep -v '^<' | grep -Ev '^(nvidia-cudnn|libcuda1|libtorch-cuda-2\.6)$' | sort -u |
    tr '\n' ' '
}

# lane_torch_cuda_unpack: unpacks the LibTorch packages at LANE_TORCH_CUDA
# unless the candidate versions are unpacked already. Needs $LANE_DIR/debs
# mounted at /opt/debs in the root.
lane_torch_cuda_unpack() {
  local versions
  versions="$(lane_chroot "apt-cache policy ${LANE_TORCH_CUDA_PACKAGES[*]}" |
    awk '/^[^ ]/ { p = $1 } /Candidate:/ { print p, $2 }')"
  [ "$(cat "$LANE_DIR/extract/.packages" 2>/dev/null)" = "$versions" ] && return
  lane_log "apt-get download + dpkg -x: ${LANE_TORCH_CUDA_PACKAGES[*]}"
  rm -rf "${LANE_DIR:?}/extract/"* "$LANE_DIR/debs/"*
  lane_chroot "cd /opt/debs && apt-get download -q ${LANE_TORCH_CUDA_PACKAGES[*]} 2>&1 |
    { grep -v 'unsandboxed as root' || true; } >&2
    for deb in /opt/debs/*.deb; do dpkg -x \$deb $LANE_TORCH_CUDA; done"
  echo "$versions" >"$LANE_DIR/extract/.packages"
  rm -f "$LANE_DIR/debs/"*.deb
}
