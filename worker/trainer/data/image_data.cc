#include "worker/trainer/data/image_data.h"

#include <torch/torch.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/status_macros.h"
#include "worker/trainer/data/image_preprocessor.h"
#include "worker/trainer/data/image_split.h"
#include "worker/trainer/data/shard_index.h"
#include "worker/trainer/data/transforms.h"

namespace tessera::trainer {
namespace {

using data::ImageSplit;

// The uint8 batch tensors a loader has handed out, taken again once the
// consumer has dropped them (no tensor or view refers to them any more), so an
// epoch does not allocate and fault in a fresh batch (10 MB at 64 x 224 px)
// per step. Holds at most kKeep, which a loader never exceeds while its
// prefetcher bounds the batches alive. Pinned batches are left to LibTorch's
// host allocator, which caches them and knows when a copy from one is done.
// Thread-safe.
class BatchBuffers {
 public:
  static constexpr size_t kKeep = 32;

  torch::Tensor Take(at::IntArrayRef sizes, const torch::TensorOptions& options) {
    absl::MutexLock lock(&mu_);
    size_t idle = kKeep;  // an idle buffer of another shape, to replace when full
    for (size_t i = 0; i < buffers_.size(); ++i) {
      const torch::Tensor& t = buffers_[i];
      if (t.use_count() != 1 || t.storage().use_count() != 1) continue;  // in use
      if (t.sizes() == sizes && t.dtype() == options.dtype()) return t;
      idle = i;
    }
    torch::Tensor fresh = torch::empty(sizes, options);
    if (buffers_.size() < kKeep) {
      buffers_.push_back(fresh);
    } else if (idle < kKeep) {
      buffers_[idle] = fresh;
    }
    return fresh;
  }

 private:
  absl::Mutex mu_;
  std::vector<torch::Tensor> buffers_ ABSL_GUARDED_BY(mu_);
};

// Decodes sample ids of one split into uint8 batches of the model's size.
class ImageLoader final : public SampleLoader {
 public:
  ImageLoader(const ImageSplit& split, const data::TransformOptions& transform,
              const BatchLoaderOptions& options, const ChannelStats& stats)
      : split_(split),
        transform_(transform),
        options_(options),
        finish_(stats, options.image_size) {}

  absl::StatusOr<Batch> Load(const std::vector<int64_t>& ids, int64_t begin, int64_t end,
                             int64_t epoch) const override {
    if (begin < 0 || begin > end || end > static_cast<int64_t>(ids.size())) {
      return absl::OutOfRangeError(absl::StrCat("batch range [", begin, ", ", end,
                                                ") is outside the ", ids.size(), " ids"));
    }
    // Load runs on the prefetcher's threads: each keeps its own decode memory.
    thread_local data::DecodeScratch scratch;
    const int64_t count = end - begin;
    const int64_t size = transform_.size;
    const bool raw = options_.stage == BatchStage::kDevice;
    const bool pinned = raw && options_.pin_memory;
    const auto host = torch::TensorOptions().pinned_memory(pinned);
    torch::Tensor images =
        pinned ? torch::empty({count, 3, size, size}, host.dtype(torch::kByte))
               : buffers_.Take({count, 3, size, size}, host.dtype(torch::kByte));
    torch::Tensor labels = torch::empty({count}, host.dtype(torch::kLong));
    uint8_t* out = images.data_ptr<uint8_t>();
    int64_t* label_out = labels.data_ptr<int64_t>();
    for (int64_t i = 0; i < count; ++i) {
      ASSIGN_OR_RETURN(label_out[i],
                       split_.DecodeInto(ids[static_cast<size_t>(begin + i)], transform_,
                                         epoch, out + i * 3 * size * size, &scratch));
    }
    if (raw) return Batch{images, labels, {}};
    return Batch{finish_(images), labels, {}};
  }

 private:
  const ImageSplit& split_;  // Not owned.
  const data::TransformOptions transform_;
  const BatchLoaderOptions options_;
  const ImagePreprocessor finish_;  // the host stage's last step
  mutable BatchBuffers buffers_;
};

class ImageData final : public TrainingData {
 public:
  // `test` is null where the data has no test split: the val split serves as both.
  ImageData(const ImageDataOptions& options, std::unique_ptr<ImageSplit> train,
            std::unique_ptr<ImageSplit> val, std::unique_ptr<ImageSplit> test)
      : options_(options),
        train_(std::move(train)),
        val_(std::move(val)),
        test_(std::move(test)) {
    shape_.channels = 3;
    shape_.num_classes = static_cast<int>(train_->class_names().size());
    shape_.train_size = train_->size();
    shape_.val_size = val_->size();
    shape_.test_size = test_ != nullptr ? test_->size() : val_->size();
    shape_.test_is_val = test_ == nullptr;
    shape_.class_names = train_->class_names();
    stats_.mean = options.mean;
    stats_.stddev = options.stddev;
  }

