// JobManager with a fake clock: no ghost ranks after a worker restart or a
// lost exit write, drain and preemption without counting restarts, and the
// watchdog ending attempts with an unresponsive rank and flagging stragglers.
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/trainer_exit.h"
#include "coordinator/core/job_manager.h"
#include "coordinator/store/sqlite_store.h"
#include "coordinator/store/store_wrapper.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

namespace v1 = ::tessera::v1;
using ::testing::HasSubstr;
using ::testing::SizeIs;

// Fails rank writes (or every job-state write) on demand, as a full disk would.
class FlakyStore final : public StoreWrapper {
 public:
  using StoreWrapper::StoreWrapper;
  absl::Status PutRanks(const std::vector<RankRecord>& ranks) override {
    if (fail_ranks) return absl::UnavailableError("disk I/O error");
    if (fail_state) return absl::ResourceExhaustedError("database or disk is full");
    return StoreWrapper::PutRanks(ranks);
  }
  absl::Status UpdateJob(const JobRecord& job) override {
    if (fail_state) return absl::ResourceExhaustedError("database or disk is full");
    return StoreWrapper::UpdateJob(job);
  }
  std::atomic<bool> fail_ranks{false};
  std::atomic<bool> fail_state{false};
};

class RobustnessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    db_ = absl::StrCat(::testing::TempDir(), "/robustness_", getpid(), "_",
                       ::testing::UnitTest::GetInstance()->current_test_info()->name(),
                       ".db");
    std::remove(db_.c_str());
    auto store = SqliteStore::Open(db_);
    ASSERT_TRUE(store.ok()) << store.status();
    auto flaky = std::make_unique<FlakyStore>(std::move(*store));
    flaky_ = flaky.get();
    store_ = std::move(flaky);
    writer_ = std::make_unique<StoreWriter>(store_.get());
    options_.worker_suspect_after = absl::Seconds(3);
    options_.worker_dead_after = absl::Seconds(15);
    options_.exit_ack_timeout = absl::Milliseconds(300);
    options_.drain_timeout = absl::Seconds(60);
    manager_ =
        std::make_unique<JobManager>(store_.get(), writer_.get(), &clock_, options_);
  }

  void TearDown() override {
    // Every state change the test caused followed the table in common/job_state.h.
    if (manager_ != nullptr) EXPECT_EQ(manager_->illegal_transitions(), 0);
    flaky_->fail_ranks = false;  // let the writer drain
    flaky_->fail_state = false;
    manager_.reset();
    writer_.reset();
    std::remove(db_.c_str());
  }

  int64_t Register(const std::string& name, int slots,
                   std::vector<v1::LocalRank> ranks = {}) {
    v1::RegisterWorkerRequest req;
    req.set_name(name);
    req.set_slots(slots);
    for (auto& r : ranks) *req.add_ranks() = r;
    auto resp = manager_->workers().RegisterWorker(req);
    EXPECT_TRUE(resp.ok()) << resp.status();
    return resp.ok() ? resp->epoch() : -1;
  }

  absl::StatusOr<v1::HeartbeatResponse> Beat(const std::string& name, int64_t epoch,
                                             std::vector<v1::LocalRank> ranks = {},
                                             bool draining = false) {
    v1::HeartbeatRequest req;
    req.set_name(name);
    req.set_epoch(epoch);
    req.set_draining(draining);
    for (auto& r : ranks) *req.add_ranks() = r;
    return manager_->workers().Heartbeat(req);
  }

  int64_t Submit(int world, int max_restarts = 0) {
    v1::JobSpec spec;
    spec.set_name("job");
    spec.set_world_size(world);
    spec.set_max_restarts(max_restarts);
    spec.mutable_trainer()->set_model("vit-micro");
    spec.mutable_trainer()->set_dataset("synthetic");
    spec.mutable_trainer()->set_batch_size(8);
    spec.mutable_trainer()->set_epochs(1);
    spec.mutable_trainer()->set_checkpoint_dir("/shared/ckpt");
    auto id = manager_->jobs().Submit(spec, "", "");
    EXPECT_TRUE(id.ok()) << id.status();
    return *id;
  }

  v1::Job Get(int64_t id) {
    auto job = manager_->jobs().GetJob(Caller::Admin(), id);
    EXPECT_TRUE(job.ok()) << job.status();
    return *job;
  }

  v1::Worker WorkerNamed(const std::string& name) {
    for (const v1::Worker& w : manager_->workers().ListWorkers(Caller::Admin())) {
      if (w.name() == name) return w;
    }
    ADD_FAILURE() << "no worker " << name;
    return {};
  }

  // Joins every rank of the attempt, so the job is RUNNING.
  void JoinAll(int64_t id, int32_t attempt, int world) {
    for (int r = 0; r < world; ++r) {
      v1::RendezvousRequest req;
      req.set_job_id(id);
      req.set_attempt(attempt);
      req.set_rank(r);
      if (r == 0) req.set_bootstrap("127.0.0.1:1234");
      manager_->ranks().Rendezvous(req, [](absl::StatusOr<v1::RendezvousResponse>) {});
    }
    ASSERT_EQ(Get(id).state(), v1::JOB_STATE_RUNNING);
  }

  void Report(int64_t id, int32_t attempt, int32_t rank, const v1::RankProgress& p) {
    v1::RenewLeaseRequest req;
    req.set_job_id(id);
    req.set_attempt(attempt);
    req.set_rank(rank);
    *req.mutable_progress() = p;
    ASSERT_TRUE(manager_->ranks().RenewLease(req).ok());
  }

  // The trainer's ReportResult, as tessera-train sends it before exiting 0.
  absl::Status Result(JobManager& manager, const v1::LaunchOrder& o) {
    v1::ReportResultRequest req;
    req.set_job_id(o.job_id());
    req.set_attempt(o.attempt());
    req.set_rank(o.rank());
    req.set_param_hash("00112233aabbccdd");
    req.set_test_accuracy(0.82);
    req.set_test_loss(0.5);
    return manager.ranks().ReportResult(req);
  }

  static v1::LocalRank Running(const v1::LaunchOrder& o) {
    v1::LocalRank r;
    r.set_job_id(o.job_id());
    r.set_attempt(o.attempt());
    r.set_rank(o.rank());
    r.set_pid(100 + o.rank());
    return r;
  }
  static v1::LocalRank Exited(const v1::LaunchOrder& o, int code) {
    v1::LocalRank r = Running(o);
    r.set_exited(true);
    r.set_exit_code(code);
    return r;
  }

  std::string db_;
  FakeClock clock_;
  JobManagerOptions options_;
  FlakyStore* flaky_ = nullptr;  // owned by store_
  std::unique_ptr<Store> store_;
  std::unique_ptr<StoreWriter> writer_;
  std::unique_ptr<JobManager> manager_;
};

