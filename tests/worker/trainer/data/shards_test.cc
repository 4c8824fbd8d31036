#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "tests/worker/trainer/data/data_test_util.h"
#include "worker/trainer/data/batch_pipeline.h"
#include "worker/trainer/data/data_source.h"
#include "worker/trainer/data/image_folder.h"
#include "worker/trainer/data/shard_index.h"
#include "worker/trainer/data/shard_packer.h"
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

  std::unique_ptr<DataSource> Open(const std::string& split = "train",
                                   size_t shuffle_buffer = 5) {
    DataSourceOptions o;
    o.root = shards_;
    o.split = split;
    o.shuffle_buffer = shuffle_buffer;
    auto source = DataSource::Open(o);
    EXPECT_TRUE(source.ok()) << source.status();
    return source.ok() ? *std::move(source) : nullptr;
  }

  // Every sample of the rank's stream: id -> label, in stream order.
  static std::vector<std::pair<int64_t, int64_t>> Drain(SampleStream& stream) {
    std::vector<std::pair<int64_t, int64_t>> out;
    for (int64_t k = 0; k < stream.size(); ++k) {
      auto s = stream.Read(k);
      EXPECT_TRUE(s.ok()) << s.status();
      if (s.ok()) out.emplace_back(s->id, s->sample.label);
    }
    return out;
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

TEST_F(ShardsTest, OneRankStreamsEverySampleOnceShuffledAndReproducibly) {
  auto source = Open();
  ASSERT_NE(source, nullptr);
  EXPECT_EQ(source->kind(), "shards");
  EXPECT_EQ(source->size(), 21);
  EpochRequest e{.seed = 3, .epoch = 1};
  auto stream = source->OpenEpoch(e);
  ASSERT_TRUE(stream.ok());
  const auto samples = Drain(**stream);
  ASSERT_EQ(samples.size(), 21u);
  std::set<int64_t> ids;
  for (const auto& [id, label] : samples) {
    ids.insert(id);
    EXPECT_EQ(label, id / 7);
  }
  EXPECT_EQ(ids.size(), 21u);
  EXPECT_EQ(samples, Drain(**source->OpenEpoch(e)));
  e.epoch = 2;
  EXPECT_NE(samples, Drain(**source->OpenEpoch(e)));
}

TEST_F(ShardsTest, RanksGetEqualCountsAndResumeAtTheSameWorldSizeIsExact) {
  auto source = Open();
  std::set<int64_t> seen;
  int64_t count = -1;
  for (int r = 0; r < 2; ++r) {
    EpochRequest e{.seed = 3, .epoch = 4, .rank = r, .world_size = 2};
    auto full = Drain(**source->OpenEpoch(e));
    if (count < 0) count = static_cast<int64_t>(full.size());
    EXPECT_EQ(static_cast<int64_t>(full.size()), count);
    for (const auto& s : full) EXPECT_TRUE(seen.insert(s.first).second);
    // Stopped after 3 samples per rank: global position 6.
    e.start_position = GlobalPosition(e, 3);
    auto rest = Drain(**source->OpenEpoch(e));
    const std::vector<std::pair<int64_t, int64_t>> tail(full.begin() + 3, full.end());
    EXPECT_EQ(rest, tail);
  }
}

TEST_F(ShardsTest, PipelineMakesEqualBatchCountsOnTwoRanks) {
  auto source = Open();
  std::set<int64_t> labels;
  for (int r = 0; r < 2; ++r) {
    auto stream = source->OpenEpoch(
        EpochRequest{.seed = 1, .epoch = 0, .rank = r, .world_size = 2});
    ASSERT_TRUE(stream.ok());
    const int64_t samples = (*stream)->size();
    BatchPipelineOptions o;
    o.batch_size = 3;
    o.workers = 2;
    o.transform.size = 24;
    auto pipeline = BatchPipeline::Start(*std::move(stream), o);
    ASSERT_TRUE(pipeline.ok());
    int64_t images = 0;
    for (;;) {
      auto batch = (*pipeline)->Next();
      if (absl::IsOutOfRange(batch.status())) break;
      ASSERT_TRUE(batch.ok()) << batch.status();
      images += batch->size;
      labels.insert(batch->labels.begin(), batch->labels.end());
    }
    EXPECT_EQ(images, samples);
    EXPECT_EQ((*pipeline)->skipped(), 0);
  }
  EXPECT_EQ(labels, (std::set<int64_t>{0, 1, 2}));
}

TEST_F(ShardsTest, DamagedShardYieldsItsMissingSamplesAsNamedErrors) {
  auto index = ReadShardIndex(shards_);
  const std::string victim = shards_ + "/" + index->splits.at("train")[0].file;
  int64_t second_image = 0;  // the offset of the second sample's image member
  {
    auto reader = TarReader::OpenFile(victim);
    for (int m = 0; m < 3; ++m) second_image = (*(*reader)->Next())->header_offset;
  }
  std::filesystem::resize_file(victim, second_image + 512 + 100);  // inside its data
  auto source = Open("train", 0);
  auto stream = source->OpenEpoch(EpochRequest{.shuffle = false});
  ASSERT_EQ((*stream)->size(), 21);
  int good = 0;
  int bad = 0;
  for (int64_t k = 0; k < 21; ++k) {
    auto s = (*stream)->Read(k);
    if (s.ok()) {
      ++good;
    } else {
      ++bad;
      EXPECT_TRUE(absl::IsDataLoss(s.status()));
      EXPECT_NE(s.status().message().find(index->splits.at("train")[0].file),
                absl::string_view::npos)
          << s.status();
    }
  }
  EXPECT_EQ(good, 21 - 4 + 1);  // the first sample of the damaged shard survives
  EXPECT_EQ(bad, 3);
}

TEST_F(ShardsTest, SampleWithoutClassIsDataLossNamingIt) {
  ScratchDir dir;
  ShardIndex index;
  index.classes = {"a"};
  index.splits["train"] = {{"train-000000.tar", 2}};
  ASSERT_TRUE(WriteShardIndex(dir.path(), index).ok());
  auto tar = TarWriter::Create(dir.File("train-000000.tar"));
  ASSERT_TRUE((*tar)->Add("x.jpg", testing::MakeJpeg(8, 8, 1)).ok());
  ASSERT_TRUE((*tar)->Add("y.jpg", testing::MakeJpeg(8, 8, 1)).ok());
  ASSERT_TRUE((*tar)->Add("y.cls", "7").ok());
  ASSERT_TRUE((*tar)->Finish().ok());
  DataSourceOptions o;
  o.root = dir.path();
  auto source = DataSource::Open(o);
  ASSERT_TRUE(source.ok()) << source.status();
  auto stream = (*source)->OpenEpoch(EpochRequest{.shuffle = false});
  auto x = (*stream)->Read(0);
  EXPECT_TRUE(absl::IsDataLoss(x.status()));
  EXPECT_NE(x.status().message().find("train-000000.tar:x"), absl::string_view::npos);
  auto y = (*stream)->Read(1);
  EXPECT_NE(y.status().message().find("class 7 is not in [0, 1)"),
            absl::string_view::npos)
      << y.status();
}

TEST_F(ShardsTest, MissingIndexOrSplitIsNotFound) {
  DataSourceOptions o;
  o.kind = "shards";
  o.root = folder_;
  EXPECT_TRUE(absl::IsNotFound(DataSource::Open(o).status()));
  o.root = shards_;
  o.split = "test";
  EXPECT_TRUE(absl::IsNotFound(DataSource::Open(o).status()));
}

}  // namespace
}  // namespace tessera::trainer::data
