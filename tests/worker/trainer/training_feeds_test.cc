// A run's data feeds (run/training_feeds.h): the training micro-batches in
// the epoch plan's order from where the run starts, and the test split's
// loader and feed.
#include "worker/trainer/run/training_feeds.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <memory>
#include <vector>

#include "worker/trainer/data/synthetic_dataset.h"

namespace tessera::trainer {
namespace {

ImageDataset Synthetic(int64_t size, Split split) {
  SyntheticDatasetOptions options;
  options.size = size;
  options.seed = 4;
  options.split = split;
  return *MakeSyntheticDataset(options);
}

struct Fixture {
  ImageDataset train = Synthetic(64, Split::kTrain);
  ImageDataset test = Synthetic(20, Split::kTest);
  InMemoryData data{train, test, "synthetic"};
  DistributedSampler sampler = *DistributedSampler::Create(DistributedSamplerOptions{
      .dataset_size = 64, .rank = 0, .world_size = 1, .seed = 9});
  EpochPlan epochs = *EpochPlan::Create(
      EpochPlanOptions{.epoch_size = 64, .world_size = 1, .batch_size = 8, .accum = 1});
};

TEST(TrainingFeedsTest, TrainsOnThePlansMicroBatchesFromTheRunsStart) {
  Fixture f;
  TrainerOptions options;
  options.seed = 9;
  options.augment = false;
  // A run resumed at sample 48 of epoch 0: two micro-batches left in it, then
  // epoch 1's first.
  const DataPosition start{0, 48};
  const std::unique_ptr<TrainingFeeds> feeds =
      TrainingFeeds::Create(f.data, options,
                            FeedPlan{.sampler = &f.sampler,
                                     .epochs = &f.epochs,
                                     .start = start,
                                     .micro_batches = 3,
                                     .rank = 0,
                                     .image_size = 28});
  const std::unique_ptr<SampleLoader> loader =
      f.data.MakeLoader(Split::kTrain, BatchLoaderOptions{.image_size = 28});
  for (int64_t p = 0; p < 3; ++p) {
    const DataPosition at = f.epochs.Advance(start, p);
    const std::vector<int64_t> ids =
        f.epochs.RankBatch(f.sampler.EpochOrder(at.epoch), at, 0);
    const absl::StatusOr<Batch> expected =
        loader->Load(ids, 0, static_cast<int64_t>(ids.size()), at.epoch);
    ASSERT_TRUE(expected.ok()) << expected.status();
    const absl::StatusOr<Batch> fed = feeds->train().Next();
    ASSERT_TRUE(fed.ok()) << fed.status();
    EXPECT_TRUE(torch::equal(fed->labels, expected->labels)) << p;
    EXPECT_TRUE(torch::equal(fed->images, expected->images)) << p;
  }
  EXPECT_EQ(f.epochs.Advance(start, 2).epoch, 1);
}

TEST(TrainingFeedsTest, LoadsTheTestSplitFinished) {
  Fixture f;
  TrainerOptions options;
  options.data_workers = 0;
  const std::unique_ptr<TrainingFeeds> feeds =
      TrainingFeeds::Create(f.data, options,
                            FeedPlan{.sampler = &f.sampler,
                                     .epochs = &f.epochs,
                                     .micro_batches = 1,
                                     .image_size = 32});
  const absl::StatusOr<Batch> loaded =
      feeds->test_loader().Load({0, 1, 2, 3, 4}, 1, 4, 0);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  const Batch batch = feeds->test().ToDevice(*loaded);
  EXPECT_EQ(batch.images.sizes(), (std::vector<int64_t>{3, 1, 32, 32}));
  EXPECT_EQ(batch.images.scalar_type(), torch::kFloat);
  EXPECT_EQ(batch.labels.size(0), 3);
}

TEST(TrainingFeedsTest, ResizesWithTheRunsInterpolationWhereverBatchesAreFinished) {
  Fixture f;
  TrainerOptions options;
  options.seed = 9;
  options.augment = false;
  options.interpolation = "bicubic";
  const DataPosition start{0, 0};
  const std::vector<int64_t> ids = f.epochs.RankBatch(f.sampler.EpochOrder(0), start, 0);
  const auto expected = [&](data::Interpolation interpolation) {
    return f.data
        .MakeLoader(Split::kTrain,
                    BatchLoaderOptions{.image_size = 32, .interpolation = interpolation})
        ->Load(ids, 0, static_cast<int64_t>(ids.size()), 0)
        .value()
        .images;
  };
  const torch::Tensor bicubic = expected(data::Interpolation::kBicubic);
  ASSERT_FALSE(torch::equal(bicubic, expected(data::Interpolation::kBilinear)));
  // By the loader threads (the CPU's way), and by the feed after the copy (a
  // GPU's way, here on the CPU).
  for (const bool on_device : {false, true}) {
    const std::unique_ptr<TrainingFeeds> feeds =
        TrainingFeeds::Create(f.data, options,
                              FeedPlan{.sampler = &f.sampler,
                                       .epochs = &f.epochs,
                                       .start = start,
                                       .micro_batches = 1,
                                       .image_size = 32,
                                       .finish_on_device = on_device});
    const absl::StatusOr<Batch> fed = feeds->train().Next();
    ASSERT_TRUE(fed.ok()) << fed.status();
    EXPECT_TRUE(torch::equal(fed->images, bicubic)) << "on_device=" << on_device;
  }
}

}  // namespace
}  // namespace tessera::trainer
