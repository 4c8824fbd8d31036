#include "worker/trainer/data/image_data.h"

#include <fcntl.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "common/status_macros.h"
#include "worker/trainer/data/encoded_image_source.h"
#include "worker/trainer/data/image_folder.h"
#include "worker/trainer/data/shard_index.h"
#include "worker/trainer/data/tar_reader.h"
#include "worker/trainer/data/transforms.h"
#include "worker/trainer/data/image_preprocessor.h"

namespace tessera::trainer {
namespace {

using data::EncodedImageSource;
using data::EncodedSample;

// One split of a `shards` dataset with random access: every image member's
// shard, data offset and size, and its label, found by one pass over the tar
// headers at open (the .cls members, a few bytes each, are read then).
class ShardSource final : public EncodedImageSource {
 public:
  static absl::StatusOr<std::unique_ptr<ShardSource>> Open(const std::string& root,
                                                           const std::string& split);

  int64_t size() const override { return static_cast<int64_t>(samples_.size()); }
  const std::vector<std::string>& class_names() const override { return classes_; }
  int64_t label(int64_t index) const override { return samples_[index].label; }
  std::string name(int64_t index) const override {
    const Sample& s = samples_[index];
    return absl::StrCat(shards_[s.shard], ":", s.member);
  }
  absl::StatusOr<EncodedSample> Read(int64_t index) const override;

 private:
  struct Sample {
    int32_t shard = 0;
    std::string member;  // the image member's name, e.g. "n01440764_10026.jpg"
    int64_t data_offset = 0;
    int64_t size = 0;
    int64_t label = 0;
  };
  // Reads `length` bytes of shard `shard` from `offset`.
  absl::StatusOr<std::string> ReadRange(int32_t shard, int64_t offset,
                                        int64_t length) const;
  absl::Status AddShard(int32_t shard);

  std::string root_;
  std::vector<std::string> shards_;  // paths
  std::vector<std::string> classes_;
  std::vector<Sample> samples_;
};

bool IsImageMember(const std::string& name) {
  const std::string lower = absl::AsciiStrToLower(name);
  return absl::EndsWith(lower, ".jpg") || absl::EndsWith(lower, ".jpeg") ||
         absl::EndsWith(lower, ".png");
}

std::string KeyOf(const std::string& member) {
  const size_t dot = member.rfind('.');
  return dot == std::string::npos ? member : member.substr(0, dot);
}

absl::StatusOr<std::unique_ptr<ShardSource>> ShardSource::Open(const std::string& root,
                                                               const std::string& split) {
  ASSIGN_OR_RETURN(const data::ShardIndex index, data::ReadShardIndex(root));
  auto it = index.splits.find(split);
  if (it == index.splits.end() || it->second.empty()) {
    return absl::NotFoundError(absl::StrCat(root, "/", data::kShardIndexFile,
                                            " lists no shards for the '", split,
                                            "' split"));
  }
  auto source = std::unique_ptr<ShardSource>(new ShardSource());
  source->root_ = root;
  source->classes_ = index.classes;
  for (const data::ShardFile& f : it->second)
    source->shards_.push_back(root + "/" + f.file);
  for (int32_t s = 0; s < static_cast<int32_t>(source->shards_.size()); ++s) {
    RETURN_IF_ERROR(source->AddShard(s));
  }
  if (source->samples_.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the '", split, "' shards under ", root, " hold no images"));
  }
  return source;
}

absl::Status ShardSource::AddShard(int32_t shard) {
  const std::string& path = shards_[shard];
  ASSIGN_OR_RETURN(std::unique_ptr<data::TarReader> reader,
                   data::TarReader::OpenFile(path));
  std::map<std::string, Sample> images;   // by key, waiting for their .cls
  std::map<std::string, int64_t> labels;  // by key
  for (;;) {
    ASSIGN_OR_RETURN(std::optional<data::TarMember> m, reader->Next(/*read_data=*/false));
    if (!m.has_value()) break;
    if (IsImageMember(m->name)) {
      images[KeyOf(m->name)] = Sample{shard, m->name, m->data_offset, m->size, -1};
    } else if (absl::EndsWith(m->name, ".cls") && m->size <= 32) {
      ASSIGN_OR_RETURN(const std::string bytes,
                       ReadRange(shard, m->data_offset, m->size));
      int64_t label = -1;
      if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(bytes), &label) || label < 0 ||
          label >= static_cast<int64_t>(classes_.size())) {
        return absl::InvalidArgumentError(absl::StrCat(
            path, ":", m->name, ": not a class index in [0, ", classes_.size(), ")"));
      }
      labels[KeyOf(m->name)] = label;
    }
  }
  for (auto& [key, sample] : images) {
    auto label = labels.find(key);
    if (label == labels.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": ", sample.member, " has no ", key, ".cls"));
    }
    sample.label = label->second;
    samples_.push_back(std::move(sample));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ShardSource::ReadRange(int32_t shard, int64_t offset,
                                                   int64_t length) const {
  const std::string& path = shards_[shard];
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::string bytes(static_cast<size_t>(length), '\0');
  int64_t got = 0;
  while (got < length) {
    const ssize_t n = pread(fd, bytes.data() + got, static_cast<size_t>(length - got),
                            static_cast<off_t>(offset + got));
    if (n <= 0) break;  // end of file: the caller sees the short read
    got += n;
  }
  close(fd);
  bytes.resize(static_cast<size_t>(got));
  return bytes;
}

