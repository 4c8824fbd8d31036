// The input pipeline's throughput and memory (run.sh drives it; not a test):
//
//   input_pipeline_bench generate DIR --images N [--classes 10] [--threads 2]
//       writes N ImageNet-size JPEGs (500x375, quality 90: smooth gradients,
//       noise and shapes, so they compress like photos, not like flat colour)
//       as DIR/train/classK/imgNNNNNN.jpg, and one per class under DIR/val/
//       (an image folder needs both splits).
//   input_pipeline_bench run DIR --workers W [--batch 64] [--size 224]
//       one epoch of DIR's train split through the loader tessera-train runs
//       (image_data.h's loader on BatchPrefetcher threads, as the trainer's
//       training feed drives it on a GPU rank: region decode +
//       RandomResizedCrop + flip into a uint8 batch tensor); prints images/s
//       and images per CPU-second of the process, timed from the first batch
//       to the last (worker start-up excluded, as on the torchvision side).
//       glibc's allocator is set up as tessera-train sets it at start-up
//       (ConfigureHostAllocator: freed batches stay in the heap);
//       --default-malloc leaves glibc's defaults.
//   input_pipeline_bench rss DIR --workers W
//       one epoch, then prints the process's peak resident set (VmHWM).
//   input_pipeline_bench decode DIR [--size 224] [--epoch E]
//       the floor under the loader's per-CPU figure: the same epoch's samples
//       and crops (same order, seed and draws), read into memory first, then
//       on one thread, best of 3 alternating passes, (1) only decoded, the
//       crop's region through libjpeg-turbo as the loader decodes it, and (2)
//       decoded and resized into the CHW image (the loader's whole per-sample
//       work, without file reads, threads or batches); prints images per
//       CPU-second of each.
#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_format.h"
#include "worker/trainer/data/batch_loader.h"
#include "worker/trainer/data/batch_prefetcher.h"
#include "worker/trainer/data/distributed_sampler.h"
#include "worker/trainer/data/image_data.h"
#include "worker/trainer/data/image_decoder.h"
#include "worker/trainer/data/image_encoder.h"
#include "worker/trainer/data/image_folder.h"
#include "worker/trainer/data/training_data.h"
#include "worker/trainer/data/transforms.h"
#include "worker/trainer/run/trainer.h"

namespace tessera::bench {
namespace {

namespace td = ::tessera::trainer::data;
namespace tt = ::tessera::trainer;

constexpr int kWidth = 500;
constexpr int kHeight = 375;
// The augmentation seed of the loader's epoch and of the decode floor's draws.
constexpr uint64_t kSeed = 1;

// A photo-like test image: two low-frequency colour fields, a few filled
// ellipses and rectangles, fine stripes on some, and per-pixel noise.
std::vector<uint8_t> NaturalImage(uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0, 1);
  std::normal_distribution<double> noise(0, 14);
  std::vector<double> px(size_t{kWidth} * kHeight * 3);
  double f[6];
  for (double& v : f) v = 1 + 5 * u(rng);
  for (int y = 0; y < kHeight; ++y) {
    for (int x = 0; x < kWidth; ++x) {
      for (int c = 0; c < 3; ++c) {
        const double a = std::sin(f[c] * x / kWidth * 3.1 + c) *
                         std::cos(f[c + 3] * y / kHeight * 2.3);
        // Grass-like texture: a few pixels' period, varying over the image.
        const double t = std::sin(x * (0.7 + 0.3 * a) + 1.7 * std::sin(y * 0.45));
        px[(size_t(y) * kWidth + x) * 3 + c] = 128 + 80 * a + 14 * t;
      }
    }
  }
  const int shapes = 4 + static_cast<int>(u(rng) * 6);
  for (int s = 0; s < shapes; ++s) {
    const double cx = u(rng) * kWidth, cy = u(rng) * kHeight;
    const double rx = 20 + u(rng) * 120, ry = 20 + u(rng) * 100;
    const double col[3] = {u(rng) * 255, u(rng) * 255, u(rng) * 255};
    const bool ellipse = u(rng) < 0.5, stripes = u(rng) < 0.4;
    for (int y = std::max(0, int(cy - ry)); y < std::min(kHeight, int(cy + ry)); ++y) {
      for (int x = std::max(0, int(cx - rx)); x < std::min(kWidth, int(cx + rx)); ++x) {
        const double dx = (x - cx) / rx, dy = (y - cy) / ry;
        if (ellipse && dx * dx + dy * dy > 1) continue;
        const double shade = 0.75 + 0.25 * dy + (stripes ? 0.15 * std::sin(x * 0.9) : 0);
        for (int c = 0; c < 3; ++c) px[(size_t(y) * kWidth + x) * 3 + c] = col[c] * shade;
      }
    }
  }
  std::vector<uint8_t> out(px.size());
  for (size_t i = 0; i < px.size(); ++i) {
    out[i] = static_cast<uint8_t>(std::clamp(px[i] + noise(rng), 0.0, 255.0));
  }
  return out;
}

int Generate(const std::string& dir, int images, int classes, int threads) {
  std::atomic<int> next{0};
  std::atomic<int64_t> bytes{0};
  std::atomic<bool> failed{false};
  std::vector<std::thread> pool;
  // The first `classes` images go to val/, one per class; the rest to train/.
  const int total = images + classes;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      for (int i = next++; i < total; i = next++) {
        const std::vector<uint8_t> rgb = NaturalImage(static_cast<uint64_t>(i) + 1);
        auto jpeg = td::EncodeJpeg(rgb.data(), kWidth, kHeight, 3, 90);
        const std::string cls = absl::StrFormat(
            "%s/%s/class%02d", dir, i < classes ? "val" : "train", i % classes);
        std::filesystem::create_directories(cls);
        std::ofstream out(absl::StrFormat("%s/img%06d.jpg", cls, i), std::ios::binary);
        if (!jpeg.ok() || !(out << *jpeg)) failed = true;
        if (jpeg.ok()) bytes += static_cast<int64_t>(jpeg->size());
      }
    });
  }
  for (std::thread& t : pool) t.join();
  std::printf("generated %d + %d JPEGs of %dx%d (quality 90, %.0f KB on average) in %s\n",
              images, classes, kWidth, kHeight,
              bytes.load() / 1024.0 / std::max(total, 1), dir.c_str());
  return failed ? 1 : 0;
}

double CpuSeconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + t.tv_nsec * 1e-9;
}

struct Rate {
  double wall = -1;  // images per second
  double cpu = -1;   // images per CPU-second of the whole process
};

// One epoch of the train split, timed from the first batch to the last.
Rate Epoch(const std::string& dir, int workers, int batch, int size, int64_t epoch) {
  tt::ImageDataOptions o;
  o.kind = "imagefolder";
  o.root = dir;
  o.log = [](const std::string& line) { std::cerr << line << "\n"; };
  auto data = tt::OpenImageData(o);
  if (!data.ok()) {
    std::cerr << data.status() << "\n";
    return {};
  }
  tt::BatchLoaderOptions loading;
  loading.image_size = size;
  loading.augment = true;
  loading.seed = kSeed;
  loading.stage = tt::BatchStage::kDevice;  // raw uint8 batches, as on a GPU rank
  const std::unique_ptr<tt::SampleLoader> loader =
      (*data)->MakeLoader(tt::Split::kTrain, loading);
  // The epoch's order, shuffled as the trainer's sampler shuffles.
  const std::vector<int64_t> ids = tt::SeededPermutation(
      (*data)->shape().train_size, static_cast<uint64_t>(epoch) + 1);
  const int64_t batches = static_cast<int64_t>(ids.size()) / batch;
  tt::BatchPrefetcherOptions prefetching;
  prefetching.workers = workers;
  tt::BatchPrefetcher prefetcher(
      [&](int64_t b) { return loader->Load(ids, b * batch, (b + 1) * batch, epoch); }, 0,
      batches, prefetching);
  int64_t images = 0;
  std::chrono::steady_clock::time_point start;
  double cpu_start = 0;
  for (int64_t b = 0; b < batches; ++b) {
    absl::StatusOr<tt::Batch> next = prefetcher.Next();
    if (!next.ok()) {
      std::cerr << next.status() << "\n";
      return {};
    }
    if (b == 0) {
      start = std::chrono::steady_clock::now();
      cpu_start = CpuSeconds();
    } else {
      images += next->labels.size(0);
    }
  }
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return Rate{images / secs, images / (CpuSeconds() - cpu_start)};
}

// Images per CPU-second of decoding alone, and of decoding and resizing, for
// the samples and crops one epoch of Epoch() draws (its order and seed).
struct Floor {
  double decode = -1;
  double decode_resize = -1;
};

