#include "worker/trainer/data/image_dataset.h"

#include <cmath>
#include <cstddef>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/trainer_choices.h"

namespace tessera::trainer {

const std::vector<std::string>& KnownDatasets() {
  static const auto* const kNames =
      new std::vector<std::string>(kDatasetChoices.begin(), kDatasetChoices.end());
  return *kNames;
}

bool IsEncodedImageDataset(const std::string& name) {
  return name == "imagefolder" || name == "shards";
}

bool AugmentsByDefault(const std::string& dataset_name) {
  return dataset_name == "cifar10" || dataset_name == "cifar100";
}

absl::Status ValidateImageDataset(const ImageDataset& d) {
  if (d.channels <= 0 || d.height <= 0 || d.width <= 0 || d.num_classes <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("dataset shape must be positive, got ", d.channels, "x", d.height,
                     "x", d.width, " with ", d.num_classes, " classes"));
  }
  if (d.size() == 0) return absl::InvalidArgumentError("dataset holds no images");
  if (static_cast<int64_t>(d.pixels.size()) != d.size() * d.image_bytes()) {
    return absl::InvalidArgumentError(
        absl::StrCat("dataset holds ", d.pixels.size(), " pixel bytes for ", d.size(),
                     " images of ", d.image_bytes(), " bytes"));
  }
  for (int64_t i = 0; i < d.size(); ++i) {
    const int64_t label = d.labels[static_cast<size_t>(i)];
    if (label < 0 || label >= d.num_classes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "label ", label, " of image ", i, " is not in [0, ", d.num_classes, ")"));
    }
  }
  return absl::OkStatus();
}

ChannelStats ComputeChannelStats(const ImageDataset& d) {
  ChannelStats stats;
  const int64_t plane = int64_t{d.height} * d.width;
  for (int c = 0; c < d.channels; ++c) {
    double sum = 0;
    double sum_sq = 0;
    for (int64_t i = 0; i < d.size(); ++i) {
      const uint8_t* p = &d.pixels[static_cast<size_t>((i * d.channels + c) * plane)];
      int64_t s = 0;
      int64_t s2 = 0;
      for (int64_t j = 0; j < plane; ++j) {
        s += p[j];
        s2 += int64_t{p[j]} * p[j];
      }
      sum += static_cast<double>(s);
      sum_sq += static_cast<double>(s2);
    }
    const double n = static_cast<double>(d.size() * plane) * 255.0;
    const double mean = n > 0 ? sum / n : 0.0;
    const double var = n > 0 ? sum_sq / (n * 255.0) - mean * mean : 0.0;
    const double stddev = var > 1e-12 ? std::sqrt(var) : 1.0;
    stats.mean.push_back(static_cast<float>(mean));
    stats.stddev.push_back(static_cast<float>(stddev));
  }
  return stats;
}

absl::StatusOr<ChannelStats> OverrideChannelStats(ChannelStats computed,
                                                  const std::vector<double>& mean,
                                                  const std::vector<double>& stddev) {
  const size_t channels = computed.mean.size();
  for (const auto& [name, given, into] : {std::tuple{"mean", &mean, &computed.mean},
                                          std::tuple{"std", &stddev, &computed.stddev}}) {
    if (given->empty()) continue;
    if (given->size() != 3) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, " takes three values (R, G, B), got ", given->size()));
    }
    if (channels == 1 && ((*given)[0] != (*given)[1] || (*given)[0] != (*given)[2])) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the data has one channel: ", name, " must give it three equal values, got [",
          absl::StrJoin(*given, ", "), "]"));
    }
    if (channels != 1 && channels != 3) {
      return absl::InvalidArgumentError(
          absl::StrCat("the data has ", channels, " channels: ", name, " gives three"));
    }
    for (double v : *given) {
      if (!std::isfinite(v) || (std::string_view(name) == "std" && v <= 0)) {
        return absl::InvalidArgumentError(
            absl::StrCat(name, ": ", v, " is not a usable value"));
      }
    }
    into->assign(given->begin(), given->begin() + static_cast<std::ptrdiff_t>(channels));
  }
  return computed;
}

}  // namespace tessera::trainer
