// What ZeRO exists for, measured by the operating system: each rank of a
// 2-rank ViT-B/16 run (85.8M parameters, AdamW in fp32) peaks lower than at
// stage 0 by most of what its stage shards away: the optimizer state at
// stage 1, the gradients too at stage 2, and the parameters too at stage 3;
// and each stage lower than the one before. Every rank
// is a tessera-train process of its own, started here and reaped with wait4, whose
// ru_maxrss is the process's peak resident set.
//
// The bytes a stage shards away are taken from the ranks' own counts
// (optimizer_state_bytes and gradient_bytes, first reported values); the
// memory is the kernel's figure. Prints FIGURE lines for the note.
#include <fcntl.h>
#include <netinet/in.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/worker/trainer/run_binary.h"

extern char** environ;

namespace tessera::trainer {
namespace {

constexpr int kWorld = 2;

// A TCP port nobody listens on right now (rank 0's store binds it next).
int FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address));
  socklen_t length = sizeof(address);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  ::close(fd);
  return ntohs(address.sin_port);
}

struct RankFigures {
  int64_t peak_rss_bytes = 0;  // wait4's ru_maxrss
  double optimizer_state_bytes = 0;
  double gradient_bytes = 0;
};

// Each metric's first value in a rank's metrics file.
std::map<std::string, double> FirstValues(const std::string& path) {
  std::map<std::string, double> first;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    const nlohmann::json point = nlohmann::json::parse(line, nullptr, false);
    if (point.is_discarded() || !point.contains("name")) continue;
    first.emplace(point["name"].get<std::string>(), point["value"].get<double>());
  }
  return first;
}

// Trains 3 steps of ViT-B/16 at 32 px at `stage` on kWorld ranks, each a
// process of its own, and returns each rank's figures.
std::vector<RankFigures> TrainAtStage(int stage, const std::string& dir) {
  const int port = FreePort();
  std::vector<pid_t> pids;
  std::vector<std::string> metrics;
  for (int rank = 0; rank < kWorld; ++rank) {
    metrics.push_back(absl::StrCat(dir, "/stage", stage, "-rank", rank, ".jsonl"));
    const std::string log = absl::StrCat(dir, "/stage", stage, "-rank", rank, ".log");
    std::vector<std::string> args = {::tessera::testing::BinaryPath("tessera-train"),
                                     "--model=vit-b16",
                                     "--image-size=32",
                                     "--dataset=synthetic",
                                     "--train-subset=64",
                                     "--test-subset=8",
                                     "--batch-size=2",
                                     "--max-steps=3",
                                     "--metrics-every=1",
                                     "--threads=1",
                                     "--data-workers=0",
                                     "--seed=1",
                                     "--optimizer=adamw",
                                     "--bucket-cap-mb=4",
                                     absl::StrCat("--zero-stage=", stage),
                                     absl::StrCat("--world-size=", kWorld),
                                     absl::StrCat("--rank=", rank),
                                     absl::StrCat("--local-rank=", rank),
                                     absl::StrCat("--rendezvous-store=127.0.0.1:", port),
                                     absl::StrCat("--metrics-file=", metrics.back())};
    std::vector<char*> argv;
    for (std::string& arg : args) argv.push_back(arg.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, log.c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    pid_t pid = 0;
    const int spawned =
        posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    EXPECT_EQ(spawned, 0) << argv[0];
    if (spawned == 0) pids.push_back(pid);
  }
  std::vector<RankFigures> ranks(static_cast<size_t>(kWorld));
  for (size_t rank = 0; rank < pids.size(); ++rank) {
    int status = 0;
    rusage usage{};
    ::wait4(pids[rank], &status, 0, &usage);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "stage " << stage << " rank " << rank << " ended with status " << status
        << "; log in " << dir;
    ranks[rank].peak_rss_bytes = static_cast<int64_t>(usage.ru_maxrss) * 1024;
    const std::map<std::string, double> first = FirstValues(metrics[rank]);
    if (first.count("optimizer_state_bytes") != 0) {
      ranks[rank].optimizer_state_bytes = first.at("optimizer_state_bytes");
    }
    if (first.count("gradient_bytes") != 0) {
      ranks[rank].gradient_bytes = first.at("gradient_bytes");
    }
  }
  return ranks;
}

int64_t HighestPeak(const std::vector<RankFigures>& ranks) {
  int64_t peak = 0;
  for (const RankFigures& rank : ranks) peak = std::max(peak, rank.peak_rss_bytes);
  return peak;
}

double MiB(double bytes) { return bytes / (1 << 20); }

TEST(ZeroMemoryTest, EachStageLowersThePeakRssByMostOfWhatItShards) {
  const std::string dir = absl::StrCat(::testing::TempDir(), "/zero-memory-", ::getpid());
  std::filesystem::create_directories(dir);
  std::map<int, std::vector<RankFigures>> stages;
  for (const int stage : {0, 1, 2, 3}) {
    stages[stage] = TrainAtStage(stage, dir);
    if (HasFailure()) return;
    for (size_t rank = 0; rank < stages[stage].size(); ++rank) {
      std::cout << "FIGURE zero_stage" << stage << "_rank" << rank << "_peak_rss_mib="
                << MiB(static_cast<double>(stages[stage][rank].peak_rss_bytes))
                << std::endl;
    }
  }
  // Stage 1 shards the optimizer state; stage 2 the gradients as well.
  const double state_sharded =
      stages[0][0].optimizer_state_bytes - stages[1][0].optimizer_state_bytes;
  const double gradients_sharded =
      stages[1][0].gradient_bytes - stages[2][0].gradient_bytes;
  ASSERT_GT(state_sharded, 200e6) << "ViT-B/16's AdamW state is about 686 MB";
  ASSERT_GT(gradients_sharded, 100e6) << "ViT-B/16's gradients are about 343 MB";
  // The parameters are as many fp32 values as the gradients.
  const double parameters_sharded = gradients_sharded;
  const double sharded[] = {0, state_sharded, state_sharded + gradients_sharded,
                            state_sharded + gradients_sharded + parameters_sharded};
  for (const int stage : {1, 2, 3}) {
    const double saved =
        static_cast<double>(HighestPeak(stages[0]) - HighestPeak(stages[stage]));
    std::cout << "FIGURE zero_stage" << stage << "_saved_mib=" << MiB(saved)
              << " of_sharded_mib=" << MiB(sharded[stage]) << std::endl;
    // Against stage 0, each stage saves most of all it shards.
    EXPECT_GE(saved, 0.8 * sharded[stage]) << "stage " << stage;
    // Each stage's own part shows against the stage before it too, less
    // what it keeps whole in flight (stage 2: gradient buckets; stage 3: the
    // gathered blocks) and the allocator's noise at this size.
    EXPECT_LT(HighestPeak(stages[stage]), HighestPeak(stages[stage - 1]))
        << "stage " << stage;
  }
  const double saved_by_2 =
      static_cast<double>(HighestPeak(stages[1]) - HighestPeak(stages[2]));
  EXPECT_GE(saved_by_2, 0.5 * gradients_sharded);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tessera::trainer
