#include "worker/trainer/data/image_preprocessor.h"

#include <torch/torch.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "tests/worker/trainer/torchvision_reference.h"
#include "worker/trainer/data/augmentation.h"
#include "worker/trainer/data/crop_resize.h"
#include "worker/trainer/data/image_dataset.h"

namespace tessera::trainer {
namespace {

namespace fs = std::filesystem;
using data::Interpolation;

torch::Tensor RandomImages(int64_t batch, int64_t channels, int64_t height, int64_t width,
                           uint64_t seed) {
  torch::manual_seed(seed);
  return torch::randint(0, 256, {batch, channels, height, width}, torch::kByte);
}

// The host pipeline as BatchLoader ran it before the conversion moved into
// ImagePreprocessor: the reference the device path must reproduce.
torch::Tensor PreviousHostPath(const torch::Tensor& raw, const ChannelStats& stats,
                               int size) {
  std::vector<float> inv_std;
  for (const float s : stats.stddev) inv_std.push_back(1.0f / s);
  const int64_t channels = raw.size(1);
  const torch::Tensor mean = torch::tensor(stats.mean).reshape({1, channels, 1, 1});
  const torch::Tensor inv = torch::tensor(inv_std).reshape({1, channels, 1, 1});
  torch::Tensor images = raw.to(torch::kFloat).div_(255.0f);
  images.sub_(mean).mul_(inv);
  if (raw.size(2) != size || raw.size(3) != size) {
    images = torch::nn::functional::interpolate(
        images, torch::nn::functional::InterpolateFuncOptions()
                    .size(std::vector<int64_t>{size, size})
                    .mode(torch::kBilinear)
                    .align_corners(false));
  }
  return images;
}

TEST(ApplyImageTransformsTest, BatchedGatherEqualsApplyImageTransformOnEachImage) {
  constexpr int64_t kBatch = 24, kChannels = 3, kHeight = 9, kWidth = 7;
  const torch::Tensor images = RandomImages(kBatch, kChannels, kHeight, kWidth, 11);
  std::vector<ImageTransform> transforms;
  for (int64_t i = 0; i < kBatch; ++i) {
    ImageTransform t;
    // Shifts inside the image, at its edges and past them (all padding).
    t.shift_y = static_cast<int>(i % 7) - 3 + (i == 5 ? 9 : 0);
    t.shift_x = static_cast<int>((i * 5) % 9) - 4 - (i == 6 ? 7 : 0);
    t.flip = i % 3 == 0;
    transforms.push_back(t);
  }
  const torch::Tensor out = ApplyImageTransforms(images, TransformsTensor(transforms));
  ASSERT_EQ(out.sizes(), images.sizes());
  const int64_t image_bytes = kChannels * kHeight * kWidth;
  const torch::Tensor contiguous = images.contiguous();
  for (int64_t i = 0; i < kBatch; ++i) {
    std::vector<uint8_t> expected(static_cast<size_t>(image_bytes));
    ApplyImageTransform(transforms[static_cast<size_t>(i)], kChannels, kHeight, kWidth,
                        contiguous.data_ptr<uint8_t>() + i * image_bytes,
                        expected.data());
    const torch::Tensor want =
        torch::from_blob(expected.data(), {kChannels, kHeight, kWidth}, torch::kByte);
    EXPECT_TRUE(torch::equal(out[i], want)) << "image " << i;
  }
  EXPECT_EQ(out[5].max().item<int>(), 0) << "shifted wholly outside: all padding";
}

TEST(ImagePreprocessorTest, EqualsThePreviousHostPathBitForBit) {
  const ChannelStats stats{{0.49f, 0.48f, 0.45f}, {0.25f, 0.24f, 0.26f}};
  for (const auto& [data_size, model_size] :
       std::vector<std::pair<int, int>>{{32, 32}, {32, 224}, {28, 32}, {32, 24}}) {
    const torch::Tensor raw = RandomImages(8, 3, data_size, data_size, 5);
    const ImagePreprocessor preprocess(stats, model_size);
    const torch::Tensor got = preprocess(raw);
    EXPECT_EQ(got.sizes(), (std::vector<int64_t>{8, 3, model_size, model_size}));
    EXPECT_EQ(got.scalar_type(), torch::kFloat);
    EXPECT_TRUE(torch::equal(got, PreviousHostPath(raw, stats, model_size)))
        << data_size << " -> " << model_size;
  }
}

TEST(ImagePreprocessorTest, TransformsAreAppliedBeforeTheConversion) {
  const ChannelStats stats{{0.5f}, {0.25f}};
  const torch::Tensor raw = RandomImages(4, 1, 8, 8, 2);
  const torch::Tensor transforms =
      TransformsTensor({{1, -2, true}, {0, 0, false}, {-3, 3, false}, {2, 0, true}});
  const ImagePreprocessor preprocess(stats, 16);
  EXPECT_TRUE(
      torch::equal(preprocess(raw, transforms),
                   PreviousHostPath(ApplyImageTransforms(raw, transforms), stats, 16)));
  EXPECT_FALSE(torch::equal(preprocess(raw, transforms), preprocess(raw)));
}

TEST(ImagePreprocessorTest, BicubicDiffersFromBilinearAndKeepsItsOvershoot) {
  const ChannelStats stats{{0.49f, 0.48f, 0.45f}, {0.25f, 0.24f, 0.26f}};
  const torch::Tensor raw = RandomImages(4, 3, 32, 32, 8);
  const ImagePreprocessor bilinear(stats, 48);
  const ImagePreprocessor bicubic(stats, 48, Interpolation::kBicubic);
  const torch::Tensor cubic = bicubic(raw);
  EXPECT_EQ(cubic.sizes(), (std::vector<int64_t>{4, 3, 48, 48}));
  EXPECT_EQ(cubic.scalar_type(), torch::kFloat);
  // Noise has edges everywhere: the cubic kernel's four taps per axis give
  // values the linear one does not, past the normalised range of the pixels.
  EXPECT_GT((cubic - bilinear(raw)).abs().max().item<float>(), 0.1f);
  EXPECT_GT(cubic.max().item<float>(), bilinear(raw).max().item<float>());
  // At the model's own size there is no resize to differ in.
  EXPECT_TRUE(torch::equal(ImagePreprocessor(stats, 32, Interpolation::kBicubic)(raw),
                           ImagePreprocessor(stats, 32)(raw)));
}

// torchvision's side of the comparison, run by /usr/bin/python3 on the files
// the test writes to DIR: for each line "NAME N C SIZE OUT MEAN STD" of
// DIR/cases.txt, NAME.raw (uint8 [N, C, SIZE, SIZE]) and NAME.normalised (the
// preprocessor's float32 output at SIZE, no resize) in, and out:
//  - NAME.resized: Resize(OUT, BICUBIC) of NAME.normalised, the resize alone
//    on the preprocessor's own input;
//  - NAME.pipeline: ConvertImageDtype(float) (ToTensor's scaling), Resize(OUT,
//    BICUBIC), Normalize(MEAN, STD): the transform as written for tensors;
//  - NAME.bytes: the same with the Resize on the uint8 images (clamped and
//    rounded to bytes, as image folders are resized).
// antialias=False is torchvision 0.14's default for tensors, given so that a
// later torchvision (antialiased by default) computes the same.
constexpr char kResizeScript[] = R"(import sys
import torch, torchvision
import torchvision.transforms.functional as TF
from torchvision.transforms import InterpolationMode
print("torch %s, torchvision %s" % (torch.__version__, torchvision.__version__), flush=True)
d = sys.argv[1]

def read(name, dtype, shape):
    with open(d + "/" + name, "rb") as f:
        return torch.frombuffer(bytearray(f.read()), dtype=dtype).reshape(shape)

def write(name, t):
    with open(d + "/" + name, "wb") as f:
        f.write(t.contiguous().numpy().tobytes())

def resize(t, side):
    return TF.resize(t, [side, side], interpolation=InterpolationMode.BICUBIC,
                     antialias=False)

for line in open(d + "/cases.txt"):
    name, n, c, size, out, mean, std = line.split()
    shape = (int(n), int(c), int(size), int(size))
    mean = [float(v) for v in mean.split(",")]
    std = [float(v) for v in std.split(",")]
    raw = read(name + ".raw", torch.uint8, shape)
    write(name + ".resized", resize(read(name + ".normalised", torch.float32, shape),
                                    int(out)))
    scaled = TF.convert_image_dtype(raw, torch.float)
    write(name + ".pipeline", TF.normalize(resize(scaled, int(out)), mean, std))
    as_bytes = TF.convert_image_dtype(resize(raw, int(out)), torch.float)
    write(name + ".bytes", TF.normalize(as_bytes, mean, std))
)";

void WriteBytes(const std::string& path, const torch::Tensor& t) {
  const torch::Tensor c = t.contiguous();
  std::ofstream(path, std::ios::binary)
      .write(static_cast<const char*>(c.data_ptr()),
             static_cast<std::streamsize>(c.nbytes()));
}

torch::Tensor ReadFloats(const std::string& path, std::vector<int64_t> shape) {
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)),
                          std::istreambuf_iterator<char>());
  torch::Tensor t = torch::empty(shape, torch::kFloat);
  EXPECT_EQ(bytes.size(), t.nbytes()) << path;
  if (bytes.size() == t.nbytes()) std::memcpy(t.data_ptr(), bytes.data(), bytes.size());
  return t;
}

