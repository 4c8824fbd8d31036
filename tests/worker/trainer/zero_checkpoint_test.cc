// ZeRO's shard files (run/zero_checkpoint.h): a rank resuming reads only the
// bytes of the ranges it keeps, whatever the writers' layout, and a broken or
// foreign checkpoint is refused naming the cause.
#include "worker/trainer/run/zero_checkpoint.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "worker/trainer/dist/bucket_plan.h"

namespace tessera::trainer {
namespace {

using ::testing::HasSubstr;

const std::vector<int64_t> kNumels = {40000, 120000, 2000, 80000};

// Element e of parameter p's state `name`: distinct everywhere.
float Value(int p, int64_t e, int name) {
  return static_cast<float>(p * 1000000 + e) + 0.25f * static_cast<float>(name);
}

// Rank `rank` of `world` keeps ShardOf of each parameter (any layout works:
// shards are written by parameter).
ElementRange RangeOf(int64_t numel, int world, int rank) {
  const ShardRange r = ShardOf(numel, world, rank);
  return {r.begin, r.end};
}

std::vector<ZeroPieceState> PiecesOf(int world, int rank, int64_t step) {
  std::vector<ZeroPieceState> pieces;
  for (size_t p = 0; p < kNumels.size(); ++p) {
    const ElementRange r = RangeOf(kNumels[p], world, rank);
    if (r.size() == 0) continue;
    ZeroPieceState piece;
    piece.param = static_cast<int>(p);
    piece.param_offset = r.begin;
    piece.state.step = step;
    for (int name = 0; name < 2; ++name) {
      torch::Tensor t = torch::empty({r.size()});
      for (int64_t e = 0; e < r.size(); ++e) {
        t[e] = Value(static_cast<int>(p), r.begin + e, name);
      }
      piece.state.tensors.emplace_back(name == 0 ? "exp_avg" : "exp_avg_sq", t);
    }
    pieces.push_back(std::move(piece));
  }
  return pieces;
}

// The bytes this process has read through read(2) and pread(2), from the OS.
int64_t BytesRead() {
  std::ifstream io("/proc/self/io");
  std::string key;
  int64_t value = 0;
  while (io >> key >> value) {
    if (key == "rchar:") return value;
  }
  return -1;
}

class ZeroCheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = std::filesystem::path(::testing::TempDir()) /
            absl::StrCat("zero_ckpt_",
                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(root_);
    std::filesystem::create_directories(dir().StepDir(7));
  }
  void TearDown() override { std::filesystem::remove_all(root_); }

  CheckpointDirectory dir() const { return CheckpointDirectory(root_.string()); }

  // Writes the checkpoint of `world` ranks at step 7; returns its bytes.
  int64_t Write(int world, const std::vector<int64_t>& numels = kNumels) {
    int64_t bytes = 0;
    for (int rank = 0; rank < world; ++rank) {
      auto shard =
          SerializeZeroShard(dir(), 7, rank, world, PiecesOf(world, rank, 7), numels);
      EXPECT_TRUE(shard.ok()) << shard.status();
      std::ofstream(shard->first, std::ios::binary) << shard->second;
      bytes += static_cast<int64_t>(shard->second.size());
    }
    return bytes;
  }

  static void ExpectValues(const std::vector<std::optional<FlatParamState>>& states,
                           const std::vector<ElementRange>& wanted) {
    ASSERT_EQ(states.size(), kNumels.size());
    for (size_t p = 0; p < kNumels.size(); ++p) {
      ASSERT_TRUE(states[p].has_value()) << "parameter " << p;
      EXPECT_EQ(states[p]->step, 7);
      ASSERT_EQ(states[p]->tensors.size(), 2u);
      for (int name = 0; name < 2; ++name) {
        const torch::Tensor& t = states[p]->tensors[static_cast<size_t>(name)].second;
        ASSERT_EQ(t.numel(), wanted[p].size());
        torch::Tensor expected =
            torch::arange(wanted[p].begin, wanted[p].end, torch::kDouble)
                .add(static_cast<double>(p) * 1000000 + 0.25 * name)
                .to(torch::kFloat);
        EXPECT_TRUE(torch::equal(t, expected)) << "parameter " << p << " tensor " << name;
      }
    }
  }

