#include "worker/trainer/data/batch_pipeline.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tessera::trainer::data {
namespace {

// Skipped samples named in the threshold error.
constexpr size_t kNamedInError = 5;

int64_t BatchCount(int64_t samples, int batch_size, bool drop_last) {
  return drop_last ? samples / batch_size : (samples + batch_size - 1) / batch_size;
}

}  // namespace

BatchPipeline::BatchPipeline(std::unique_ptr<SampleStream> stream,
                             const BatchPipelineOptions& options)
    : stream_(std::move(stream)),
      options_(options),
      total_samples_(options.drop_last
                         ? BatchCount(stream_->size(), options.batch_size, true) *
                               options.batch_size
                         : stream_->size()),
      num_batches_(BatchCount(stream_->size(), options.batch_size, options.drop_last)),
      max_skipped_(static_cast<int64_t>(std::floor(
          options.max_skipped_fraction * static_cast<double>(stream_->size())))),
      image_bytes_(size_t{3} * options.transform.size * options.transform.size) {}

absl::StatusOr<std::unique_ptr<BatchPipeline>> BatchPipeline::Start(
    std::unique_ptr<SampleStream> stream, const BatchPipelineOptions& options) {
  if (options.batch_size < 1 || options.workers < 1 || options.prefetch_batches < 1 ||
      options.transform.size < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "batch pipeline: batch size ", options.batch_size, ", ", options.workers,
        " workers, ", options.prefetch_batches, " batches ahead and image size ",
        options.transform.size, " must all be positive"));
  }
  if (stream == nullptr)
    return absl::InvalidArgumentError("batch pipeline without a stream");
  std::unique_ptr<BatchPipeline> pipeline(new BatchPipeline(std::move(stream), options));
  for (int i = 0; i < options.workers; ++i) {
    pipeline->workers_.emplace_back([p = pipeline.get()] { p->WorkerLoop(); });
  }
  return pipeline;
}

BatchPipeline::~BatchPipeline() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  for (std::thread& t : workers_) t.join();
}

bool BatchPipeline::ClaimNext(Claim& claim) {
  absl::MutexLock lock(&mu_);
  const int b = options_.batch_size;
  const int64_t limit = options_.prefetch_batches;
  auto claimable = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stop_ || !status_.ok() || next_sample_ >= total_samples_ ||
           next_sample_ % b != 0 || outstanding_ < limit;
  };
  mu_.Await(absl::Condition(&claimable));
  if (stop_ || !status_.ok() || next_sample_ >= total_samples_) return false;
  claim.sample = next_sample_++;
  const int64_t batch = claim.sample / b;
  if (claim.sample % b == 0) {
    Building& building = building_[batch];
    if (spare_.empty()) {
      ++allocated_;
    } else {
      building.batch = std::move(spare_.back());
      spare_.pop_back();
    }
    building.batch.replaced = 0;
    const int64_t size = std::min<int64_t>(b, total_samples_ - claim.sample);
    building.batch.index = batch;
    building.batch.size = size;
    building.batch.image_size = options_.transform.size;
    building.batch.pixels.resize(static_cast<size_t>(size) * image_bytes_);
    building.batch.labels.resize(static_cast<size_t>(size));
    building.bad.resize(static_cast<size_t>(size));
    building.remaining = static_cast<int>(size);
    peak_outstanding_ = std::max(peak_outstanding_, ++outstanding_);
  }
  claim.slot = building_[batch].batch.pixels.data() + (claim.sample % b) * image_bytes_;
  return true;
}

void BatchPipeline::WorkerLoop() {
  DecodeScratch scratch;
  for (;;) {
    Claim claim;
    absl::StatusOr<StreamSample> sample;
    if (stream_->sequential()) {
      absl::MutexLock read_lock(&read_mu_);
      if (!ClaimNext(claim)) return;
      sample = stream_->Read(claim.sample);
    } else {
      if (!ClaimNext(claim)) return;
      sample = stream_->Read(claim.sample);
    }
    if (!sample.ok()) {
      Complete(claim, 0, sample.status(), "");
      continue;
    }
    const absl::Status decoded =
        DecodeTransformed(sample->sample.bytes, options_.transform, options_.epoch,
                          sample->id, claim.slot, &scratch);
    Complete(claim, sample->sample.label, decoded, sample->sample.name);
  }
}