  const DataShape& shape() const override { return shape_; }
  absl::Status Check() const override {
    for (const ImageSplit* other : {val_.get(), test_.get()}) {
      if (other == nullptr || other->class_names() == train_->class_names()) continue;
      return absl::InvalidArgumentError(absl::StrCat(
          "the train and ", other == val_.get() ? "val" : "test", " splits of ",
          options_.root, " have different classes: ", train_->class_names().size(),
          " and ", other->class_names().size()));
    }
    return absl::OkStatus();
  }
  ChannelStats stats() const override { return stats_; }
  bool augments_by_default() const override { return true; }
  int64_t skipped() const override {
    return train_->skipped() + val_->skipped() +
           (test_ != nullptr ? test_->skipped() : 0);
  }

  std::unique_ptr<SampleLoader> MakeLoader(
      Split split, const BatchLoaderOptions& options) const override {
    data::TransformOptions transform;
    transform.train = split == Split::kTrain && options.augment;
    transform.size = options.image_size;
    transform.seed = options.seed;
    transform.crop_fraction = options_.crop_fraction;
    transform.interpolation = options_.interpolation;
    const ImageSplit& images = split == Split::kTrain                      ? *train_
                               : split == Split::kTest && test_ != nullptr ? *test_
                                                                           : *val_;
    return std::make_unique<ImageLoader>(images, transform, options, stats_);
  }

 private:
  const ImageDataOptions options_;
  const std::unique_ptr<ImageSplit> train_;
  const std::unique_ptr<ImageSplit> val_;
  const std::unique_ptr<ImageSplit> test_;  // null: none, val_ serves as test
  DataShape shape_;
  ChannelStats stats_;
};

absl::StatusOr<std::unique_ptr<ImageSplit>> OpenSplit(const ImageDataOptions& options,
                                                      const std::string& split) {
  data::ImageSplitOptions opening;
  opening.kind = options.kind;
  opening.root = options.root;
  opening.split = split;
  opening.max_skipped_fraction = options.max_skipped_fraction;
  opening.log = options.log;
  return ImageSplit::Open(opening);
}

// Whether the data has a split of this name: ROOT/NAME/ for image folders, a
// NAME entry in the shard index for shards.
bool HasSplit(const ImageDataOptions& options, const std::string& split) {
  if (options.kind == "imagefolder") {
    std::error_code error;
    return std::filesystem::is_directory(std::filesystem::path(options.root) / split,
                                         error);
  }
  absl::StatusOr<data::ShardIndex> index = data::ReadShardIndex(options.root);
  return index.ok() && index->splits.count(split) != 0;
}

}  // namespace

bool IsImageDataKind(const std::string& dataset) {
  return IsEncodedImageDataset(dataset);
}

absl::StatusOr<std::unique_ptr<TrainingData>> OpenImageData(
    const ImageDataOptions& options) {
  if (!IsImageDataKind(options.kind)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown image data kind '", options.kind, "'; expected imagefolder or shards"));
  }
  if (options.mean.size() != 3 || options.stddev.size() != 3) {
    return absl::InvalidArgumentError("image data: mean and std need 3 values (RGB)");
  }
  ASSIGN_OR_RETURN(std::unique_ptr<ImageSplit> train, OpenSplit(options, "train"));
  ASSIGN_OR_RETURN(std::unique_ptr<ImageSplit> val, OpenSplit(options, "val"));
  std::unique_ptr<ImageSplit> test;
  if (HasSplit(options, "test")) {
    ASSIGN_OR_RETURN(test, OpenSplit(options, "test"));
  }
  auto data = std::make_unique<ImageData>(options, std::move(train), std::move(val),
                                          std::move(test));
  RETURN_IF_ERROR(data->Check());
  return std::unique_ptr<TrainingData>(std::move(data));
}

}  // namespace tessera::trainer
