#include "worker/trainer/data/validation_split.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "worker/trainer/data/sample_rng.h"

namespace tessera::trainer {
namespace {

// Copies the images at `indices` (ascending) of `full` into a new dataset.
ImageDataset Select(const ImageDataset& full, const std::vector<int64_t>& indices) {
  ImageDataset out;
  out.channels = full.channels;
  out.height = full.height;
  out.width = full.width;
  out.num_classes = full.num_classes;
  const int64_t bytes = full.image_bytes();
  out.pixels.resize(static_cast<size_t>(bytes) * indices.size());
  out.labels.reserve(indices.size());
  uint8_t* to = out.pixels.data();
  for (const int64_t i : indices) {
    std::memcpy(to, full.pixels.data() + i * bytes, static_cast<size_t>(bytes));
    to += bytes;
    out.labels.push_back(full.labels[static_cast<size_t>(i)]);
  }
  return out;
}

}  // namespace

absl::StatusOr<std::vector<int64_t>> ValidationIndices(const std::vector<int64_t>& labels,
                                                       int num_classes, double fraction,
                                                       uint64_t seed) {
  if (!(fraction > 0.0 && fraction < 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("val_fraction must be above 0 and below 1, got ", fraction));
  }
  std::vector<std::vector<int64_t>> by_class(
      static_cast<size_t>(std::max(num_classes, 0)));
  for (size_t i = 0; i < labels.size(); ++i) {
    if (labels[i] < 0 || labels[i] >= num_classes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "image ", i, " has label ", labels[i], " outside [0, ", num_classes, ")"));
    }
    by_class[static_cast<size_t>(labels[i])].push_back(static_cast<int64_t>(i));
  }
  std::vector<char> held(labels.size(), 0);
  int64_t count = 0;
  for (size_t c = 0; c < by_class.size(); ++c) {
    const std::vector<int64_t>& members = by_class[c];
    const auto take = static_cast<int64_t>(
        std::llround(fraction * static_cast<double>(members.size())));
    // One stream per class, keyed by the split's seed alone.
    data::SampleRng rng(seed, static_cast<int64_t>(c), data::kValidationStream);
    const std::vector<int64_t> order =
        data::SeededShuffle(static_cast<int64_t>(members.size()), rng);
    for (int64_t k = 0; k < take; ++k) {
      held[static_cast<size_t>(
          members[static_cast<size_t>(order[static_cast<size_t>(k)])])] = 1;
    }
    count += take;
  }
  if (count == 0 || count == static_cast<int64_t>(labels.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("val_fraction ", fraction, " of ", labels.size(), " images leaves ",
                     count == 0 ? "no image to validate on" : "no image to train on"));
  }
  std::vector<int64_t> indices;
  indices.reserve(static_cast<size_t>(count));
  for (size_t i = 0; i < held.size(); ++i) {
    if (held[i] != 0) indices.push_back(static_cast<int64_t>(i));
  }
  return indices;
}

absl::StatusOr<HeldOut> HoldOutValidation(const ImageDataset& full, double fraction,
                                          uint64_t seed) {
  absl::StatusOr<std::vector<int64_t>> val =
      ValidationIndices(full.labels, full.num_classes, fraction, seed);
  if (!val.ok()) return val.status();
  std::vector<int64_t> train;
  train.reserve(full.labels.size() - val->size());
  size_t next = 0;
  for (int64_t i = 0; i < full.size(); ++i) {
    if (next < val->size() && (*val)[next] == i) {
      ++next;
    } else {
      train.push_back(i);
    }
  }
  return HeldOut{Select(full, train), Select(full, *val)};
}

}  // namespace tessera::trainer
