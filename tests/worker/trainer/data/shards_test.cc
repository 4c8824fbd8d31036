#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "tests/worker/trainer/data/data_test_util.h"
#include "worker/trainer/data/image_folder.h"
#include "worker/trainer/data/image_split.h"
#include "worker/trainer/data/shard_index.h"
#include "worker/trainer/data/shard_packer.h"
#include "worker/trainer/data/shard_source.h"
#include "worker/trainer/data/tar_reader.h"
#include "worker/trainer/data/tar_writer.h"

namespace tessera::trainer::data {
namespace {

using testing::MakeImageFolder;
using testing::MakePng;
using testing::ScratchDir;
using testing::WriteFile;

// An image folder of 3 classes (7 train and 3 val images each, one train
// image a PNG named .jpg) packed 4 samples to a shard.
class ShardsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    MakeImageFolder(folder_, {"ant", "bee", "cat"}, {{"train", 7}, {"val", 3}});
    WriteFile(folder_ + "/train/bee/img003.jpg", MakePng(30, 20, 9));
    PackOptions o;
    o.root = folder_;
    o.out = shards_;
    o.shard_size = 4;
    auto report = PackImageFolder(o);
    ASSERT_TRUE(report.ok()) << report.status();
    EXPECT_EQ(report->samples.at("train"), 21);
    EXPECT_EQ(report->samples.at("val"), 9);
    EXPECT_EQ(report->shards, 6 + 3);
    EXPECT_TRUE(report->left_out.empty());
  }

  // The split as the trainer opens it ("auto" finds the index).
  std::unique_ptr<ImageSplit> Open(const std::string& split = "train") {
    ImageSplitOptions o;
    o.root = shards_;
    o.split = split;
    auto opened = ImageSplit::Open(o);
    EXPECT_TRUE(opened.ok()) << opened.status();
    return opened.ok() ? *std::move(opened) : nullptr;
  }

  ScratchDir dir_;
  const std::string folder_ = dir_.File("folder");
  const std::string shards_ = dir_.File("shards");
};

TEST_F(ShardsTest, PackedShardsListExactlyTheFolderSamples) {
  auto index = ReadShardIndex(shards_);
  ASSERT_TRUE(index.ok()) << index.status();
  EXPECT_EQ(index->classes, (std::vector<std::string>{"ant", "bee", "cat"}));
  for (const std::string split : {"train", "val"}) {
    auto folder = ImageFolder::Open(folder_, split);
    ASSERT_TRUE(folder.ok());
    int64_t i = 0;
    for (const ShardFile& shard : index->splits.at(split)) {
      EXPECT_EQ(shard.file.rfind(split + "-", 0), 0u) << shard.file;
      auto reader = TarReader::OpenFile(shards_ + "/" + shard.file);
      ASSERT_TRUE(reader.ok());
      int64_t in_shard = 0;
      for (;; ++i, ++in_shard) {
        auto image = (*reader)->Next();
        ASSERT_TRUE(image.ok());
        if (!image->has_value()) break;
        auto cls = (*reader)->Next();
        ASSERT_TRUE(cls.ok() && cls->has_value());
        auto expected = (*folder)->Read(i);
        ASSERT_TRUE(expected.ok());
        const bool png = split == "train" && i == 7 + 3;  // bee/img003.jpg
        EXPECT_EQ((*image)->name, absl::StrFormat("%08d.%s", i, png ? "png" : "jpg"));
        EXPECT_EQ((*image)->data, expected->bytes) << (*folder)->name(i);
        EXPECT_EQ((*cls)->name, absl::StrFormat("%08d.cls", i));
        EXPECT_EQ((*cls)->data, absl::StrCat(expected->label));
      }
      EXPECT_EQ(in_shard, shard.samples);
    }
    EXPECT_EQ(i, (*folder)->size());
  }
}

