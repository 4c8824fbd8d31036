// What one user may see and do with another's jobs and sweeps, the per-user
// and per-job limits, and request-id scoping: JobManager and SweepManager over
// an in-memory store and a fake clock.
#include <string>

#include "coordinator/core/job_manager.h"
#include "coordinator/core/sweep_manager.h"
#include "coordinator/store/sqlite_store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

namespace v1 = ::tessera::v1;
using ::testing::HasSubstr;

const Caller kAlice = Caller::User("alice");
const Caller kBob = Caller::User("bob");
const Caller kAdmin = Caller{"lab-admin", true};

class OwnershipTest : public ::testing::Test {
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
    options_.user_limits.max_queued_jobs = 3;
    options_.user_limits.max_running_ranks = 4;
    options_.job_limits.max_metric_rows = 5;
    options_.job_limits.max_metric_names = 2;
    options_.job_limits.max_log_bytes = 10;
    manager_ =
        std::make_unique<JobManager>(store_.get(), writer_.get(), &clock_, options_);
    sweeps_ = std::make_unique<SweepManager>(store_.get(), &manager_->jobs(), &clock_,
                                             SpecLimits());
  }

  static v1::JobSpec Spec(int world = 1) {
    v1::JobSpec spec;
    spec.set_name("job");
    spec.set_world_size(world);
    spec.mutable_trainer()->set_model("vit-micro");
    spec.mutable_trainer()->set_dataset("synthetic");
    spec.mutable_trainer()->set_batch_size(8);
    spec.mutable_trainer()->set_epochs(1);
    (*spec.mutable_env())["HF_TOKEN"] = "hf_secret_value";
    return spec;
  }

  absl::StatusOr<int64_t> SubmitAs(const Caller& who, v1::JobSpec spec = Spec(),
                                   const std::string& request_id = "") {
    JobOrigin origin;
    origin.owner = who.name;
    origin.admin = who.admin;
    return manager_->jobs().Submit(spec, "env: {HF_TOKEN: hf_secret_value}\n", request_id,
                                   origin);
  }

  FakeClock clock_;
  JobManagerOptions options_;
  std::unique_ptr<SqliteStore> store_;
  std::unique_ptr<StoreWriter> writer_;
  std::unique_ptr<JobManager> manager_;
  std::unique_ptr<SweepManager> sweeps_;
};

TEST_F(OwnershipTest, OthersJobsAreNotFoundForReadsAndCancel) {
  absl::StatusOr<int64_t> id = SubmitAs(kAlice);
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_TRUE(manager_->jobs().GetJob(kAlice, *id).ok());
  absl::Status get = manager_->jobs().GetJob(kBob, *id).status();
  EXPECT_TRUE(absl::IsNotFound(get)) << get;
  // The same answer as for an id that was never used: ids do not leak.
  EXPECT_EQ(get.message(), absl::StrCat("job ", *id, " not found"));
  EXPECT_EQ(manager_->jobs().GetJob(kBob, 999).status().message(), "job 999 not found");
  v1::GetMetricsRequest metrics;
  metrics.set_job_id(*id);
  EXPECT_TRUE(absl::IsNotFound(manager_->jobs().GetMetrics(kBob, metrics).status()));
  v1::GetLogsRequest logs;
  logs.set_job_id(*id);
  EXPECT_TRUE(absl::IsNotFound(manager_->jobs().GetLogs(kBob, logs).status()));
  EXPECT_TRUE(absl::IsNotFound(manager_->jobs().CheckVisible(kBob, *id)));
  EXPECT_TRUE(absl::IsNotFound(manager_->jobs().CancelJob(kBob, *id).status()));
  EXPECT_EQ(manager_->jobs().GetJob(kAlice, *id)->state(), v1::JOB_STATE_QUEUED);
}

TEST_F(OwnershipTest, AdminSeesAndCancelsAnyonesJob) {
  absl::StatusOr<int64_t> id = SubmitAs(kAlice);
  ASSERT_TRUE(id.ok());
  absl::StatusOr<v1::Job> job = manager_->jobs().GetJob(kAdmin, *id);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->spec().env().at("HF_TOKEN"), "hf_secret_value");
  absl::StatusOr<v1::JobState> state = manager_->jobs().CancelJob(kAdmin, *id);
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_EQ(*state, v1::JOB_STATE_CANCELLED);
  EXPECT_THAT(manager_->jobs().GetJob(kAlice, *id)->reason(),
              HasSubstr("cancelled by lab-admin"));
}

