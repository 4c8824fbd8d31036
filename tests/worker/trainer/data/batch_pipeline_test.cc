#include "worker/trainer/data/batch_pipeline.h"

#include <algorithm>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/worker/trainer/data/data_test_util.h"

namespace tessera::trainer::data {
namespace {

// Encoded images in memory; `bad` samples fail to read (even index) or hold
// bytes that do not decode (odd index). Records the order of its reads.
class FakeStream : public SampleStream {
 public:
  FakeStream(int64_t n, std::set<int64_t> bad, bool sequential)
      : bad_(std::move(bad)), sequential_(sequential) {
    for (int64_t i = 0; i < n; ++i) images_.push_back(testing::MakeJpeg(40, 30, i));
  }

  int64_t size() const override { return static_cast<int64_t>(images_.size()); }
  bool sequential() const override { return sequential_; }
  absl::StatusOr<StreamSample> Read(int64_t k) override {
    {
      absl::MutexLock lock(&mu_);
      order_.push_back(k);
    }
    const std::string name = absl::StrCat("fake/", k, ".jpg");
    if (bad_.count(k) && k % 2 == 0) return absl::DataLossError(name + ": unreadable");
    StreamSample s;
    s.id = 1000 + k;
    s.sample.label = k % 7;
    s.sample.name = name;
    s.sample.bytes = bad_.count(k) ? images_[k].substr(0, 100) : images_[k];
    return s;
  }

  int64_t reads() const {
    absl::MutexLock lock(&mu_);
    return static_cast<int64_t>(order_.size());
  }
  // Waits (with a deadline) until `n` samples were read.
  bool AwaitReads(int64_t n) const {
    absl::MutexLock lock(&mu_);
    auto done = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return static_cast<int64_t>(order_.size()) >= n;
    };
    return mu_.AwaitWithTimeout(absl::Condition(&done), absl::Seconds(30));
  }
  std::vector<int64_t> order() const {
    absl::MutexLock lock(&mu_);
    return order_;
  }
  const std::string& image(int64_t k) const { return images_[k]; }