// ---- no ghost ranks ----

TEST_F(RobustnessTest, WorkerRestartedWithinTheDeadThresholdLosesItsRanksAtOnce) {
  const int64_t e1 = Register("a", 1);
  const int64_t id = Submit(1);
  auto launch = Beat("a", e1);
  ASSERT_EQ(launch->launch_size(), 1);
  ASSERT_TRUE(Beat("a", e1, {Running(launch->launch(0))}).ok());
  ASSERT_EQ(WorkerNamed("a").slots_used(), 1);

  // kill -9 and systemd's restart 2 s later: the new process runs nothing.
  clock_.Advance(absl::Seconds(2));
  const int64_t e2 = Register("a", 1);
  v1::Job job = Get(id);
  EXPECT_EQ(job.state(), v1::JOB_STATE_FAILED);
  EXPECT_THAT(job.reason(),
              HasSubstr("worker a registered again (restarted) without it"));
  EXPECT_EQ(WorkerNamed("a").slots_used(), 0);
  std::printf("FIGURE ghost_slots_after_worker_restart=%d\n",
              WorkerNamed("a").slots_used());

  // The next job is placed there at once.
  const int64_t next = Submit(1);
  auto orders = Beat("a", e2);
  ASSERT_TRUE(orders.ok());
  ASSERT_EQ(orders->launch_size(), 1);
  EXPECT_EQ(orders->launch(0).job_id(), next);
}

