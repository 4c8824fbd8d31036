#!/usr/bin/env bash
# The CUDA compile-and-link lane: builds tessera-train and the trainer's tests
# against Debian trixie's LibTorch 2.6 with CUDA (contrib libtorch-cuda-dev),
# CUDA 12 (non-free nvidia-cuda-toolkit) and NCCL (non-free libnccl-dev), inside
# a cached trixie root. Every CUDA-guarded trainer file is compiled with CUDA
# on and the binary links; no GPU is needed, and none is used: the tests are
# built, and only the GPU ones that need no LibTorch run (they skip, saying why).
# Fails if CUDA or NCCL was silently dropped: checks the configure output, the
# compile commands, and that `readelf -d tessera-train` lists libtorch_cuda.so
# and libnccl.so.2 as NEEDED.
#
# The two LibTorch packages are unpacked, not installed (lane_torch_cuda_unpack
# in lane-common.sh: their cuDNN dependency downloads at install time); their
# other dependencies are installed.
# What LibTorch alone needs and no package here provides (libcuda.so.1 from the
# driver, libcudnn.so.9) is left for the loader, as on a user's machine: the
# link uses --allow-shlib-undefined. If $TESSERA_LANE_CUDNN_DIR (default
# /usr/local/cuda/lib64) has a libcudnn.so.9, ld resolves against a copy.
# The lane prints which of LibTorch's libraries were and were not present.
# Not part of .ci/run. Needs root; see scripts/lane-common.sh for the cache.
#
# Usage: sudo scripts/lane-cuda.sh [--cache DIR] [--jobs N]
# shellcheck source=scripts/lane-common.sh
source "$(dirname "$0")/lane-common.sh"
lane_init cuda "$@"

EXTRACT=$LANE_TORCH_CUDA
LIBDIR=$EXTRACT/usr/lib/x86_64-linux-gnu
CUDNN_SOURCE="${TESSERA_LANE_CUDNN_DIR:-/usr/local/cuda/lib64}"

lane_ensure_root
mkdir -p "$LANE_DIR/extract" "$LANE_DIR/debs" "$LANE_DIR/cudnn" "$LANE_ROOT$EXTRACT" \
  "$LANE_ROOT/opt/debs" "$LANE_ROOT/opt/cudnn"
lane_mount_all
lane_mount --bind "$LANE_DIR/extract" "$LANE_ROOT$EXTRACT"
lane_mount --bind "$LANE_DIR/debs" "$LANE_ROOT/opt/debs"
lane_mount --bind "$LANE_DIR/cudnn" "$LANE_ROOT/opt/cudnn"

torch_deps="$(lane_torch_cuda_deps)"
# shellcheck disable=SC2086
lane_install g++ cmake ninja-build ccache binutils libabsl-dev libcli11-dev zlib1g-dev \
  libgtest-dev libgmock-dev nlohmann-json3-dev libdnnl-dev libgloo-cuda-dev libjpeg62-turbo-dev libspng-dev \
  libarchive-dev pkgconf nvidia-cuda-toolkit libnccl-dev $torch_deps

lane_torch_cuda_unpack
rm -f "$LANE_DIR/cudnn/"*
if [ -e "$CUDNN_SOURCE/libcudnn.so.9" ]; then
  cp -L "$CUDNN_SOURCE/libcudnn.so.9" "$LANE_DIR/cudnn/"
fi

# The toolkit's nvcc (enable_language(CUDA) in LibTorch's CMake config) takes
# the newest host compiler it supports.
# shellcheck disable=SC2016 # expanded in the root
host_cxx="$(lane_chroot 'for v in 13 12; do command -v g++-$v && break; done')"
[ -n "$host_cxx" ] || lane_die "no g++ that CUDA 12's nvcc supports (g++-13 or g++-12)"
# The unpacked LibTorch as a prefix: its CMake config finds its libraries there.
lane_configure_build -DCMAKE_PREFIX_PATH=$EXTRACT/usr -DTorch_DIR=$LIBDIR/cmake/Torch \
  -DCMAKE_CUDA_HOST_COMPILER="$host_cxx" \
  -DCMAKE_GTEST_DISCOVER_TESTS_DISCOVERY_MODE=PRE_TEST \
  "-DCMAKE_EXE_LINKER_FLAGS=-Wl,--allow-shlib-undefined -Wl,-rpath-link,$LIBDIR:/opt/cudnn"

