#include "worker/trainer/data/synthetic_dataset.h"

#include <cstdint>
#include <limits>
#include <vector>

#include "gtest/gtest.h"

namespace tessera::trainer {
namespace {

ImageDataset Make(int64_t size, int64_t seed, Split split) {
  SyntheticDatasetOptions options;
  options.size = size;
  options.seed = seed;
  options.split = split;
  absl::StatusOr<ImageDataset> dataset = MakeSyntheticDataset(options);
  EXPECT_TRUE(dataset.ok()) << dataset.status();
  return dataset.ok() ? *std::move(dataset) : ImageDataset();
}

TEST(SyntheticDatasetTest, SameOptionsGiveIdenticalData) {
  const ImageDataset a = Make(200, 5, Split::kTrain);
  const ImageDataset b = Make(200, 5, Split::kTrain);
  EXPECT_EQ(a.pixels, b.pixels);
  EXPECT_EQ(a.labels, b.labels);
}

TEST(SyntheticDatasetTest, DifferentSeedsGiveDifferentData) {
  EXPECT_NE(Make(200, 1, Split::kTrain).pixels, Make(200, 2, Split::kTrain).pixels);
}

TEST(SyntheticDatasetTest, SmallerSizeIsAPrefixOfLarger) {
  const ImageDataset small = Make(50, 3, Split::kTrain);
  const ImageDataset large = Make(120, 3, Split::kTrain);
  ASSERT_EQ(small.size(), 50);
  EXPECT_EQ(small.pixels,
            std::vector<uint8_t>(large.pixels.begin(),
                                 large.pixels.begin() + small.pixels.size()));
  EXPECT_EQ(small.labels,
            std::vector<int64_t>(large.labels.begin(), large.labels.begin() + 50));
}

TEST(SyntheticDatasetTest, TrainAndTestSplitsHoldDifferentImages) {
  EXPECT_NE(Make(100, 3, Split::kTrain).pixels, Make(100, 3, Split::kTest).pixels);
}

TEST(SyntheticDatasetTest, DefaultSizesDependOnSplit) {
  EXPECT_EQ(Make(0, 0, Split::kTrain).size(),
            SyntheticDatasetOptions().default_train_size);
  EXPECT_EQ(Make(0, 0, Split::kTest).size(), SyntheticDatasetOptions().default_test_size);
}

// A nearest-class-mean classifier fitted on the train split must do far better
// than chance on the test split: the classes are learnable.
TEST(SyntheticDatasetTest, ClassesAreSeparableByNearestClassMean) {
  const ImageDataset train = Make(2000, 11, Split::kTrain);
  const ImageDataset test = Make(500, 11, Split::kTest);
  const int64_t pixels = train.image_bytes();
  std::vector<std::vector<double>> means(10, std::vector<double>(pixels));
  std::vector<int> counts(10);
  for (int64_t i = 0; i < train.size(); ++i) {
    const auto label = static_cast<size_t>(train.labels[static_cast<size_t>(i)]);
    ++counts[label];
    for (int64_t p = 0; p < pixels; ++p) {
      means[label][static_cast<size_t>(p)] +=
          train.pixels[static_cast<size_t>(i * pixels + p)];
    }
  }
  for (int c = 0; c < 10; ++c) {
    ASSERT_GT(counts[static_cast<size_t>(c)], 0) << "class " << c << " never drawn";
    for (double& v : means[static_cast<size_t>(c)]) v /= counts[static_cast<size_t>(c)];
  }
  int correct = 0;
  for (int64_t i = 0; i < test.size(); ++i) {
    int best = -1;
    double best_distance = std::numeric_limits<double>::max();
    for (int c = 0; c < 10; ++c) {
      double distance = 0;
      for (int64_t p = 0; p < pixels; ++p) {
        const double d = test.pixels[static_cast<size_t>(i * pixels + p)] -
                         means[static_cast<size_t>(c)][static_cast<size_t>(p)];
        distance += d * d;
      }
      if (distance < best_distance) {
        best_distance = distance;
        best = c;
      }
    }
    correct += best == test.labels[static_cast<size_t>(i)];
  }
  EXPECT_GT(correct, 0.6 * static_cast<double>(test.size()));
}

TEST(SyntheticDatasetTest, RejectsSizeAboveLimit) {
  SyntheticDatasetOptions options;
  options.size = 11;
  options.max_size = 10;
  EXPECT_EQ(MakeSyntheticDataset(options).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(SyntheticDatasetTest, RejectsNonPositiveShape) {
  SyntheticDatasetOptions options;
  options.height = 0;
  EXPECT_EQ(MakeSyntheticDataset(options).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tessera::trainer
