#include "worker/trainer/data/synthetic_dataset.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/trainer/data/sample_rng.h"

namespace tessera::trainer {
namespace {

using data::SplitMix64;

// Standard normal (Box-Muller) from two of `rng`'s uniforms.
double Normal(SplitMix64& rng) {
  const double u1 = 1.0 - rng.NextDouble();
  const double u2 = rng.NextDouble();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

uint64_t Mix(uint64_t a, uint64_t b) {
  return SplitMix64::Hash(a ^ (b * 0xd1b54a32d192ed03ULL));
}

// Class templates: channels * height * width values in [0, 1] per class.
std::vector<std::vector<float>> MakeTemplates(const SyntheticDatasetOptions& o) {
  std::vector<std::vector<float>> templates;
  const int grid = o.template_grid;
  for (int c = 0; c < o.num_classes; ++c) {
    SplitMix64 rng(Mix(static_cast<uint64_t>(o.seed), 0x7e3a0000ULL + c));
    std::vector<float> coarse(static_cast<size_t>(o.channels) * grid * grid);
    for (float& v : coarse) v = rng.NextDouble() < 0.5 ? 0.0f : 1.0f;
    std::vector<float> image(static_cast<size_t>(o.channels) * o.height * o.width);
    for (int ch = 0; ch < o.channels; ++ch) {
      for (int y = 0; y < o.height; ++y) {
        const double gy = (y + 0.5) * grid / o.height - 0.5;
        const int y0 = std::clamp(static_cast<int>(std::floor(gy)), 0, grid - 1);
        const int y1 = std::min(y0 + 1, grid - 1);
        const double fy = std::clamp(gy - y0, 0.0, 1.0);
        for (int x = 0; x < o.width; ++x) {
          const double gx = (x + 0.5) * grid / o.width - 0.5;
          const int x0 = std::clamp(static_cast<int>(std::floor(gx)), 0, grid - 1);
          const int x1 = std::min(x0 + 1, grid - 1);
          const double fx = std::clamp(gx - x0, 0.0, 1.0);
          auto at = [&](int yy, int xx) {
            return coarse[(static_cast<size_t>(ch) * grid + yy) * grid + xx];
          };
          const double top = at(y0, x0) * (1 - fx) + at(y0, x1) * fx;
          const double bottom = at(y1, x0) * (1 - fx) + at(y1, x1) * fx;
          image[(static_cast<size_t>(ch) * o.height + y) * o.width + x] =
              static_cast<float>(top * (1 - fy) + bottom * fy);
        }
      }
    }
    templates.push_back(std::move(image));
  }
  return templates;
}

}  // namespace

absl::StatusOr<ImageDataset> MakeSyntheticDataset(const SyntheticDatasetOptions& o) {
  if (o.channels <= 0 || o.height <= 0 || o.width <= 0 || o.num_classes <= 1 ||
      o.template_grid <= 0) {
    return absl::InvalidArgumentError(
        "synthetic dataset: shape, class count (> 1) and grid must be positive");
  }
  const int64_t size = o.size > 0 ? o.size
                                  : (o.split == Split::kTrain ? o.default_train_size
                                                              : o.default_test_size);
  if (size > o.max_size || size < 1) {
    return absl::InvalidArgumentError(absl::StrCat("synthetic dataset: size ", size,
                                                   " is not in [1, ", o.max_size, "]"));
  }

  const std::vector<std::vector<float>> templates = MakeTemplates(o);
  ImageDataset dataset;
  dataset.channels = o.channels;
  dataset.height = o.height;
  dataset.width = o.width;
  dataset.num_classes = o.num_classes;
  const int64_t image_bytes = dataset.image_bytes();
  dataset.pixels.resize(static_cast<size_t>(size * image_bytes));
  dataset.labels.resize(static_cast<size_t>(size));
  const uint64_t split_key = o.split == Split::kTrain ? 0x7241494eULL : 0x54455354ULL;
  for (int64_t i = 0; i < size; ++i) {
    SplitMix64 rng(
        Mix(Mix(static_cast<uint64_t>(o.seed), split_key), static_cast<uint64_t>(i)));
    const int64_t label = static_cast<int64_t>(rng.Next() % o.num_classes);
    const double contrast = 0.6 + 0.4 * rng.NextDouble();
    const double offset = 0.1 * rng.NextDouble();
    const std::vector<float>& pattern = templates[static_cast<size_t>(label)];
    uint8_t* out = &dataset.pixels[static_cast<size_t>(i * image_bytes)];
    for (int64_t p = 0; p < image_bytes; ++p) {
      const double v = offset + contrast * 0.85 * pattern[static_cast<size_t>(p)] +
                       o.noise_stddev * Normal(rng);
      out[p] = static_cast<uint8_t>(std::lround(255.0 * std::clamp(v, 0.0, 1.0)));
    }
    dataset.labels[static_cast<size_t>(i)] = label;
  }
  RETURN_IF_ERROR(ValidateImageDataset(dataset));
  return dataset;
}

}  // namespace tessera::trainer
