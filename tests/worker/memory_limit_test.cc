// memory_per_rank on the worker: which mechanism holds a rank (memory.max on a
// rank cgroup, or RLIMIT_DATA), that the limit reaches the child, and that a
// rank past it ends with an out-of-memory reason naming the rank and the
// limit instead of hanging. The binary is also its own over-allocating rank
// (--allocate-mib=N), run through the Supervisor as the worker runs trainers.
#include "worker/memory_limit.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <memory>
#include <new>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/test_util.h"
#include "worker/cgroup.h"
#include "worker/supervisor.h"

namespace tessera {
namespace {

using ::tessera::testing::TempDir;
using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr int64_t kMiB = int64_t{1} << 20;
constexpr int64_t kGiB = int64_t{1} << 30;

// A fake cgroup v2 tree in a plain directory: the files the worker reads and
// writes, with "memory" among the root's controllers when `memory` is set.
std::unique_ptr<CgroupTree> FakeTree(const TempDir& dir, bool memory) {
  std::ofstream(dir.File("cgroup.controllers"))
      << (memory ? "cpuset cpu io memory pids\n" : "cpuset cpu io pids\n");
  absl::StatusOr<std::unique_ptr<CgroupTree>> tree = CgroupTree::CreateAt(dir.path());
  EXPECT_TRUE(tree.ok()) << tree.status();
  return tree.ok() ? std::move(*tree) : nullptr;
}

void WaitExited(Supervisor& sup, const RankKey& key, absl::Duration limit) {
  const absl::Time until = absl::Now() + limit;
  while (absl::Now() < until) {
    sup.Poll();
    for (const RankProcess& p : sup.Snapshot()) {
      if (p.key == key && p.exited) return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  FAIL() << "rank did not exit within " << limit;
}

RankProcess Find(const Supervisor& sup, const RankKey& key) {
  for (const RankProcess& p : sup.Snapshot()) {
    if (p.key == key) return p;
  }
  ADD_FAILURE() << "rank not tracked";
  return {};
}

std::string SelfExe() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
}

TEST(MemoryLimitTest, NoLimitAsksForNothing) {
  TempDir dir;
  std::unique_ptr<CgroupTree> tree = FakeTree(dir, /*memory=*/true);
  const RankMemoryLimit limit = ChooseMemoryLimit(0, tree.get(), dir.File("a"), 0);
  EXPECT_EQ(limit.mechanism, MemoryMechanism::kNone);
  EXPECT_EQ(limit.log_line, "");
}

TEST(MemoryLimitTest, WithoutCgroupsTheLimitIsRlimitData) {
  const RankMemoryLimit limit = ChooseMemoryLimit(3 * kGiB, nullptr, "", 1);
  EXPECT_EQ(limit.mechanism, MemoryMechanism::kRlimitData);
  EXPECT_EQ(limit.bytes, 3 * kGiB);
  EXPECT_EQ(limit.log_line,
            "tessera-worker: memory_per_rank 3 GiB: enforced by RLIMIT_DATA (the worker "
            "runs its ranks without cgroups)");
}

TEST(MemoryLimitTest, CgroupWithoutTheMemoryControllerFallsBackToRlimitData) {
  TempDir dir;
  std::unique_ptr<CgroupTree> tree = FakeTree(dir, /*memory=*/false);
  ASSERT_NE(tree, nullptr);
  absl::StatusOr<std::string> attempt = tree->EnsureGroup(7, 1);
  ASSERT_TRUE(attempt.ok()) << attempt.status();
  const RankMemoryLimit limit = ChooseMemoryLimit(3 * kGiB, tree.get(), *attempt, 1);
  EXPECT_EQ(limit.mechanism, MemoryMechanism::kRlimitData);
  EXPECT_THAT(limit.log_line, HasSubstr("RLIMIT_DATA (the cgroup v2 memory controller is "
                                        "not delegated to " +
                                        dir.path() + ")"));
  // Nothing was set up for a rank group.
  struct stat st;
  EXPECT_NE(::stat((*attempt + "/rank-1").c_str(), &st), 0);
}

TEST(MemoryLimitTest, DelegatedMemoryControllerSetsMemoryMaxOnARankGroup) {
  TempDir dir;
  std::unique_ptr<CgroupTree> tree = FakeTree(dir, /*memory=*/true);
  ASSERT_NE(tree, nullptr);
  ASSERT_TRUE(tree->HasMemoryController());
  absl::StatusOr<std::string> attempt = tree->EnsureGroup(7, 1);
  ASSERT_TRUE(attempt.ok()) << attempt.status();
  // The kernel makes these files with the group; the fake tree has them too.
  ASSERT_EQ(::mkdir((*attempt + "/rank-2").c_str(), 0755), 0);
  std::ofstream(*attempt + "/rank-2/memory.swap.max") << "max\n";
  std::ofstream(*attempt + "/rank-2/memory.oom.group") << "0\n";

  const RankMemoryLimit limit = ChooseMemoryLimit(3 * kGiB, tree.get(), *attempt, 2);
  EXPECT_EQ(limit.mechanism, MemoryMechanism::kCgroup);
  EXPECT_EQ(limit.group, *attempt + "/rank-2");
  EXPECT_EQ(testing::ReadFile(limit.group + "/memory.max"), absl::StrCat(3 * kGiB));
  EXPECT_EQ(testing::ReadFile(limit.group + "/memory.swap.max"), "0");
  EXPECT_EQ(testing::ReadFile(limit.group + "/memory.oom.group"), "1");
  // The controller is handed down to the attempt's children at each level.
  EXPECT_EQ(testing::ReadFile(dir.File("cgroup.subtree_control")), "+memory");
  EXPECT_EQ(testing::ReadFile(*attempt + "/cgroup.subtree_control"), "+memory");
  EXPECT_EQ(limit.log_line,
            "tessera-worker: memory_per_rank 3 GiB: enforced by "
            "memory.max on cgroup " +
                limit.group);
}

TEST(MemoryLimitTest, OomKillsAreReadFromMemoryEvents) {
  EXPECT_EQ(OomKillsIn("low 0\nhigh 0\nmax 12\noom 2\noom_kill 1\noom_group_kill 1\n"),
            1);
  EXPECT_EQ(OomKillsIn("low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\n"), 0);
  EXPECT_EQ(OomKillsIn(""), 0);
}

TEST(MemoryLimitTest, OutOfMemoryReasonNamesTheRankAndTheLimit) {
  RankMemoryLimit cgroup{.bytes = 3 * kGiB, .mechanism = MemoryMechanism::kCgroup};
  RankMemoryLimit rlimit{.bytes = 3 * kGiB, .mechanism = MemoryMechanism::kRlimitData};
  EXPECT_EQ(OutOfMemoryReason(1, cgroup, true, 1, ""),
            "rank 1 exceeded memory_per_rank 3 GiB (out of memory: the kernel's OOM "
            "killer ended it under memory.max)");
  EXPECT_EQ(
      OutOfMemoryReason(1, rlimit, true, 0, "tessera-train: fatal: std::bad_alloc\n"),
      "rank 1 exceeded memory_per_rank 3 GiB (out of memory: an allocation failed "
      "under RLIMIT_DATA)");
  EXPECT_THAT(OutOfMemoryReason(
                  3, rlimit, true, 0,
                  "training failed: [enforce fail at alloc_cpu.cpp:117] "
                  "DefaultCPUAllocator: can't allocate memory: you tried to "
                  "allocate 50331648 bytes. Error code 12 (Cannot allocate memory)"),
              StartsWith("rank 3 exceeded memory_per_rank 3 GiB (out of memory"));
  // Not an out-of-memory end: a clean exit, another failure, no limit.
  EXPECT_EQ(OutOfMemoryReason(1, rlimit, false, 0, "std::bad_alloc"), "");
  EXPECT_EQ(OutOfMemoryReason(1, rlimit, true, 0, "a collective timed out"), "");
  EXPECT_EQ(OutOfMemoryReason(1, cgroup, true, 0, "killed"), "");
  EXPECT_EQ(OutOfMemoryReason(1, RankMemoryLimit{}, true, 1, "std::bad_alloc"), "");
}

class SupervisorMemoryTest : public ::testing::Test {
 protected:
  TempDir dir_;
  PosixLauncher launcher_;
  FakeClock clock_;
};

TEST_F(SupervisorMemoryTest, RlimitDataIsSetInTheChildBeforeExec) {
  Supervisor sup(&launcher_, &clock_, absl::Seconds(5));
  const RankKey key{1, 1, 0};
  ProcessSpec spec;
  // ulimit -d prints the data limit in KiB.
  spec.argv = {"/bin/sh", "-c", "ulimit -d"};
  spec.log_path = dir_.File("rank.log");
  spec.memory_limit_bytes = 256 * kMiB;
  ASSERT_TRUE(sup.Start(key, spec).ok());
  WaitExited(sup, key, absl::Seconds(30));
  EXPECT_EQ(Find(sup, key).memory.mechanism, MemoryMechanism::kRlimitData);
  EXPECT_EQ(testing::ReadFile(spec.log_path),
            "tessera-worker: memory_per_rank 256 MiB: enforced by RLIMIT_DATA (the "
            "worker runs its ranks without cgroups)\n262144\n");
}

// The worker's path end to end for RLIMIT_DATA: a rank allocating 2 GiB under
// 256 MiB fails its allocation, exits, and its exit detail opens with the
// out-of-memory reason; nothing waits on it.
TEST_F(SupervisorMemoryTest, RankPastRlimitDataEndsWithOutOfMemoryReason) {
  Supervisor sup(&launcher_, &clock_, absl::Seconds(5));
  const RankKey key{4, 1, 1};
  ProcessSpec spec;
  spec.argv = {SelfExe(), "--allocate-mib=2048"};
  spec.log_path = dir_.File("rank-1.log");
  spec.memory_limit_bytes = 256 * kMiB;
  const absl::Time start = absl::Now();
  ASSERT_TRUE(sup.Start(key, spec).ok());
  WaitExited(sup, key, absl::Seconds(30));
  const absl::Duration took = absl::Now() - start;
  const RankProcess p = Find(sup, key);
  EXPECT_NE(p.exit.exit_code, 0);
  EXPECT_THAT(p.exit_detail,
              StartsWith("rank 1 exceeded memory_per_rank 256 MiB (out of memory: an "
                         "allocation failed under RLIMIT_DATA)"));
  EXPECT_THAT(testing::ReadFile(spec.log_path), HasSubstr("std::bad_alloc"));
  std::cout << "FIGURE rlimit_data_oom_exit_ms=" << absl::ToInt64Milliseconds(took)
            << std::endl;
}

// The cgroup path over a fake tree: the rank starts in its own group, and an
// OOM kill counted there (as the kernel counts one past memory.max) becomes
// the out-of-memory reason of the SIGKILLed rank.
TEST_F(SupervisorMemoryTest, OomKillInTheRankCgroupEndsWithOutOfMemoryReason) {
  std::unique_ptr<CgroupTree> tree = FakeTree(dir_, /*memory=*/true);
  ASSERT_NE(tree, nullptr);
  Supervisor sup(&launcher_, &clock_, absl::Seconds(5), tree.get());
  const RankKey key{9, 2, 1};
  const std::string rank_group = dir_.File("job-9-attempt-2/rank-1");
  ASSERT_EQ(::mkdir(dir_.File("job-9-attempt-2").c_str(), 0755), 0);
  ASSERT_EQ(::mkdir(rank_group.c_str(), 0755), 0);
  std::ofstream(rank_group + "/cgroup.procs") << "";
  std::ofstream(rank_group + "/memory.events") << "oom 1\noom_kill 1\n";
  ProcessSpec spec;
  spec.argv = {"/bin/sh", "-c", "kill -9 $$"};
  spec.log_path = dir_.File("rank-1.log");
  spec.memory_limit_bytes = 3 * kGiB;
  ASSERT_TRUE(sup.Start(key, spec).ok());
  WaitExited(sup, key, absl::Seconds(30));
  const RankProcess p = Find(sup, key);
  EXPECT_EQ(p.memory.mechanism, MemoryMechanism::kCgroup);
  EXPECT_EQ(p.exit.signal, SIGKILL);
  EXPECT_EQ(p.exit_detail,
            "rank 1 exceeded memory_per_rank 3 GiB (out of memory: the kernel's OOM "
            "killer ended it under memory.max)");
  // The child joined the rank's group, not the attempt's.
  EXPECT_EQ(testing::ReadFile(rank_group + "/cgroup.procs"), "0");
  EXPECT_EQ(testing::ReadFile(rank_group + "/memory.max"), absl::StrCat(3 * kGiB));
}

// The over-allocating rank: touches `mib` MiB in 64 MiB pieces and, as
// tessera-train's main does, turns an exception into a "fatal" line and code 1.
int AllocateMiB(int64_t mib) {
  try {
    std::vector<std::unique_ptr<char[]>> pieces;
    for (int64_t done = 0; done < mib; done += 64) {
      pieces.push_back(std::make_unique<char[]>(64 * kMiB));
      for (int64_t i = 0; i < 64 * kMiB; i += 4096) pieces.back()[i] = 1;
    }
    std::cout << "allocated " << mib << " MiB" << std::endl;
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "tessera-train: fatal: " << e.what() << std::endl;
    return 1;
  }
}

}  // namespace
}  // namespace tessera

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg(argv[i]);
    int64_t mib = 0;
    if (arg.substr(0, 15) == "--allocate-mib=" &&
        absl::SimpleAtoi(arg.substr(15), &mib)) {
      return tessera::AllocateMiB(mib);
    }
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