TEST_F(ShardsTest, PythonTarfileReadsTheShards) {
  if (!testing::HavePython3()) GTEST_SKIP() << "/usr/bin/python3 is not installed";
  // Groups members by key as webdataset does; prints samples and class sum.
  const std::string script = absl::StrCat(
      "import glob, tarfile\n"
      "n = 0; total = 0\n"
      "for path in sorted(glob.glob('",
      shards_,
      "/train-*.tar')):\n"
      "    with tarfile.open(path) as tar:\n"
      "        samples = {}\n"
      "        for m in tar.getmembers():\n"
      "            key, ext = m.name.split('.', 1)\n"
      "            samples.setdefault(key, {})[ext] = tar.extractfile(m).read()\n"
      "        for key, s in samples.items():\n"
      "            assert ('jpg' in s) != ('png' in s), key\n"
      "            n += 1; total += int(s['cls'])\n"
      "print(n, total)\n");
  WriteFile(dir_.File("read.py"), script);
  FILE* pipe =
      popen(absl::StrCat("/usr/bin/python3 ", dir_.File("read.py")).c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  char line[128] = {};
  ASSERT_NE(fgets(line, sizeof(line), pipe), nullptr);
  EXPECT_EQ(pclose(pipe), 0);
  EXPECT_EQ(std::string(line), "21 21\n");  // 7 per class, labels 0 + 1 + 2
}

TEST_F(ShardsTest, AShardSplitHoldsEverySampleOnceInThePackersOrder) {
  auto split = Open();
  ASSERT_NE(split, nullptr);
  EXPECT_EQ(split->kind(), "shards");
  EXPECT_EQ(split->class_names(), (std::vector<std::string>{"ant", "bee", "cat"}));
  ASSERT_EQ(split->size(), 21);
  for (int64_t id = 0; id < 21; ++id) {
    absl::StatusOr<SampleImage> image = split->DecodeWhole(id);
    ASSERT_TRUE(image.ok()) << image.status();
    EXPECT_EQ(image->label, id / 7) << id;
    const bool png = id == 7 + 3;  // bee/img003.jpg
    EXPECT_EQ(image->width, png ? 30 : 47) << id;
  }
}

TEST_F(ShardsTest, TrainingDecodesAShardSampleLikeTheFolderSample) {
  auto shards = Open();
  ImageSplitOptions o;
  o.root = folder_;
  auto folder = ImageSplit::Open(o);
  ASSERT_TRUE(folder.ok()) << folder.status();
  EXPECT_EQ((*folder)->kind(), "imagefolder");
  TransformOptions t;
  t.size = 16;
  t.seed = 3;
  std::vector<uint8_t> a(3 * 16 * 16), b(3 * 16 * 16);
  for (int64_t id : {0, 10, 20}) {
    auto from_shard = shards->DecodeInto(id, t, /*epoch=*/2, a.data(), nullptr);
    auto from_folder = (*folder)->DecodeInto(id, t, /*epoch=*/2, b.data(), nullptr);
    ASSERT_TRUE(from_shard.ok() && from_folder.ok());
    EXPECT_EQ(*from_shard, *from_folder);
    EXPECT_EQ(a, b) << id;
  }
}

TEST_F(ShardsTest, ADamagedShardIsNamedAtOpenOrByItsUnreadableSamples) {
  auto index = ReadShardIndex(shards_);
  const std::string file = index->splits.at("train")[0].file;
  const std::string victim = shards_ + "/" + file;
  int64_t second_image = 0;  // the offset of the second sample's image member
  {
    auto reader = TarReader::OpenFile(victim);
    for (int m = 0; m < 3; ++m) second_image = (*(*reader)->Next())->header_offset;
  }
  std::filesystem::resize_file(victim, second_image + 512 + 100);  // inside its data
  ImageSplitOptions o;
  o.root = shards_;
  auto split = ImageSplit::Open(o);
  if (!split.ok()) {
    EXPECT_NE(split.status().message().find(file), absl::string_view::npos)
        << split.status();
    return;
  }
  ASSERT_TRUE((*split)->DecodeWhole(0).ok()) << "the first sample is whole";
  const absl::Status second = (*split)->DecodeWhole(1).status();
  EXPECT_TRUE(absl::IsDataLoss(second)) << second;
  EXPECT_NE(second.message().find(file), absl::string_view::npos) << second;
}

TEST_F(ShardsTest, AnImageWithoutItsClassOrWithABadClassIsRefusedNamingIt) {
  ScratchDir dir;
  ShardIndex index;
  index.classes = {"a"};
  index.splits["train"] = {{"train-000000.tar", 1}};
  ASSERT_TRUE(WriteShardIndex(dir.path(), index).ok());
  const auto write = [&](bool with_class, const std::string& label) {
    auto tar = TarWriter::Create(dir.File("train-000000.tar"));
    ASSERT_TRUE((*tar)->Add("x.jpg", testing::MakeJpeg(8, 8, 1)).ok());
    if (with_class) ASSERT_TRUE((*tar)->Add("x.cls", label).ok());
    ASSERT_TRUE((*tar)->Finish().ok());
  };
  write(false, "");
  absl::Status opened = ShardSource::Open(dir.path(), "train").status();
  EXPECT_TRUE(absl::IsInvalidArgument(opened)) << opened;
  EXPECT_NE(opened.message().find("x.jpg has no x.cls"), absl::string_view::npos)
      << opened;
  write(true, "7");
  opened = ShardSource::Open(dir.path(), "train").status();
  EXPECT_NE(opened.message().find("x.cls: not a class index in [0, 1)"),
            absl::string_view::npos)
      << opened;
  write(true, "0");
  EXPECT_TRUE(ShardSource::Open(dir.path(), "train").ok());
}

TEST_F(ShardsTest, MissingIndexOrSplitIsNotFound) {
  ImageSplitOptions o;
  o.kind = "shards";
  o.root = folder_;
  EXPECT_TRUE(absl::IsNotFound(ImageSplit::Open(o).status()));
  o.root = shards_;
  o.split = "test";
  EXPECT_TRUE(absl::IsNotFound(ImageSplit::Open(o).status()));
}

}  // namespace
}  // namespace tessera::trainer::data