absl::StatusOr<EncodedSample> ShardSource::Read(int64_t index) const {
  const Sample& s = samples_[index];
  ASSIGN_OR_RETURN(std::string bytes, ReadRange(s.shard, s.data_offset, s.size));
  if (static_cast<int64_t>(bytes.size()) != s.size) {
    return absl::DataLossError(absl::StrCat(name(index), ": truncated (", bytes.size(),
                                            " of ", s.size, " bytes)"));
  }
  return EncodedSample{std::move(bytes), s.label, name(index)};
}

// The samples a split skipped, shared by its loaders: counted once each,
// named once, and a limit past which loading fails.
class SkipTally {
 public:
  SkipTally(int64_t split_size, double max_fraction,
            std::function<void(const std::string&)> log)
      : limit_(static_cast<int64_t>(max_fraction * static_cast<double>(split_size))),
        log_(std::move(log)) {}

  // Records a skipped sample; an error once past the limit.
  absl::Status Skip(int64_t id, const std::string& why) {
    absl::MutexLock lock(&mu_);
    if (!ids_.insert(id).second) return Check();
    if (first_.size() < 5) first_.push_back(why);
    const std::string line = absl::StrCat("skipping an unreadable sample: ", why);
    if (log_) {
      log_(line);
    } else {
      std::cerr << "tessera-train: " << line << std::endl;
    }
    return Check();
  }
  int64_t count() const {
    absl::MutexLock lock(&mu_);
    return static_cast<int64_t>(ids_.size());
  }

 private:
  absl::Status Check() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (static_cast<int64_t>(ids_.size()) <= limit_) return absl::OkStatus();
    return absl::DataLossError(
        absl::StrCat(ids_.size(), " samples could not be read, more than the ", limit_,
                     " allowed (--data-max-skipped of the split); the first: ",
                     absl::StrJoin(first_, "; ")));
  }

  const int64_t limit_;
  const std::function<void(const std::string&)> log_;
  mutable absl::Mutex mu_;
  std::set<int64_t> ids_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> first_ ABSL_GUARDED_BY(mu_);
};

// Decodes sample ids of one split into uint8 batches of the model's size.
class ImageLoader final : public SampleLoader {
 public:
  ImageLoader(const EncodedImageSource& source, SkipTally& skips,
              const data::TransformOptions& transform, const BatchLoaderOptions& options,
              const ChannelStats& stats)
      : source_(source),
        skips_(skips),
        transform_(transform),
        options_(options),
        finish_(stats, options.image_size) {}

  Batch Load(const std::vector<int64_t>& ids, int64_t begin, int64_t end,
             int64_t epoch) const override {
    TORCH_CHECK(0 <= begin && begin <= end && end <= static_cast<int64_t>(ids.size()),
                "batch range outside the ids");
    const int64_t count = end - begin;
    const int64_t size = transform_.size;
    const bool raw = options_.stage == BatchStage::kDevice;
    const auto host = torch::TensorOptions().pinned_memory(raw && options_.pin_memory);
    torch::Tensor images = torch::empty({count, 3, size, size}, host.dtype(torch::kByte));
    torch::Tensor labels = torch::empty({count}, host.dtype(torch::kLong));
    uint8_t* out = images.data_ptr<uint8_t>();
    int64_t* label_out = labels.data_ptr<int64_t>();
    for (int64_t i = 0; i < count; ++i) {
      label_out[i] = DecodeInto(ids[static_cast<size_t>(begin + i)], epoch,
                                out + i * 3 * size * size);
    }
    if (raw) return Batch{images, labels, {}};
    return Batch{finish_(images), labels, {}};
  }