TEST_F(OwnershipTest, ListShowsOnlyOwnJobsWithoutSpecTextOrEnvValues) {
  ASSERT_TRUE(SubmitAs(kAlice).ok());
  ASSERT_TRUE(SubmitAs(kBob).ok());
  absl::StatusOr<JobList> bobs = manager_->jobs().ListJobs(kBob);
  ASSERT_TRUE(bobs.ok());
  ASSERT_EQ(bobs->jobs.size(), 1u);
  EXPECT_EQ(bobs->jobs[0].owner(), "bob");
  EXPECT_TRUE(bobs->jobs[0].spec_yaml().empty());
  EXPECT_EQ(bobs->jobs[0].spec().env().at("HF_TOKEN"), "<redacted>");
  // Asking for someone else's jobs gives nothing to a non-admin.
  JobFilter alices;
  alices.owner = "alice";
  EXPECT_TRUE(manager_->jobs().ListJobs(kBob, alices)->jobs.empty());
  EXPECT_EQ(manager_->jobs().ListJobs(kAdmin, alices)->jobs.size(), 1u);
  EXPECT_EQ(manager_->jobs().ListJobs(kAdmin)->jobs.size(), 2u);
}

TEST_F(OwnershipTest, ListPagesByBeforeId) {
  options_.default_list_limit = 2;
  manager_ = std::make_unique<JobManager>(store_.get(), writer_.get(), &clock_, options_);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(SubmitAs(kAdmin).ok());
  absl::StatusOr<JobList> first = manager_->jobs().ListJobs(kAdmin);
  ASSERT_TRUE(first.ok());
  ASSERT_EQ(first->jobs.size(), 2u);
  EXPECT_EQ(first->jobs[0].id(), 3);
  EXPECT_EQ(first->next_before_id, 2);
  JobFilter next;
  next.before_id = first->next_before_id;
  absl::StatusOr<JobList> second = manager_->jobs().ListJobs(kAdmin, next);
  ASSERT_EQ(second->jobs.size(), 1u);
  EXPECT_EQ(second->jobs[0].id(), 1);
  EXPECT_EQ(second->next_before_id, 0);
}

TEST_F(OwnershipTest, WorkersShowOthersSlotsAsACountOnly) {
  v1::RegisterWorkerRequest reg;
  reg.set_name("w1");
  reg.set_slots(2);
  ASSERT_TRUE(manager_->workers().RegisterWorker(reg).ok());
  ASSERT_TRUE(SubmitAs(kAlice).ok());
  std::vector<v1::Worker> for_bob = manager_->workers().ListWorkers(kBob);
  ASSERT_EQ(for_bob.size(), 1u);
  EXPECT_EQ(for_bob[0].slots_used(), 1);
  EXPECT_EQ(for_bob[0].slots_used_by_others(), 1);
  EXPECT_EQ(manager_->workers().ListWorkers(kAlice)[0].slots_used_by_others(), 0);
}

TEST_F(OwnershipTest, QueuedJobsLimitIsResourceExhaustedNamingTheFlag) {
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(SubmitAs(kAlice).ok());
  absl::StatusOr<int64_t> fourth = SubmitAs(kAlice);
  EXPECT_TRUE(absl::IsResourceExhausted(fourth.status())) << fourth.status();
  EXPECT_THAT(fourth.status().message(), HasSubstr("--max-queued-jobs"));
  // Another user, and an admin, are not held by Alice's queue.
  EXPECT_TRUE(SubmitAs(kBob).ok());
  EXPECT_TRUE(SubmitAs(kAdmin).ok());
}

TEST_F(OwnershipTest, WorldSizeOverTheRunningRanksLimitIsRefusedAtSubmit) {
  absl::StatusOr<int64_t> big = SubmitAs(kAlice, Spec(/*world=*/5));
  EXPECT_TRUE(absl::IsResourceExhausted(big.status())) << big.status();
  EXPECT_THAT(big.status().message(), HasSubstr("--max-running-ranks"));
  EXPECT_TRUE(SubmitAs(kAdmin, Spec(5)).ok());
}

