#!/usr/bin/env bash
# The GPU check: builds tessera-train as a trainer-only build (no gRPC or
# protobuf: -DTESSERA_TRAINER_ONLY=ON, plus the trainer's GPU tests) against the
# GPU machine's own PyTorch, then prints:
#   1. the GPU tests (ctest -L gpu: CUDA step timer, NCCL communicator);
#   2. ViT-B/16 training throughput, bf16 autocast, 224 px, batch 128, one GPU
#      (synthetic 28 px single-channel images, resized to 224 on the GPU by the
#      input pipeline; one input channel instead of three changes the patch
#      embedding's FLOPs by under 0.1%), and its MFU at 105 GFLOP per image
#      (forward + backward, 3 x 17.6 GMAC x 2) against PEAK_TFLOPS (default
#      989: H100 SXM bf16 dense);
#   3. NCCL at world size 1: joining the communicator, and one all-reduce of a
#      25 MiB bucket (nccl_communicator_test's FIGURE lines);
#   4. the collective timeout aborting a collective the check makes hang: a
#      world-of-one all-reduce queued behind a stream held by a blocking host
#      function (nccl_communicator_test), and with two or more GPUs also two
#      tessera-train ranks of which the check stops one (SIGSTOP) mid-run: the
#      other must exit with code 4 naming the pending collective;
#   5. a PyTorch peer on the same GPU (bench/trainer_vs_ddp/gpu_peer.py):
#      torchvision's vit_b_16 and timm's vit_base_patch16_224, eager, bf16
#      autocast, fused AdamW, batch 128, 224 px, and torchvision's under
#      torch.compile when it compiles within COMPILE_TIMEOUT; then Tessera's and
#      the peer's images/s side by side;
#   6. same weights, same batch, same loss: tessera-train and timm from one set
#      of initial weights on one fixed batch, 20 bf16 steps, every loss within
#      2% (bench/step_profile/loss_agreement.py);
#   7. the step, kernel by kernel: tessera-train (--profile-steps) and the timm
#      peer (torch.profiler; torchvision's without timm) over the same 5 steps
#      after warm-up, side by side (bench/step_profile/compare.py): the top 20
#      kernels of each in ms per step, kernels per step, GPU idle per step. The
#      traces stay in $BUILD/gpu-run/profile/ (Perfetto, chrome://tracing).
# Target: >= 2,800 images/s on one H100. Meant to finish within 8 minutes on an
# H100 machine with 16 cores (ninja on every core, only the targets it runs).
#
# GPU machines are borrowed bare and offline: they have PyTorch (python3's
# torch, with CUDA and the C++11 ABI), nvcc, CMake, ninja and a C++ compiler, but
# not the trainer's other build dependencies. Those are Debian packages
# unpacked (dpkg -x) into a folder on a machine with apt, which travels with the
# working tree:
#
#   scripts/gpu_check.sh --prepare DIR   here (Debian 12, apt reachable): fetch
#       abseil, CLI11, nlohmann-json, GoogleTest/gmock, libjpeg-turbo, libspng,
#       libarchive, zlib and pkgconf, unpack them into DIR/root, print their
#       sizes. DIR is meant to be gpu-deps/ (git-ignored), carried to the GPU
#       machine.
#   scripts/gpu_check.sh [--deps DIR]    on the GPU machine (DIR defaults to
#       gpu-deps/ in the repository).
#   scripts/gpu_check.sh --profile [--deps DIR]    the build, then only the step
#       profile below (6b), for a look at the kernels after a change.
#   scripts/gpu_check.sh --rehearse [--deps DIR]   every step before the first
#       CUDA call (checks, configure, build, library check), no GPU needed;
#       scripts/gpu_check_rehearsal.sh runs it offline in a trixie root.
#
# The build finds DIR/root through CMAKE_PREFIX_PATH, .pc files rewritten to
# DIR/root (PKG_CONFIG_PATH), and the unpacked pkgconf where the machine has no
# pkg-config; binaries find its shared libraries through their RPATH and
# LD_LIBRARY_PATH. LibTorch is python's torch.utils.cmake_prefix_path, or
# $TORCH_PREFIX (a CMake prefix, e.g. a LibTorch without python). Fails early,
# saying why, without a GPU, a torch with CUDA, nvcc, or the deps folder.
#
# Environment: BUILD (default build-gpucheck), JOBS (default: all cores),
#   PYTHON=python3 PEAK_TFLOPS=989 STEPS=60 COLLECTIVE_TIMEOUT=20s
#   COMPILE_TIMEOUT=150 (0 skips torch.compile) TORCH_PREFIX CUDAHOSTCXX
#   NCCL_HOME TESSERA_GPU_CHECK_CMAKE_ARGS (extra configure arguments)
#   TESSERA_GPU_CHECK_MISSING_OK (regex of libraries the loader may lack; the
#   rehearsal's driver and cuDNN)
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$ROOT/build-gpucheck}
PYTHON=${PYTHON:-python3}
PEAK_TFLOPS=${PEAK_TFLOPS:-989}
GFLOP_PER_IMAGE=105
STEPS=${STEPS:-60}
WARMUP=20
BATCH=128
COLLECTIVE_TIMEOUT=${COLLECTIVE_TIMEOUT:-20s}
COMPILE_TIMEOUT=${COMPILE_TIMEOUT:-150}
JOBS=${JOBS:-$(nproc)}
PEER=$ROOT/bench/trainer_vs_ddp/gpu_peer.py
# Debian bookworm packages the trainer-only build needs and a GPU machine lacks.
# (libarchive13's own libraries, libxml2, nettle, lz4, zstd, are those of the
# machine: Debian's and Ubuntu's CMake depend on libarchive13 too.)
PREPARE_PACKAGES=(libabsl-dev libabsl20220623 libcli11-dev nlohmann-json3-dev libgtest-dev
  libgmock-dev libjpeg62-turbo-dev libjpeg62-turbo libspng-dev libspng0 zlib1g-dev zlib1g
  libarchive-dev libarchive13 pkgconf-bin libpkgconf3)
