// JobManager with a fake clock over an in-memory SQLite store: failure
// handling, restarts, fencing, rendezvous timeouts, cancel and logs.
#include "coordinator/core/job_manager.h"

#include <optional>

#include "absl/strings/str_cat.h"
#include "coordinator/store/sqlite_store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/fake_slurm_client.h"

namespace tessera {
namespace {

namespace v1 = ::tessera::v1;
using ::testing::HasSubstr;

class JobManagerTest : public ::testing::Test {
 protected:
  // Every state change the test caused followed the table in common/job_state.h.
  void TearDown() override {
    if (manager_ != nullptr) EXPECT_EQ(manager_->illegal_transitions(), 0);
  }

  void SetUp() override {
    auto store = SqliteStore::Open(":memory:");
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
    writer_ = std::make_unique<StoreWriter>(store_.get());
    JobManagerOptions options;
    options.worker_suspect_after = absl::Seconds(3);
    options.worker_dead_after = absl::Seconds(15);
    options.rendezvous_timeout = absl::Seconds(60);
    manager_ =
        std::make_unique<JobManager>(store_.get(), writer_.get(), &clock_, options);
  }

  int64_t Register(const std::string& name, int slots) {
    v1::RegisterWorkerRequest req;
    req.set_name(name);
    req.set_slots(slots);
    auto resp = manager_->workers().RegisterWorker(req);
    EXPECT_TRUE(resp.ok()) << resp.status();
    return resp->epoch();
  }

  absl::StatusOr<v1::HeartbeatResponse> Beat(const std::string& name, int64_t epoch,
                                             std::vector<v1::LocalRank> ranks = {}) {
    v1::HeartbeatRequest req;
    req.set_name(name);
    req.set_epoch(epoch);
    for (auto& r : ranks) *req.add_ranks() = r;
    return manager_->workers().Heartbeat(req);
  }

  int64_t Submit(int world, int max_restarts = 0,
                 const std::string& checkpoint_dir = "") {
    v1::JobSpec spec;
    spec.set_name("job");
    spec.set_world_size(world);
    spec.set_max_restarts(max_restarts);
    spec.mutable_trainer()->set_model("vit-micro");
    spec.mutable_trainer()->set_dataset("synthetic");
    spec.mutable_trainer()->set_batch_size(8);
    spec.mutable_trainer()->set_epochs(1);
    spec.mutable_trainer()->set_checkpoint_dir(checkpoint_dir);
    auto id = manager_->jobs().Submit(spec, "", "");
    EXPECT_TRUE(id.ok()) << id.status();
    return *id;
  }

