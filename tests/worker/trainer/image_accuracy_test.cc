// The image-folder path learns as well as the in-memory IDX path: Fashion-MNIST
// (the Debian package's real data) is written here as image folders, upscaled
// to 56 px and saved as JPEG (quality 90) and as PNG; vit-micro trained for the
// same steps on the folder and on the IDX files reaches a test accuracy within
// 1.5 points of the IDX run. The folder path decodes, resizes 56 -> 28 px and
// normalises with the given mean and deviation; the IDX path reads raw 28 px
// pixels. A loader that mislabels classes, shifts or mangles pixels, or
// drops samples falls far outside 1.5 points.
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "tests/worker/trainer/data/data_test_util.h"
#include "worker/trainer/data/idx_reader.h"
#include "worker/trainer/data/image_data.h"
#include "worker/trainer/data/image_dataset.h"
#include "worker/trainer/data/image_encoder.h"
#include "worker/trainer/dist/communicator.h"
#include "worker/trainer/run/metrics_reporter.h"
#include "worker/trainer/run/trainer.h"

namespace tessera::trainer {
namespace {

constexpr char kFashionMnist[] = "/usr/share/datasets/fashion-mnist";
constexpr int64_t kTrainImages = 4000;
constexpr int64_t kTestImages = 1000;
constexpr int kSize = 56;
// Sorted directory names give the labels, so each name starts with its index.
const char* const kClassNames[] = {"0-t-shirt", "1-trouser",   "2-pullover", "3-dress",
                                   "4-coat",    "5-sandal",    "6-shirt",    "7-sneaker",
                                   "8-bag",     "9-ankle-boot"};

// The first `limit` images of `all`.
ImageDataset First(const ImageDataset& all, int64_t limit) {
  ImageDataset out = all;
  const int64_t n = std::min(limit, all.size());
  out.labels.resize(static_cast<size_t>(n));
  out.pixels.resize(static_cast<size_t>(n * all.image_bytes()));
  return out;
}

// The first `limit` images of `all`, in the order an image folder lists them
// (by class, then by file name: the original index), each gray pixel given as
// three equal RGB channels, as the folder path decodes them. With the same
// order, the same model shape and the same seed, both runs draw the same
// samples in the same batches: what differs is only the pixels' way in.
ImageDataset FolderOrdered(const ImageDataset& all, int64_t limit) {
  const int64_t n = std::min(limit, all.size());
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) order[static_cast<size_t>(i)] = i;
  std::stable_sort(order.begin(), order.end(), [&all](int64_t a, int64_t b) {
    return all.labels[static_cast<size_t>(a)] < all.labels[static_cast<size_t>(b)];
  });
  ImageDataset out;
  out.channels = 3;
  out.height = all.height;
  out.width = all.width;
  out.num_classes = all.num_classes;
  const int64_t plane = all.image_bytes();
  for (const int64_t i : order) {
    out.labels.push_back(all.labels[static_cast<size_t>(i)]);
    for (int c = 0; c < 3; ++c)
      out.pixels.insert(out.pixels.end(), all.pixels.begin() + i * plane,
                        all.pixels.begin() + (i + 1) * plane);
  }
  return out;
}

// One 28x28 grayscale image upscaled 2x to kSize x kSize by repeating each
// pixel as a 2x2 block. The folder path's 56 -> 28 px way back lands on the
// original pixels: for PNG the bilinear resize samples between two equal
// pixels, and for JPEG the decoder's 1/2 DCT scaling averages each block (plus
// the quality-90 loss). So the test compares data paths, not resamplers.
std::vector<uint8_t> Upscale(const uint8_t* src, int side) {
  std::vector<uint8_t> out(static_cast<size_t>(kSize) * kSize);
  for (int y = 0; y < kSize; ++y)
    for (int x = 0; x < kSize; ++x)
      out[static_cast<size_t>(y) * kSize + x] = src[(y / 2) * side + x / 2];
  return out;
}

// Writes ROOT/SPLIT/CLASS/NNNNN.{jpg,png} for every image of `split`.
void WriteSplit(const ImageDataset& split, const std::string& root,
                const std::string& name, bool jpeg) {
  for (int64_t i = 0; i < split.size(); ++i) {
    const std::vector<uint8_t> big =
        Upscale(split.pixels.data() + i * split.image_bytes(), split.width);
    absl::StatusOr<std::string> bytes =
        jpeg ? data::EncodeJpeg(big.data(), kSize, kSize, 1, 90)
             : data::EncodePng(big.data(), kSize, kSize, 1);
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    data::testing::WriteFile(
        absl::StrFormat("%s/%s/%s/%05d.%s", root, name,
                        kClassNames[split.labels[static_cast<size_t>(i)]], i,
                        jpeg ? "jpg" : "png"),
        *bytes);
  }
}

TrainerOptions Options() {
  TrainerOptions options;
  options.model = "vit-micro";
  options.image_size = 28;
  options.batch_size = 64;
  options.lr = 2e-3;
  options.max_steps = 150;
  options.epochs = 100;
  options.metrics_every = 1000;
  options.seed = 11;
  options.augment = false;
  options.data_workers = 2;
  return options;
}

class ImageAccuracyTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!std::filesystem::exists(std::string(kFashionMnist) +
                                 "/train-images-idx3-ubyte.gz") &&
        !std::filesystem::exists(std::string(kFashionMnist) + "/train-images-idx3-ubyte"))
      return;
    absl::StatusOr<ImageDataset> train =
        LoadFashionMnist(kFashionMnist, Split::kTrain, 0);
    absl::StatusOr<ImageDataset> test = LoadFashionMnist(kFashionMnist, Split::kTest, 0);
    ASSERT_TRUE(train.ok()) << train.status();
    ASSERT_TRUE(test.ok()) << test.status();
    gray_train_ = new ImageDataset(First(*train, kTrainImages));
    train_ = new ImageDataset(FolderOrdered(*train, kTrainImages));
    gray_test_ = new ImageDataset(First(*test, kTestImages));
    test_ = new ImageDataset(FolderOrdered(*test, kTestImages));
    scratch_ = new data::testing::ScratchDir();
    idx_accuracy_ = TrainIdx();
  }
  static void TearDownTestSuite() {
    delete scratch_;
    scratch_ = nullptr;
  }

  void SetUp() override {
    if (train_ == nullptr)
      GTEST_SKIP() << "Fashion-MNIST is not installed in " << kFashionMnist
                   << " (Debian package dataset-fashion-mnist)";
  }

  static double TrainIdx() {
    LocalCommunicator communicator;
    auto reporter = Reporter();
    TrainerOptions options = Options();
    options.dataset = "fashion-mnist";
    Trainer trainer(options, *train_, *test_, communicator, *reporter);
    absl::StatusOr<TrainingOutcome> outcome = trainer.Run();
    EXPECT_TRUE(outcome.ok()) << outcome.status();
    std::cout << "FIGURE idx_test_accuracy="
              << (outcome.ok() ? outcome->test_accuracy : -1) << "\n";
    return outcome.ok() ? outcome->test_accuracy : -1;
  }

  // Writes the folder, trains on it and returns the test accuracy.
  double TrainFolder(bool jpeg) {
    const std::string root = scratch_->File(jpeg ? "jpeg" : "png");
    WriteSplit(*gray_train_, root, "train", jpeg);
    WriteSplit(*gray_test_, root, "val", jpeg);
    ImageDataOptions opening;
    opening.kind = "imagefolder";
    opening.root = root;
    // The statistics the IDX path scans from its training split.
    const ChannelStats stats = ComputeChannelStats(*train_);
    opening.mean = stats.mean;
    opening.stddev = stats.stddev;
    opening.crop_fraction = 1.0;
    absl::StatusOr<std::unique_ptr<TrainingData>> data = OpenImageData(opening);
    EXPECT_TRUE(data.ok()) << data.status();
    if (!data.ok()) return -1;
    EXPECT_EQ((*data)->shape().class_names.size(), 10u);
    TrainerOptions options = Options();
    options.dataset = "imagefolder";
    options.data_dir = root;
    LocalCommunicator communicator;
    auto reporter = Reporter();
    Trainer trainer(options, **data, communicator, *reporter);
    absl::StatusOr<TrainingOutcome> outcome = trainer.Run();
    EXPECT_TRUE(outcome.ok()) << outcome.status();
    return outcome.ok() ? outcome->test_accuracy : -1;
  }

  static std::unique_ptr<MetricsReporter> Reporter() {
    MetricsReporterOptions reporting;
    reporting.flush_interval = absl::InfiniteDuration();
    absl::StatusOr<std::unique_ptr<MetricsReporter>> reporter =
        MetricsReporter::Create(reporting, nullptr);
    if (!reporter.ok()) std::abort();
    return *std::move(reporter);
  }

  static ImageDataset* gray_train_;  // as read, 1 channel
  static ImageDataset* gray_test_;
  static ImageDataset* train_;  // in folder order, 3 channels
  static ImageDataset* test_;
  static data::testing::ScratchDir* scratch_;
  static double idx_accuracy_;
};