MARKER=.tessera-gpu-deps
MULTIARCH=x86_64-linux-gnu

START=$SECONDS
die() {
  echo "gpu_check: FAILED: $*" >&2
  exit 1
}
phase() { printf '[%s +%3ds] gpu_check: %s\n' "$(date +%T)" $((SECONDS - START)) "$*" >&2; }

usage() {
  cat <<EOF
Usage: $0 --prepare DIR          fetch and unpack the build dependencies (Debian, apt)
       $0 [--deps DIR]           build and run the GPU check (default DIR: $ROOT/gpu-deps)
       $0 --profile [--deps DIR]   build, then only the kernel-by-kernel step profile
       $0 --rehearse [--deps DIR]  every step before the first CUDA call
EOF
}

mode=run
DEPS=$ROOT/gpu-deps
while [ $# -gt 0 ]; do
  case "$1" in
    --prepare) mode=prepare; DEPS=${2:?--prepare needs a folder}; shift 2 ;;
    --deps) DEPS=${2:?--deps needs a folder}; shift 2 ;;
    --rehearse) mode=rehearse; shift ;;
    --profile) mode=profile; shift ;;
    -h | --help) usage; exit 0 ;;
    *) usage >&2; exit 2 ;;
  esac
done

# --prepare DIR: apt-get download + dpkg -x into DIR/root, without docs.
prepare() {
  for tool in apt-get dpkg-deb du readelf; do
    command -v "$tool" >/dev/null || die "--prepare needs $tool (a Debian machine with binutils)"
  done
  mkdir -p "$DEPS"
  DEPS=$(cd "$DEPS" && pwd)
  local debs unpack
  debs=$(mktemp -d)
  unpack=$(mktemp -d)
  # shellcheck disable=SC2064 # the folders are fixed now
  trap "rm -rf '$debs' '$unpack'" EXIT
  phase "apt-get download ${PREPARE_PACKAGES[*]}"
  (cd "$debs" && apt-get download -q "${PREPARE_PACKAGES[@]}" 2>&1 |
    { grep -v 'unsandboxed as root' || true; }) >&2
  local count
  count=$(find "$debs" -name '*.deb' | wc -l)
  [ "$count" = "${#PREPARE_PACKAGES[@]}" ] ||
    die "apt-get download gave $count of ${#PREPARE_PACKAGES[@]} packages (apt-get update?)"
  rm -rf "$DEPS/root" "$DEPS/PACKAGES"
  mkdir -p "$DEPS/root"
  printf '%-22s %-22s %9s %9s\n' package version deb unpacked
  local deb name version deb_kib tree_kib total_deb=0 total_tree=0
  for deb in "$debs"/*.deb; do
    name=$(dpkg-deb -f "$deb" Package)
    version=$(dpkg-deb -f "$deb" Version)
    rm -rf "${unpack:?}/$name"
    dpkg-deb -x "$deb" "$unpack/$name"
    # Documentation, manuals, lintian overrides and GoogleTest's source link
    # are of no use to a build.
    rm -rf "$unpack/$name"/usr/share/{doc,man,info,lintian,bug} "$unpack/$name/usr/src"
    find "$unpack/$name" -depth -type d -empty -delete
    deb_kib=$(($(stat -c %s "$deb") / 1024))
    tree_kib=$(du -sk "$unpack/$name" 2>/dev/null | cut -f1)
    tree_kib=${tree_kib:-0}
    total_deb=$((total_deb + deb_kib))
    total_tree=$((total_tree + tree_kib))
    printf '%-22s %-22s %6d KiB %6d KiB\n' "$name" "$version" "$deb_kib" "$tree_kib"
    echo "$name $version" >>"$DEPS/PACKAGES"
    [ ! -d "$unpack/$name" ] || cp -a "$unpack/$name/." "$DEPS/root/"
  done
  # The tree moves to another machine and path: absolute links become relative.
  local link target
  while IFS= read -r link; do
    target=$(readlink "$link")
    case "$target" in
      /*) ln -sfn "$(realpath -m --relative-to="$(dirname "$link")" "$DEPS/root$target")" "$link" ;;
    esac
  done < <(find "$DEPS/root" -type l)
  # The newest glibc symbol version its binaries use (the GPU machine's glibc must be as new).
  local glibc
  glibc=$(find "$DEPS/root" -type f \( -name '*.so*' -o -path '*/bin/*' \) -print0 |
    xargs -0 readelf -V 2>/dev/null | grep -Eo 'GLIBC_2\.[0-9]+' | sort -t. -k2 -n -u | tail -1)
  printf '%s\n' "tessera gpu deps: bookworm packages unpacked with dpkg -x" >"$DEPS/root/$MARKER"
  printf '%-45s %6d KiB %6d KiB\n' "total: ${#PREPARE_PACKAGES[@]} packages" "$total_deb" "$total_tree"
  echo "gpu_check: $DEPS/root holds $(du -sh "$DEPS/root" | cut -f1) (what travels; the .debs do not);" \
    "its binaries need glibc ${glibc#GLIBC_} or newer"
  echo "gpu_check: carry it to the GPU machine and run scripts/gpu_check.sh --deps ${DEPS#"$ROOT/"}"
}

if [ "$mode" = prepare ]; then
  prepare
  exit 0
fi

# ---------------------------------------------------------------------------
# 1. Preflight: everything that can be checked in seconds, before any long step.
phase "preflight ($mode)"
gpus=""
gpu_count=0
if [ "$mode" = run ] || [ "$mode" = profile ]; then
  command -v nvidia-smi >/dev/null 2>&1 ||
    die "no nvidia-smi: this needs a machine with an NVIDIA GPU and its driver (not run)"
  gpus=$(nvidia-smi --query-gpu=name,compute_cap --format=csv,noheader 2>/dev/null || true)
  [ -n "$gpus" ] || die "nvidia-smi lists no GPU (not run)"
  gpu_count=$(wc -l <<<"$gpus")
fi

[ -f "$DEPS/root/$MARKER" ] ||
  die "no prepared dependencies in $DEPS (run scripts/gpu_check.sh --prepare $DEPS on a Debian 12 machine with apt, and carry the folder)"
DEPS=$(cd "$DEPS" && pwd)
D=$DEPS/root
for tool in cmake ninja; do
  command -v "$tool" >/dev/null || die "no $tool on PATH"
done
command -v "${CXX:-c++}" >/dev/null || command -v g++ >/dev/null || die "no C++ compiler (c++ or g++)"
if ! command -v nvcc >/dev/null; then
  if [ -x /usr/local/cuda/bin/nvcc ]; then
    export PATH=$PATH:/usr/local/cuda/bin
  else
    die "no nvcc on PATH or in /usr/local/cuda/bin (LibTorch's CMake config needs the CUDA toolkit)"
  fi
fi
[ -f "$PEER" ] || die "missing $PEER"
COMPARE=$ROOT/bench/step_profile/compare.py
[ -f "$COMPARE" ] || die "missing $COMPARE"

# python's torch: where its LibTorch is, and (not rehearsing) that it can use the GPU.
torch_info=""
if command -v "$PYTHON" >/dev/null 2>&1; then
  torch_err=$(mktemp)
  torch_info=$(GPU_CHECK_MODE=$mode "$PYTHON" - 2>"$torch_err" <<'EOF'
import importlib.util, os, sys
try:
    import torch
except ImportError:
    sys.exit("python has no torch")
if not torch.version.cuda:
    sys.exit(f"torch {torch.__version__} was built without CUDA")
if not torch._C._GLIBCXX_USE_CXX11_ABI:
    sys.exit(f"torch {torch.__version__} uses the pre-C++11 ABI (pip wheels before 2.7); "
             "the unpacked libraries are built with the C++11 ABI")
if os.environ["GPU_CHECK_MODE"] != "rehearse" and not torch.cuda.is_available():
    sys.exit(f"torch {torch.__version__} sees no CUDA device")
# The CUDA libraries python's torch loads (pip's nvidia-* packages): tessera-train
# loads the same ones, first on LD_LIBRARY_PATH.
libs, nccl = [], "-"
try:
    import nvidia
    for root in nvidia.__path__:
        for sub in sorted(os.listdir(root)):
            lib = os.path.join(root, sub, "lib")
            if os.path.isdir(lib):
                libs.append(lib)
            if sub == "nccl" and os.path.isfile(os.path.join(root, sub, "include", "nccl.h")):
                nccl = os.path.join(root, sub)
except ImportError:
    pass
peer = [m for m in ("torchvision", "timm") if importlib.util.find_spec(m)]
print(torch.utils.cmake_prefix_path, torch.__version__, torch.version.cuda, nccl,
      ":".join(libs) or "-", ",".join(peer) or "-")
EOF
  ) || torch_info="!$(tail -1 "$torch_err")"
  rm -f "$torch_err"
else
  torch_info="!no $PYTHON"
fi
torch_prefix=${TORCH_PREFIX:-}
wheel_nccl=- wheel_libs=- peer_models=-
if [ "${torch_info:0:1}" = "!" ]; then
  if [ "$mode" != rehearse ] || [ -z "$torch_prefix" ]; then
    die "no usable PyTorch with CUDA: ${torch_info:1} (set PYTHON=...; rehearsals may set TORCH_PREFIX)"
  fi
  phase "python: ${torch_info:1}; LibTorch from TORCH_PREFIX=$torch_prefix"
else
  read -r py_prefix torch_version torch_cuda wheel_nccl wheel_libs peer_models <<<"$torch_info"
  torch_prefix=${torch_prefix:-$py_prefix}
  phase "torch $torch_version (CUDA $torch_cuda); LibTorch at $torch_prefix; peer models: $peer_models"
fi
if [ -z "${NCCL_HOME:-}" ] && [ "$wheel_nccl" != "-" ]; then export NCCL_HOME=$wheel_nccl; fi
[ "$mode" = rehearse ] || phase "$gpu_count GPU(s): $(head -1 <<<"$gpus")"
# Headers that LibTorch's own headers or the NCCL backend include, and that
# come from neither the deps folder nor CMake's checks: fail now, not mid-build.
# has_header NAME DIR...: whether DIR/NAME exists for some DIR.
has_header() {
  local name=$1 dir
  shift
  for dir in "$@"; do [ -f "$dir/$name" ] && return 0; done
  return 1
}
nvcc_include=$(dirname "$(command -v nvcc)")/../include
# pip's LibTorch ships no Gloo headers: the build then leaves the gloo backend
# (CPU ranks) out, which nothing here uses.
has_header gloo/algorithm.h "$torch_prefix/include" "$torch_prefix/../../include" /usr/include \
  /usr/local/include ||
  phase "LibTorch at $torch_prefix ships no gloo headers: the gloo backend (CPU ranks) is left out; the check uses NCCL"
has_header nccl.h "${NCCL_HOME:-/nonexistent}/include" "${NCCL_ROOT:-/nonexistent}/include" \
  "$nvcc_include" /usr/include /usr/local/include ||
  die "no nccl.h (pip's nvidia-nccl package, NCCL_HOME, the CUDA toolkit or /usr/include)"
# Without it, LibTorch's CMake config compiles and runs a CUDA program to ask
# the GPU its architecture (nothing here is compiled for the GPU anyway).
arch_list=${TORCH_CUDA_ARCH_LIST:-$(awk -F', *' 'NR == 1 { print $2 }' <<<"$gpus")}
arch_list=${arch_list:-9.0}
unset TORCH_CUDA_ARCH_LIST  # a CMake variable instead (LibTorch warns about the env one)

# 2. The unpacked dependencies: .pc files pointed at DIR/root, and pkgconf
#    where the machine has no pkg-config.
mkdir -p "$BUILD/gpu-deps/pkgconfig"
for pc in "$D/usr/lib/$MULTIARCH"/pkgconfig/*.pc "$D"/usr/share/pkgconfig/*.pc; do
  [ -f "$pc" ] || continue
  sed -E "s#^([A-Za-z_]+)=/usr#\1=$D/usr#" "$pc" >"$BUILD/gpu-deps/pkgconfig/$(basename "$pc")"
done
export PKG_CONFIG_PATH=$BUILD/gpu-deps/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
deps_libs=$D/usr/lib/$MULTIARCH:$D/lib/$MULTIARCH
# Debian keeps some headers (libjpeg's jconfig.h) in the multiarch folder, which
# the compiler searches on its own only under /usr/include.
cxx_flags=${CXXFLAGS:-}
[ ! -d "$D/usr/include/$MULTIARCH" ] || cxx_flags="$cxx_flags -isystem $D/usr/include/$MULTIARCH"
pkg_config_arg=()
if ! command -v pkg-config >/dev/null && ! command -v pkgconf >/dev/null; then
  printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec %s "$@"\n' "$deps_libs" "$D/usr/bin/pkgconf" \
    >"$BUILD/gpu-deps/pkg-config"
  chmod +x "$BUILD/gpu-deps/pkg-config"
  pkg_config_arg=(-DPKG_CONFIG_EXECUTABLE="$BUILD/gpu-deps/pkg-config")
fi
run_libs=$deps_libs
[ "$wheel_libs" = "-" ] || run_libs=$wheel_libs:$run_libs
with_libs() { LD_LIBRARY_PATH=$run_libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} "$@"; }

# 3. Configure and build tessera-train and the GPU tests, only those.
# The tests are listed when ctest runs (PRE_TEST), under with_libs: the unpacked
# libraries' own dependencies are found through LD_LIBRARY_PATH, not the RUNPATH.
phase "configure $BUILD (Release, trainer only, tests on)"
extra_args=()
# shellcheck disable=SC2206 # word-split on purpose: extra configure arguments
[ -z "${TESSERA_GPU_CHECK_CMAKE_ARGS:-}" ] || extra_args=(${TESSERA_GPU_CHECK_CMAKE_ARGS})
cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTESSERA_TRAINER_ONLY=ON \
  -DTESSERA_TRAINER_TESTS=ON -DCMAKE_PREFIX_PATH="$torch_prefix;$D/usr" \
  -DCMAKE_CXX_FLAGS="${cxx_flags# }" -DTORCH_CUDA_ARCH_LIST="$arch_list" \
  -DCMAKE_GTEST_DISCOVER_TESTS_DISCOVERY_MODE=PRE_TEST \
  "${pkg_config_arg[@]}" "${extra_args[@]}" >"$BUILD/gpu-configure.log" 2>&1 ||
  { tail -30 "$BUILD/gpu-configure.log" >&2; die "configure failed; see $BUILD/gpu-configure.log"; }
grep -E '^-- tessera-train:' "$BUILD/gpu-configure.log" >&2 || true
grep -q 'LibTorch has CUDA .*NCCL tensors on' "$BUILD/gpu-configure.log" ||
  die "the build left CUDA or NCCL out; see $BUILD/gpu-configure.log"
targets=(tessera-train tessera-export nccl_communicator_test cuda_step_timer_test trainer_gpu_test)
phase "build ${targets[*]} (ninja -j$JOBS)"
cmake --build "$BUILD" --parallel "$JOBS" --target "${targets[@]}" >"$BUILD/gpu-build.log" 2>&1 ||
  { grep -E -A8 'error|FAILED' "$BUILD/gpu-build.log" | head -60 >&2; die "build failed; see $BUILD/gpu-build.log"; }
TRAIN=$BUILD/bin/tessera-train

# 4. Every library the binaries need resolves (ldd: none of their code runs).
phase "library check (ldd)"
for binary in "$TRAIN" "$BUILD/bin/tessera-export" "$BUILD/tests/nccl_communicator_test" \
  "$BUILD/tests/cuda_step_timer_test" "$BUILD/tests/trainer_gpu_test"; do
  missing=$(with_libs ldd "$binary" | awk '/not found/ { print $1 }' | sort -u)
  if [ -n "${TESSERA_GPU_CHECK_MISSING_OK:-}" ] && [ -n "$missing" ]; then
    excused=$(grep -E "^(${TESSERA_GPU_CHECK_MISSING_OK})$" <<<"$missing" || true)
    [ -z "$excused" ] || phase "$(basename "$binary"): not found, excused: $(tr '\n' ' ' <<<"$excused")"
    missing=$(grep -Ev "^(${TESSERA_GPU_CHECK_MISSING_OK})$" <<<"$missing" || true)
  fi
  [ -z "$missing" ] || die "$(basename "$binary") needs libraries the loader cannot find: $(tr '\n' ' ' <<<"$missing")"
done
grep -Eq 'NEEDED.*(libtorch_cuda|libc10_cuda)' <(readelf -d "$TRAIN" 2>/dev/null) ||
  die "tessera-train does not link LibTorch's CUDA library"
# Parsed only: no __pycache__ written into the tree (read-only in the rehearsal).
py=$PYTHON
command -v "$py" >/dev/null 2>&1 || py=python3
AGREEMENT=$ROOT/bench/step_profile/loss_agreement.py
for script in "$PEER" "$COMPARE" "$AGREEMENT" "$ROOT/bench/step_profile/torch_window.py"; do
  "$py" -c 'import ast, sys; ast.parse(open(sys.argv[1]).read(), sys.argv[1])' "$script" ||
    die "$script does not parse"
done
# Listing the GPU tests loads their binaries (gtest's list, no CUDA call).
listed=$(cd "$BUILD" && with_libs ctest -N -L gpu 2>&1) ||
  { tail -20 <<<"$listed" >&2; die "ctest could not list the GPU tests"; }
count=$(sed -n 's/^Total Tests: //p' <<<"$listed")
[ "${count:-0}" -gt 0 ] || { tail -20 <<<"$listed" >&2; die "ctest lists no GPU tests"; }
phase "ctest lists $count GPU tests"
if [ "$mode" = rehearse ]; then
  echo "gpu_check: rehearsal passed: configure, build and the steps before the first CUDA call" \
    "($((SECONDS - START)) s)"
  exit 0
fi

# The run's logs stay here (ctest.log, b16.log, peer.err) for a look afterwards.
WORK=$BUILD/gpu-run
rm -rf "$WORK"
mkdir -p "$WORK"
gpu_name=$(head -1 <<<"$gpus" | cut -d, -f1)

# The step, kernel by kernel (6b): tessera-train and a PyTorch peer over the
# same steps after warm-up, each under its profiler; compare.py prints them
# side by side.
profile_step() {
  local dir=$WORK/profile first=$((WARMUP + 1)) last=$((WARMUP + 5)) model
  model=timm
  [[ ",$peer_models," == *,timm,* ]] || model=${peer_models%%,*}
  phase "profile: tessera-train vit-b16 and the $model peer, steps $first-$last, on $gpu_name"
  with_libs "$TRAIN" --model vit-b16 --dataset synthetic --train-subset $((BATCH * (last + 4))) \
    --test-subset 256 --batch-size "$BATCH" --image-size 224 --precision bf16 --device cuda \
    --max-steps "$last" --metrics-every "$last" --data-workers 4 \
    --profile-steps "$first-$last" --profile-dir "$dir/tessera" >"$WORK/profile-tessera.log" 2>&1 ||
    { tail -20 "$WORK/profile-tessera.log" >&2; echo "gpu_check: the profiled run failed" >&2; return 0; }
  if [ "$model" = "-" ]; then
    echo "gpu_check: python has neither timm nor torchvision: tessera's table only" >&2
    sed -n '/profile of steps/,/profile written/p' "$WORK/profile-tessera.log"
    return 0
  fi
  timeout 240 "$PYTHON" "$PEER" --model "$model" --batch-size "$BATCH" \
    --profile-steps "$first-$last" --profile-dir "$dir/$model" >/dev/null 2>"$WORK/peer-profile.err" ||
    { tail -5 "$WORK/peer-profile.err" >&2; echo "gpu_check: the peer's profile failed" >&2; return 0; }
  "$PYTHON" "$COMPARE" --a "$dir/tessera" --a-name tessera --b "$dir/$model" --b-name "$model" \
    --top 20 | tee "$WORK/profile.txt"
  phase "profile traces: $dir/{tessera,$model}/trace.json"
}
if [ "$mode" = profile ]; then
  profile_step
  phase "done (profile only)"
  exit 0
fi

# 5. The GPU tests.
phase "ctest -L gpu"
(cd "$BUILD" && with_libs ctest -L gpu -V --timeout 300) >"$WORK/ctest.log" 2>&1 ||
  { grep -E '^[0-9]+: ' "$WORK/ctest.log" | tail -40 >&2; tail -8 "$WORK/ctest.log" >&2; die "the GPU tests failed"; }
grep -E 'tests passed|tests failed|Total Test time' "$WORK/ctest.log"
grep -E '^[0-9]+: \[  SKIPPED \]' "$WORK/ctest.log" | sort -u | head -5 || true

# 5b. Same weights, same batch, same loss: tessera-train and timm (torchvision
#     without timm) from one set of initial weights on one fixed batch of 128
#     images, 20 steps in bf16; every step's loss within 2% (loss_agreement.py).
#     A disagreement fails the check at its end, after the figures below.
agreement_failed=""
agreement_model=timm
[[ ",$peer_models," == *,timm,* ]] || agreement_model=torchvision
if [[ ",$peer_models," == *,"$agreement_model",* ]]; then
  phase "loss agreement: tessera-train and $agreement_model, same weights and batch, bf16, 20 steps"
  with_libs "$PYTHON" "$AGREEMENT" --train "$TRAIN" --model "$agreement_model" --device cuda \
    --precision bf16 --batch "$BATCH" --steps 20 --workdir "$WORK/agreement" ||
    agreement_failed="the losses of tessera-train and $agreement_model disagree (above)"
else
  echo "gpu_check: python has neither timm nor torchvision: no loss agreement check" >&2
fi

# 6. ViT-B/16 throughput and MFU: the eager step, then the step captured in a
#    CUDA graph (--cuda-graph on, cuda_graph.h).
# b16_run NAME [FLAGS...]: prints the run's figures; its images/s on stdout.
b16_run() {
  local name=$1
  shift
  phase "tessera-train vit-b16 ($name), bf16, 224 px, batch $BATCH: $WARMUP warmup + $((STEPS - WARMUP)) timed steps"
  with_libs "$TRAIN" --model vit-b16 --dataset synthetic --train-subset $((BATCH * (STEPS + 10))) \
    --test-subset 256 --batch-size "$BATCH" --image-size 224 --precision bf16 --device cuda \
    --max-steps "$STEPS" --metrics-every 10 --data-workers 4 "$@" \
    --metrics-file "$WORK/b16-$name.jsonl" >"$WORK/b16-$name.log" 2>&1 ||
    { tail -20 "$WORK/b16-$name.log" >&2; echo "gpu_check: the ViT-B/16 run ($name) failed" >&2; return 1; }
  grep -E '^\[rank 0\] (vit-b16|step [0-9]+: training step captured|CUDA graph)' \
    "$WORK/b16-$name.log" >&2 || true
  "$PYTHON" - "$WORK/b16-$name.jsonl" "$BATCH" "$WARMUP" "$GFLOP_PER_IMAGE" "$PEAK_TFLOPS" \
    "$gpu_name" "$name" <<'EOF'
import json, sys
path, batch, warmup, gflop, peak, gpu, name = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), \
    float(sys.argv[4]), float(sys.argv[5]), sys.argv[6], sys.argv[7]
steps = [p["value"] for p in map(json.loads, open(path))
         if p["name"] == "time_step_ms" and p["step"] > warmup]
ips = batch * 1000.0 / (sum(steps) / len(steps))
print(f"vit-b16 ({name}) bf16 224px batch {batch} on {gpu}: {ips:.0f} images/s "
      f"(target >= 3700 on one H100 or H200)", file=sys.stderr)
print(f"MFU: {100 * ips * gflop * 1e9 / (peak * 1e12):.1f}% "
      f"({gflop:.0f} GFLOP/image, peak {peak:.0f} TFLOP/s bf16 dense)", file=sys.stderr)
print(f"{ips:.0f}")
EOF
}
tessera_ips=$(b16_run eager) || die "the ViT-B/16 run failed"
captured_ips=$(b16_run captured --cuda-graph on) || captured_ips=failed

# 7. NCCL at world size 1, and the collective timeout on a collective held back on
#    purpose (both ran under ctest above; their figures).
grep -Eo 'FIGURE .*' "$WORK/ctest.log" || die "nccl_communicator_test printed no FIGURE lines"

# 8. The PyTorch peer on the same GPU.
peer_lines=()
peer_run() {  # peer_run TIMEOUT ARGS...: one JSON line, or a reason
  local limit=$1 out
  shift
  phase "PyTorch peer: $*"
  if out=$(timeout "$limit" "$PYTHON" "$PEER" --batch-size "$BATCH" "$@" 2>"$WORK/peer.err"); then
    peer_lines+=("$out")
  else
    local rc=$?
    [ "$rc" != 124 ] || echo "gpu_check: peer $* did not finish within ${limit}s (skipped)" >&2
    [ "$rc" = 124 ] || { tail -5 "$WORK/peer.err" >&2; echo "gpu_check: peer $* failed (rc $rc)" >&2; }
  fi
}
for model in ${peer_models//,/ }; do
  [ "$model" = "-" ] || peer_run 180 --model "$model"
done
[ "$peer_models" != "-" ] || echo "gpu_check: python has neither torchvision nor timm: no peer" >&2
if [ "$COMPILE_TIMEOUT" -gt 0 ] && [ "$peer_models" != "-" ]; then
  if [ $((SECONDS - START)) -lt 330 ]; then
    peer_run "$COMPILE_TIMEOUT" --model "${peer_models%%,*}" --compile
  else
    echo "gpu_check: torch.compile peer skipped: $((SECONDS - START)) s spent already" >&2
  fi
fi

phase "side by side on $gpu_name (bf16, 224 px, batch $BATCH, one GPU)"
printf '  %-58s %7s images/s\n' "tessera-train vit-b16 (LibTorch C++, synthetic input pipeline)" "$tessera_ips"
printf '  %-58s %7s images/s\n' "tessera-train vit-b16, step captured in a CUDA graph" "$captured_ips"
for line in "${peer_lines[@]}"; do
  "$PYTHON" -c '
import json, sys
p = json.loads(sys.argv[1])
ips, tessera = p["images_per_s"], float(sys.argv[2])
name = "PyTorch %s %s (fixed batch on GPU)" % (p["model"], "torch.compile" if p["compile"] else "eager")
print("  %-58s %7.0f images/s  tessera/peer %.2f" % (name, ips, tessera / ips))
' "$line" "$tessera_ips"
done

profile_step
[ -z "$agreement_failed" ] || die "$agreement_failed"

# 9. With two GPUs: two ranks, one of them stopped mid-run; the other's
#    collective timeout must end it with exit code 4, naming the collective.
if [ "$gpu_count" -lt 2 ]; then
  phase "done (one GPU: the two-rank collective-timeout run needs two, skipped)"
  exit 0
fi
phase "two-rank collective-timeout run"
port=$((20000 + RANDOM % 20000))
pids=()
for rank in 0 1; do
  with_libs "$TRAIN" --model vit-s16 --dataset synthetic --train-subset 20000 --test-subset 256 \
    --batch-size 64 --precision bf16 --device cuda --max-steps 100000 --metrics-every 5 \
    --world-size 2 --rank "$rank" --local-rank "$rank" --rendezvous-store "127.0.0.1:$port" \
    --collective-timeout "$COLLECTIVE_TIMEOUT" --metrics-file "$WORK/hang-$rank.jsonl" \
    >"$WORK/hang-$rank.log" 2>&1 &
  pids+=($!)
done
for _ in $(seq 300); do  # up to 5 minutes for the first metrics
  [ -s "$WORK/hang-1.jsonl" ] && break
  sleep 1
done
[ -s "$WORK/hang-1.jsonl" ] || { kill -9 "${pids[@]}"; die "rank 1 never reported a step"; }
kill -STOP "${pids[1]}"
stopped=$(date +%s.%N)
status=0
wait "${pids[0]}" || status=$?
ended=$(date +%s.%N)
kill -9 "${pids[1]}" 2>/dev/null || true
echo "collective timeout, two ranks: rank 1 stopped; rank 0 exited with code $status after" \
  "$(awk -v a="$stopped" -v b="$ended" 'BEGIN { printf "%.1f", b - a }') s (--collective-timeout $COLLECTIVE_TIMEOUT)"
grep -iE 'collective|timeout|abort' "$WORK/hang-0.log" | tail -3
[ "$status" = 4 ] || die "rank 0 should have exited with code 4 (collective failure)"
phase "done"