# CUDA and NCCL must both have been taken, not dropped.
lane_expect_configured '^-- tessera-train: LibTorch 2\.6\.' "LibTorch 2.6 was not the one found"
lane_expect_configured '^-- tessera-train: CUDA toolkit 12\.' "no CUDA 12 toolkit"
lane_expect_configured '^-- tessera-train: NCCL backend: ' "NCCL was not found"
lane_expect_configured '^-- tessera-train: LibTorch has CUDA 12; CUDA tensor glue and NCCL tensors on' \
  "LibTorch's CUDA was not used"

# Every file with a CUDA guard was compiled with that guard's macro set.
commands="$LANE_DIR/build/compile_commands.json"
# compile_line NAME: the compile command of worker/trainer/NAME (NAME with its
# folder, e.g. gpu/device.cc), or of the
# unity batch that includes it (TESSERA_TRAINER_UNITY); empty if none.
compile_line() {
  local line unity
  line="$(grep -E "\"command\": .* -c /src/worker/trainer/$1\"" "$commands" | head -1)"
  if [ -z "$line" ]; then
    unity="$(grep -lF "#include \"/src/worker/trainer/$1\"" \
      "$LANE_DIR"/build/worker/trainer/CMakeFiles/*.dir/Unity/unity_*.cxx 2>/dev/null | head -1)"
    [ -z "$unity" ] ||
      line="$(grep -F -- "-c /build/${unity#"$LANE_DIR/build/"}\"" "$commands" | head -1)"
  fi
  echo "$line"
}
guarded=0
for source in "$LANE_REPO"/worker/trainer/*.cc "$LANE_REPO"/worker/trainer/*/*.cc; do
  name="${source#"$LANE_REPO"/worker/trainer/}"
  macros="$(grep -Eo '^#if.*TESSERA_(TORCH_CUDA|HAVE_CUDA_RUNTIME|HAVE_NCCL|NCCL_TENSORS)' \
    "$source" | grep -Eo 'TESSERA_[A-Z_]+' | sort -u || true)"
  [ -n "$macros" ] || continue
  line="$(compile_line "$name")"
  [ -n "$line" ] || lane_die "$name has CUDA guards but was not compiled"
  for macro in $macros; do
    grep -q -- "-D$macro=1" <<<"$line" || lane_die "$name was compiled without $macro"
  done
  guarded=$((guarded + 1))
done
for name in gpu/cuda_step_timer.cc dist/nccl_communicator.cc dist/nccl_tensor_communicator.cc; do
  [ -n "$(compile_line "$name")" ] || lane_die "$name (CUDA only) was not compiled"
done
lane_log "$guarded CUDA-guarded files and the 3 CUDA-only files compiled with CUDA on"

needed="$(lane_chroot 'readelf -d /build/bin/tessera-train' | grep NEEDED)"
echo "$needed"
# Sonames: libtorch_cuda.so.<major>.<minor> (Debian), libtorch_cuda.so (PyTorch's
# own builds), libnccl.so.2.
for lib in 'libtorch_cuda\.so(\.[0-9.]+)?' 'libnccl\.so\.2'; do
  grep -Eq "\[$lib\]" <<<"$needed" || lane_die "tessera-train does not list $lib as NEEDED"
done

# What LibTorch's CUDA library needs, and whether ld had it at link time.
lane_log "libtorch_cuda.so's NEEDED at link time:"
lane_chroot "for lib in \$(readelf -d $LIBDIR/libtorch_cuda.so | sed -n 's/.*NEEDED.*\[\(.*\)\]/\1/p'); do
    where=\$(ldconfig -p | awk -v l=\$lib '\$1 == l && !n++ { print \$NF }')
    for dir in $LIBDIR /opt/cudnn; do
      if [ -e \$dir/\$lib ]; then where=\$dir/\$lib; fi
    done
    echo \"  \$lib: \${where:-absent (left to the loader; --allow-shlib-undefined)}\"
  done"

# The GPU tests that need no LibTorch load here (LibTorch's CUDA library needs a
# driver and cuDNN to load); with no GPU they skip, saying why.
for test in cuda_step_timer_test nccl_communicator_test; do
  lane_log "$test (no GPU here: expect skips)"
  lane_chroot "/build/tests/$test" >"$LANE_DIR/$test.log" 2>&1 || {
    tail -30 "$LANE_DIR/$test.log" >&2
    lane_die "$test failed; see $LANE_DIR/$test.log"
  }
  grep -E '^\[  (PASSED|SKIPPED|FAILED) *\] [0-9]+ tests?' "$LANE_DIR/$test.log"
done
lane_log "OK: tessera-train links LibTorch $(grep -Eo 'LibTorch 2\.6\.[0-9]+' \
  "$LANE_DIR/configure.log" | head -1 | cut -d' ' -f2) with CUDA 12 and NCCL"