ImageDataset* ImageAccuracyTest::gray_train_ = nullptr;
ImageDataset* ImageAccuracyTest::gray_test_ = nullptr;
ImageDataset* ImageAccuracyTest::train_ = nullptr;
ImageDataset* ImageAccuracyTest::test_ = nullptr;
data::testing::ScratchDir* ImageAccuracyTest::scratch_ = nullptr;
double ImageAccuracyTest::idx_accuracy_ = -1;

TEST_F(ImageAccuracyTest, JpegFolderReachesTheIdxAccuracyWithinOneAndAHalfPoints) {
  ASSERT_GT(idx_accuracy_, 0.5) << "the IDX run itself did not learn";
  const double accuracy = TrainFolder(/*jpeg=*/true);
  std::cout << "FIGURE jpeg_folder_test_accuracy=" << accuracy << "\n";
  EXPECT_NEAR(accuracy, idx_accuracy_, 0.015);
}

TEST_F(ImageAccuracyTest, PngFolderReachesTheIdxAccuracyWithinOneAndAHalfPoints) {
  ASSERT_GT(idx_accuracy_, 0.5) << "the IDX run itself did not learn";
  const double accuracy = TrainFolder(/*jpeg=*/false);
  std::cout << "FIGURE png_folder_test_accuracy=" << accuracy << "\n";
  EXPECT_NEAR(accuracy, idx_accuracy_, 0.015);
}

}  // namespace
}  // namespace tessera::trainer
