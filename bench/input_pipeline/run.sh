#!/usr/bin/env bash
# Input pipeline benchmark: images/s of decode + RandomResizedCrop 224 + flip
# into uint8 batches, the loader tessera-train runs (its image-folder loader on
# its prefetcher's threads) against torchvision 0.14's
# ImageFolder + DataLoader (/usr/bin/python3, Debian python3-torchvision) on
# the same generated ImageNet-size JPEGs with the same number of workers;
# sides alternate, best of ROUNDS; then the pipeline's peak RSS on a 2,000- and
# a 20,000-image folder, each in its own process.
#
# The floor under the per-CPU figures: on one thread, with the epoch's JPEGs
# already in memory, the same samples and crops only decoded (libjpeg-turbo,
# as the loader calls it), and decoded and resized (the loader's whole
# per-sample work, without file reads, threads or batches). The loader's share
# of the second is what its reads, threads and batches cost; the first is what
# the CPU's JPEG entropy decoding allows at all.
#
# The machine's own scaling, as a reference for the per-CPU figures at W > 1
# workers: W separate single-worker processes run at once, sharing nothing but
# the machine; their mean images per CPU-second ("solo x W") is what W workers
# could reach if the pipeline's threads cost nothing extra. Where it falls below
# the single-worker figure, the cores slow each other down (shared caches,
# memory bandwidth, the hypervisor), not the pipeline.
#
# Usage: bench/input_pipeline/run.sh [--build-dir DIR] [--images N] [--rounds R]
#   --build-dir DIR  a configured build directory (default build/); the
#                    input_pipeline_bench target is built there
#   --images N       images in the speed folder (default 2000)
#   --rounds R       rounds per side and worker count (default 3)
# Data goes to $BENCH_DIR (default /tmp/tessera-input-bench), kept for reruns.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
BUILD="$ROOT/build"
IMAGES=2000
ROUNDS=3
while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) BUILD="$2"; shift 2 ;;
    --images) IMAGES="$2"; shift 2 ;;
    --rounds) ROUNDS="$2"; shift 2 ;;
    -h|--help) sed -n '2,29p' "$0"; exit 0 ;;
    *) echo "run.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
DATA="${BENCH_DIR:-/tmp/tessera-input-bench}"
cmake --build "$BUILD" --target input_pipeline_bench >/dev/null
BENCH="$BUILD/bench/input_pipeline_bench"

small="$DATA/images-$IMAGES"
# An image folder needs a val split too (generate writes one image per class).
if [ ! -d "$small/val" ]; then "$BENCH" generate "$small" --images "$IMAGES"; fi
# The 20,000-image folder holds the 2,000 images ten times over (hard links):
# memory use depends on the count, not on the pixels.
big="$DATA/images-20000"
if [ ! -d "$big/val" ]; then
  rm -rf "$big"
  rss_small="$DATA/images-2000"
  if [ ! -d "$rss_small/val" ]; then "$BENCH" generate "$rss_small" --images 2000; fi
  mkdir -p "$big"
  cp -al "$rss_small/val" "$big/val"
  for c in "$rss_small"/train/*; do
    mkdir -p "$big/train/$(basename "$c")"
    # Subdirectories of a class directory are part of the class (image_folder.h).
    for copy in 0 1 2 3 4 5 6 7 8 9; do cp -al "$c" "$big/train/$(basename "$c")/copy$copy"; done
  done
fi

have_tv=1
/usr/bin/python3 -c 'import torchvision' 2>/dev/null || have_tv=0
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "folder: $small ($IMAGES JPEGs, 10 classes); batch 64, RandomResizedCrop 224 + flip, uint8"
# Mean images per CPU-second of N single-worker processes run at once.
solo_cpu() {
  local n=$1 r=$2 i out
  out=$(mktemp -d)
  for i in $(seq "$n"); do "$BENCH" run "$small" --workers 1 --epoch "$((r * 10 + i))" >"$out/$i" & done
  wait
  cat "$out"/* | python3 -c "import sys; v = [float(l.split()[1]) for l in sys.stdin]; print(sum(v) / len(v))"
  rm -rf "$out"
}
printf '\n%-8s %12s %12s %7s %12s %12s %12s %12s %7s %12s\n' workers tessera tv ratio \
  tessera/wkr tv/wkr tessera/cpu tv/cpu ratio 'solo x W/cpu'
best_d=0; best_dr=0; loader_1=0
for w in 1 2; do
  best_t=0; best_v=0; best_tc=0; best_vc=0; best_s=0
  for r in $(seq "$ROUNDS"); do
    read -r t tc < <("$BENCH" run "$small" --workers "$w" --epoch "$r")
    best_t=$(python3 -c "print(max($best_t, $t))"); best_tc=$(python3 -c "print(max($best_tc, $tc))")
    if [ "$w" = 1 ]; then
      read -r d dr < <("$BENCH" decode "$small" --epoch "$r")
      best_d=$(python3 -c "print(max($best_d, $d))"); best_dr=$(python3 -c "print(max($best_dr, $dr))")
      loader_1=$best_tc
    fi
    if [ "$w" -gt 1 ]; then best_s=$(python3 -c "print(max($best_s, $(solo_cpu "$w" "$r")))"); fi
    if [ $have_tv = 1 ]; then
      read -r v vc < <(/usr/bin/python3 "$ROOT/bench/input_pipeline/torchvision_loader.py" "$small" "$w" 2>/dev/null)
      best_v=$(python3 -c "print(max($best_v, $v))"); best_vc=$(python3 -c "print(max($best_vc, $vc))")
    fi
  done
  python3 -c "
t, v, tc, vc, w, s = $best_t, $best_v, $best_tc, $best_vc, $w, $best_s
r = lambda a, b: '%.2fx' % (a / b) if b else 'n/a'
solo = '%.1f' % s if s else '-'
print('%-8d %12.1f %12.1f %7s %12.1f %12.1f %12.1f %12.1f %7s %12s' % (w, t, v, r(t, v), t / w, v / w, tc, vc, r(tc, vc), solo))"
done
echo "(images/s; /wkr: images/s per worker; /cpu: images per CPU-second, all threads or processes;"
echo " solo x W/cpu: W single-worker tessera processes at once, mean images per CPU-second each)"
python3 -c "
d, dr, l = $best_d, $best_dr, $loader_1
print('floor, one thread, JPEGs in memory, the same crops: decode only %.1f, decode + resize %.1f images per CPU-second;' % (d, dr))
print('the loader at 1 worker reaches %.0f%% of decode + resize (%.1f images per CPU-second)' % (100 * l / dr, l))"

echo
kb_small=$("$BENCH" rss "$DATA/images-2000" --workers 2)
kb_big=$("$BENCH" rss "$big" --workers 2)
python3 -c "
s, b = $kb_small, $kb_big
print('peak RSS (VmHWM), 2 workers, batch 64: 2,000 images %.1f MB, 20,000 images %.1f MB, difference %.1f MB' % (s / 1024, b / 1024, (b - s) / 1024))"
