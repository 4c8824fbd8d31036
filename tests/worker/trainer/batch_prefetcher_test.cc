#include "worker/trainer/data/batch_prefetcher.h"

#include <torch/torch.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/trainer/data/batch_loader.h"
#include "worker/trainer/data/distributed_sampler.h"
#include "worker/trainer/data/image_dataset.h"

namespace tessera::trainer {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

// A batch that carries its position as its only label.
Batch Tagged(int64_t position) {
  return Batch{torch::zeros({1, 1, 1, 1}), torch::tensor({position}, torch::kLong)};
}

int64_t TagOf(const Batch& batch) { return batch.labels[0].item<int64_t>(); }

// Records which positions a producer was asked for, and from which threads.
class Recorder {
 public:
  BatchPrefetcher::Producer Producer() {
    return [this](int64_t position) {
      absl::MutexLock lock(&mu_);
      calls_.push_back(position);
      threads_.insert(std::this_thread::get_id());
      return Tagged(position);
    };
  }
  std::vector<int64_t> calls() const {
    absl::MutexLock lock(&mu_);
    return calls_;
  }
  int64_t max_call() const {
    absl::MutexLock lock(&mu_);
    return calls_.empty() ? -1 : *std::max_element(calls_.begin(), calls_.end());
  }
  std::set<std::thread::id> threads() const {
    absl::MutexLock lock(&mu_);
    return threads_;
  }

