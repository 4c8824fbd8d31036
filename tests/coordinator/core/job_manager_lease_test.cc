// JobManager with a fake clock: the trainer lease. A job whose rank was lost
// with a dead worker restarts only once that rank's lease has run out by the
// coordinator's clock, or at once when its worker confirms it stopped.
#include <optional>
#include <string>
#include <vector>

#include "coordinator/core/job_manager.h"
#include "coordinator/store/sqlite_store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

namespace v1 = ::tessera::v1;
using ::testing::HasSubstr;

// Lease 20 s: a lost rank may run until 20 s * 1.1 + 1 s = 23 s after the
// last renewal the coordinator received.
constexpr absl::Duration kLease = absl::Seconds(20);
constexpr absl::Duration kLeaseEnd = absl::Seconds(23);

class JobManagerLeaseTest : public ::testing::Test {
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
    options.trainer_lease = kLease;
    options.trainer_first_contact_lease = absl::Seconds(15);
    manager_ =
        std::make_unique<JobManager>(store_.get(), writer_.get(), &clock_, options);
  }

  // `ranks`: what the registering worker still runs.
  int64_t Register(const std::string& name, std::vector<v1::LocalRank> ranks = {}) {
    v1::RegisterWorkerRequest req;
    req.set_name(name);
    req.set_slots(1);
    for (auto& r : ranks) *req.add_ranks() = r;
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

  int64_t SubmitRestartable() {
    v1::JobSpec spec;
    spec.set_name("single");
    spec.set_world_size(1);
    spec.set_max_restarts(1);
    spec.mutable_trainer()->set_model("vit-micro");
    spec.mutable_trainer()->set_dataset("synthetic");
    spec.mutable_trainer()->set_batch_size(8);
    spec.mutable_trainer()->set_epochs(1);
    auto id = manager_->jobs().Submit(spec, "", "");
    EXPECT_TRUE(id.ok()) << id.status();
    return *id;
  }

  v1::Job Get(int64_t id) {
    auto job = manager_->jobs().GetJob(Caller::Admin(), id);
    EXPECT_TRUE(job.ok()) << job.status();
    return *job;
  }

  absl::StatusOr<absl::Duration> Renew(int64_t id, int32_t attempt) {
    v1::RenewLeaseRequest req;
    req.set_job_id(id);
    req.set_attempt(attempt);
    req.set_rank(0);
    return manager_->ranks().RenewLease(req);
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

  // Registers workers a and b, submits a 1-rank job that may restart once,
  // and launches it; the worker that runs it is the victim.
  void StartJobOnVictim() {
    epochs_["a"] = Register("a");
    epochs_["b"] = Register("b");
    id_ = SubmitRestartable();
    for (const std::string name : {"a", "b"}) {
      auto resp = Beat(name, epochs_[name]);
      ASSERT_TRUE(resp.ok());
      if (resp->launch_size() == 1) {
        victim_ = name;
        launch_ = resp->launch(0);
      }
    }
    ASSERT_FALSE(victim_.empty()) << "the job was not launched";
    other_ = victim_ == "a" ? "b" : "a";
    ASSERT_TRUE(Beat(victim_, epochs_[victim_], {Running(launch_)}).ok());
  }

  // Only the other worker heartbeats, one second at a time, until the victim
  // is declared dead. Returns when that happened.
  absl::Time CutVictimUntilDeclaredDead() {
    for (int i = 0; i < 30; ++i) {
      clock_.Advance(absl::Seconds(1));
      EXPECT_TRUE(Beat(other_, epochs_[other_]).ok());
      manager_->Tick();
      if (Get(id_).state() == v1::JOB_STATE_QUEUED) return clock_.Now();
    }
    ADD_FAILURE() << "the victim was not declared dead";
    return clock_.Now();
  }

  // Whether the other worker was ordered to launch a new attempt.
  bool OtherGetsLaunch() {
    auto resp = Beat(other_, epochs_[other_]);
    EXPECT_TRUE(resp.ok());
    return resp.ok() && resp->launch_size() > 0;
  }

  FakeClock clock_;
  std::unique_ptr<SqliteStore> store_;
  std::unique_ptr<StoreWriter> writer_;
  std::unique_ptr<JobManager> manager_;
  std::map<std::string, int64_t> epochs_;
  int64_t id_ = 0;
  std::string victim_, other_;
  v1::LaunchOrder launch_;
};

TEST_F(JobManagerLeaseTest, RenewalOfACurrentRankReturnsTheLease) {
  ASSERT_NO_FATAL_FAILURE(StartJobOnVictim());
  absl::StatusOr<absl::Duration> lease = Renew(id_, 1);
  ASSERT_TRUE(lease.ok()) << lease.status();
  EXPECT_EQ(*lease, kLease);
  EXPECT_TRUE(absl::IsAborted(Renew(id_, 2).status()));
  EXPECT_TRUE(absl::IsNotFound(Renew(id_ + 100, 1).status()));
}

TEST_F(JobManagerLeaseTest, RestartWaitsUntilTheLostRanksLeaseHasRunOut) {
  ASSERT_NO_FATAL_FAILURE(StartJobOnVictim());
  clock_.Advance(absl::Seconds(2));
  ASSERT_TRUE(Renew(id_, 1).ok());
  const absl::Time renewed = clock_.Now();

  CutVictimUntilDeclaredDead();
  v1::Job job = Get(id_);
  ASSERT_EQ(job.state(), v1::JOB_STATE_QUEUED);
  EXPECT_EQ(job.attempt(), 1);
  // The restart event says why it waits.
  EXPECT_THAT(job.events(job.events_size() - 1).reason(),
              HasSubstr("lease to expire (rank 0 of attempt 1 on " + victim_ + ")"));
  EXPECT_THAT(job.events(job.events_size() - 1).reason(), HasSubstr("waiting up to "));
  EXPECT_THAT(job.pending_reason(), HasSubstr("lease to expire"));
  // The lost rank can no longer renew: it would stop at once if it could hear.
  EXPECT_TRUE(absl::IsAborted(Renew(id_, 1).status()));

  // Nothing is placed until the lease has run out by the coordinator's clock.
  while (clock_.Now() + absl::Seconds(1) < renewed + kLeaseEnd) {
    clock_.Advance(absl::Seconds(1));
    manager_->Tick();
    ASSERT_FALSE(OtherGetsLaunch())
        << "restarted " << absl::FormatDuration(clock_.Now() - renewed)
        << " after the last renewal";
    ASSERT_EQ(Get(id_).attempt(), 1);
  }
  clock_.Advance(absl::Seconds(1));
  manager_->Tick();
  ASSERT_TRUE(OtherGetsLaunch()) << "no restart after the lease ran out";
  job = Get(id_);
  EXPECT_EQ(job.attempt(), 2);
  EXPECT_EQ(job.state(), v1::JOB_STATE_SCHEDULED);
}

TEST_F(JobManagerLeaseTest, ConfirmedExitReleasesTheRestartAtOnce) {
  ASSERT_NO_FATAL_FAILURE(StartJobOnVictim());
  ASSERT_TRUE(Renew(id_, 1).ok());
  CutVictimUntilDeclaredDead();
  EXPECT_FALSE(OtherGetsLaunch());

  // The partition heals: the victim's old session is refused; registered
  // again, it is told to stop the rank, and then reports its exit.
  clock_.Advance(absl::Seconds(1));
  EXPECT_TRUE(
      absl::IsAborted(Beat(victim_, epochs_[victim_], {Running(launch_)}).status()));
  const int64_t epoch = Register(victim_, {Running(launch_)});
  auto stop = Beat(victim_, epoch, {Running(launch_)});
  ASSERT_TRUE(stop.ok());
  ASSERT_EQ(stop->kill_size(), 1);
  EXPECT_EQ(stop->kill(0).attempt(), 1);
  EXPECT_EQ(Get(id_).attempt(), 1) << "restarted while the old rank still ran";

  ASSERT_TRUE(Beat(victim_, epoch, {Exited(launch_, 143)}).ok());
  v1::Job job = Get(id_);
  EXPECT_EQ(job.attempt(), 2) << "the confirmed exit did not release the restart";
  EXPECT_EQ(job.state(), v1::JOB_STATE_SCHEDULED);
}

TEST_F(JobManagerLeaseTest, WorkerThatNoLongerListsTheLostRankReleasesTheRestart) {
  ASSERT_NO_FATAL_FAILURE(StartJobOnVictim());
  CutVictimUntilDeclaredDead();
  // The worker was restarted meanwhile: its ranks died with it, and its
  // registration, which lists none, releases the restart at once.
  clock_.Advance(absl::Seconds(1));
  const int64_t epoch = Register(victim_);
  EXPECT_EQ(Get(id_).attempt(), 2);
  ASSERT_TRUE(Beat(victim_, epoch).ok());
  EXPECT_EQ(Get(id_).attempt(), 2);
}

TEST_F(JobManagerLeaseTest, RankNeverHeardFromCountsFromItsLastLaunchOrder) {
  ASSERT_NO_FATAL_FAILURE(StartJobOnVictim());
  // No renewal ever arrives. The launch order went out at the start; the
  // worker's later heartbeats showed the rank running, so no order followed.
  const absl::Time launched = clock_.Now();
  CutVictimUntilDeclaredDead();
  // Before its first renewal a trainer counts max(lease, first contact).
  while (clock_.Now() + absl::Seconds(1) < launched + kLeaseEnd) {
    clock_.Advance(absl::Seconds(1));
    manager_->Tick();
    ASSERT_FALSE(OtherGetsLaunch());
  }
  clock_.Advance(absl::Seconds(1));
  manager_->Tick();
  EXPECT_TRUE(OtherGetsLaunch());
}

TEST_F(JobManagerLeaseTest, JobWithoutRestartsFailsAtOnceWhenItsRankIsLost) {
  epochs_["a"] = Register("a");
  v1::JobSpec spec;
  spec.set_name("once");
  spec.set_world_size(1);
  spec.mutable_trainer()->set_model("vit-micro");
  spec.mutable_trainer()->set_dataset("synthetic");
  spec.mutable_trainer()->set_batch_size(8);
  spec.mutable_trainer()->set_epochs(1);
  auto id = manager_->jobs().Submit(spec, "", "");
  ASSERT_TRUE(id.ok());
  ASSERT_EQ(Beat("a", epochs_["a"])->launch_size(), 1);
  for (int i = 0; i < 20 && Get(*id).state() != v1::JOB_STATE_FAILED; ++i) {
    clock_.Advance(absl::Seconds(1));
    manager_->Tick();
  }
  EXPECT_EQ(Get(*id).state(), v1::JOB_STATE_FAILED);
  EXPECT_THAT(Get(*id).reason(), HasSubstr("declared dead"));
}

}  // namespace
}  // namespace tessera
