// The held-out validation split (data/validation_split.h): disjoint from what
// trains, stratified by class, and fixed by its own seed whatever the rank,
// world size or resume, since it depends on the loaded training set alone.
#include "worker/trainer/data/validation_split.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <vector>

#include "worker/trainer/data/distributed_sampler.h"
#include "worker/trainer/data/synthetic_dataset.h"

namespace tessera::trainer {
namespace {

// Labels 0..9 with uneven class sizes: class c has 20 + 7c images,
// interleaved.
std::vector<int64_t> UnevenLabels() {
  std::vector<int64_t> labels;
  std::map<int64_t, int> left;
  for (int c = 0; c < 10; ++c) left[c] = 20 + 7 * c;
  bool any = true;
  while (any) {
    any = false;
    for (auto& [c, n] : left) {
      if (n == 0) continue;
      labels.push_back(c);
      --n;
      any = true;
    }
  }
  return labels;
}

// An image dataset whose pixel byte names its index, so that a copied image
// can be traced back to where it came from.
ImageDataset Traceable(const std::vector<int64_t>& labels) {
  ImageDataset d;
  d.channels = 1;
  d.height = 2;
  d.width = 2;
  d.num_classes = 10;
  d.labels = labels;
  for (size_t i = 0; i < labels.size(); ++i) {
    for (int k = 0; k < 4; ++k) d.pixels.push_back(static_cast<uint8_t>(i % 251));
  }
  return d;
}

TEST(ValidationSplitTest, TheSplitIsDisjointFromTrainingAndCoversEveryImageOnce) {
  const ImageDataset full = Traceable(UnevenLabels());
  const absl::StatusOr<HeldOut> parts = HoldOutValidation(full, 0.1, 0);
  ASSERT_TRUE(parts.ok()) << parts.status();
  const absl::StatusOr<std::vector<int64_t>> val =
      ValidationIndices(full.labels, full.num_classes, 0.1, 0);
  ASSERT_TRUE(val.ok());
  const std::set<int64_t> held(val->begin(), val->end());
  EXPECT_EQ(held.size(), val->size());
  EXPECT_EQ(parts->val.size() + parts->train.size(), full.size());
  EXPECT_EQ(parts->val.size(), static_cast<int64_t>(held.size()));
  // Each part is the images it names, in the loaded order: the train part is
  // exactly the complement of the held-out indices.
  size_t t = 0;
  size_t v = 0;
  for (int64_t i = 0; i < full.size(); ++i) {
    const uint8_t byte = static_cast<uint8_t>(i % 251);
    if (held.count(i) != 0) {
      EXPECT_EQ(parts->val.pixels[v * 4], byte) << i;
      EXPECT_EQ(parts->val.labels[v], full.labels[static_cast<size_t>(i)]);
      ++v;
    } else {
      EXPECT_EQ(parts->train.pixels[t * 4], byte) << i;
      EXPECT_EQ(parts->train.labels[t], full.labels[static_cast<size_t>(i)]);
      ++t;
    }
  }
}

TEST(ValidationSplitTest, EachClassGivesItsShareRounded) {
  const std::vector<int64_t> labels = UnevenLabels();
  const absl::StatusOr<std::vector<int64_t>> val = ValidationIndices(labels, 10, 0.2, 3);
  ASSERT_TRUE(val.ok());
  std::map<int64_t, int> held;
  for (const int64_t i : *val) ++held[labels[static_cast<size_t>(i)]];
  for (int c = 0; c < 10; ++c) {
    const int count = 20 + 7 * c;
    EXPECT_EQ(held[c], static_cast<int>(std::llround(0.2 * count))) << "class " << c;
  }
}

TEST(ValidationSplitTest, TheSplitDependsOnItsOwnSeedAloneAndDiffersAcrossSeeds) {
  const std::vector<int64_t> labels = UnevenLabels();
  const auto a = ValidationIndices(labels, 10, 0.1, 0);
  const auto b = ValidationIndices(labels, 10, 0.1, 0);
  const auto c = ValidationIndices(labels, 10, 0.1, 1);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(*a, *b);
  EXPECT_NE(*a, *c);
}

// Every rank of every world size holds out the same images, and a resumed run
// the same again: the split is made from the whole loaded training set before
// the sampler shards it, so the shards of the training part never include a
// held-out image.
TEST(ValidationSplitTest, TheSplitIsTheSameOnEveryRankWorldSizeAndResume) {
  SyntheticDatasetOptions options;
  options.split = Split::kTrain;
  options.size = 600;
  options.seed = 5;
  const absl::StatusOr<ImageDataset> full = MakeSyntheticDataset(options);
  ASSERT_TRUE(full.ok()) << full.status();
  const absl::StatusOr<HeldOut> first = HoldOutValidation(*full, 0.15, 7);
  ASSERT_TRUE(first.ok());
  for (int world : {1, 2, 3, 4}) {
    for (int rank = 0; rank < world; ++rank) {
      // What a rank of this world would compute (every rank loads the same
      // training set and splits it alone), and again after a resume.
      for (int attempt = 0; attempt < 2; ++attempt) {
        const absl::StatusOr<HeldOut> mine = HoldOutValidation(*full, 0.15, 7);
        ASSERT_TRUE(mine.ok());
        EXPECT_EQ(mine->val.labels, first->val.labels);
        EXPECT_EQ(mine->val.pixels, first->val.pixels);
      }
      DistributedSamplerOptions sampling;
      sampling.dataset_size = first->train.size();
      sampling.rank = rank;
      sampling.world_size = world;
      const absl::StatusOr<DistributedSampler> sampler =
          DistributedSampler::Create(sampling);
      ASSERT_TRUE(sampler.ok());
      for (const int64_t id : sampler->EpochIndices(0)) {
        ASSERT_LT(id, first->train.size()) << "rank " << rank << " of " << world;
      }
    }
  }
}

TEST(ValidationSplitTest, FractionsThatLeaveNothingToTrainOrValidateAreRefused) {
  const std::vector<int64_t> labels = {0, 1, 2};
  EXPECT_FALSE(ValidationIndices(labels, 3, 0.0, 0).ok());
  EXPECT_FALSE(ValidationIndices(labels, 3, 1.0, 0).ok());
  const auto none = ValidationIndices(labels, 3, 0.1, 0);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("no image to validate on"), std::string::npos);
  EXPECT_FALSE(ValidationIndices({0, 5}, 3, 0.5, 0).ok());
}

}  // namespace
}  // namespace tessera::trainer