Floor DecodeFloor(const std::string& dir, int size, int64_t epoch) {
  auto folder = td::ImageFolder::Open(dir, "train");
  if (!folder.ok()) {
    std::cerr << folder.status() << "\n";
    return {};
  }
  const std::vector<int64_t> ids =
      tt::SeededPermutation((*folder)->size(), static_cast<uint64_t>(epoch) + 1);
  std::vector<std::string> bytes;
  bytes.reserve(ids.size());
  for (int64_t id : ids) {
    auto sample = (*folder)->Read(id);
    if (!sample.ok()) {
      std::cerr << sample.status() << "\n";
      return {};
    }
    bytes.push_back(std::move(sample->bytes));
  }
  td::TransformOptions transform;  // as Epoch()'s loader draws
  transform.train = true;
  transform.size = size;
  transform.seed = kSeed;
  td::DecodeScratch scratch;
  std::vector<uint8_t> out(size_t{3} * size * size);
  // The two alternate, best of kPasses each: a shared machine's noise moves
  // both alike.
  constexpr int kPasses = 3;
  Floor floor;
  for (int pass = 0; pass < kPasses; ++pass) {
    double start = CpuSeconds();
    for (size_t i = 0; i < ids.size(); ++i) {
      td::RegionRequest request;
      request.out_width = size;
      request.out_height = size;
      request.choose_crop = [&](int width, int height) {
        return td::DrawSampleTransform(transform, epoch, ids[i], width, height).crop;
      };
      const absl::Status status = td::DecodeImageRegionInto(
          bytes[i], request, td::DecodeLimits{}, scratch.region());
      if (!status.ok()) {
        std::cerr << status << "\n";
        return {};
      }
    }
    floor.decode =
        std::max(floor.decode, static_cast<double>(ids.size()) / (CpuSeconds() - start));
    start = CpuSeconds();
    for (size_t i = 0; i < ids.size(); ++i) {
      const absl::Status status =
          td::DecodeTransformed(bytes[i], transform, epoch, ids[i], out.data(), &scratch);
      if (!status.ok()) {
        std::cerr << status << "\n";
        return {};
      }
    }
    floor.decode_resize = std::max(
        floor.decode_resize, static_cast<double>(ids.size()) / (CpuSeconds() - start));
  }
  return floor;
}

int64_t PeakRssKb() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6));
  }
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss;
}

}  // namespace
}  // namespace tessera::bench

int main(int argc, char** argv) {
  using namespace tessera::bench;  // NOLINT(build/namespaces): the entry point
  CLI::App app{"input pipeline benchmark (see bench/input_pipeline/run.sh)"};
  app.require_subcommand(1);
  std::string dir;
  int images = 2000, classes = 10, threads = 2, workers = 1, batch = 64, size = 224;
  int64_t epoch = 0;
  bool default_malloc = false;
  auto* gen = app.add_subcommand("generate", "write the JPEG folder");
  gen->add_option("dir", dir)->required();
  gen->add_option("--images", images);
  gen->add_option("--classes", classes);
  gen->add_option("--threads", threads);
  auto* run = app.add_subcommand("run", "images/s of one epoch");
  auto* rss = app.add_subcommand("rss", "peak RSS of one epoch");
  auto* decode = app.add_subcommand(
      "decode", "images per CPU-second of decoding alone, and with the resize");
  decode->add_option("dir", dir)->required();
  decode->add_option("--size", size);
  decode->add_option("--epoch", epoch);
  for (auto* sub : {run, rss}) {
    sub->add_option("dir", dir)->required();
    sub->add_option("--workers", workers);
    sub->add_option("--batch", batch);
    sub->add_option("--size", size);
    sub->add_option("--epoch", epoch);
    sub->add_flag("--default-malloc", default_malloc,
                  "keep glibc's allocator defaults (tessera-train changes them)");
  }
  CLI11_PARSE(app, argc, argv);
  if (gen->parsed()) return Generate(dir, images, classes, threads);
  if (decode->parsed()) {
    const Floor floor = DecodeFloor(dir, size, epoch);
    if (floor.decode < 0) return 1;
    std::printf("%.1f %.1f\n", floor.decode, floor.decode_resize);
    return 0;
  }
  if (!default_malloc) tessera::trainer::ConfigureHostAllocator();
  const Rate rate = Epoch(dir, workers, batch, size, epoch);
  if (rate.wall < 0) return 1;
  if (run->parsed()) {
    std::printf("%.1f %.1f\n", rate.wall, rate.cpu);
  } else {
    std::printf("%lld\n", static_cast<long long>(PeakRssKb()));
  }
  return 0;
}