  std::filesystem::path root_;
};

TEST_F(ZeroCheckpointTest, ARankReadsOnlyTheBytesOfItsRangesAtAnyWorldSize) {
  const int64_t file_bytes = Write(2);
  for (const int world : {1, 3, 4}) {
    for (int rank = 0; rank < world; ++rank) {
      std::vector<ElementRange> wanted;
      for (const int64_t n : kNumels) wanted.push_back(RangeOf(n, world, rank));
      const int64_t before = BytesRead();
      auto states = LoadZeroShards(dir(), 7, 2, kNumels, wanted);
      const int64_t read = BytesRead() - before;
      ASSERT_TRUE(states.ok()) << states.status();
      ExpectValues(*states, wanted);
      // The state's bytes over the world, and the two files' headers.
      const double share = static_cast<double>(file_bytes) / world;
      std::cout << "FIGURE zero_shard_read_bytes_world" << world << "_rank" << rank << "="
                << read << " (files " << file_bytes << ")\n";
      EXPECT_LE(static_cast<double>(read), share * 1.02 + 8192)
          << "rank " << rank << " of " << world;
    }
  }
}

TEST_F(ZeroCheckpointTest, AShardWrittenForAnotherModelIsRefusedNamingIt) {
  Write(2);
  std::vector<int64_t> other = kNumels;
  other[1] += 16;  // another head, say
  auto shard = SerializeZeroShard(dir(), 7, 1, 2, {}, other);
  ASSERT_TRUE(shard.ok());
  std::ofstream(shard->first, std::ios::binary | std::ios::trunc) << shard->second;
  std::vector<ElementRange> whole;
  for (const int64_t n : kNumels) whole.push_back({0, n});
  auto states = LoadZeroShards(dir(), 7, 2, kNumels, whole);
  ASSERT_FALSE(states.ok());
  EXPECT_EQ(states.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(states.status().message(), HasSubstr("optimizer-rank-00001.shard"));
  EXPECT_THAT(states.status().message(), HasSubstr("another model"));
}

TEST_F(ZeroCheckpointTest, MissingTruncatedOrIncompleteShardsAreRefusedNamingTheCause) {
  Write(2);
  std::vector<ElementRange> whole;
  for (const int64_t n : kNumels) whole.push_back({0, n});
  // Three ranks' files expected, two written.
  auto missing = LoadZeroShards(dir(), 7, 3, kNumels, whole);
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.status().message(), HasSubstr("optimizer-rank-00000.shard"));

  const std::string path = ZeroShardPath(dir(), 7, 1);
  std::filesystem::resize_file(path, std::filesystem::file_size(path) - 100);
  auto truncated = LoadZeroShards(dir(), 7, 2, kNumels, whole);
  ASSERT_FALSE(truncated.ok());
  EXPECT_EQ(truncated.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(truncated.status().message(), HasSubstr("truncated"));

  // Rank 1's file with no pieces: rank 0's cover half of each parameter.
  auto empty = SerializeZeroShard(dir(), 7, 1, 2, {}, kNumels);
  ASSERT_TRUE(empty.ok());
  std::ofstream(path, std::ios::binary | std::ios::trunc) << empty->second;
  auto incomplete = LoadZeroShards(dir(), 7, 2, kNumels, whole);
  ASSERT_FALSE(incomplete.ok());
  EXPECT_EQ(incomplete.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(incomplete.status().message(),
              HasSubstr("parameter 0's pieces cover 20000"));
}

}  // namespace
}  // namespace tessera::trainer