  v1::Job Get(int64_t id) {
    auto job = manager_->jobs().GetJob(Caller::Admin(), id);
    EXPECT_TRUE(job.ok()) << job.status();
    return *job;
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

  FakeClock clock_;
  std::unique_ptr<SqliteStore> store_;
  std::unique_ptr<StoreWriter> writer_;
  std::unique_ptr<JobManager> manager_;
};

TEST_F(JobManagerTest, SilentWorkerIsDeclaredDeadItsJobFailsAndItsSessionIsFenced) {
  const int64_t ea = Register("a", 1);
  const int64_t eb = Register("b", 1);
  const int64_t id = Submit(2);
  auto la = Beat("a", ea);
  auto lb = Beat("b", eb);
  ASSERT_EQ(la->launch_size(), 1);
  ASSERT_EQ(lb->launch_size(), 1);

  // Only b keeps heartbeating.
  for (int i = 0; i < 4; ++i) {
    clock_.Advance(absl::Seconds(4));
    ASSERT_TRUE(Beat("b", eb, {Running(lb->launch(0))}).ok());
    manager_->Tick();
  }
  v1::Job job = Get(id);
  EXPECT_EQ(job.state(), v1::JOB_STATE_FAILED);
  EXPECT_THAT(job.reason(), HasSubstr("worker a declared dead"));

  // The survivor is told to stop.
  auto orders = Beat("b", eb, {Running(lb->launch(0))});
  ASSERT_TRUE(orders.ok());
  ASSERT_EQ(orders->kill_size(), 1);
  EXPECT_EQ(orders->kill(0).rank(), lb->launch(0).rank());

  // a comes back: its old session is refused, and once registered again it is
  // told to stop the rank it still runs.
  EXPECT_TRUE(absl::IsAborted(Beat("a", ea, {Running(la->launch(0))}).status()));
  const int64_t ea2 = Register("a", 1);
  EXPECT_GT(ea2, ea);
  auto back = Beat("a", ea2, {Running(la->launch(0))});
  ASSERT_TRUE(back.ok());
  ASSERT_EQ(back->kill_size(), 1);
  EXPECT_EQ(back->kill(0).job_id(), id);
}

TEST_F(JobManagerTest, RendezvousTimeoutFailsAttemptNamingMissingRankAndReleasesOthers) {
  const int64_t ea = Register("a", 1);
  const int64_t eb = Register("b", 1);
  const int64_t id = Submit(2);
  auto la = Beat("a", ea);
  auto lb = Beat("b", eb);
  // Both workers stay alive; only the rendezvous is incomplete.
  auto beat_both = [&] {
    ASSERT_TRUE(Beat("a", ea, {Running(la->launch(0))}).ok());
    ASSERT_TRUE(Beat("b", eb, {Running(lb->launch(0))}).ok());
  };
  std::optional<absl::StatusOr<v1::RendezvousResponse>> answer;
  v1::RendezvousRequest req;
  req.set_job_id(id);
  req.set_attempt(1);
  req.set_rank(0);
  req.set_bootstrap("127.0.0.1:1234");
  manager_->ranks().Rendezvous(req, [&answer](absl::StatusOr<v1::RendezvousResponse> r) {
    answer = std::move(r);
  });
  EXPECT_FALSE(answer.has_value());

  for (int i = 0; i < 6; ++i) {
    clock_.Advance(absl::Seconds(5));
    beat_both();
    manager_->Tick();
  }
  EXPECT_FALSE(answer.has_value()) << "released before the timeout";
  for (int i = 0; i < 7; ++i) {
    clock_.Advance(absl::Seconds(5));
    beat_both();
    manager_->Tick();
  }

  ASSERT_TRUE(answer.has_value());
  EXPECT_FALSE(answer->ok());
  v1::Job job = Get(id);
  EXPECT_EQ(job.state(), v1::JOB_STATE_FAILED);
  EXPECT_THAT(job.reason(), HasSubstr("rank(s) 1 (on b) never joined"));
}

TEST_F(JobManagerTest, FailedAttemptRestartsFromCheckpointOnceSurvivorsAreGone) {
  const int64_t ea = Register("a", 1);
  const int64_t eb = Register("b", 1);
  const int64_t id = Submit(2, /*max_restarts=*/1, "/shared/ckpt");
  auto la = Beat("a", ea);
  auto lb = Beat("b", eb);
  ASSERT_EQ(la->launch(0).attempt(), 1);
  EXPECT_FALSE(la->launch(0).trainer().resume());

  ASSERT_TRUE(Beat("a", ea, {Exited(la->launch(0), 1)}).ok());
  v1::Job job = Get(id);
  EXPECT_EQ(job.state(), v1::JOB_STATE_QUEUED);
  EXPECT_THAT(job.reason(), HasSubstr("restarting (restart 1 of 1)"));

  // b's rank of attempt 1 still holds its slot: no new attempt yet, and b is
  // told to stop it.
  auto stop = Beat("b", eb, {Running(lb->launch(0))});
  ASSERT_EQ(stop->kill_size(), 1);
  EXPECT_EQ(Get(id).attempt(), 1);
  ASSERT_TRUE(Beat("b", eb, {Exited(lb->launch(0), 143)}).ok());

  job = Get(id);
  EXPECT_EQ(job.state(), v1::JOB_STATE_SCHEDULED);
  EXPECT_EQ(job.attempt(), 2);
  auto relaunch = Beat("a", ea);
  ASSERT_EQ(relaunch->launch_size(), 1);
  EXPECT_EQ(relaunch->launch(0).attempt(), 2);
  EXPECT_TRUE(relaunch->launch(0).trainer().resume());

  // The second failure is final.
  auto relaunch_b = Beat("b", eb);
  ASSERT_EQ(relaunch_b->launch_size(), 1);
  ASSERT_TRUE(Beat("b", eb, {Exited(relaunch_b->launch(0), 2)}).ok());
  job = Get(id);
  EXPECT_EQ(job.state(), v1::JOB_STATE_FAILED);
  EXPECT_THAT(job.reason(), HasSubstr("exited with code 2"));
  // Every transition is recorded with its reason.
  std::vector<v1::JobState> states;
  for (const auto& e : job.events()) states.push_back(e.to_state());
  EXPECT_THAT(states,
              ::testing::ElementsAre(v1::JOB_STATE_QUEUED, v1::JOB_STATE_SCHEDULED,
                                     v1::JOB_STATE_QUEUED, v1::JOB_STATE_SCHEDULED,
                                     v1::JOB_STATE_FAILED));
}

TEST_F(JobManagerTest, ARanksExitReasonSaysWhatItsCodeMeansAndWhatTheRankSaid) {
  const int64_t ea = Register("a", 1);
  const int64_t id = Submit(1);
  auto launch = Beat("a", ea);
  ASSERT_EQ(launch->launch_size(), 1);
  v1::LocalRank exited = Exited(launch->launch(0), 6);
  exited.set_exit_detail(
      "cudaErrorIllegalAddress (an illegal memory access was encountered) on CUDA device "
      "0");
  ASSERT_TRUE(Beat("a", ea, {exited}).ok());
  const v1::Job job = Get(id);
  EXPECT_EQ(job.state(), v1::JOB_STATE_FAILED);
  ASSERT_EQ(job.ranks_size(), 1);
  EXPECT_EQ(job.ranks(0).exit_reason(),
            "exited with code 6 (CUDA error): cudaErrorIllegalAddress (an illegal memory "
            "access was encountered) on CUDA device 0");
  EXPECT_THAT(job.reason(), HasSubstr("exited with code 6 (CUDA error): "
                                      "cudaErrorIllegalAddress"));
}

TEST_F(JobManagerTest, CancelStopsRunningRanksAndRecordsCancelled) {
  const int64_t ea = Register("a", 2);
  const int64_t id = Submit(2);
  auto launch = Beat("a", ea);
  ASSERT_EQ(launch->launch_size(), 2);
  auto state = manager_->jobs().CancelJob(Caller::Admin(), id);
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_EQ(*state, v1::JOB_STATE_CANCELLED);
  auto orders = Beat("a", ea, {Running(launch->launch(0)), Running(launch->launch(1))});
  EXPECT_EQ(orders->kill_size(), 2);
  EXPECT_EQ(orders->launch_size(), 0);
  EXPECT_EQ(Get(id).state(), v1::JOB_STATE_CANCELLED);
  // Cancelling again is harmless; cancelling a finished job is refused.
  EXPECT_TRUE(manager_->jobs().CancelJob(Caller::Admin(), id).ok());
  EXPECT_TRUE(
      absl::IsNotFound(manager_->jobs().CancelJob(Caller::Admin(), 999).status()));
}

TEST_F(JobManagerTest, CancelOfSucceededJobIsFailedPrecondition) {
  const int64_t ea = Register("a", 1);
  const int64_t id = Submit(1);
  auto launch = Beat("a", ea);
  ASSERT_TRUE(Beat("a", ea, {Exited(launch->launch(0), 0)}).ok());
  ASSERT_EQ(Get(id).state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_TRUE(absl::IsFailedPrecondition(
      manager_->jobs().CancelJob(Caller::Admin(), id).status()));
}

TEST_F(JobManagerTest, ShippedLogsAreReadBackAndCompleteAfterEof) {
  const int64_t ea = Register("a", 1);
  const int64_t id = Submit(1);
  auto launch = Beat("a", ea);
  v1::ShipLogsRequest ship;
  ship.set_name("a");
  ship.set_epoch(ea);
  ship.set_job_id(id);
  ship.set_attempt(1);
  ship.set_rank(0);
  ship.set_data("step 10 loss 1.0\n");
  auto shipped = manager_->workers().ShipLogs(ship);
  ASSERT_TRUE(shipped.ok()) << shipped.status();
  EXPECT_EQ(shipped->next_offset(), 17);

  v1::GetLogsRequest get;
  get.set_job_id(id);
  auto logs = manager_->jobs().GetLogs(Caller::Admin(), get);
  ASSERT_TRUE(logs.ok());
  EXPECT_EQ(logs->data(), "step 10 loss 1.0\n");
  EXPECT_FALSE(logs->complete());

  ASSERT_TRUE(Beat("a", ea, {Exited(launch->launch(0), 0)}).ok());
  ship.set_offset(17);
  ship.set_data("done\n");
  ship.set_eof(true);
  ASSERT_TRUE(manager_->workers().ShipLogs(ship).ok());
  get.set_offset(17);
  logs = manager_->jobs().GetLogs(Caller::Admin(), get);
  EXPECT_EQ(logs->data(), "done\n");
  get.set_offset(22);
  logs = manager_->jobs().GetLogs(Caller::Admin(), get);
  EXPECT_TRUE(logs->complete());

  // A stale session cannot write logs.
  ship.set_epoch(ea + 7);
  EXPECT_TRUE(absl::IsAborted(manager_->workers().ShipLogs(ship).status()));
}

// The Slurm pools read the queue through the JobManager's snapshot and keep
// their own state: the job shows what it waits for in Slurm and is placed on
// its allocation's worker once that registers.
TEST_F(JobManagerTest, JobLackingWorkersGetsASlurmAllocationAndRunsOnItsWorker) {
  testing::FakeSlurmClient slurm;
  SlurmPoolConfig pool;
  pool.name = "cpu";
  pool.cpus_per_node = 2;
  pool.max_nodes = 1;
  SlurmPoolManager pools({pool}, &slurm, store_.get(), &clock_,
                         [](const SlurmSubmitDecision& d, const std::string&) {
                           return absl::StatusOr<SlurmCredential>(SlurmCredential{
                               absl::StrCat("/join/job", d.job_id), d.job_id});
                         },
                         {.coordinator_address = "coord:50051"});
  manager_->SetSlurmPools(&pools);
  const int64_t id = Submit(2);
  manager_->TickSlurm();
  ASSERT_EQ(slurm.submitted.size(), 1u);
  EXPECT_EQ(Get(id).pending_reason(), "waiting for Slurm allocation 100 (PD)");
  EXPECT_THAT(Get(id).slurm_allocation(), HasSubstr("100 in pool cpu (PD)"));

  v1::RegisterWorkerRequest req;
  req.set_name("n1-slurm-100");
  req.set_slots(2);
  req.set_pool("cpu");
  req.set_slurm_job_id("100");
  ASSERT_TRUE(manager_->workers().RegisterWorker(req).ok());
  const v1::Job job = Get(id);
  EXPECT_EQ(job.state(), v1::JOB_STATE_SCHEDULED) << job.pending_reason();
  ASSERT_EQ(job.ranks_size(), 2);
  EXPECT_EQ(job.ranks(0).worker(), "n1-slurm-100");
  EXPECT_EQ(pools.Allocation(id)->state, "R");  // its worker joined
  manager_->SetSlurmPools(nullptr);
}

}  // namespace
}  // namespace tessera
