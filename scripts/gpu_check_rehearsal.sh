#!/usr/bin/env bash
# Rehearses scripts/gpu_check.sh offline, without a GPU: in a Debian trixie root
# that looks like a borrowed GPU machine (g++, CMake, ninja, python3, nvcc from
# non-free nvidia-cuda-toolkit, NCCL from libnccl-dev, and trixie's LibTorch 2.6
# with CUDA, fetched with apt-get download and unpacked with dpkg -x as in
# scripts/lane-cuda.sh; but no abseil, CLI11, GoogleTest, nlohmann-json,
# libjpeg-turbo, libspng, libarchive or Gloo development files: pip's LibTorch
# ships no Gloo headers either), it runs
#
#   unshare -n chroot ROOT .../gpu_check.sh --rehearse --deps /deps
#
# with no network, the repository at /src (read only) and the folder made by
# `scripts/gpu_check.sh --prepare DIR` at /deps. That configures and builds
# tessera-train and the GPU tests against the unpacked dependencies and stops
# before the first CUDA call. There is no python torch in the root: LibTorch is
# given by TORCH_PREFIX. What no package here provides (the driver's
# libcuda.so.1, cuDNN) is left to the loader, as in the CUDA lane.
# Then prints the size of what travels to a GPU machine: the working tree that
# git does not ignore, plus DIR.
#
# The root, its build folder and the unpacked LibTorch are cached under
# /var/cache/tessera-lanes/gpucheck (scripts/lane-common.sh); a second run reuses
# them and only rebuilds what changed. Needs root, and the network the first time.
#
# Usage: sudo scripts/gpu_check_rehearsal.sh [--cache DIR] [--jobs N]
#   TESSERA_GPU_DEPS=DIR (default gpu-deps/ in the repository; prepared with
#   scripts/gpu_check.sh --prepare DIR)
# shellcheck source=scripts/lane-common.sh
source "$(dirname "$0")/lane-common.sh"
lane_init gpucheck "$@"

DEPS="${TESSERA_GPU_DEPS:-$LANE_REPO/gpu-deps}"
[ -f "$DEPS/root/.tessera-gpu-deps" ] ||
  lane_die "no prepared dependencies in $DEPS: run scripts/gpu_check.sh --prepare $DEPS first"
DEPS="$(cd "$DEPS" && pwd)"
# What a GPU machine lacks and the prepared folder brings: none of it may be in the root.
FORBIDDEN='^(libabsl-dev|libcli11-dev|libgtest-dev|libgmock-dev|googletest|nlohmann-json3-dev|libjpeg62-turbo-dev|libjpeg-dev|libturbojpeg0-dev|libspng-dev|libarchive-dev)$'
EXTRACT=$LANE_TORCH_CUDA
LIBDIR=$EXTRACT/usr/lib/x86_64-linux-gnu

lane_ensure_root
mkdir -p "$LANE_DIR/extract" "$LANE_DIR/debs" "$LANE_ROOT$EXTRACT" "$LANE_ROOT/opt/debs" \
  "$LANE_ROOT/deps"
lane_mount_all
lane_mount --bind "$LANE_DIR/extract" "$LANE_ROOT$EXTRACT"
lane_mount --bind "$LANE_DIR/debs" "$LANE_ROOT/opt/debs"
lane_mount --bind "$DEPS" "$LANE_ROOT/deps"
mount -o remount,bind,ro "$LANE_ROOT/deps"

# Without Gloo's headers, as pip's LibTorch comes (its ProcessGroupGloo.hpp
# includes them, and the wheel ships none): the build must leave the gloo
# backend out by itself. Debian's LibTorch depends on libgloo-cuda-dev, so it
# is filtered out here and removed from a root that has it from an earlier run.
torch_deps="$(lane_torch_cuda_deps | tr ' ' '\n' | grep -Ev '^libgloo.*-dev$' | tr '\n' ' ')"
# shellcheck disable=SC2086
lane_install g++ cmake ninja-build python3 binutils nvidia-cuda-toolkit libnccl-dev $torch_deps
lane_chroot "dpkg-query -W -f '\${Package}\n' 'libgloo*-dev' 2>/dev/null |
  xargs -r dpkg --purge --force-depends >/dev/null"

lane_torch_cuda_unpack

# The root must lack what the prepared folder brings, or the rehearsal proves nothing.
present="$(lane_chroot "dpkg-query -W -f '\${Package} \${Status}\n'" |
  awk '$NF == "installed" { print $1 }' | grep -E "$FORBIDDEN" || true)"
[ -z "$present" ] || lane_die "the root has $(tr '\n' ' ' <<<"$present")installed; a GPU machine has not"
for f in usr/lib/x86_64-linux-gnu/cmake/absl usr/lib/cmake/GTest usr/lib/x86_64-linux-gnu/cmake/GTest \
  usr/share/cmake/CLI11 usr/share/cmake/nlohmann_json usr/include/jpeglib.h usr/include/spng.h usr/include/archive.h \
  usr/include/gloo "${EXTRACT#/}/usr/include/gloo"; do
  [ ! -e "$LANE_ROOT/$f" ] || lane_die "the root has /$f; a GPU machine has not"
done

# The toolkit's nvcc (CUDA 12.4) takes g++ up to 13 as its host compiler.
# shellcheck disable=SC2016 # expanded in the root
host_cxx="$(lane_chroot 'for v in 13 12; do command -v g++-$v && break; done')"
[ -n "$host_cxx" ] || lane_die "no g++ that CUDA 12's nvcc supports (g++-13 or g++-12)"

lane_log "unshare -n chroot $LANE_ROOT scripts/gpu_check.sh --rehearse --deps /deps (no network)"
nice -n 19 unshare -n chroot "$LANE_ROOT" /usr/bin/env -i \
  PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  HOME=/root LANG=C.UTF-8 BUILD=/build JOBS="$LANE_JOBS" \
  TORCH_PREFIX="$EXTRACT/usr" CUDAHOSTCXX="$host_cxx" \
  TESSERA_GPU_CHECK_CMAKE_ARGS="-DTorch_DIR=$LIBDIR/cmake/Torch -DCMAKE_EXE_LINKER_FLAGS=-Wl,--allow-shlib-undefined,-rpath-link,$LIBDIR" \
  TESSERA_GPU_CHECK_MISSING_OK='libcuda\.so\.1|libcudnn\.so\.9' \
  /bin/bash /src/scripts/gpu_check.sh --rehearse --deps /deps ||
  lane_die "the rehearsal failed (logs in $LANE_DIR/build: gpu-configure.log, gpu-build.log)"

grep -q 'gloo backend left out' "$LANE_DIR/build/gpu-configure.log" ||
  lane_die "the build found Gloo headers; the rehearsal must build without them, as pip's LibTorch does"

# What a device run carries: the working tree git does not ignore, and DIR.
tree_bytes="$(cd "$LANE_REPO" && git ls-files -z -c -o --exclude-standard |
  du -cb --files0-from=- 2>/dev/null | tail -1 | cut -f1)"
deps_bytes="$(du -sb "$DEPS" | cut -f1)"
lane_log "what travels: working tree $((tree_bytes / 1048576)) MiB + ${DEPS#"$LANE_REPO/"} $((deps_bytes / 1048576)) MiB = $(((tree_bytes + deps_bytes) / 1048576)) MiB (limit 64 MiB)"
lane_log "OK: rehearsal passed offline in $LANE_ROOT"