 private:
  std::vector<std::string> images_;
  const std::set<int64_t> bad_;
  const bool sequential_;
  mutable absl::Mutex mu_;
  std::vector<int64_t> order_ ABSL_GUARDED_BY(mu_);
};

BatchPipelineOptions Options(int batch, int workers, int prefetch) {
  BatchPipelineOptions o;
  o.batch_size = batch;
  o.workers = workers;
  o.prefetch_batches = prefetch;
  o.transform.size = 16;
  o.transform.seed = 5;
  o.epoch = 2;
  return o;
}

const uint8_t* Image(const ImageBatch& b, int64_t slot) {
  return b.pixels.data() + slot * 3 * b.image_size * b.image_size;
}

TEST(BatchPipelineTest, BatchesHoldTheStreamsSamplesInOrder) {
  auto stream = std::make_unique<FakeStream>(10, std::set<int64_t>{}, false);
  FakeStream* fake = stream.get();
  const BatchPipelineOptions o = Options(4, 3, 2);
  auto pipeline = BatchPipeline::Start(std::move(stream), o);
  ASSERT_TRUE(pipeline.ok()) << pipeline.status();
  EXPECT_EQ((*pipeline)->num_batches(), 3);
  std::vector<uint8_t> expected(3 * 16 * 16);
  for (int64_t b = 0; b < 3; ++b) {
    auto batch = (*pipeline)->Next();
    ASSERT_TRUE(batch.ok()) << batch.status();
    EXPECT_EQ(batch->index, b);
    ASSERT_EQ(batch->size, b < 2 ? 4 : 2);
    ASSERT_EQ(batch->pixels.size(), static_cast<size_t>(batch->size) * 3 * 16 * 16);
    for (int64_t i = 0; i < batch->size; ++i) {
      const int64_t k = 4 * b + i;
      EXPECT_EQ(batch->labels[i], k % 7);
      ASSERT_TRUE(DecodeTransformed(fake->image(k), o.transform, o.epoch, 1000 + k,
                                    expected.data())
                      .ok());
      EXPECT_TRUE(std::equal(expected.begin(), expected.end(), Image(*batch, i))) << k;
    }
  }
  EXPECT_TRUE(absl::IsOutOfRange((*pipeline)->Next().status()));
  EXPECT_EQ((*pipeline)->skipped(), 0);
}

TEST(BatchPipelineTest, NeverHoldsMoreThanThePrefetchedBatches) {
  constexpr int kBatch = 4;
  constexpr int kAhead = 2;
  auto stream = std::make_unique<FakeStream>(40, std::set<int64_t>{}, false);
  FakeStream* fake = stream.get();
  auto pipeline = BatchPipeline::Start(std::move(stream), Options(kBatch, 3, kAhead));
  ASSERT_TRUE(pipeline.ok());
  for (int64_t taken = 0; taken < 10; ++taken) {
    // The workers run ahead as far as the bound lets them, and no further.
    ASSERT_TRUE(fake->AwaitReads(std::min<int64_t>(40, (taken + kAhead) * kBatch)));
    EXPECT_LE(fake->reads(), (taken + kAhead) * kBatch);
    ASSERT_TRUE((*pipeline)->Next().ok());
  }
  EXPECT_EQ((*pipeline)->peak_outstanding_batches(), kAhead);
}

TEST(BatchPipelineTest, RecycledBatchesAreReusedAndHoldTheRightImages) {
  constexpr int kAhead = 2;
  auto stream = std::make_unique<FakeStream>(50, std::set<int64_t>{}, false);
  FakeStream* fake = stream.get();
  const BatchPipelineOptions o = Options(4, 2, kAhead);
  auto pipeline = BatchPipeline::Start(std::move(stream), o);
  ASSERT_TRUE(pipeline.ok());
  std::vector<uint8_t> expected(3 * 16 * 16);
  for (int64_t b = 0; b < 13; ++b) {
    auto batch = (*pipeline)->Next();
    ASSERT_TRUE(batch.ok()) << batch.status();
    // The last batch is short (50 = 12 * 4 + 2): a reused buffer is resized.
    ASSERT_EQ(batch->size, b < 12 ? 4 : 2);
    ASSERT_EQ(batch->pixels.size(), static_cast<size_t>(batch->size) * 3 * 16 * 16);
    EXPECT_EQ(batch->replaced, 0);
    for (int64_t i = 0; i < batch->size; ++i) {
      const int64_t k = 4 * b + i;
      ASSERT_TRUE(DecodeTransformed(fake->image(k), o.transform, o.epoch, 1000 + k,
                                    expected.data())
                      .ok());
      EXPECT_TRUE(std::equal(expected.begin(), expected.end(), Image(*batch, i))) << k;
      EXPECT_EQ(batch->labels[i], k % 7);
    }
    (*pipeline)->Recycle(*std::move(batch));
  }
  // At most the prefetched batches and the one being consumed were ever
  // allocated; the other ten reused recycled buffers.
  EXPECT_LE((*pipeline)->allocated_batches(), kAhead + 1);
  EXPECT_TRUE(absl::IsOutOfRange((*pipeline)->Next().status()));
}

TEST(BatchPipelineTest, BatchesNotRecycledAreEachAllocated) {
  auto stream = std::make_unique<FakeStream>(20, std::set<int64_t>{}, false);
  auto pipeline = BatchPipeline::Start(std::move(stream), Options(4, 2, 2));
  ASSERT_TRUE(pipeline.ok());
  for (int b = 0; b < 5; ++b) ASSERT_TRUE((*pipeline)->Next().ok());
  EXPECT_EQ((*pipeline)->allocated_batches(), 5);
}

TEST(BatchPipelineTest, SequentialStreamsAreReadInOrder) {
  auto stream = std::make_unique<FakeStream>(30, std::set<int64_t>{}, true);
  FakeStream* fake = stream.get();
  auto pipeline = BatchPipeline::Start(std::move(stream), Options(4, 3, 3));
  int64_t batches = 0;
  while ((*pipeline)->Next().ok()) ++batches;
  EXPECT_EQ(batches, 8);
  const std::vector<int64_t> order = fake->order();
  ASSERT_EQ(order.size(), 30u);
  for (int64_t k = 0; k < 30; ++k) EXPECT_EQ(order[k], k);
}

TEST(BatchPipelineTest, DropLastLeavesOutTheShortBatch) {
  BatchPipelineOptions o = Options(4, 2, 2);
  o.drop_last = true;
  auto pipeline = BatchPipeline::Start(
      std::make_unique<FakeStream>(10, std::set<int64_t>{}, true), o);
  EXPECT_EQ((*pipeline)->num_batches(), 2);
  EXPECT_TRUE((*pipeline)->Next().ok());
  EXPECT_TRUE((*pipeline)->Next().ok());
  EXPECT_TRUE(absl::IsOutOfRange((*pipeline)->Next().status()));
}

TEST(BatchPipelineTest, BadSamplesAreSkippedCountedNamedOnceAndReplaced) {
  absl::Mutex log_mu;
  std::vector<std::string> log;
  BatchPipelineOptions o = Options(8, 2, 2);
  o.max_skipped_fraction = 0.05;
  o.log = [&](const std::string& line) {
    absl::MutexLock lock(&log_mu);
    log.push_back(line);
  };
  auto pipeline = BatchPipeline::Start(
      std::make_unique<FakeStream>(100, std::set<int64_t>{5, 6, 50}, false), o);
  std::vector<ImageBatch> batches;
  for (;;) {
    auto batch = (*pipeline)->Next();
    if (absl::IsOutOfRange(batch.status())) break;
    ASSERT_TRUE(batch.ok()) << batch.status();
    batches.push_back(*std::move(batch));
  }
  ASSERT_EQ(batches.size(), 13u);  // unchanged by the skips
  int64_t images = 0;
  for (const ImageBatch& b : batches) images += b.size;
  EXPECT_EQ(images, 100);
  EXPECT_EQ((*pipeline)->skipped(), 3);
  // Slots 5 and 6 of batch 0 hold copies of slot 7, the next good sample.
  const ImageBatch& first = batches[0];
  EXPECT_EQ(first.replaced, 2);
  const size_t bytes = 3 * 16 * 16;
  EXPECT_TRUE(std::equal(Image(first, 5), Image(first, 5) + bytes, Image(first, 7)));
  EXPECT_TRUE(std::equal(Image(first, 6), Image(first, 6) + bytes, Image(first, 7)));
  EXPECT_EQ(first.labels[5], 7 % 7);
  EXPECT_EQ(first.labels[6], 7 % 7);
  EXPECT_EQ(batches[6].replaced, 1);  // sample 50 is slot 2 of batch 6
  absl::MutexLock lock(&log_mu);
  ASSERT_EQ(log.size(), 3u);
  std::sort(log.begin(), log.end());
  EXPECT_NE(log[0].find("fake/5.jpg: corrupt JPEG"), std::string::npos) << log[0];
  EXPECT_NE(log[1].find("fake/50.jpg: unreadable"), std::string::npos) << log[1];
  EXPECT_NE(log[2].find("fake/6.jpg: unreadable"), std::string::npos) << log[2];
}

TEST(BatchPipelineTest, TooManyBadSamplesFailNamingTheFirst) {
  BatchPipelineOptions o = Options(8, 2, 2);
  o.max_skipped_fraction = 0.02;  // 2 of 100
  auto pipeline = BatchPipeline::Start(
      std::make_unique<FakeStream>(100, std::set<int64_t>{3, 10, 20}, false), o);
  absl::Status status;
  for (int i = 0; i < 20 && status.ok(); ++i) status = (*pipeline)->Next().status();
  ASSERT_TRUE(absl::IsDataLoss(status)) << status;
  EXPECT_NE(status.message().find("3 of this rank's 100 samples are unreadable"),
            absl::string_view::npos)
      << status;
  for (const char* name : {"fake/3.jpg", "fake/10.jpg", "fake/20.jpg"}) {
    EXPECT_NE(status.message().find(name), absl::string_view::npos)
        << name << ": " << status;
  }
  EXPECT_TRUE(absl::IsDataLoss((*pipeline)->Next().status()));
}

TEST(BatchPipelineTest, ABatchWithoutAGoodSampleFails) {
  BatchPipelineOptions o = Options(4, 2, 2);
  o.max_skipped_fraction = 1.0;
  auto pipeline = BatchPipeline::Start(
      std::make_unique<FakeStream>(8, std::set<int64_t>{0, 1, 2, 3}, false), o);
  const absl::Status status = (*pipeline)->Next().status();
  EXPECT_TRUE(absl::IsDataLoss(status));
  EXPECT_NE(status.message().find("every sample of batch 0"), absl::string_view::npos)
      << status;
}

TEST(BatchPipelineTest, StopsCleanlyMidEpochAndRejectsBadOptions) {
  {
    auto stream = std::make_unique<FakeStream>(40, std::set<int64_t>{}, false);
    FakeStream* fake = stream.get();
    auto pipeline = BatchPipeline::Start(std::move(stream), Options(4, 2, 2));
    ASSERT_TRUE(fake->AwaitReads(8));
  }  // destroyed with the workers waiting for room: joins them
  EXPECT_TRUE(absl::IsInvalidArgument(
      BatchPipeline::Start(std::make_unique<FakeStream>(1, std::set<int64_t>{}, false),
                           Options(0, 1, 1))
          .status()));
}

}  // namespace
}  // namespace tessera::trainer::data
