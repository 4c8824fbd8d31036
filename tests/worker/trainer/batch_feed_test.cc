#include "worker/trainer/data/batch_feed.h"

#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "worker/trainer/data/batch_loader.h"
#include "worker/trainer/data/batch_prefetcher.h"
#include "worker/trainer/data/image_dataset.h"
#include "worker/trainer/data/synthetic_dataset.h"

namespace tessera::trainer {
namespace {

ImageDataset Data() {
  SyntheticDatasetOptions options;
  options.size = 64;
  options.seed = 4;
  return *MakeSyntheticDataset(options);
}

BatchLoaderOptions Loading(BatchStage stage) {
  BatchLoaderOptions options;
  options.image_size = 32;  // the 28 px data is resized
  options.augment = true;
  options.augmentation.crop_padding = 3;
  options.seed = 6;
  options.stage = stage;
  return options;
}

BatchFeedOptions Feeding(const ImageDataset& data, BatchStage stage, bool ahead) {
  BatchFeedOptions options;
  options.stage = stage;
  options.stats = ComputeChannelStats(data);
  options.image_size = 32;
  options.copy_ahead = ahead;
  return options;
}

// Position p: images [8p, 8p + 8) of epoch p.
BatchPrefetcher::Producer Producer(const BatchLoader& loader,
                                   const std::vector<int64_t>& order) {
  return [&loader, &order](int64_t p) { return loader.Load(order, 8 * p, 8 * p + 8, p); };
}

TEST(BatchFeedTest, RawBatchesFinishedByTheFeedEqualHostFinishedBatches) {
  const ImageDataset data = Data();
  std::vector<int64_t> order(64);
  for (int64_t i = 0; i < 64; ++i) order[static_cast<size_t>(i)] = (i * 37) % 64;
  const BatchLoader host(data, ComputeChannelStats(data), Loading(BatchStage::kHost));
  const BatchLoader raw(data, ComputeChannelStats(data), Loading(BatchStage::kDevice));
  for (const bool ahead : {true, false}) {
    BatchPrefetcher host_batches(Producer(host, order), 0, 8);
    BatchPrefetcher raw_batches(Producer(raw, order), 0, 8);
    BatchFeed host_feed(&host_batches, Feeding(data, BatchStage::kHost, ahead));
    BatchFeed raw_feed(&raw_batches, Feeding(data, BatchStage::kDevice, ahead));
    EXPECT_EQ(raw_feed.copies_ahead(), ahead);
    for (int64_t p = 0; p < 8; ++p) {
      const absl::StatusOr<Batch> want = host_feed.Next();
      const absl::StatusOr<Batch> got = raw_feed.Next();
      ASSERT_TRUE(want.ok() && got.ok()) << want.status() << " " << got.status();
      EXPECT_EQ(got->images.scalar_type(), torch::kFloat);
      EXPECT_EQ(got->images.sizes(), (std::vector<int64_t>{8, 1, 32, 32}));
      EXPECT_TRUE(torch::equal(got->images, want->images)) << "position " << p;
      EXPECT_TRUE(torch::equal(got->labels, want->labels)) << "position " << p;
      EXPECT_FALSE(got->transforms.defined());
    }
    EXPECT_EQ(raw_feed.Next().status().code(), absl::StatusCode::kOutOfRange);
    EXPECT_EQ(raw_feed.Next().status().code(), absl::StatusCode::kOutOfRange);
  }
}

TEST(BatchFeedTest, ASourceFailureIsReportedAtItsOwnBatchNotTheOneBefore) {
  const ImageDataset data = Data();
  const std::vector<int64_t> order = {0,  1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11,
                                      12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23};
  const BatchLoader raw(data, ComputeChannelStats(data), Loading(BatchStage::kDevice));
  BatchPrefetcherOptions inline_only;
  inline_only.workers = 0;
  BatchPrefetcher batches(
      [&](int64_t p) -> absl::StatusOr<Batch> {
        if (p == 2) return absl::DataLossError("disk on fire");
        return raw.Load(order, 8 * p, 8 * p + 8, 0);
      },
      0, 3, inline_only);
  BatchFeed feed(&batches, Feeding(data, BatchStage::kDevice, /*ahead=*/true));
  EXPECT_TRUE(feed.Next().ok());
  EXPECT_TRUE(feed.Next().ok()) << "batch 1 is fine although batch 2's load failed";
  const absl::Status failed = feed.Next().status();
  EXPECT_EQ(failed.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(failed.message().find("disk on fire"), std::string::npos) << failed;
}

TEST(BatchFeedTest, ToDeviceFinishesOneRawBatch) {
  const ImageDataset data = Data();
  const std::vector<int64_t> order = {3, 1, 4, 1, 5, 9, 2, 6};
  const BatchLoader host(data, ComputeChannelStats(data), Loading(BatchStage::kHost));
  const BatchLoader raw(data, ComputeChannelStats(data), Loading(BatchStage::kDevice));
  BatchFeed feed(nullptr, Feeding(data, BatchStage::kDevice, true));
  const Batch got = feed.ToDevice(raw.Load(order, 0, 8, 2).value());
  EXPECT_TRUE(torch::equal(got.images, host.Load(order, 0, 8, 2).value().images));
  EXPECT_EQ(feed.Next().status().code(), absl::StatusCode::kFailedPrecondition)
      << "a feed without a source only serves ToDevice";
}

TEST(BatchFeedTest, LoaderAndFeedResizeWithTheirInterpolation) {
  const ImageDataset data = Data();
  const std::vector<int64_t> order = {3, 1, 4, 1, 5, 9, 2, 6};
  BatchLoaderOptions host_loading = Loading(BatchStage::kHost);
  const BatchLoader bilinear(data, ComputeChannelStats(data), host_loading);
  host_loading.interpolation = data::Interpolation::kBicubic;
  const BatchLoader bicubic(data, ComputeChannelStats(data), host_loading);
  BatchLoaderOptions raw_loading = Loading(BatchStage::kDevice);
  raw_loading.interpolation = data::Interpolation::kBicubic;
  const BatchLoader raw(data, ComputeChannelStats(data), raw_loading);
  BatchFeedOptions feeding = Feeding(data, BatchStage::kDevice, true);
  feeding.interpolation = data::Interpolation::kBicubic;
  BatchFeed feed(nullptr, feeding);
  const torch::Tensor want = bicubic.Load(order, 0, 8, 2).value().images;
  EXPECT_TRUE(torch::equal(feed.ToDevice(raw.Load(order, 0, 8, 2).value()).images, want));
  EXPECT_FALSE(torch::equal(bilinear.Load(order, 0, 8, 2).value().images, want));
}

}  // namespace
}  // namespace tessera::trainer