TEST_F(RobustnessTest, RegistrationThatListsItsRankKeepsIt) {
  const int64_t e1 = Register("a", 1);
  const int64_t id = Submit(1);
  auto launch = Beat("a", e1);
  ASSERT_TRUE(Beat("a", e1, {Running(launch->launch(0))}).ok());
  // A worker that lost its session (e.g. fenced) but kept its rank lists it.
  Register("a", 1, {Running(launch->launch(0))});
  EXPECT_EQ(Get(id).state(), v1::JOB_STATE_SCHEDULED);
  EXPECT_EQ(WorkerNamed("a").slots_used(), 1);
}

TEST_F(RobustnessTest, HeartbeatThatOmitsARunningRankLosesIt) {
  const int64_t e = Register("a", 2);
  const int64_t id = Submit(2, /*max_restarts=*/1);
  auto launch = Beat("a", e);
  ASSERT_EQ(launch->launch_size(), 2);
  ASSERT_TRUE(
      Beat("a", e, {Running(launch->launch(0)), Running(launch->launch(1))}).ok());
  auto orders = Beat("a", e, {Running(launch->launch(0))});
  ASSERT_TRUE(orders.ok());
  v1::Job job = Get(id);
  EXPECT_EQ(job.state(), v1::JOB_STATE_QUEUED);
  EXPECT_THAT(job.reason(), HasSubstr("rank 1 on a lost: worker a no longer reports it"));
}

TEST_F(RobustnessTest, RankStillStartingIsNotLostWhenUnlisted) {
  const int64_t e = Register("a", 1);
  const int64_t id = Submit(1);
  ASSERT_EQ(Beat("a", e)->launch_size(), 1);
  // Not started yet: the launch order is simply sent again.
  auto again = Beat("a", e);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->launch_size(), 1);
  EXPECT_EQ(Get(id).state(), v1::JOB_STATE_SCHEDULED);
}

TEST_F(RobustnessTest, ExitIsAcknowledgedOnlyOnceStoredAndACrashBeforeThatLeavesNoGhost) {
  const int64_t e = Register("a", 1);
  const int64_t id = Submit(1);
  auto launch = Beat("a", e);
  ASSERT_TRUE(Beat("a", e, {Running(launch->launch(0))}).ok());
  ASSERT_TRUE(Result(*manager_, launch->launch(0)).ok());
  writer_->Flush();

  // The exit arrives while the disk fails: it is not acknowledged, so the
  // worker keeps reporting it.
  flaky_->fail_ranks = true;
  auto unacked = Beat("a", e, {Exited(launch->launch(0), 0)});
  ASSERT_TRUE(unacked.ok());
  EXPECT_EQ(unacked->acknowledged_exits_size(), 0);

  // The coordinator crashes before the write commits; a new one recovers
  // from the same database and hears the exit again.
  auto reopened = SqliteStore::Open(db_);
  ASSERT_TRUE(reopened.ok()) << reopened.status();
  std::unique_ptr<SqliteStore> store2 = std::move(*reopened);
  StoreWriter writer2(store2.get());
  JobManager manager2(store2.get(), &writer2, &clock_, options_);
  ASSERT_TRUE(manager2.Recover().ok());
  v1::HeartbeatRequest beat;
  beat.set_name("a");
  beat.set_epoch(e);
  *beat.add_ranks() = Exited(launch->launch(0), 0);
  auto acked = manager2.workers().Heartbeat(beat);
  ASSERT_TRUE(acked.ok()) << acked.status();
  EXPECT_EQ(acked->acknowledged_exits_size(), 1);
  auto job = manager2.jobs().GetJob(Caller::Admin(), id);
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->state(), v1::JOB_STATE_SUCCEEDED);
  for (const v1::Worker& w : manager2.workers().ListWorkers(Caller::Admin())) {
    EXPECT_EQ(w.slots_used(), 0) << w.name();
  }
}

// ---- a result while the store fails ----