TEST_F(OwnershipTest, PriorityAboveTheCapIsRefusedForNonAdmins) {
  v1::JobSpec urgent = Spec();
  urgent.set_priority(options_.user_limits.max_priority + 1);
  absl::StatusOr<int64_t> refused = SubmitAs(kAlice, urgent);
  EXPECT_TRUE(absl::IsPermissionDenied(refused.status())) << refused.status();
  EXPECT_THAT(refused.status().message(), HasSubstr("--max-user-priority"));
  EXPECT_TRUE(SubmitAs(kAdmin, urgent).ok());
}

// --max-memory-per-rank: a non-admin's job asking for more, or for no limit
// at all, is refused at submit naming the cap; an admin has none.
TEST_F(OwnershipTest, MemoryPerRankAboveTheCapOrUnsetIsRefusedForNonAdmins) {
  options_.user_limits.max_memory_per_rank_bytes = int64_t{4} << 30;
  manager_ = std::make_unique<JobManager>(store_.get(), writer_.get(), &clock_, options_);
  v1::JobSpec fits = Spec();
  fits.set_memory_per_rank("3GiB");
  EXPECT_TRUE(SubmitAs(kAlice, fits).ok());
  v1::JobSpec big = Spec();
  big.set_memory_per_rank("8GiB");
  absl::StatusOr<int64_t> refused = SubmitAs(kAlice, big);
  EXPECT_TRUE(absl::IsResourceExhausted(refused.status())) << refused.status();
  EXPECT_THAT(refused.status().message(),
              HasSubstr("8 GiB is above the per-user cap of 4 GiB"));
  absl::StatusOr<int64_t> unlimited = SubmitAs(kAlice, Spec());
  EXPECT_TRUE(absl::IsResourceExhausted(unlimited.status())) << unlimited.status();
  EXPECT_THAT(unlimited.status().message(), HasSubstr("--max-memory-per-rank"));
  EXPECT_TRUE(SubmitAs(kAdmin, big).ok());
  EXPECT_TRUE(SubmitAs(kAdmin, Spec()).ok());
}

TEST_F(OwnershipTest, RequestIdsAreDeduplicatedPerOwner) {
  absl::StatusOr<int64_t> a1 = SubmitAs(kAlice, Spec(), "req-1");
  absl::StatusOr<int64_t> a2 = SubmitAs(kAlice, Spec(), "req-1");
  absl::StatusOr<int64_t> b1 = SubmitAs(kBob, Spec(), "req-1");
  ASSERT_TRUE(a1.ok() && a2.ok() && b1.ok());
  EXPECT_EQ(*a1, *a2);
  EXPECT_NE(*a1, *b1);
  EXPECT_EQ(manager_->jobs().GetJob(kBob, *b1)->owner(), "bob");
}

class OwnershipRunningTest : public OwnershipTest {
 protected:
  // Places a 1-rank job of Alice's on worker w1 and returns its launch order.
  v1::LaunchOrder Launch(int64_t* id) {
    v1::RegisterWorkerRequest reg;
    reg.set_name("w1");
    reg.set_slots(1);
    auto registered = manager_->workers().RegisterWorker(reg);
    EXPECT_TRUE(registered.ok());
    epoch_ = registered->epoch();
    absl::StatusOr<int64_t> submitted = SubmitAs(kAlice);
    EXPECT_TRUE(submitted.ok());
    *id = *submitted;
    v1::HeartbeatRequest beat;
    beat.set_name("w1");
    beat.set_epoch(epoch_);
    auto response = manager_->workers().Heartbeat(beat);
    EXPECT_TRUE(response.ok());
    EXPECT_EQ(response->launch_size(), 1);
    return response->launch(0);
  }

  absl::Status Report(int64_t id, int32_t attempt, const std::vector<std::string>& names,
                      int step) {
    v1::ReportMetricsRequest req;
    req.set_job_id(id);
    req.set_attempt(attempt);
    req.set_rank(0);
    for (const std::string& n : names) {
      v1::MetricPoint* p = req.add_points();
      p->set_step(step);
      p->set_name(n);
      p->set_value(1);
    }
    absl::Status result;
    manager_->ranks().ReportMetrics(req, [&result](absl::Status s) { result = s; });
    writer_->Flush();
    return result;
  }