void BatchPipeline::Complete(const Claim& claim, int64_t label,
                             const absl::Status& status, const std::string& name) {
  std::string message;
  if (!status.ok()) {
    // A read error names its sample itself; a decode error does not.
    message = name.empty() ? std::string(status.message())
                           : absl::StrCat(name, ": ", status.message());
  }
  {
    absl::MutexLock lock(&mu_);
    const int b = options_.batch_size;
    auto it = building_.find(claim.sample / b);
    if (it == building_.end()) return;
    Building& building = it->second;
    const auto slot = static_cast<size_t>(claim.sample % b);
    building.batch.labels[slot] = label;
    if (!status.ok()) {
      building.bad[slot] = true;
      ++skipped_;
      if (skipped_names_.size() < kNamedInError) skipped_names_.push_back(message);
      if (skipped_ > max_skipped_) {
        Fail(absl::DataLossError(
            absl::StrCat(skipped_, " of this rank's ", stream_->size(),
                         " samples are unreadable, over the limit of ", max_skipped_,
                         " (", options_.max_skipped_fraction * 100,
                         "%); first: ", absl::StrJoin(skipped_names_, "; "))));
      }
    }
    if (--building.remaining == 0) FinishBatch(building);
  }
  if (!message.empty() && options_.log) {
    absl::MutexLock lock(&log_mu_);
    options_.log(absl::StrCat("skipped ", message));
  }
}

void BatchPipeline::FinishBatch(Building& b) {
  const auto size = static_cast<size_t>(b.batch.size);
  for (size_t i = 0; i < size; ++i) {
    if (!b.bad[i]) continue;
    size_t good = (i + 1) % size;
    while (good != i && b.bad[good]) good = (good + 1) % size;
    if (good == i) {
      Fail(absl::DataLossError(
          absl::StrCat("every sample of batch ", b.batch.index,
                       " is unreadable; first: ", absl::StrJoin(skipped_names_, "; "))));
      return;
    }
    std::memcpy(b.batch.pixels.data() + i * image_bytes_,
                b.batch.pixels.data() + good * image_bytes_, image_bytes_);
    b.batch.labels[i] = b.batch.labels[good];
    ++b.batch.replaced;
  }
}

void BatchPipeline::Fail(absl::Status status) {
  if (status_.ok()) status_ = std::move(status);
}

absl::StatusOr<ImageBatch> BatchPipeline::Next() {
  absl::MutexLock lock(&mu_);
  auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (stop_ || !status_.ok() || next_batch_ >= num_batches_) return true;
    auto it = building_.find(next_batch_);
    return it != building_.end() && it->second.remaining == 0;
  };
  mu_.Await(absl::Condition(&ready));
  if (!status_.ok()) return status_;
  if (stop_ || next_batch_ >= num_batches_) {
    return absl::OutOfRangeError(
        absl::StrCat("end of the epoch after ", num_batches_, " batches"));
  }
  auto it = building_.find(next_batch_);
  ImageBatch batch = std::move(it->second.batch);
  building_.erase(it);
  --outstanding_;
  ++next_batch_;
  return batch;
}

void BatchPipeline::Recycle(ImageBatch batch) {
  absl::MutexLock lock(&mu_);
  // The batches a consumer holding one at a time ever needs: the prefetched
  // ones and its own.
  if (static_cast<int64_t>(spare_.size()) <= options_.prefetch_batches) {
    spare_.push_back(std::move(batch));
  }
}

int64_t BatchPipeline::allocated_batches() const {
  absl::MutexLock lock(&mu_);
  return allocated_;
}

int64_t BatchPipeline::skipped() const {
  absl::MutexLock lock(&mu_);
  return skipped_;
}

int64_t BatchPipeline::peak_outstanding_batches() const {
  absl::MutexLock lock(&mu_);
  return peak_outstanding_;
}

}  // namespace tessera::trainer::data
