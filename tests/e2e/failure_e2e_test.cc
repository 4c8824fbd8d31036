// End-to-end failure handling with real processes on 127.0.0.1: a trainer or a
// worker killed with SIGKILL, cancel, logs after the worker is gone, and a
// coordinator killed and restarted mid-job.
#include <signal.h>

#include <fstream>
#include <map>
#include <set>

#include "gmock/gmock.h"
#include "tests/e2e/cluster_fixture.h"

namespace tessera {
namespace {

using ::testing::HasSubstr;

// A 2-rank job on synthetic data that runs until stopped (or `steps` steps).
std::string LongJob(int64_t steps = 1000000, int metrics_every = 5) {
  return absl::StrCat(R"(name: e2e-long
world_size: 2
trainer:
  model: vit-micro
  dataset: synthetic
  epochs: 1000
  max_steps: )",
                      steps, R"(
  batch_size: 16
  train_subset: 512
  test_subset: 64
  metrics_every: )",
                      metrics_every, "\n");
}

class FailureTest : public ClusterTest {
 protected:
  void StartCluster(std::vector<std::string> coordinator_flags = {}) {
    StartCoordinator(0, coordinator_flags);
    StartWorker("w1", port_);
    StartWorker("w2", port_);
    WaitForWorkers(2);
  }

