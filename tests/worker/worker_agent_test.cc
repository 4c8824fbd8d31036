// WorkerAgent against a scripted coordinator (FakeWorkerService, in-process
// gRPC) with real rank processes (a /bin/sh fake trainer): what registration
// lists, preempt and kill orders, and the drain that SIGTERM and SIGUSR1
// start (Drain(), Preempt()).
#include "worker/worker_agent.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/trainer_exit.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/test_util.h"
#include "tests/worker/fake_worker_service.h"
#include "worker/supervisor.h"

namespace tessera {
namespace {

using ::tessera::testing::FakeCoordinator;
using ::tessera::testing::FakeWorkerService;
using ::tessera::testing::OnUsr1;
using ::tessera::testing::Order;
using ::tessera::testing::TempDir;
using Key = FakeWorkerService::Key;

int CountLines(const std::string& path) {
  int n = 0;
  for (absl::string_view line :
       absl::StrSplit(testing::ReadFile(path), '\n', absl::SkipEmpty())) {
    (void)line;
    ++n;
  }
  return n;
}

char StateOf(pid_t pid) {
  return ProcStatState(testing::ReadFile(absl::StrCat("/proc/", pid, "/stat")));
}

class WorkerAgentTest : public ::testing::Test {
 protected:
  ~WorkerAgentTest() override { StopAgent(); }

  WorkerOptions Options() {
    WorkerOptions options;
    options.name = "w1";
    options.hostname = "localhost";
    options.cpu_slots = 2;
    options.work_dir = dir_.File("work");
    options.state_dir = "";
    options.trainer_path = dir_.File("trainer.sh");
    options.allow_root_jobs = true;  // the test may run as root
    options.rpc_timeout = absl::Seconds(5);
    options.initial_backoff = absl::Milliseconds(50);
    options.kill_grace = absl::Seconds(60);  // longer than any test waits
    options.drain_timeout = absl::Seconds(60);
    options.pool = "test-pool";
    options.slurm_job_id = "4242";
    return options;
  }

  void StartAgent(WorkerOptions options) {
    std::filesystem::create_directories(options.work_dir);
    agent_ = std::make_unique<WorkerAgent>(options, coordinator_.InProcessChannel(),
                                           &launcher_);
    returned_ = std::make_unique<absl::Notification>();
    thread_ = std::thread([this] {
      agent_->Run();
      returned_->Notify();
    });
  }

  void StopAgent() {
    if (agent_ == nullptr) return;
    agent_->Stop();
    thread_.join();
    agent_.reset();
  }

  // Waits for Run() to return; the time it took.
  std::optional<absl::Duration> WaitReturned(absl::Duration timeout) {
    const absl::Time start = absl::Now();
    if (!returned_->WaitForNotificationWithTimeout(timeout)) return std::nullopt;
    return absl::Now() - start;
  }

  std::string RankFile(int rank, const std::string& ext) const {
    return dir_.File(absl::StrCat("rank-", rank, ".", ext));
  }