TEST_F(RobustnessTest, ResultReportedWhileWritesFailIsSucceededOnceTheyDo) {
  const int64_t e = Register("a", 1);
  const int64_t id = Submit(1);
  auto launch = Beat("a", e);
  ASSERT_TRUE(Beat("a", e, {Running(launch->launch(0))}).ok());
  ASSERT_NO_FATAL_FAILURE(JoinAll(id, 1, 1));
  ASSERT_TRUE(writer_->Flush());

  // The disk fills: the result is taken into memory and acknowledged, so the
  // rank exits; its exit is decided at once but not acknowledged to the
  // worker until it is stored.
  flaky_->fail_state = true;
  ASSERT_TRUE(Result(*manager_, launch->launch(0)).ok());
  auto unacked = Beat("a", e, {Exited(launch->launch(0), 0)});
  ASSERT_TRUE(unacked.ok());
  EXPECT_EQ(unacked->acknowledged_exits_size(), 0);
  EXPECT_FALSE(manager_->view().StoreHealthy());
  auto stored = store_->GetJob(id);
  ASSERT_TRUE(stored.ok());
  EXPECT_EQ(stored->state, v1::JOB_STATE_RUNNING);

  // Reads do not lie: they show the coordinator's state, marked not stored,
  // not the stored RUNNING.
  v1::Job shown = Get(id);
  EXPECT_EQ(shown.state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_TRUE(shown.not_stored());
  auto listed = manager_->jobs().ListJobs(Caller::Admin());
  ASSERT_TRUE(listed.ok()) << listed.status();
  ASSERT_THAT(listed->jobs, SizeIs(1));
  EXPECT_EQ(listed->jobs[0].state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_TRUE(listed->jobs[0].not_stored());
  EXPECT_EQ(manager_->view().GetStoreMode(), ClusterView::StoreMode::kNotServing);

  // Space again: the kept writes land, in order.
  flaky_->fail_state = false;
  ASSERT_TRUE(writer_->Flush(absl::Seconds(20)));
  stored = store_->GetJob(id);
  ASSERT_TRUE(stored.ok());
  EXPECT_EQ(stored->state, v1::JOB_STATE_SUCCEEDED);
  auto ranks = store_->GetRanks(id, 1);
  ASSERT_TRUE(ranks.ok());
  ASSERT_THAT(*ranks, SizeIs(1));
  EXPECT_TRUE((*ranks)[0].has_result);
  EXPECT_DOUBLE_EQ((*ranks)[0].test_accuracy, 0.82);
  shown = Get(id);
  EXPECT_EQ(shown.state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_FALSE(shown.not_stored());
  EXPECT_EQ(manager_->view().GetStoreMode(), ClusterView::StoreMode::kServing);
  EXPECT_EQ(Beat("a", e, {Exited(launch->launch(0), 0)})->acknowledged_exits_size(), 1);
}

TEST_F(RobustnessTest, ResultLostWithTheCoordinatorRestartsTheJobFromItsCheckpoint) {
  const int64_t e = Register("a", 1);
  const int64_t id = Submit(1);  // max_restarts 0: the requeue is not a restart
  auto launch = Beat("a", e);
  ASSERT_TRUE(Beat("a", e, {Running(launch->launch(0))}).ok());
  ASSERT_NO_FATAL_FAILURE(JoinAll(id, 1, 1));
  ASSERT_TRUE(writer_->Flush());

  flaky_->fail_state = true;
  ASSERT_TRUE(Result(*manager_, launch->launch(0)).ok());
  ASSERT_EQ(Beat("a", e, {Exited(launch->launch(0), 0)})->acknowledged_exits_size(), 0);
  EXPECT_EQ(Get(id).state(), v1::JOB_STATE_SUCCEEDED);

  // The coordinator dies before the store takes the writes; a new one
  // recovers from the file, which still says RUNNING without a result.
  auto reopened = SqliteStore::Open(db_);
  ASSERT_TRUE(reopened.ok()) << reopened.status();
  std::unique_ptr<SqliteStore> store2 = std::move(*reopened);
  StoreWriter writer2(store2.get());
  JobManager manager2(store2.get(), &writer2, &clock_, options_);
  ASSERT_TRUE(manager2.Recover().ok());
  v1::HeartbeatRequest beat;
  beat.set_name("a");
  beat.set_epoch(e);
  *beat.add_ranks() = Exited(launch->launch(0), 0);
  auto acked = manager2.workers().Heartbeat(beat);
  ASSERT_TRUE(acked.ok()) << acked.status();
  EXPECT_EQ(acked->acknowledged_exits_size(), 1);

  // Neither SUCCEEDED without the result nor FAILED: attempt 2 resumes from
  // the checkpoint, not counted as a restart.
  auto job = manager2.jobs().GetJob(Caller::Admin(), id);
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->attempt(), 2);
  EXPECT_TRUE(job->state() == v1::JOB_STATE_SCHEDULED ||
              job->state() == v1::JOB_STATE_QUEUED)
      << v1::JobState_Name(job->state());
  bool named = false;
  for (const v1::JobEvent& ev : job->events()) {
    named |= absl::StrContains(ev.reason(),
                               "result was lost with the previous "
                               "coordinator");
  }
  EXPECT_TRUE(named) << job->DebugString();
  ASSERT_TRUE(writer2.Flush());
  auto again = manager2.workers().Heartbeat(beat);
  ASSERT_TRUE(again.ok());
  v1::HeartbeatRequest next;
  next.set_name("a");
  next.set_epoch(e);
  auto orders = manager2.workers().Heartbeat(next);
  ASSERT_TRUE(orders.ok());
  ASSERT_EQ(orders->launch_size(), 1);
  EXPECT_EQ(orders->launch(0).attempt(), 2);
}

// ---- drain and preemption ----

TEST_F(RobustnessTest, DrainPreemptsTheRankAndRequeuesElsewhereWithoutCountingARestart) {
  const int64_t ea = Register("a", 1);
  const int64_t id = Submit(1, /*max_restarts=*/0);
  auto la = Beat("a", ea);
  ASSERT_EQ(la->launch_size(), 1);
  ASSERT_TRUE(Beat("a", ea, {Running(la->launch(0))}).ok());
  JoinAll(id, 1, 1);
  const int64_t eb = Register("b", 1);

  EXPECT_TRUE(absl::IsPermissionDenied(
      manager_->workers()
          .DrainWorker(Caller::User("bob"), "a", absl::ZeroDuration(), false)
          .status()));
  EXPECT_TRUE(absl::IsNotFound(
      manager_->workers()
          .DrainWorker(Caller::Admin("root"), "zz", absl::ZeroDuration(), false)
          .status()));
  auto drained = manager_->workers().DrainWorker(Caller::Admin("root"), "a",
                                                 absl::ZeroDuration(), false);
  ASSERT_TRUE(drained.ok()) << drained.status();
  EXPECT_TRUE(drained->draining());
  EXPECT_FALSE(drained->drained());

  auto orders = Beat("a", ea, {Running(la->launch(0))});
  ASSERT_TRUE(orders.ok());
  ASSERT_EQ(orders->preempt_size(), 1);
  EXPECT_EQ(orders->preempt(0).job_id(), id);
  EXPECT_EQ(orders->kill_size(), 0);

  // The rank checkpoints and leaves with the preempted code.
  ASSERT_TRUE(Beat("a", ea, {Exited(la->launch(0), kTrainerExitPreempted)}).ok());
  v1::Job job = Get(id);
  bool preempted_event = false;
  for (const v1::JobEvent& e : job.events()) {
    if (e.to_state() == v1::JOB_STATE_QUEUED &&
        absl::StrContains(e.reason(), "attempt 1 preempted on a (drain by root)") &&
        absl::StrContains(e.reason(), "not counted as a restart")) {
      preempted_event = true;
    }
  }
  EXPECT_TRUE(preempted_event);
  EXPECT_EQ(job.preemptions(), 1);
  EXPECT_TRUE(WorkerNamed("a").drained());

  // It moves to b (a takes no new ranks) and resumes from the checkpoint.
  EXPECT_EQ(Beat("a", ea)->launch_size(), 0);
  auto lb = Beat("b", eb);
  ASSERT_EQ(lb->launch_size(), 1);
  EXPECT_EQ(lb->launch(0).attempt(), 2);
  EXPECT_TRUE(lb->launch(0).trainer().resume());
  ASSERT_TRUE(Beat("b", eb, {Exited(lb->launch(0), 0)}).ok());
  EXPECT_EQ(Get(id).state(), v1::JOB_STATE_SUCCEEDED);

  // Undrained, a takes ranks again.
  ASSERT_TRUE(manager_->workers()
                  .DrainWorker(Caller::Admin("root"), "a", absl::ZeroDuration(), true)
                  .ok());
  Submit(1);
  EXPECT_EQ(Beat("a", ea)->launch_size(), 1);
}

TEST_F(RobustnessTest, RanksThatDoNotLeaveWithinTheDrainTimeoutAreStopped) {
  const int64_t ea = Register("a", 1);
  const int64_t id = Submit(1, /*max_restarts=*/0);
  auto la = Beat("a", ea);
  ASSERT_TRUE(Beat("a", ea, {Running(la->launch(0))}).ok());
  ASSERT_TRUE(manager_->workers()
                  .DrainWorker(Caller::Admin("root"), "a", absl::Seconds(10), false)
                  .ok());
  clock_.Advance(absl::Seconds(9));
  manager_->Tick();
  EXPECT_EQ(Get(id).state(), v1::JOB_STATE_SCHEDULED);
  clock_.Advance(absl::Seconds(2));
  manager_->Tick();
  v1::Job job = Get(id);
  EXPECT_EQ(job.state(), v1::JOB_STATE_QUEUED);
  EXPECT_THAT(job.reason(), HasSubstr("did not leave within the drain timeout"));
  auto orders = Beat("a", ea, {Running(la->launch(0))});
  ASSERT_EQ(orders->kill_size(), 1);
}

TEST_F(RobustnessTest, WorkerThatIsStoppingDrainsItselfUntilItRegistersAgain) {
  const int64_t ea = Register("a", 1);
  Submit(1);
  auto la = Beat("a", ea);
  ASSERT_TRUE(Beat("a", ea, {Running(la->launch(0))}).ok());
  auto orders = Beat("a", ea, {Running(la->launch(0))}, /*draining=*/true);
  ASSERT_TRUE(orders.ok());
  EXPECT_EQ(orders->preempt_size(), 1);
  EXPECT_TRUE(WorkerNamed("a").draining());
  EXPECT_EQ(WorkerNamed("a").drain_reason(), "worker stopping");
  ASSERT_TRUE(Beat("a", ea, {Exited(la->launch(0), kTrainerExitPreempted)}).ok());
  Register("a", 1);
  EXPECT_FALSE(WorkerNamed("a").draining());
}

// ---- the watchdog ----

TEST_F(RobustnessTest, UnresponsiveRankEndsTheAttemptNamingItAndItsWorker) {
  const int64_t ea = Register("a", 1);
  const int64_t eb = Register("b", 1);
  const int64_t id = Submit(2, /*max_restarts=*/1);
  auto la = Beat("a", ea);
  auto lb = Beat("b", eb);
  JoinAll(id, 1, 2);
  v1::RankProgress working;
  working.set_step(7);
  working.set_phase("forward");
  v1::RankProgress waiting;
  waiting.set_step(8);
  waiting.set_phase("collective");
  waiting.set_collective("allreduce #17 (bucket 1)");
  Report(id, 1, 0, working);
  Report(id, 1, 1, working);
  // Rank 1 stops (SIGSTOP); rank 0 blocks on the next allreduce.
  for (int i = 0; i < 12; ++i) {
    clock_.Advance(absl::Seconds(2));
    ASSERT_TRUE(Beat("a", ea, {Running(la->launch(0))}).ok());
    ASSERT_TRUE(Beat("b", eb, {Running(lb->launch(0))}).ok());
    if (Get(id).state() != v1::JOB_STATE_RUNNING) break;
    Report(id, 1, 0, waiting);
    manager_->Tick();
  }
  v1::Job job = Get(id);
  EXPECT_EQ(job.state(), v1::JOB_STATE_QUEUED);
  EXPECT_THAT(job.reason(), HasSubstr("watchdog: rank 1 on b unresponsive"));
  EXPECT_THAT(job.reason(), HasSubstr("rank 0 waiting on allreduce #17 (bucket 1)"));
  EXPECT_THAT(job.reason(), HasSubstr("restarting (restart 1 of 1)"));
  // Both ranks are ordered stopped.
  EXPECT_EQ(Beat("b", eb, {Running(lb->launch(0))})->kill_size(), 1);
  EXPECT_EQ(Beat("a", ea, {Running(la->launch(0))})->kill_size(), 1);
}

TEST_F(RobustnessTest, MalformedProgressReportIsDroppedButTheLeaseIsRenewed) {
  const int64_t ea = Register("a", 1);
  const int64_t id = Submit(1);
  auto la = Beat("a", ea);
  JoinAll(id, 1, 1);
  v1::RankProgress huge;
  huge.set_step(3);
  huge.set_phase(std::string(10000, 'x'));
  Report(id, 1, 0, huge);  // asserts the renewal succeeded
  EXPECT_FALSE(Get(id).ranks(0).has_progress());
  v1::RankProgress fine;
  fine.set_step(4);
  fine.set_phase("forward");
  Report(id, 1, 0, fine);
  EXPECT_EQ(Get(id).ranks(0).progress().step(), 4);
}

TEST_F(RobustnessTest, JobSpecCanTurnTheWatchdogOff) {
  const int64_t ea = Register("a", 1);
  v1::JobSpec spec;
  spec.set_name("job");
  spec.set_world_size(1);
  spec.mutable_trainer()->set_model("vit-micro");
  spec.mutable_trainer()->set_dataset("synthetic");
  spec.mutable_trainer()->set_batch_size(8);
  spec.mutable_trainer()->set_epochs(1);
  spec.mutable_watchdog()->set_enabled(false);
  auto id = manager_->jobs().Submit(spec, "", "");
  ASSERT_TRUE(id.ok());
  auto la = Beat("a", ea);
  JoinAll(*id, 1, 1);
  for (int i = 0; i < 60; ++i) {
    clock_.Advance(absl::Seconds(2));
    ASSERT_TRUE(Beat("a", ea, {Running(la->launch(0))}).ok());
    manager_->Tick();
  }
  EXPECT_EQ(Get(*id).state(), v1::JOB_STATE_RUNNING);
}

TEST_F(RobustnessTest, StragglerIsShownAndRecordedOnceWithoutStoppingTheJob) {
  const int64_t ea = Register("a", 1);
  const int64_t eb = Register("b", 1);
  const int64_t id = Submit(2);
  auto la = Beat("a", ea);
  auto lb = Beat("b", eb);
  JoinAll(id, 1, 2);
  auto work = [](int64_t step, double forward, double collective) {
    v1::RankProgress p;
    p.set_step(step);
    p.set_phase("forward");
    p.set_window_steps(10);
    p.set_step_time_ms(300);
    (*p.mutable_phase_ms())["forward"] = forward;
    (*p.mutable_phase_ms())["backward"] = 100;
    (*p.mutable_phase_ms())["collective"] = collective;
    return p;
  };
  for (int i = 0; i < 25; ++i) {
    clock_.Advance(absl::Seconds(2));
    ASSERT_TRUE(Beat("a", ea, {Running(la->launch(0))}).ok());
    ASSERT_TRUE(Beat("b", eb, {Running(lb->launch(0))}).ok());
    Report(id, 1, 0, work(i, 50, 150));
    Report(id, 1, 1, work(i, 200, 5));
    manager_->Tick();
  }
  v1::Job job = Get(id);
  EXPECT_EQ(job.state(), v1::JOB_STATE_RUNNING);
  ASSERT_THAT(job.stragglers(), SizeIs(1));
  EXPECT_THAT(job.stragglers(0), HasSubstr("rank 1 on b"));
  EXPECT_THAT(job.stragglers(0), HasSubstr("forward 200 ms vs 50 ms"));
  EXPECT_TRUE(job.ranks(1).straggler());
  EXPECT_EQ(job.ranks(1).progress().step(), 24);
  int events = 0;
  for (const v1::JobEvent& e : job.events()) {
    if (absl::StrContains(e.reason(), "straggler: rank 1 on b")) ++events;
  }
  EXPECT_EQ(events, 1);
  // The event is stored, not only held in memory.
  writer_->Flush();
  auto stored = store_->ListEvents(id);
  ASSERT_TRUE(stored.ok());
  EXPECT_THAT(stored->back().reason, HasSubstr("straggler: rank 1 on b"));
}

}  // namespace
}  // namespace tessera
