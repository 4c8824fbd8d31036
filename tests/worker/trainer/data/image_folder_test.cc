#include "worker/trainer/data/image_folder.h"

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/worker/trainer/data/data_test_util.h"
#include "worker/trainer/data/image_decoder.h"
#include "worker/trainer/data/image_split.h"

namespace tessera::trainer::data {
namespace {

using testing::MakeImageFolder;
using testing::MakeJpeg;
using testing::MakePng;
using testing::ReadFile;
using testing::ScratchDir;
using testing::WriteFile;

TEST(ImageFolderTest, ClassesAreSortedNamesAndSamplesFollowClassThenPath) {
  ScratchDir dir;
  MakeImageFolder(dir.path(), {"zebra", "ant", "Moth"}, {{"train", 2}, {"val", 1}});
  auto folder = ImageFolder::Open(dir.path(), "train");
  ASSERT_TRUE(folder.ok()) << folder.status();
  EXPECT_EQ((*folder)->class_names(), (std::vector<std::string>{"Moth", "ant", "zebra"}));
  ASSERT_EQ((*folder)->size(), 6);
  const std::vector<std::string> expected = {"Moth/img000.jpg",  "Moth/img001.jpg",
                                             "ant/img000.jpg",   "ant/img001.jpg",
                                             "zebra/img000.jpg", "zebra/img001.jpg"};
  for (int64_t i = 0; i < 6; ++i) {
    EXPECT_EQ((*folder)->name(i), dir.path() + "/train/" + expected[i]);
    EXPECT_EQ((*folder)->label(i), i / 2);
    auto sample = (*folder)->Read(i);
    ASSERT_TRUE(sample.ok()) << sample.status();
    EXPECT_EQ(sample->label, i / 2);
    EXPECT_TRUE(DecodeImage(sample->bytes).ok());
  }
}

TEST(ImageFolderTest, TakesImageExtensionsInAnyCaseAndNothingElse) {
  ScratchDir dir;
  const std::string cls = dir.path() + "/train/cls/";
  WriteFile(cls + "a.JPG", MakeJpeg(16, 16, 1));
  WriteFile(cls + "b.JpEg", MakeJpeg(16, 16, 2));
  WriteFile(cls + "c.png", MakePng(16, 16, 3));
  WriteFile(cls + "sub/d.jpg", MakeJpeg(16, 16, 4));
  WriteFile(cls + "notes.txt", "hello");
  WriteFile(cls + "._a.jpg", "resource fork");
  auto folder = ImageFolder::Open(dir.path(), "train");
  ASSERT_TRUE(folder.ok()) << folder.status();
  ASSERT_EQ((*folder)->size(), 4);
  EXPECT_EQ((*folder)->name(3), cls + "sub/d.jpg");
}

TEST(ImageFolderTest, PngNamedJpgDecodes) {
  ScratchDir dir;
  WriteFile(dir.path() + "/train/cls/photo.jpg", MakePng(20, 10, 1));
  auto folder = ImageFolder::Open(dir.path(), "train");
  ASSERT_TRUE(folder.ok()) << folder.status();
  auto sample = (*folder)->Read(0);
  ASSERT_TRUE(sample.ok());
  auto image = DecodeImage(sample->bytes);
  ASSERT_TRUE(image.ok()) << image.status();
  EXPECT_EQ(image->width, 20);
}

TEST(ImageFolderTest, ClassMissingFromValIsNamed) {
  ScratchDir dir;
  MakeImageFolder(dir.path(), {"cat", "dog"}, {{"train", 1}});
  MakeImageFolder(dir.path(), {"cat"}, {{"val", 1}});
  for (const char* split : {"train", "val"}) {
    auto folder = ImageFolder::Open(dir.path(), split);
    ASSERT_TRUE(absl::IsInvalidArgument(folder.status())) << folder.status();
    EXPECT_NE(folder.status().message().find("class dog is in train but not in val"),
              absl::string_view::npos)
        << folder.status();
  }
}

TEST(ImageFolderTest, MissingOrEmptyDirectoriesFailNamingThePath) {
  ScratchDir dir;
  auto missing_root = ImageFolder::Open(dir.path() + "/nope", "train");
  EXPECT_TRUE(absl::IsNotFound(missing_root.status()));
  EXPECT_NE(missing_root.status().message().find(dir.path() + "/nope"),
            absl::string_view::npos);
  auto missing_split = ImageFolder::Open(dir.path(), "train");
  EXPECT_TRUE(absl::IsNotFound(missing_split.status()));
  EXPECT_NE(missing_split.status().message().find("/train"), absl::string_view::npos);
  std::filesystem::create_directories(dir.path() + "/train");
  EXPECT_TRUE(absl::IsInvalidArgument(ImageFolder::Open(dir.path(), "train").status()));
  std::filesystem::create_directories(dir.path() + "/train/empty");
  auto empty_class = ImageFolder::Open(dir.path(), "train");
  EXPECT_TRUE(absl::IsInvalidArgument(empty_class.status()));
  EXPECT_NE(empty_class.status().message().find("/train/empty"), absl::string_view::npos);
}

TEST(ImageFolderTest, ZeroByteFileReadsButDoesNotDecode) {
  ScratchDir dir;
  WriteFile(dir.path() + "/train/cls/empty.jpg", "");
  auto folder = ImageFolder::Open(dir.path(), "train");
  ASSERT_TRUE(folder.ok());
  auto sample = (*folder)->Read(0);
  ASSERT_TRUE(sample.ok());
  EXPECT_TRUE(absl::IsDataLoss(DecodeImage(sample->bytes).status()));
  std::filesystem::remove(dir.path() + "/train/cls/empty.jpg");
  EXPECT_TRUE(absl::IsNotFound((*folder)->Read(0).status()));
}

TEST(ImageSplitTest, AutoKindOpensAnImageFolderAndRejectsUnknownKinds) {
  ScratchDir dir;
  MakeImageFolder(dir.path(), {"a", "b"}, {{"train", 3}, {"val", 1}});
  ImageSplitOptions o;
  o.root = dir.path();
  auto split = ImageSplit::Open(o);
  ASSERT_TRUE(split.ok()) << split.status();
  EXPECT_EQ((*split)->kind(), "imagefolder");
  EXPECT_EQ((*split)->size(), 6);
  o.kind = "lmdb";
  EXPECT_TRUE(absl::IsInvalidArgument(ImageSplit::Open(o).status()));
}

// The one bad-sample policy: the next readable id takes a bad sample's place,
// each bad file is counted and named once, and past the split's share the
// decode fails naming the first.
TEST(ImageSplitTest, BadSamplesAreReplacedByTheNextCountedNamedOnceAndBounded) {
  ScratchDir dir;
  const auto files = MakeImageFolder(dir.path(), {"a", "b"}, {{"train", 4}}, 24);
  const std::vector<std::string>& train = files.at("train");
  WriteFile(train[1], "");                                 // a/img001.jpg
  WriteFile(train[2], ReadFile(train[2]).substr(0, 100));  // a/img002.jpg
  std::vector<std::string> log;
  ImageSplitOptions o;
  o.root = dir.path();
  o.max_skipped_fraction = 0.25;  // 2 of 8
  o.log = [&log](const std::string& line) { log.push_back(line); };
  auto split = ImageSplit::Open(o);
  ASSERT_TRUE(split.ok()) << split.status();
  TransformOptions t;
  t.train = false;
  t.size = 16;
  std::vector<uint8_t> got(3 * 16 * 16), want(3 * 16 * 16);
  const absl::StatusOr<int64_t> replaced =
      (*split)->DecodeInto(1, t, 0, got.data(), nullptr);
  ASSERT_TRUE(replaced.ok()) << replaced.status();
  ASSERT_TRUE((*split)->DecodeInto(3, t, 0, want.data(), nullptr).ok());
  EXPECT_EQ(got, want) << "ids 1 and 2 are bad: id 3 takes their place";
  EXPECT_EQ(*replaced, 0);
  EXPECT_EQ((*split)->skipped(), 2);
  ASSERT_TRUE((*split)->DecodeInto(2, t, 1, got.data(), nullptr).ok());
  EXPECT_EQ((*split)->skipped(), 2) << "a file skipped again is not counted again";
  ASSERT_EQ(log.size(), 2u);
  EXPECT_NE(log[0].find(train[1]), std::string::npos) << log[0];
  EXPECT_NE(log[1].find(train[2]), std::string::npos) << log[1];
  // The check's whole decode fails on exactly these files, naming them.
  EXPECT_NE((*split)->DecodeWhole(1).status().message().find(train[1]),
            absl::string_view::npos);
  EXPECT_TRUE((*split)->DecodeWhole(3).ok());

  WriteFile(train[5], "not an image");  // b/img001.jpg: the third, over the limit
  const absl::Status over = (*split)->DecodeInto(5, t, 0, got.data(), nullptr).status();
  EXPECT_TRUE(absl::IsDataLoss(over)) << over;
  EXPECT_NE(over.message().find("more than the 2 allowed"), absl::string_view::npos)
      << over;
  EXPECT_NE(over.message().find(train[1]), absl::string_view::npos) << over;
}

}  // namespace
}  // namespace tessera::trainer::data
