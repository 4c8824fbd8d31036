#include "worker/trainer/batch_loader.h"

#include <torch/torch.h>

#include <vector>

#include "gtest/gtest.h"
#include "worker/trainer/image_dataset.h"

namespace tessera::trainer {
namespace {

// Four 2x2 single-channel images; image i holds the value 10 * i everywhere.
ImageDataset Tiny() {
  ImageDataset d;
  d.channels = 1;
  d.height = 2;
  d.width = 2;
  d.num_classes = 4;
  for (int i = 0; i < 4; ++i) {
    for (int p = 0; p < 4; ++p) d.pixels.push_back(static_cast<uint8_t>(10 * i));
    d.labels.push_back(3 - i);
  }
  return d;
}

TEST(BatchLoaderTest, GathersTheRequestedIndicesInOrder) {
  const ImageDataset data = Tiny();
  const BatchLoader loader(data, ChannelStats{{0.0f}, {1.0f}}, 2);
  const std::vector<int64_t> indices = {2, 0, 3, 1};
  const Batch batch = loader.Load(indices, 1, 3);  // images 0 and 3
  EXPECT_EQ(batch.images.sizes(), (std::vector<int64_t>{2, 1, 2, 2}));
  EXPECT_EQ(batch.images.scalar_type(), torch::kFloat);
  EXPECT_TRUE(torch::equal(batch.labels, torch::tensor({3, 0}, torch::kLong)));
  EXPECT_FLOAT_EQ(batch.images[0].max().item<float>(), 0.0f);
  EXPECT_FLOAT_EQ(batch.images[1].min().item<float>(), 30.0f / 255.0f);
}

TEST(BatchLoaderTest, NormalisesWithTheGivenStatistics) {
  const ImageDataset data = Tiny();
  const ChannelStats stats = ComputeChannelStats(data);
  const BatchLoader loader(data, stats, 2);
  const std::vector<int64_t> all = {0, 1, 2, 3};
  const Batch batch = loader.Load(all, 0, 4);
  EXPECT_NEAR(batch.images.mean().item<double>(), 0.0, 1e-5);
  EXPECT_NEAR(batch.images.std(/*unbiased=*/false).item<double>(), 1.0, 1e-4);
}

TEST(BatchLoaderTest, ResizesToTheModelImageSize) {
  const ImageDataset data = Tiny();
  const BatchLoader loader(data, ChannelStats{{0.0f}, {1.0f}}, 6);
  const std::vector<int64_t> indices = {1};
  const Batch batch = loader.Load(indices, 0, 1);
  EXPECT_EQ(batch.images.sizes(), (std::vector<int64_t>{1, 1, 6, 6}));
  // A constant image stays constant under bilinear resizing.
  EXPECT_NEAR(batch.images.min().item<float>(), 10.0f / 255.0f, 1e-6);
  EXPECT_NEAR(batch.images.max().item<float>(), 10.0f / 255.0f, 1e-6);
}

}  // namespace
}  // namespace tessera::trainer