 private:
  mutable absl::Mutex mu_;
  std::vector<int64_t> calls_ ABSL_GUARDED_BY(mu_);
  std::set<std::thread::id> threads_ ABSL_GUARDED_BY(mu_);
};

TEST(BatchPrefetcherTest, WorkersDeliverEveryPositionOnceInOrder) {
  Recorder recorder;
  BatchPrefetcherOptions options;
  options.workers = 3;
  BatchPrefetcher prefetcher(recorder.Producer(), /*first=*/5, /*count=*/40, options);
  for (int64_t position = 5; position < 45; ++position) {
    EXPECT_EQ(prefetcher.position(), position);
    absl::StatusOr<Batch> batch = prefetcher.Next();
    ASSERT_TRUE(batch.ok()) << batch.status();
    EXPECT_EQ(TagOf(*batch), position);
  }
  EXPECT_EQ(prefetcher.Next().status().code(), absl::StatusCode::kOutOfRange);
  std::vector<int64_t> calls = recorder.calls();
  std::sort(calls.begin(), calls.end());
  std::vector<int64_t> expected(40);
  for (int64_t i = 0; i < 40; ++i) expected[static_cast<size_t>(i)] = 5 + i;
  EXPECT_EQ(calls, expected);
  EXPECT_EQ(recorder.threads().count(std::this_thread::get_id()), 0u)
      << "batches were prepared on the consumer's thread";
}

TEST(BatchPrefetcherTest, ZeroWorkersPrepareOnTheCallersThread) {
  Recorder recorder;
  BatchPrefetcherOptions options;
  options.workers = 0;
  BatchPrefetcher prefetcher(recorder.Producer(), 0, 3, options);
  for (int64_t position = 0; position < 3; ++position) {
    absl::StatusOr<Batch> batch = prefetcher.Next();
    ASSERT_TRUE(batch.ok()) << batch.status();
    EXPECT_EQ(TagOf(*batch), position);
    // Nothing is prepared ahead.
    EXPECT_EQ(recorder.max_call(), position);
  }
  EXPECT_EQ(prefetcher.Next().status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(recorder.threads(), std::set<std::thread::id>{std::this_thread::get_id()});
}

TEST(BatchPrefetcherTest, NeverPreparesMoreThanTheQueueDepthAhead) {
  Recorder recorder;
  BatchPrefetcherOptions options;
  options.workers = 3;
  options.queue_depth = 2;
  BatchPrefetcher prefetcher(recorder.Producer(), 0, 200, options);
  for (int64_t position = 0; position < 200; ++position) {
    absl::StatusOr<Batch> batch = prefetcher.Next();
    ASSERT_TRUE(batch.ok()) << batch.status();
    // Once `position` is delivered, positions below position + 1 + depth may be
    // claimed, and no others.
    ASSERT_LE(recorder.max_call(), position + options.queue_depth)
        << "after delivering " << position;
    // A slow consumer, so that unbounded workers would run ahead.
    volatile double sink = 0;
    for (int i = 0; i < 20000; ++i) sink = sink + i;
  }
}

TEST(BatchPrefetcherTest, DestructorStopsWorkersBlockedOnAFullQueue) {
  Recorder recorder;
  BatchPrefetcherOptions options;
  options.workers = 2;
  options.queue_depth = 4;
  {
    BatchPrefetcher prefetcher(recorder.Producer(), 0, 1'000'000, options);
    ASSERT_TRUE(prefetcher.Next().ok());
    ASSERT_TRUE(prefetcher.Next().ok());
    // Leaves with the queue full and the workers waiting for room.
  }
  EXPECT_LE(recorder.max_call(), 2 + options.queue_depth);
}

TEST(BatchPrefetcherTest, DestructorWaitsForABatchInPreparation) {
  absl::Notification entered;
  std::atomic<bool> leaving{false};
  std::atomic<bool> finished{false};
  BatchPrefetcherOptions options;
  options.workers = 1;
  {
    BatchPrefetcher prefetcher(
        [&](int64_t position) {
          entered.Notify();
          // Still preparing when the prefetcher's destructor starts.
          while (!leaving) std::this_thread::yield();
          for (int i = 0; i < 1000; ++i) std::this_thread::yield();
          finished = true;
          return Tagged(position);
        },
        0, 1, options);
    entered.WaitForNotification();
    leaving = true;
  }
  EXPECT_TRUE(finished);
}

class FailingProducerTest : public ::testing::TestWithParam<int> {};

TEST_P(FailingProducerTest, ProducerErrorBecomesNextsStatusAtItsPosition) {
  BatchPrefetcherOptions options;
  options.workers = GetParam();
  BatchPrefetcher prefetcher(
      [](int64_t position) -> absl::StatusOr<Batch> {
        if (position == 7) return absl::DataLossError("disk fell off");
        return Tagged(position);
      },
      0, 20, options);
  for (int64_t position = 0; position < 7; ++position) {
    absl::StatusOr<Batch> batch = prefetcher.Next();
    ASSERT_TRUE(batch.ok()) << batch.status();
    EXPECT_EQ(TagOf(*batch), position);
  }
  for (int attempt = 0; attempt < 2; ++attempt) {
    const absl::Status status = prefetcher.Next().status();
    EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(status.message(),
                AllOf(HasSubstr("batch 7"), HasSubstr("disk fell off")));
  }
}

TEST(BatchPrefetcherTest, ALibTorchErrorOnAWorkerBecomesInternal) {
  BatchPrefetcherOptions options;
  options.workers = 2;
  BatchPrefetcher prefetcher(
      [](int64_t position) -> absl::StatusOr<Batch> {
        // An allocation LibTorch refuses throws c10::Error on the worker.
        if (position == 1) return Batch{torch::empty({-1}), torch::empty({0})};
        return Tagged(position);
      },
      0, 4, options);
  ASSERT_TRUE(prefetcher.Next().ok());
  const absl::Status status = prefetcher.Next().status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(status.message(), HasSubstr("batch 1"));
}

INSTANTIATE_TEST_SUITE_P(Workers, FailingProducerTest, ::testing::Values(0, 1, 3));

// Twelve 2x2 single-channel images; image i is filled with 20 * i and has label
// i % 4.
ImageDataset Twelve() {
  ImageDataset d;
  d.channels = 1;
  d.height = 2;
  d.width = 2;
  d.num_classes = 4;
  for (int i = 0; i < 12; ++i) {
    for (int p = 0; p < 4; ++p) d.pixels.push_back(static_cast<uint8_t>(20 * i));
    d.labels.push_back(i % 4);
  }
  return d;
}

TEST(EpochBatchProducerTest, PositionsWalkEachEpochsShardBatchByBatch) {
  const ImageDataset data = Twelve();
  BatchLoaderOptions loading;
  loading.image_size = 2;
  loading.augment = true;
  loading.augmentation.crop_padding = 1;
  const BatchLoader loader(data, ChannelStats{{0.0f}, {1.0f}}, loading);
  DistributedSamplerOptions sampling;
  sampling.dataset_size = data.size();
  sampling.rank = 1;
  sampling.world_size = 2;
  sampling.seed = 3;
  const absl::StatusOr<DistributedSampler> sampler = DistributedSampler::Create(sampling);
  ASSERT_TRUE(sampler.ok());
  // 6 samples per rank, batches of 2, 3 per epoch; positions 0..8 span 3 epochs.
  const BatchPrefetcher::Producer produce = EpochBatchProducer(loader, *sampler, 2, 3);
  for (int64_t position = 0; position < 9; ++position) {
    const int64_t epoch = position / 3;
    const int64_t b = position % 3;
    const Batch expected =
        loader.Load(sampler->EpochIndices(epoch), 2 * b, 2 * b + 2, epoch).value();
    const Batch got = produce(position).value();
    EXPECT_TRUE(torch::equal(got.labels, expected.labels)) << "position " << position;
    EXPECT_TRUE(torch::equal(got.images, expected.images)) << "position " << position;
  }
}

TEST(EpochBatchProducerTest, AResumedStreamContinuesTheUninterruptedOne) {
  const ImageDataset data = Twelve();
  BatchLoaderOptions loading;
  loading.image_size = 4;  // resized too
  loading.augment = true;
  loading.augmentation.crop_padding = 1;
  loading.seed = 11;
  const BatchLoader loader(data, ComputeChannelStats(data), loading);
  DistributedSamplerOptions sampling;
  sampling.dataset_size = data.size();
  sampling.seed = 5;
  const absl::StatusOr<DistributedSampler> sampler = DistributedSampler::Create(sampling);
  ASSERT_TRUE(sampler.ok());
  BatchPrefetcherOptions options;
  options.workers = 2;

  std::vector<Batch> full;
  {
    BatchPrefetcher stream(EpochBatchProducer(loader, *sampler, 3, 4), 0, 12, options);
    for (int i = 0; i < 12; ++i) full.push_back(*stream.Next());
  }
  // A run stopped after step 6 (mid-epoch 1) and resumed there.
  BatchPrefetcher resumed(EpochBatchProducer(loader, *sampler, 3, 4), 6, 6, options);
  for (int i = 6; i < 12; ++i) {
    const absl::StatusOr<Batch> batch = resumed.Next();
    ASSERT_TRUE(batch.ok()) << batch.status();
    EXPECT_TRUE(torch::equal(batch->images, full[static_cast<size_t>(i)].images)) << i;
    EXPECT_TRUE(torch::equal(batch->labels, full[static_cast<size_t>(i)].labels)) << i;
  }
}

}  // namespace
}  // namespace tessera::trainer
