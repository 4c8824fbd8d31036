#!/usr/bin/env bash
# The LibTorch 2.6 lane: builds tessera-train and the trainer's tests
# (tests/worker/trainer) against Debian trixie's CPU LibTorch 2.6 inside a
# cached trixie root, and runs those tests. Shows that the trainer's sources
# build on LibTorch 2.6 as well as on bookworm's 1.13 (the main build).
# Not part of .ci/run. Needs root; see scripts/lane-common.sh for the cache.
#
# Usage: sudo scripts/lane-libtorch26.sh [--cache DIR] [--jobs N]
# shellcheck source=scripts/lane-common.sh
source "$(dirname "$0")/lane-common.sh"
lane_init libtorch26 "$@"

lane_ensure_root
lane_mount_all
lane_install g++ cmake ninja-build ccache binutils libtorch-dev libabsl-dev libcli11-dev \
  zlib1g-dev libgtest-dev libgmock-dev nlohmann-json3-dev libdnnl-dev libgloo-dev libjpeg62-turbo-dev libspng-dev \
  libarchive-dev pkgconf python3-torchvision python3-safetensors

# A CPU lane: the GPU pieces stay out even if a toolkit turns up in the root.
lane_configure_build -DCMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit=ON
lane_expect_configured '^-- tessera-train: LibTorch 2\.6\.' "LibTorch 2.6 was not the one found"

lane_log "ctest (the trainer's tests)"
# trixie's python3-torchvision (0.21, on its torch 2.6) and python3-safetensors
# are installed: the comparison against torchvision's model must run, not skip.
if ! lane_chroot "cd /build && TESSERA_REQUIRE_TORCHVISION=1 ctest --output-on-failure -j$LANE_JOBS --timeout 900" \
  >"$LANE_DIR/ctest.log" 2>&1; then
  grep -E -A30 '\*\*\*Failed|\(Failed\)|\(Timeout\)|\(SEGFAULT\)|Exception' \
    "$LANE_DIR/ctest.log" | head -150 >&2
  tail -25 "$LANE_DIR/ctest.log" >&2
  lane_die "trainer tests failed; see $LANE_DIR/ctest.log"
fi
tail -4 "$LANE_DIR/ctest.log"
lane_log "torchvision comparison (vit_weights_test)"
lane_chroot "cd /build && TESSERA_REQUIRE_TORCHVISION=1 tests/vit_weights_test \
  --gtest_filter='VitWeightsTorchvisionTest.Small*' | grep -E '^torchvision|^tessera ->|OK \]'"
lane_chroot "/build/bin/tessera-train --help | sed -n 1p"
lane_log "OK: tessera-train and the trainer's tests built against LibTorch $(
  grep -Eo 'LibTorch 2\.6\.[0-9]+' "$LANE_DIR/configure.log" | head -1 | cut -d' ' -f2); tests pass"