float MaxAbsDiff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a - b).abs().max().item<float>();
}

TEST(ImagePreprocessorTorchvisionTest, BicubicIsTorchvisionsResizeOfFloatTensors) {
  if (std::getenv("TESSERA_REQUIRE_TORCHVISION") != nullptr) {
    ASSERT_TRUE(torchvision_reference::HaveTorchvision())
        << "no torch and torchvision, and TESSERA_REQUIRE_TORCHVISION is set";
  }
  if (!torchvision_reference::HaveTorchvision()) {
    GTEST_SKIP() << torchvision_reference::kPython
                 << " with torch and torchvision is not installed "
                 << "(Debian: python3-torchvision)";
  }
  struct Case {
    std::string name;
    ChannelStats stats;
    int64_t channels, size, out;
  };
  // CIFAR at ViT-B's 224, Fashion-MNIST at 32, and a downscale.
  const std::vector<Case> cases = {
      {"cifar", {{0.49f, 0.48f, 0.45f}, {0.25f, 0.24f, 0.26f}}, 3, 32, 224},
      {"fashion", {{0.286f}, {0.353f}}, 1, 28, 32},
      {"down", {{0.5f, 0.4f, 0.3f}, {0.2f, 0.3f, 0.4f}}, 3, 32, 20}};
  const fs::path dir = fs::path(::testing::TempDir()) /
                       ("image-preprocessor-torchvision-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream list(dir / "cases.txt");
  constexpr int64_t kBatch = 4;
  std::vector<torch::Tensor> raws;
  for (const Case& c : cases) {
    const torch::Tensor raw = RandomImages(kBatch, c.channels, c.size, c.size, 21);
    raws.push_back(raw);
    WriteBytes((dir / (c.name + ".raw")).string(), raw);
    WriteBytes((dir / (c.name + ".normalised")).string(),
               ImagePreprocessor(c.stats, static_cast<int>(c.size))(raw));
    // %.9g: each float32 statistic reads back as itself.
    const auto exact = [](std::string* out, float v) {
      absl::StrAppend(out, absl::StrFormat("%.9g", v));
    };
    list << c.name << " " << kBatch << " " << c.channels << " " << c.size << " " << c.out
         << " " << absl::StrJoin(c.stats.mean, ",", exact) << " "
         << absl::StrJoin(c.stats.stddev, ",", exact) << "\n";
  }
  list.close();
  ASSERT_TRUE(torchvision_reference::RunPythonScript(dir.string(), "resize_reference.py",
                                                     kResizeScript, dir.string()));
  std::string versions;
  std::getline(std::ifstream(dir / "python.log") >> std::ws, versions);
  std::cout << "bicubic resize against " << versions << std::endl;
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    SCOPED_TRACE(c.name);
    const std::vector<int64_t> shape = {kBatch, c.channels, c.out, c.out};
    const torch::Tensor got = ImagePreprocessor(c.stats, static_cast<int>(c.out),
                                                Interpolation::kBicubic)(raws[i]);
    const torch::Tensor resized =
        ReadFloats((dir / (c.name + ".resized")).string(), shape);
    const torch::Tensor pipeline =
        ReadFloats((dir / (c.name + ".pipeline")).string(), shape);
    const torch::Tensor bytes = ReadFloats((dir / (c.name + ".bytes")).string(), shape);
    // The resize is torchvision's, bit for bit.
    EXPECT_TRUE(torch::equal(got, resized)) << MaxAbsDiff(got, resized);
    // Normalising first changes only float rounding; nothing is clamped or
    // rounded to bytes, as torchvision does not on float tensors.
    EXPECT_LT(MaxAbsDiff(got, pipeline), 1e-5f);
    EXPECT_GT(MaxAbsDiff(got, bytes), 1e-3f);
    std::cout << c.name << " " << c.size << " -> " << c.out
              << ": max |tessera - torchvision| resize alone " << MaxAbsDiff(got, resized)
              << ", ToTensor+Resize+Normalize " << MaxAbsDiff(got, pipeline)
              << ", uint8 Resize " << MaxAbsDiff(got, bytes) << std::endl;
  }
  fs::remove_all(dir);
}

TEST(ImagePreprocessorTest, RejectsImagesWithAnotherChannelCount) {
  const ImagePreprocessor preprocess(ChannelStats{{0.5f}, {0.25f}}, 8);
  EXPECT_THROW(preprocess(RandomImages(2, 3, 8, 8, 1)), c10::Error);
}

}  // namespace
}  // namespace tessera::trainer