 private:
  // Decodes sample `id`, or the next readable one after it, into `out`;
  // returns its label. Throws once too many samples were skipped.
  int64_t DecodeInto(int64_t id, int64_t epoch, uint8_t* out) const {
    // Load runs on the loader's threads: each keeps its own decode memory.
    thread_local data::DecodeScratch scratch;
    const int64_t n = source_.size();
    for (int64_t k = 0; k < n; ++k) {
      const int64_t candidate = (id + k) % n;
      absl::StatusOr<EncodedSample> sample = source_.Read(candidate);
      absl::Status decoded = sample.status();
      if (sample.ok()) {
        decoded = data::DecodeTransformed(sample->bytes, transform_, epoch, candidate,
                                          out, &scratch);
        if (decoded.ok()) return sample->label;
      }
      const absl::Status limit = skips_.Skip(
          candidate, absl::StrCat(source_.name(candidate), " (", decoded.message(), ")"));
      if (!limit.ok()) throw std::runtime_error(std::string(limit.message()));
    }
    throw std::runtime_error("no sample of the split can be read");
  }

  const EncodedImageSource& source_;  // Not owned.
  SkipTally& skips_;                  // Not owned.
  const data::TransformOptions transform_;
  const BatchLoaderOptions options_;
  const ImagePreprocessor finish_;  // the host stage's last step
};

class ImageData final : public TrainingData {
 public:
  ImageData(const ImageDataOptions& options, std::unique_ptr<EncodedImageSource> train,
            std::unique_ptr<EncodedImageSource> test)
      : options_(options),
        train_(std::move(train)),
        test_(std::move(test)),
        train_skips_(train_->size(), options.max_skipped_fraction, options.log),
        test_skips_(test_->size(), options.max_skipped_fraction, options.log) {
    shape_.channels = 3;
    shape_.num_classes = static_cast<int>(train_->class_names().size());
    shape_.train_size = train_->size();
    shape_.test_size = test_->size();
    shape_.class_names = train_->class_names();
    stats_.mean = options.mean;
    stats_.stddev = options.stddev;
  }

  const DataShape& shape() const override { return shape_; }
  absl::Status Check() const override {
    if (train_->class_names() != test_->class_names()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the train and val splits of ", options_.root, " have different classes: ",
          train_->class_names().size(), " and ", test_->class_names().size()));
    }
    return absl::OkStatus();
  }
  ChannelStats stats() const override { return stats_; }
  bool augments_by_default() const override { return true; }
  int64_t skipped() const override { return train_skips_.count() + test_skips_.count(); }

  std::unique_ptr<SampleLoader> MakeLoader(
      Split split, const BatchLoaderOptions& options) const override {
    data::TransformOptions transform;
    transform.train = split == Split::kTrain && options.augment;
    transform.size = options.image_size;
    transform.seed = options.seed;
    transform.crop_fraction = options_.crop_fraction;
    const bool train = split == Split::kTrain;
    return std::make_unique<ImageLoader>(train ? *train_ : *test_,
                                         train ? train_skips_ : test_skips_, transform,
                                         options, stats_);
  }

 private:
  const ImageDataOptions options_;
  const std::unique_ptr<EncodedImageSource> train_;
  const std::unique_ptr<EncodedImageSource> test_;
  mutable SkipTally train_skips_;
  mutable SkipTally test_skips_;
  DataShape shape_;
  ChannelStats stats_;
};

absl::StatusOr<std::unique_ptr<EncodedImageSource>> OpenSplit(
    const ImageDataOptions& options, const std::string& split) {
  if (options.kind == "shards") {
    ASSIGN_OR_RETURN(std::unique_ptr<ShardSource> source,
                     ShardSource::Open(options.root, split));
    return std::unique_ptr<EncodedImageSource>(std::move(source));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<data::ImageFolder> folder,
                   data::ImageFolder::Open(options.root, split));
  return std::unique_ptr<EncodedImageSource>(std::move(folder));
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
  ASSIGN_OR_RETURN(std::unique_ptr<EncodedImageSource> train,
                   OpenSplit(options, "train"));
  ASSIGN_OR_RETURN(std::unique_ptr<EncodedImageSource> test, OpenSplit(options, "val"));
  auto data = std::make_unique<ImageData>(options, std::move(train), std::move(test));
  RETURN_IF_ERROR(data->Check());
  return std::unique_ptr<TrainingData>(std::move(data));
}

}  // namespace tessera::trainer