  // Waits until none of the job's trainer processes is left.
  bool NoTrainersWithin(int64_t id, absl::Duration timeout) {
    const absl::Time until = absl::Now() + timeout;
    while (absl::Now() < until) {
      if (TrainerPids(id).empty()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return TrainerPids(id).empty();
  }
};

TEST_F(FailureTest, KilledTrainerFailsJobAndStopsTheOtherRank) {
  StartCluster();
  const int64_t id = Submit(LongJob());
  WaitForTraining(id, 2, absl::Minutes(2));
  v1::Job job = Get(id);
  ASSERT_EQ(job.ranks_size(), 2);
  const pid_t victim = job.ranks(0).pid();
  ASSERT_GT(victim, 0);
  ASSERT_EQ(kill(victim, SIGKILL), 0);

  job = WaitForEnd(id, absl::Minutes(1));
  EXPECT_EQ(job.state(), v1::JOB_STATE_FAILED);
  // Whichever worker reports first names the failure (the survivor may exit on
  // its own when its peer's connection drops); the victim's record is exact.
  ASSERT_EQ(job.ranks_size(), 2);
  EXPECT_EQ(job.ranks(0).signal(), SIGKILL);
  EXPECT_THAT(job.ranks(0).exit_reason(), HasSubstr("signal 9"));
  // The worker's kill grace is 3 s; the survivor must be gone well within it.
  EXPECT_TRUE(NoTrainersWithin(id, absl::Seconds(10)))
      << "trainer processes survive: " << TrainerPids(id).size();
}

TEST_F(FailureTest, KilledWorkerDaemonIsDetectedAndLeavesNoOrphans) {
  StartCluster({"--worker-suspect-after-ms", "1000", "--worker-dead-after-ms", "3000"});
  const int64_t id = Submit(LongJob());
  WaitForTraining(id, 2, absl::Minutes(2));
  const absl::Time killed_at = absl::Now();
  workers_[0]->Signal(SIGKILL);
  workers_[0]->Wait(absl::Seconds(10));

  v1::Job job = WaitForEnd(id, absl::Seconds(30));
  EXPECT_EQ(job.state(), v1::JOB_STATE_FAILED);
  EXPECT_LT(absl::Now() - killed_at, absl::Seconds(20));
  // The dead worker's trainer dies with it (PR_SET_PDEATHSIG); the survivor is
  // stopped by its worker.
  EXPECT_TRUE(NoTrainersWithin(id, absl::Seconds(10)))
      << "orphaned trainer processes: " << TrainerPids(id).size();
  // The coordinator declares the silent worker dead.
  bool declared_dead = false;
  for (int i = 0; i < 100 && !declared_dead; ++i) {
    grpc::ClientContext ctx;
    v1::ListWorkersResponse resp;
    ASSERT_TRUE(jobs_->ListWorkers(&ctx, v1::ListWorkersRequest(), &resp).ok());
    for (const auto& w : resp.workers()) declared_dead |= w.name() == "w1" && !w.alive();
    if (!declared_dead) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_TRUE(declared_dead);
  EXPECT_LT(absl::Now() - killed_at, absl::Seconds(20));
  workers_.erase(workers_.begin());  // already gone; TearDown checks the rest
}

TEST_F(FailureTest, CancelStopsEveryRankAndRecordsCancelled) {
  StartCluster();
  const int64_t id = Submit(LongJob());
  WaitForTraining(id, 2, absl::Minutes(2));
  grpc::ClientContext ctx;
  v1::CancelJobRequest req;
  req.set_job_id(id);
  v1::CancelJobResponse resp;
  ASSERT_TRUE(jobs_->CancelJob(&ctx, req, &resp).ok());
  EXPECT_EQ(resp.state(), v1::JOB_STATE_CANCELLED);
  EXPECT_TRUE(NoTrainersWithin(id, absl::Seconds(10)));
  v1::Job job = WaitForEnd(id, absl::Seconds(30));
  EXPECT_EQ(job.state(), v1::JOB_STATE_CANCELLED);
  EXPECT_EQ(job.reason(), "cancelled by user");
}

TEST_F(FailureTest, LogsStayReadableAfterWorkersAreGone) {
  StartCluster();
  const int64_t id = Submit(LongJob(/*steps=*/20));
  v1::Job job = WaitForEnd(id, absl::Minutes(2));
  ASSERT_EQ(job.state(), v1::JOB_STATE_SUCCEEDED) << DumpLogs();
  for (auto& w : workers_) {
    w->Signal(SIGTERM);
    ASSERT_TRUE(w->Wait(absl::Seconds(20)).has_value());
  }
  workers_.clear();
  std::filesystem::remove_all(dir_.File("work-w1"));
  std::filesystem::remove_all(dir_.File("work-w2"));

  for (int rank = 0; rank < 2; ++rank) {
    std::string text;
    v1::GetLogsRequest req;
    req.set_job_id(id);
    req.set_rank(rank);
    // Pages until an empty one; a log that never ends is a failure, not a hang.
    bool ended = false;
    for (int page = 0; page < 10000 && !ended; ++page) {
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
      v1::GetLogsResponse resp;
      ASSERT_TRUE(jobs_->GetLogs(&ctx, req, &resp).ok());
      if (resp.data().empty()) {
        EXPECT_TRUE(resp.complete());
        ended = true;
      }
      text += resp.data();
      req.set_offset(resp.next_offset());
    }
    ASSERT_TRUE(ended) << "rank " << rank << "'s log did not end after 10000 pages";
    EXPECT_THAT(text, HasSubstr("step")) << "rank " << rank << " log:\n" << text;
  }
}

TEST_F(FailureTest, CoordinatorKilledMidJobRestartsAndJobCompletesWithoutLostSteps) {
  const int port = testing::PickUnusedPort();
  StartCoordinator(port);
  StartWorker("w1", port_);
  StartWorker("w2", port_);
  WaitForWorkers(2);
  const int64_t steps = 300;
  const int every = 5;
  const int64_t id = Submit(LongJob(steps, every));
  WaitForTraining(id, 2, absl::Minutes(2));

  coordinator_->Signal(SIGKILL);
  coordinator_->Wait(absl::Seconds(10));
  std::this_thread::sleep_for(std::chrono::seconds(2));  // a short outage
  StartCoordinator(port);

  v1::Job job = WaitForEnd(id, absl::Minutes(3));
  ASSERT_EQ(job.state(), v1::JOB_STATE_SUCCEEDED) << job.reason() << "\n" << DumpLogs();
  EXPECT_EQ(job.attempt(), 1);
  std::map<int32_t, std::set<int64_t>> loss_steps;
  int loss_rows = 0;
  for (const auto& p : Metrics(id)) {
    if (p.name() != "loss") continue;
    loss_steps[p.rank()].insert(p.step());
    ++loss_rows;
  }
  // Every reported step of every rank is stored exactly once.
  for (int32_t rank = 0; rank < 2; ++rank) {
    std::set<int64_t> expected;
    for (int64_t s = every; s <= steps; s += every) expected.insert(s);
    EXPECT_EQ(loss_steps[rank], expected) << "rank " << rank;
  }
  EXPECT_EQ(loss_rows, 2 * steps / every);
}

TEST_F(FailureTest, FiftyConcurrentSubmitsWithRetriesMakeExactlyFiftyJobs) {
  StartCoordinator();
  constexpr int kClients = 50;
  std::vector<std::thread> clients;
  std::vector<int64_t> first(kClients, -1), retried(kClients, -2);
  std::vector<std::string> errors(kClients);  // why a submit failed, for the report
  for (int i = 0; i < kClients; ++i) {
    clients.emplace_back([&, i] {
      // Each client has its own connection, like separate tessctl processes.
      grpc::ChannelArguments args;
      args.SetInt("tessera.test.client", i);
      auto stub =
          v1::JobService::NewStub(grpc::experimental::CreateCustomChannelWithInterceptors(
              absl::StrCat("127.0.0.1:", port_), grpc::InsecureChannelCredentials(), args,
              testing::BearerInterceptors(user_token_)));
      absl::StatusOr<v1::JobSpec> spec = ParseAndValidateJobSpec(LongJob(), SpecLimits{});
      v1::SubmitJobRequest req;
      *req.mutable_spec() = *spec;
      req.set_client_request_id(absl::StrCat("e2e-client-", i));
      for (int64_t* out : {&first[i], &retried[i]}) {  // the retry reuses the request id
        grpc::ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
        // A connection attempt can fail on a loaded machine (gRPC then fails
        // calls at once for a second): like tessctl, which retries UNAVAILABLE
        // with backoff, the call waits for its connection, within the deadline.
        ctx.set_wait_for_ready(true);
        v1::SubmitJobResponse resp;
        const grpc::Status status = stub->SubmitJob(&ctx, req, &resp);
        if (status.ok()) {
          *out = resp.job_id();
        } else {
          absl::StrAppend(&errors[i], status.error_code(), " ", status.error_message(),
                          "; ");
        }
      }
    });
  }
  for (auto& t : clients) t.join();
  std::set<int64_t> ids;
  for (int i = 0; i < kClients; ++i) {
    EXPECT_EQ(first[i], retried[i]) << "client " << i << ": " << errors[i];
    ids.insert(first[i]);
  }
  EXPECT_EQ(ids.size(), static_cast<size_t>(kClients));
  grpc::ClientContext ctx;
  v1::ListJobsResponse list;
  ASSERT_TRUE(jobs_->ListJobs(&ctx, v1::ListJobsRequest(), &list).ok());
  EXPECT_EQ(list.jobs_size(), kClients);
}

TEST_F(FailureTest, RankThatNeverJoinsTimesOutRendezvousNamingIt) {
  StartCoordinator(0, {"--rendezvous-timeout-ms", "4000"});
  // w2's "trainer" starts but never reaches the rendezvous.
  const std::string stuck = dir_.File("stuck-trainer");
  {
    std::ofstream script(stuck);
    script << "#!/bin/sh\nexec sleep 600\n";
  }
  std::filesystem::permissions(stuck, std::filesystem::perms::owner_all);
  StartWorker("w1", port_);
  StartWorker("w2", port_, {"--trainer", stuck});
  WaitForWorkers(2);
  const int64_t id = Submit(LongJob());
  v1::Job job = WaitForEnd(id, absl::Minutes(1));
  EXPECT_EQ(job.state(), v1::JOB_STATE_FAILED);
  EXPECT_THAT(job.reason(), HasSubstr("never joined"));
  EXPECT_THAT(job.reason(), HasSubstr("on w2"));
  // The rank that did join is released and exits; the stuck one is stopped.
  EXPECT_TRUE(NoTrainersWithin(id, absl::Seconds(15)));
  bool stuck_gone = false;
  for (int i = 0; i < 150 && !stuck_gone; ++i) {
    stuck_gone = testing::FindProcesses({"sleep", "600"}).empty();
    if (!stuck_gone) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_TRUE(stuck_gone) << "the rank that never joined was not stopped";
}

TEST_F(FailureTest, KilledTrainerRestartsAsNewAttemptFromCheckpointWhenAllowed) {
  StartCluster();
  const std::string yaml = absl::StrCat(R"(name: e2e-restart
world_size: 2
max_restarts: 1
trainer:
  model: vit-micro
  dataset: synthetic
  epochs: 1
  max_steps: 200
  batch_size: 16
  train_subset: 4096
  test_subset: 64
  metrics_every: 5
  checkpoint_every: 20
  checkpoint_dir: )",
                                        dir_.File("ckpt"), "\n");
  const int64_t id = Submit(yaml);
  WaitForTraining(id, 2, absl::Minutes(2));
  // Let a checkpoint land, then kill rank 1.
  const absl::Time until = absl::Now() + absl::Minutes(1);
  while (absl::Now() < until && !std::filesystem::exists(dir_.File("ckpt/latest"))) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  v1::Job job = Get(id);
  ASSERT_EQ(job.attempt(), 1);
  ASSERT_EQ(kill(job.ranks(1).pid(), SIGKILL), 0);

  job = WaitForEnd(id, absl::Minutes(3));
  EXPECT_EQ(job.state(), v1::JOB_STATE_SUCCEEDED) << job.reason() << "\n" << DumpLogs();
  EXPECT_EQ(job.attempt(), 2);
  std::vector<v1::JobState> states;
  for (const auto& e : job.events()) states.push_back(e.to_state());
  EXPECT_THAT(states, ::testing::Contains(v1::JOB_STATE_QUEUED).Times(2));
  // Attempt 2 resumed: its first reported step is past the checkpoint, not 5.
  int64_t first_step_of_attempt_2 = -1;
  for (const auto& p : Metrics(id)) {
    if (p.attempt() == 2 && p.name() == "loss" &&
        (first_step_of_attempt_2 < 0 || p.step() < first_step_of_attempt_2)) {
      first_step_of_attempt_2 = p.step();
    }
  }
  EXPECT_GT(first_step_of_attempt_2, 5) << "attempt 2 started from scratch";
  EXPECT_TRUE(NoTrainersWithin(id, absl::Seconds(10)));
}

}  // namespace
}  // namespace tessera
