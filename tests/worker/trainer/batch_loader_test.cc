#include "worker/trainer/data/batch_loader.h"

#include <torch/torch.h>

#include <vector>

#include "gtest/gtest.h"
#include "worker/trainer/data/augmentation.h"
#include "worker/trainer/data/image_dataset.h"
#include "worker/trainer/data/image_preprocessor.h"

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
  const Batch batch = loader.Load(indices, 1, 3).value();  // images 0 and 3
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
  const Batch batch = loader.Load(all, 0, 4).value();
  EXPECT_NEAR(batch.images.mean().item<double>(), 0.0, 1e-5);
  EXPECT_NEAR(batch.images.std(/*unbiased=*/false).item<double>(), 1.0, 1e-4);
}

TEST(BatchLoaderTest, ResizesToTheModelImageSize) {
  const ImageDataset data = Tiny();
  const BatchLoader loader(data, ChannelStats{{0.0f}, {1.0f}}, 6);
  const std::vector<int64_t> indices = {1};
  const Batch batch = loader.Load(indices, 0, 1).value();
  EXPECT_EQ(batch.images.sizes(), (std::vector<int64_t>{1, 1, 6, 6}));
  // A constant image stays constant under bilinear resizing.
  EXPECT_NEAR(batch.images.min().item<float>(), 10.0f / 255.0f, 1e-6);
  EXPECT_NEAR(batch.images.max().item<float>(), 10.0f / 255.0f, 1e-6);
}

// Eight 4x4 three-channel images with distinct, position-dependent pixels.
ImageDataset Patterned() {
  ImageDataset d;
  d.channels = 3;
  d.height = 4;
  d.width = 4;
  d.num_classes = 8;
  for (int i = 0; i < 8; ++i) {
    for (int p = 0; p < 48; ++p)
      d.pixels.push_back(static_cast<uint8_t>(5 * i + 3 * p + 1));
    d.labels.push_back(i);
  }
  return d;
}

BatchLoaderOptions Augmenting(int image_size, uint64_t seed) {
  BatchLoaderOptions options;
  options.image_size = image_size;
  options.augment = true;
  options.augmentation.crop_padding = 2;
  options.seed = seed;
  return options;
}

TEST(BatchLoaderTest, AugmentedImageIsItsDrawnTransformOfTheRawImage) {
  const ImageDataset data = Patterned();
  const BatchLoader loader(data, ChannelStats{{0, 0, 0}, {1, 1, 1}}, Augmenting(4, 9));
  const std::vector<int64_t> indices = {5, 2, 7};
  const Batch batch = loader.Load(indices, 0, 3, /*epoch=*/4).value();
  int changed = 0;
  for (int k = 0; k < 3; ++k) {
    const int64_t index = indices[static_cast<size_t>(k)];
    const ImageTransform t =
        DrawImageTransform(loader.options().augmentation, 9, 4, index);
    std::vector<uint8_t> expected(48);
    ApplyImageTransform(t, 3, 4, 4, &data.pixels[static_cast<size_t>(index * 48)],
                        expected.data());
    const torch::Tensor want =
        torch::tensor(std::vector<float>(expected.begin(), expected.end()))
            .div(255.0f)
            .reshape({3, 4, 4});
    EXPECT_TRUE(torch::allclose(batch.images[k], want)) << "image " << index;
    changed += !(t == ImageTransform{});
  }
  EXPECT_GT(changed, 0);
  EXPECT_TRUE(torch::equal(batch.labels, torch::tensor({5, 2, 7}, torch::kLong)));
}

TEST(BatchLoaderTest, AugmentationDependsOnEpochAndIndexNotOnTheBatch) {
  const ImageDataset data = Patterned();
  const BatchLoader loader(data, ComputeChannelStats(data), Augmenting(8, 1));
  const std::vector<int64_t> order = {0, 1, 2, 3, 4, 5, 6, 7};
  const std::vector<int64_t> reversed = {7, 6, 5, 4, 3, 2, 1, 0};
  const Batch a = loader.Load(order, 0, 8, 2).value();
  // Same epoch: identical, whatever the batch's make-up or order.
  EXPECT_TRUE(torch::equal(a.images, loader.Load(order, 0, 8, 2).value().images));
  EXPECT_TRUE(
      torch::equal(a.images[3], loader.Load(reversed, 4, 5, 2).value().images[0]));
  // Another epoch: other crops and flips.
  EXPECT_FALSE(torch::equal(a.images, loader.Load(order, 0, 8, 3).value().images));
  EXPECT_EQ(a.images.sizes(), (std::vector<int64_t>{8, 3, 8, 8}));
}