  // The pid the fake trainer of `rank` wrote once its traps were set.
  pid_t WaitForRank(int rank) {
    const std::string path = RankFile(rank, "pid");
    const absl::Time until = absl::Now() + absl::Seconds(20);
    while (absl::Now() < until) {
      int pid = 0;
      if (absl::SimpleAtoi(absl::StripAsciiWhitespace(testing::ReadFile(path)), &pid)) {
        return pid;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ADD_FAILURE() << "rank " << rank << " did not start";
    return 0;
  }

  // Waits until the fake trainer of `rank` has handled a SIGUSR2 sent now. A
  // signal sent to it before that one has been handled by then too.
  void SyncWithRank(int rank, pid_t pid) {
    const int before = CountLines(RankFile(rank, "usr2"));
    ASSERT_EQ(::kill(pid, SIGUSR2), 0);
    const absl::Time until = absl::Now() + absl::Seconds(10);
    while (CountLines(RankFile(rank, "usr2")) == before && absl::Now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    ASSERT_GT(CountLines(RankFile(rank, "usr2")), before);
  }

  bool WaitForLines(const std::string& path, int n) {
    const absl::Time until = absl::Now() + absl::Seconds(10);
    while (CountLines(path) < n && absl::Now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return CountLines(path) >= n;
  }

  // Number of heartbeats the fake has taken so far.
  size_t Heartbeats() {
    return service().Read(
        [](const FakeWorkerService& s) { return s.heartbeats_.size(); });
  }
  // Waits until `n` more heartbeats than now have arrived.
  bool WaitHeartbeats(size_t n) {
    const size_t target = Heartbeats() + n;
    return service().WaitUntil(
        [target](const FakeWorkerService& s) { return s.heartbeats_.size() >= target; },
        absl::Seconds(10));
  }

  FakeWorkerService& service() { return coordinator_.service(); }

  TempDir dir_;
  FakeCoordinator coordinator_;
  PosixLauncher launcher_;
  std::unique_ptr<WorkerAgent> agent_;
  std::unique_ptr<absl::Notification> returned_;
  std::thread thread_;
};

// ---- Registration ----

TEST_F(WorkerAgentTest, FreshWorkerRegistersWithNoRanksAndItsPoolAndSlurmJob) {
  testing::WriteFakeTrainer(dir_.File("trainer.sh"), dir_.path(), OnUsr1::kCarryOn);
  StartAgent(Options());
  ASSERT_TRUE(WaitHeartbeats(1));
  const v1::RegisterWorkerRequest reg =
      service().Read([](const FakeWorkerService& s) { return s.registrations_.front(); });
  EXPECT_EQ(reg.ranks_size(), 0);
  EXPECT_EQ(reg.pool(), "test-pool");
  EXPECT_EQ(reg.slurm_job_id(), "4242");
  EXPECT_EQ(reg.slots(), 2);
}

TEST_F(WorkerAgentTest, SlurmWorkerWhoseJoinCredentialIsRefusedStopsSoItsAllocationEnds) {
  testing::WriteFakeTrainer(dir_.File("trainer.sh"), dir_.path(), OnUsr1::kCarryOn);
  service().RefuseRegistrations(grpc::StatusCode::UNAUTHENTICATED);
  StartAgent(Options());  // slurm_job_id "4242"
  const std::optional<absl::Duration> took = WaitReturned(absl::Seconds(20));
  ASSERT_TRUE(took.has_value()) << "Run() still retries";
  EXPECT_TRUE(agent_->refused());
  EXPECT_EQ(
      service().Read([](const FakeWorkerService& s) { return s.registrations_.size(); }),
      1u);
  std::printf("FIGURE slurm_refused_worker_exit_s=%.2f\n", absl::ToDoubleSeconds(*took));
}

TEST_F(WorkerAgentTest, SlurmWorkerRefusedMidSessionStopsItsRanksAndItself) {
  testing::WriteFakeTrainer(dir_.File("trainer.sh"), dir_.path(), OnUsr1::kCarryOn);
  WorkerOptions options = Options();  // slurm_job_id "4242"
  options.kill_grace = absl::Seconds(1);
  StartAgent(options);
  ASSERT_TRUE(WaitHeartbeats(1));
  service().QueueLaunch(testing::Launch(1, 0, 0, 1));
  const pid_t pid = WaitForRank(0);
  ASSERT_GT(pid, 0);
  // The coordinator revokes the allocation's join credential.
  service().RefuseRegistrations(grpc::StatusCode::UNAUTHENTICATED);
  ASSERT_TRUE(WaitReturned(absl::Seconds(20)).has_value()) << "Run() still retries";
  EXPECT_TRUE(agent_->refused());
  const absl::Time until = absl::Now() + absl::Seconds(5);
  while (::kill(pid, 0) == 0 && absl::Now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_NE(::kill(pid, 0), 0) << "the rank outlived its worker";
}

TEST_F(WorkerAgentTest, StaticWorkerWhoseJoinCredentialIsRefusedKeepsRetrying) {
  testing::WriteFakeTrainer(dir_.File("trainer.sh"), dir_.path(), OnUsr1::kCarryOn);
  service().RefuseRegistrations(grpc::StatusCode::UNAUTHENTICATED);
  WorkerOptions options = Options();
  options.slurm_job_id.clear();
  options.pool.clear();
  StartAgent(options);
  // It keeps asking (backoff from 50 ms) and joins once the token is good.
  ASSERT_TRUE(service().WaitUntil(
      [](const FakeWorkerService& s) { return s.registrations_.size() >= 3; },
      absl::Seconds(10)));
  EXPECT_FALSE(WaitReturned(absl::Milliseconds(1)).has_value());
  service().RefuseRegistrations(grpc::StatusCode::OK);
  ASSERT_TRUE(service().WaitUntil(
      [](const FakeWorkerService& s) { return !s.heartbeats_.empty(); },
      absl::Seconds(20)));
  EXPECT_FALSE(agent_->refused());
}

TEST_F(WorkerAgentTest,
       ReRegistrationListsRunningRanksAndUnacknowledgedExitsAsAHeartbeat) {
  // Rank 1 exits with code 3 at once; rank 0 runs on.
  testing::WriteFakeTrainer(dir_.File("trainer.sh"), dir_.path(), OnUsr1::kCarryOn, false,
                            "1", 3);
  service().SetAcknowledgeExits(false);
  StartAgent(Options());
  service().QueueLaunch(testing::Launch(7, 2, 0, 2));
  service().QueueLaunch(testing::Launch(7, 2, 1, 2));
  const pid_t pid = WaitForRank(0);
  ASSERT_TRUE(service().WaitUntil(
      [](const FakeWorkerService& s) {
        return s.exits_.contains(Key{7, 2, 1});
      },
      absl::Seconds(10)));
  ASSERT_TRUE(WaitHeartbeats(1));

  service().ForgetSession();
  ASSERT_TRUE(service().WaitUntil(
      [](const FakeWorkerService& s) { return s.registrations_.size() == 2; },
      absl::Seconds(10)));
  const auto [reg, last_heartbeat] = service().Read([](const FakeWorkerService& s) {
    return std::make_pair(s.registrations_.back(), s.heartbeats_.back());
  });
  ASSERT_EQ(reg.ranks_size(), 2) << reg.ShortDebugString();
  EXPECT_EQ(reg.ranks(0).job_id(), 7);
  EXPECT_EQ(reg.ranks(0).attempt(), 2);
  EXPECT_EQ(reg.ranks(0).rank(), 0);
  EXPECT_EQ(reg.ranks(0).pid(), pid);
  EXPECT_FALSE(reg.ranks(0).exited());
  EXPECT_EQ(reg.ranks(1).rank(), 1);
  EXPECT_TRUE(reg.ranks(1).exited());
  EXPECT_EQ(reg.ranks(1).exit_code(), 3);
  // Exactly the list the last heartbeat before it carried.
  ASSERT_EQ(last_heartbeat.ranks_size(), 2);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(reg.ranks(i).SerializeAsString(),
              last_heartbeat.ranks(i).SerializeAsString());
  }
  service().SetAcknowledgeExits(true);  // lets the agent stop without waiting
}

// ---- GPUs ----

TEST_F(WorkerAgentTest, RanksSeeOnlyTheGpusTheWorkerWasGiven) {
  // Slurm gave the worker GPUs 2 and 3 of an 8-GPU node (device_probe.h).
  // The fake trainer writes the CUDA_VISIBLE_DEVICES it got, then exits.
  const std::string trainer = dir_.File("trainer.sh");
  std::ofstream(trainer) << "#!/bin/sh\necho \"${CUDA_VISIBLE_DEVICES-unset}\" > "
                         << dir_.path() << "/job-$TESSERA_JOB_ID-rank-$RANK.cvd\n";
  ::chmod(trainer.c_str(), 0755);
  WorkerOptions options = Options();
  options.gpu_ids = {"2", "3"};
  StartAgent(options);
  for (int rank = 0; rank < 2; ++rank) {
    v1::LaunchOrder order = testing::Launch(7, 1, rank, 2);
    order.add_local_slots(0);
    order.add_local_slots(1);
    service().QueueLaunch(order);
  }
  // A slot the worker does not have: refused, never a GPU outside the set.
  v1::LaunchOrder outside = testing::Launch(8, 1, 0, 1);
  outside.set_slot(2);
  service().QueueLaunch(outside);
  ASSERT_TRUE(service().WaitUntil(
      [](const FakeWorkerService& s) {
        return s.exits_.contains(Key{7, 1, 0}) && s.exits_.contains(Key{7, 1, 1}) &&
               s.exits_.contains(Key{8, 1, 0});
      },
      absl::Seconds(20)));
  const v1::RegisterWorkerRequest reg =
      service().Read([](const FakeWorkerService& s) { return s.registrations_.front(); });
  EXPECT_EQ(reg.slots(), 2);
  EXPECT_EQ(reg.device_kind(), "cuda");
  EXPECT_THAT(reg.gpu_ids(), ::testing::ElementsAre("2", "3"));
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(testing::ReadFile(dir_.File(absl::StrCat("job-7-rank-", rank, ".cvd"))),
              "2,3\n")
        << "rank " << rank;
  }
  const v1::LocalRank refused = service().Read([](const FakeWorkerService& s) {
    return s.exits_.at(Key{8, 1, 0});
  });
  EXPECT_THAT(refused.launch_error(), ::testing::HasSubstr("slot 2 is not one of"));
  EXPECT_FALSE(std::filesystem::exists(dir_.File("job-8-rank-0.cvd")));
}

// ---- GPU readings ----

TEST_F(WorkerAgentTest, HeartbeatsCarryTheNvmlReadingsOfEachOwnedGpu) {
  testing::WriteFakeTrainer(dir_.File("trainer.sh"), dir_.path(), OnUsr1::kCarryOn);
  WorkerOptions options = Options();
  // The fake NVML knows GPUs 0 and 1 (also as GPU-fake-0/1), not 7.
  options.gpu_ids = {"1", "GPU-fake-0", "7"};
  options.nvml_library = TESSERA_FAKE_NVML;
  StartAgent(options);
  ASSERT_TRUE(WaitHeartbeats(1));
  const v1::HeartbeatRequest beat =
      service().Read([](const FakeWorkerService& s) { return s.heartbeats_.back(); });
  ASSERT_EQ(beat.gpus_size(), 2) << beat.DebugString();
  const v1::WorkerGpuReading& one = beat.gpus(0);
  EXPECT_EQ(one.gpu_id(), "1");
  EXPECT_EQ(one.utilization_percent(), 50);
  EXPECT_EQ(one.memory_used_bytes(), int64_t{2} << 30);
  EXPECT_EQ(one.memory_total_bytes(), int64_t{16} << 30);
  EXPECT_EQ(one.temperature_celsius(), 51);
  EXPECT_DOUBLE_EQ(one.power_watts(), 101.5);
  EXPECT_EQ(beat.gpus(1).gpu_id(), "GPU-fake-0");
  EXPECT_EQ(beat.gpus(1).utilization_percent(), 40);
}

TEST_F(WorkerAgentTest, WithoutNvmlHeartbeatsCarryNoGpuReadingsAndTheWorkerServes) {
  testing::WriteFakeTrainer(dir_.File("trainer.sh"), dir_.path(), OnUsr1::kCarryOn);
  WorkerOptions options = Options();
  options.gpu_ids = {"0", "1"};
  options.nvml_library = "libtessera-no-such-nvml.so.1";  // no driver on the node
  StartAgent(options);
  ASSERT_TRUE(WaitHeartbeats(2));
  const std::vector<v1::HeartbeatRequest> beats =
      service().Read([](const FakeWorkerService& s) { return s.heartbeats_; });
  for (const v1::HeartbeatRequest& beat : beats) EXPECT_EQ(beat.gpus_size(), 0);
  EXPECT_EQ(
      service().Read([](const FakeWorkerService& s) { return s.registrations_.size(); }),
      1u);
}

// ---- Step profile ----

TEST_F(WorkerAgentTest, ProfileStepsReachTheTrainerWithAProfileFolderBesideItsLog) {
  // The fake trainer writes its arguments, one per line, and whether the
  // folder --profile-dir names exists and is writable by it.
  const std::string trainer = dir_.File("trainer.sh");
  std::ofstream(trainer)
      << "#!/bin/sh\nout=" << dir_.path()
      << "/job-$TESSERA_JOB_ID-rank-$RANK.args\n"
         ": > $out\n"
         "for a in \"$@\"; do echo \"$a\" >> $out; case \"$a\" in "
         "--profile-dir=*) d=${a#--profile-dir=}; "
         "touch \"$d/trace.json\" && echo writable >> $out;; esac; done\n";
  ::chmod(trainer.c_str(), 0755);
  StartAgent(Options());
  v1::LaunchOrder profiled = testing::Launch(7, 1, 0, 1);
  profiled.mutable_trainer()->set_profile_steps("3-5");
  service().QueueLaunch(profiled);
  service().QueueLaunch(testing::Launch(8, 1, 0, 1));  // no profile
  ASSERT_TRUE(service().WaitUntil(
      [](const FakeWorkerService& s) {
        return s.exits_.contains(Key{7, 1, 0}) && s.exits_.contains(Key{8, 1, 0});
      },
      absl::Seconds(20)));
  const std::string folder = dir_.File("work/job-7/attempt-1/rank-0.profile");
  const std::vector<std::string> args =
      absl::StrSplit(testing::ReadFile(dir_.File("job-7-rank-0.args")), '\n');
  EXPECT_THAT(args, ::testing::Contains("--profile-steps=3-5"));
  EXPECT_THAT(args, ::testing::Contains(absl::StrCat("--profile-dir=", folder)));
  EXPECT_THAT(args, ::testing::Contains("writable"));
  // Beside the rank's log.
  EXPECT_TRUE(std::filesystem::exists(dir_.File("work/job-7/attempt-1/rank-0.log")));
  EXPECT_TRUE(std::filesystem::exists(folder + "/trace.json"));
  const std::string plain = testing::ReadFile(dir_.File("job-8-rank-0.args"));
  EXPECT_THAT(plain, ::testing::Not(::testing::HasSubstr("--profile")));
  EXPECT_FALSE(std::filesystem::exists(dir_.File("work/job-8/attempt-1/rank-0.profile")));
}

// ---- Orders ----

TEST_F(WorkerAgentTest, PreemptOrderSendsSigusr1ToTheTrainerOnceHoweverOftenRepeated) {
  testing::WriteFakeTrainer(dir_.File("trainer.sh"), dir_.path(), OnUsr1::kCarryOn);
  StartAgent(Options());
  service().QueueLaunch(testing::Launch(8, 1, 0, 1));
  const pid_t pid = WaitForRank(0);
  service().QueuePreempt(Order(8, 1, 0), 5);
  ASSERT_TRUE(service().WaitUntil(
      [](const FakeWorkerService& s) { return s.preempts_sent_ == 5; },
      absl::Seconds(10)));
  ASSERT_TRUE(WaitHeartbeats(1));  // the agent has acted on the last reply
  SyncWithRank(0, pid);
  EXPECT_EQ(CountLines(RankFile(0, "usr1")), 1) << "one SIGUSR1 for five orders";
  EXPECT_EQ(::kill(pid, 0), 0) << "the rank runs on until it exits by itself";
}

TEST_F(WorkerAgentTest, KillOrderEndsAStoppedRankAtOnceWithSigkill) {
  testing::WriteFakeTrainer(dir_.File("trainer.sh"), dir_.path(), OnUsr1::kCarryOn);
  StartAgent(Options());  // kill grace 60 s
  service().QueueLaunch(testing::Launch(9, 1, 0, 1));
  const pid_t pid = WaitForRank(0);
  ASSERT_EQ(::kill(pid, SIGSTOP), 0);
  for (int i = 0; i < 1000 && StateOf(pid) != 'T'; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_EQ(StateOf(pid), 'T');

  const absl::Time ordered = absl::Now();
  service().QueueKill(Order(9, 1, 0));
  ASSERT_TRUE(service().WaitUntil(
      [](const FakeWorkerService& s) {
        return s.exits_.contains(Key{9, 1, 0});
      },
      absl::Seconds(20)))
      << "a stopped rank must not wait for the 60 s kill grace";
  const absl::Duration took = absl::Now() - ordered;
  const v1::LocalRank exit = service().Read([](const FakeWorkerService& s) {
    return s.exits_.at(Key{9, 1, 0});
  });
  EXPECT_EQ(exit.signal(), SIGKILL);
  std::cout << "FIGURE stopped_rank_kill_ms=" << absl::ToInt64Milliseconds(took)
            << std::endl;
}

// ---- Drain (SIGTERM) ----

TEST_F(WorkerAgentTest, DrainAsksRanksToLeaveAndReturnsOnceTheirExitsAreAcknowledged) {
  testing::WriteFakeTrainer(dir_.File("trainer.sh"), dir_.path(), OnUsr1::kExitPreempted);
  StartAgent(Options());  // drain timeout 60 s
  service().QueueLaunch(testing::Launch(10, 1, 0, 2));
  service().QueueLaunch(testing::Launch(10, 1, 1, 2));
  WaitForRank(0);
  WaitForRank(1);
  const size_t before = Heartbeats();

  agent_->Drain();
  std::optional<absl::Duration> took = WaitReturned(absl::Seconds(30));
  ASSERT_TRUE(took.has_value()) << "Run() did not return after the drain";
  EXPECT_LT(*took, absl::Seconds(30)) << "it ended with its ranks, not the timeout";
  EXPECT_EQ(CountLines(RankFile(0, "usr1")), 1);
  EXPECT_EQ(CountLines(RankFile(1, "usr1")), 1);
  service().Read([&](const FakeWorkerService& s) {
    // Both exits reached the coordinator, with the preempted code, and were
    // acknowledged before the worker went.
    for (int rank : {0, 1}) {
      auto it = s.acknowledged_.find(Key{10, 1, rank});
      if (it == s.acknowledged_.end()) {
        ADD_FAILURE() << "the exit of rank " << rank << " was not acknowledged";
        continue;
      }
      EXPECT_EQ(it->second.exit_code(), kTrainerExitPreempted);
      EXPECT_EQ(it->second.signal(), 0);
    }
    // Every heartbeat from the drain on says so.
    EXPECT_GT(s.heartbeats_.size(), before);
    int draining = 0;
    for (size_t i = before; i < s.heartbeats_.size(); ++i) {
      draining += s.heartbeats_[i].draining() ? 1 : 0;
    }
    EXPECT_GE(draining, static_cast<int>(s.heartbeats_.size() - before) - 1)
        << "at most the heartbeat in flight when Drain() came may lack it";
    EXPECT_TRUE(s.heartbeats_.back().draining());
    return 0;
  });
  std::cout << "FIGURE drain_to_exit_ms=" << absl::ToInt64Milliseconds(*took)
            << std::endl;
}

TEST_F(WorkerAgentTest, DrainWaitsForTheCoordinatorToAcknowledgeExits) {
  testing::WriteFakeTrainer(dir_.File("trainer.sh"), dir_.path(), OnUsr1::kExitPreempted);
  service().SetAcknowledgeExits(false);
  StartAgent(Options());
  service().QueueLaunch(testing::Launch(11, 1, 0, 1));
  WaitForRank(0);
  agent_->Drain();
  ASSERT_TRUE(service().WaitUntil(
      [](const FakeWorkerService& s) {
        return s.exits_.contains(Key{11, 1, 0});
      },
      absl::Seconds(10)));
  // The exit was reported but not acknowledged: the worker stays, and keeps
  // reporting it.
  ASSERT_TRUE(WaitHeartbeats(3));
  EXPECT_FALSE(returned_->HasBeenNotified());
  service().SetAcknowledgeExits(true);
  ASSERT_TRUE(WaitReturned(absl::Seconds(10)).has_value());
  EXPECT_TRUE(service().Read([](const FakeWorkerService& s) {
    return s.acknowledged_.contains(Key{11, 1, 0});
  }));
}

TEST_F(WorkerAgentTest, DrainStopsRanksStillRunningWhenTheDrainTimeoutPasses) {
  testing::WriteFakeTrainer(dir_.File("trainer.sh"), dir_.path(), OnUsr1::kCarryOn);
  WorkerOptions options = Options();
  options.drain_timeout = absl::Seconds(1);
  options.kill_grace = absl::Seconds(1);
  StartAgent(options);
  service().QueueLaunch(testing::Launch(12, 1, 0, 1));
  WaitForRank(0);

  agent_->Drain();
  std::optional<absl::Duration> took = WaitReturned(absl::Seconds(20));
  ASSERT_TRUE(took.has_value());
  EXPECT_GE(*took, absl::Seconds(1)) << "the rank gets the whole drain timeout";
  EXPECT_LT(*took, absl::Seconds(10));
  EXPECT_EQ(CountLines(RankFile(0, "usr1")), 1);
  const v1::LocalRank exit = service().Read([](const FakeWorkerService& s) {
    return s.exits_.at(Key{12, 1, 0});
  });
  EXPECT_EQ(exit.signal(), SIGTERM) << "stopped after the timeout";
  std::cout << "FIGURE drain_timeout_1s_exit_ms=" << absl::ToInt64Milliseconds(*took)
            << std::endl;
}

TEST_F(WorkerAgentTest, SecondDrainStopsAtOnce) {
  testing::WriteFakeTrainer(dir_.File("trainer.sh"), dir_.path(), OnUsr1::kCarryOn);
  WorkerOptions options = Options();
  options.kill_grace = absl::Seconds(2);
  StartAgent(options);  // drain timeout 60 s
  service().QueueLaunch(testing::Launch(13, 1, 0, 1));
  WaitForRank(0);
  agent_->Drain();
  ASSERT_TRUE(WaitForLines(RankFile(0, "usr1"), 1));
  agent_->Drain();
  std::optional<absl::Duration> took = WaitReturned(absl::Seconds(20));
  ASSERT_TRUE(took.has_value());
  EXPECT_LT(*took, absl::Seconds(10));
  EXPECT_EQ(service()
                .Read([](const FakeWorkerService& s) {
                  return s.exits_.at(Key{13, 1, 0});
                })
                .signal(),
            SIGTERM);
}

TEST_F(WorkerAgentTest, ZeroDrainTimeoutStopsAtOnceWithoutAskingRanks) {
  testing::WriteFakeTrainer(dir_.File("trainer.sh"), dir_.path(), OnUsr1::kCarryOn);
  WorkerOptions options = Options();
  options.drain_timeout = absl::ZeroDuration();
  StartAgent(options);
  service().QueueLaunch(testing::Launch(14, 1, 0, 1));
  WaitForRank(0);
  agent_->Drain();
  ASSERT_TRUE(WaitReturned(absl::Seconds(20)).has_value());
  EXPECT_EQ(CountLines(RankFile(0, "usr1")), 0);
  EXPECT_EQ(service()
                .Read([](const FakeWorkerService& s) {
                  return s.exits_.at(Key{14, 1, 0});
                })
                .signal(),
            SIGTERM);
}

// ---- Preemption notice (SIGUSR1) ----

TEST_F(WorkerAgentTest, PreemptionNoticeForwardsSigusr1AndDrainsWithoutReturning) {
  testing::WriteFakeTrainer(dir_.File("trainer.sh"), dir_.path(), OnUsr1::kCarryOn);
  StartAgent(Options());
  service().QueueLaunch(testing::Launch(15, 1, 0, 1));
  const pid_t pid = WaitForRank(0);
  agent_->Preempt();
  ASSERT_TRUE(WaitForLines(RankFile(0, "usr1"), 1));
  ASSERT_TRUE(WaitHeartbeats(2));
  EXPECT_TRUE(service()
                  .Read([](const FakeWorkerService& s) { return s.heartbeats_.back(); })
                  .draining());
  // A rank ordered now does not start: it leaves as a preempted one would.
  service().QueueLaunch(testing::Launch(16, 1, 0, 1));
  ASSERT_TRUE(service().WaitUntil(
      [](const FakeWorkerService& s) {
        return s.exits_.contains(Key{16, 1, 0});
      },
      absl::Seconds(10)));
  const v1::LocalRank refused = service().Read([](const FakeWorkerService& s) {
    return s.exits_.at(Key{16, 1, 0});
  });
  EXPECT_EQ(refused.exit_code(), kTrainerExitPreempted);
  EXPECT_EQ(refused.pid(), 0);
  EXPECT_THAT(refused.launch_error(), ::testing::HasSubstr("draining"));
  EXPECT_FALSE(std::filesystem::exists(dir_.File("work/job-16"))) << "nothing launched";
  // The worker serves on; a second notice asks nobody twice.
  agent_->Preempt();
  ASSERT_TRUE(WaitHeartbeats(2));
  EXPECT_FALSE(returned_->HasBeenNotified());
  SyncWithRank(0, pid);
  EXPECT_EQ(CountLines(RankFile(0, "usr1")), 1);
}

}  // namespace
}  // namespace tessera