  int64_t epoch_ = 0;
};

TEST_F(OwnershipRunningTest, MetricRowsAndNamesLimitsNameTheirFlags) {
  int64_t id = 0;
  v1::LaunchOrder order = Launch(&id);
  ASSERT_TRUE(Report(id, order.attempt(), {"loss", "acc"}, 1).ok());
  absl::Status names = Report(id, order.attempt(), {"loss", "lr"}, 2);
  EXPECT_TRUE(absl::IsResourceExhausted(names)) << names;
  EXPECT_THAT(names.message(), HasSubstr("--max-metric-names"));
  ASSERT_TRUE(Report(id, order.attempt(), {"loss", "acc"}, 2).ok());
  absl::Status rows = Report(id, order.attempt(), {"loss", "acc"}, 3);
  EXPECT_TRUE(absl::IsResourceExhausted(rows)) << rows;
  EXPECT_THAT(rows.message(), HasSubstr("--max-metric-rows"));
}

TEST_F(OwnershipRunningTest, MetricsOfAStaleAttemptAreRefused) {
  int64_t id = 0;
  v1::LaunchOrder order = Launch(&id);
  absl::Status stale = Report(id, order.attempt() + 1, {"loss"}, 1);
  EXPECT_TRUE(absl::IsAborted(stale)) << stale;
  EXPECT_TRUE(Report(id, order.attempt(), {"loss"}, 1).ok());
}

TEST_F(OwnershipRunningTest, LogBytesLimitNamesItsFlag) {
  int64_t id = 0;
  v1::LaunchOrder order = Launch(&id);
  v1::ShipLogsRequest ship;
  ship.set_name("w1");
  ship.set_epoch(epoch_);
  ship.set_job_id(id);
  ship.set_attempt(order.attempt());
  ship.set_rank(0);
  ship.set_data("0123456789");
  ASSERT_TRUE(manager_->workers().ShipLogs(ship).ok());
  ship.set_offset(10);
  ship.set_data("x");
  absl::StatusOr<v1::ShipLogsResponse> over = manager_->workers().ShipLogs(ship);
  EXPECT_TRUE(absl::IsResourceExhausted(over.status())) << over.status();
  EXPECT_THAT(over.status().message(), HasSubstr("--max-log-bytes"));
}

TEST_F(OwnershipTest, OthersSweepsAreNotFoundAndNotListed) {
  v1::SweepSpec spec;
  spec.set_name("study");
  *spec.mutable_base() = Spec();
  spec.mutable_grid()->add_world_size(1);
  spec.mutable_grid()->add_batch_size(8);
  absl::StatusOr<v1::SubmitSweepResponse> sweep = sweeps_->Submit(spec, "", "", "alice");
  ASSERT_TRUE(sweep.ok()) << sweep.status();
  const int64_t id = sweep->sweep_id();
  EXPECT_TRUE(sweeps_->Get(kAlice, id).ok());
  EXPECT_TRUE(absl::IsNotFound(sweeps_->Get(kBob, id).status()));
  EXPECT_TRUE(absl::IsNotFound(sweeps_->Report(kBob, id).status()));
  EXPECT_TRUE(absl::IsNotFound(sweeps_->Cancel(kBob, id).status()));
  EXPECT_TRUE(sweeps_->List(kBob)->empty());
  EXPECT_EQ(sweeps_->List(kAdmin)->size(), 1u);
  EXPECT_TRUE(sweeps_->Cancel(kAlice, id).ok());
}

TEST_F(OwnershipTest, ShareShowsOwnLineToUsersAndEveryoneToAdmins) {
  ASSERT_TRUE(SubmitAs(kAlice).ok());
  ASSERT_TRUE(SubmitAs(kBob).ok());
  std::vector<UserShare> mine = manager_->quotas().GetShare(kBob);
  ASSERT_EQ(mine.size(), 1u);
  EXPECT_EQ(mine[0].user, "bob");
  EXPECT_EQ(mine[0].queued_jobs, 1);
  EXPECT_EQ(manager_->quotas().GetShare(kAdmin).size(), 2u);
}

}  // namespace
}  // namespace tessera