TEST(BatchLoaderTest, WithoutAugmentationEveryEpochSeesTheSameImages) {
  const ImageDataset data = Patterned();
  const BatchLoader loader(data, ComputeChannelStats(data), 4);
  const std::vector<int64_t> order = {0, 1, 2, 3, 4, 5, 6, 7};
  EXPECT_TRUE(torch::equal(loader.Load(order, 0, 8, 0).value().images,
                           loader.Load(order, 0, 8, 5).value().images));
}

TEST(BatchLoaderTest, DeviceStageGivesRawImagesWithTheirDrawnTransforms) {
  const ImageDataset data = Patterned();
  BatchLoaderOptions raw_options = Augmenting(8, 9);
  raw_options.stage = BatchStage::kDevice;
  const BatchLoader raw_loader(data, ComputeChannelStats(data), raw_options);
  const std::vector<int64_t> indices = {5, 2, 7, 0};
  const Batch raw = raw_loader.Load(indices, 0, 4, /*epoch=*/3).value();
  ASSERT_EQ(raw.images.scalar_type(), torch::kByte);
  EXPECT_EQ(raw.images.sizes(), (std::vector<int64_t>{4, 3, 4, 4})) << "native size";
  EXPECT_TRUE(torch::equal(raw.labels, torch::tensor({5, 2, 7, 0}, torch::kLong)));
  ASSERT_TRUE(raw.transforms.defined());
  for (int k = 0; k < 4; ++k) {
    const int64_t index = indices[static_cast<size_t>(k)];
    const torch::Tensor pixels = torch::from_blob(
        const_cast<uint8_t*>(&data.pixels[static_cast<size_t>(index * 48)]), {3, 4, 4},
        torch::kByte);
    EXPECT_TRUE(torch::equal(raw.images[k], pixels)) << "untransformed image " << index;
    const ImageTransform t = DrawImageTransform(raw_options.augmentation, 9, 3, index);
    EXPECT_TRUE(torch::equal(
        raw.transforms[k],
        torch::tensor({int64_t{t.shift_y}, int64_t{t.shift_x}, int64_t{t.flip ? 1 : 0}})))
        << "image " << index;
  }
  // Finished elsewhere, the batch is the host stage's, bit for bit.
  const BatchLoader host_loader(data, ComputeChannelStats(data), Augmenting(8, 9));
  const ImagePreprocessor finish(ComputeChannelStats(data), 8);
  EXPECT_TRUE(torch::equal(finish(raw.images, raw.transforms),
                           host_loader.Load(indices, 0, 4, 3).value().images));
}

TEST(BatchLoaderTest, DeviceStageWithoutAugmentationHasNoTransforms) {
  const ImageDataset data = Patterned();
  BatchLoaderOptions options;
  options.image_size = 8;
  options.stage = BatchStage::kDevice;
  const BatchLoader loader(data, ComputeChannelStats(data), options);
  const std::vector<int64_t> indices = {1, 3};
  const Batch raw = loader.Load(indices, 0, 2).value();
  EXPECT_FALSE(raw.transforms.defined());
  EXPECT_EQ(raw.images.sizes(), (std::vector<int64_t>{2, 3, 4, 4}));
}

TEST(BatchLoaderTest, IndexOutsideTheDatasetThrows) {
  const ImageDataset data = Tiny();
  const BatchLoader loader(data, ChannelStats{{0.0f}, {1.0f}}, 2);
  const std::vector<int64_t> indices = {0, 4};
  EXPECT_EQ(loader.Load(indices, 0, 2).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(loader.Load(indices, 1, 3).status().code(), absl::StatusCode::kOutOfRange);
}

}  // namespace
}  // namespace tessera::trainer
