// FairShare's usage decay and factors, the pure scheduler's owner limits, and
// the JobManager's own charging and ordering of equal-priority jobs by them
// (against first come, first served), over a fake clock.
#include "coordinator/core/fair_share.h"

#include <algorithm>
#include <iostream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "coordinator/core/job_manager.h"
#include "coordinator/core/scheduler.h"
#include "coordinator/store/sqlite_store.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

namespace v1 = ::tessera::v1;

const absl::Time kStart = absl::FromUnixSeconds(1'800'000'000);

TEST(FairShareTest, UsageHalvesEachHalfLife) {
  FairShare share(absl::Hours(1));
  share.Charge("alice", 100, kStart);
  EXPECT_DOUBLE_EQ(share.Usage("alice", kStart), 100);
  EXPECT_NEAR(share.Usage("alice", kStart + absl::Hours(1)), 50, 1e-9);
  EXPECT_NEAR(share.Usage("alice", kStart + absl::Hours(2)), 25, 1e-9);
  share.Charge("alice", 10, kStart + absl::Hours(1));
  EXPECT_NEAR(share.Usage("alice", kStart + absl::Hours(1)), 60, 1e-9);
  EXPECT_EQ(share.Usage("nobody", kStart), 0);
}

TEST(FairShareTest, UserWithoutUsageHasFactorOneAndHeavyUserLess) {
  FairShare share(absl::Hours(1));
  share.Charge("alice", 1000, kStart);
  std::map<std::string, double> f = share.Factors(kStart, {"bob"});
  EXPECT_DOUBLE_EQ(f.at("bob"), 1.0);
  // Alice has all the usage with a share of 1/2: 2^-(1 / 0.5) = 0.25.
  EXPECT_NEAR(f.at("alice"), 0.25, 1e-9);
}

TEST(FairShareTest, EqualUsageGivesEqualFactorsOfOneHalf) {
  FairShare share(absl::Hours(1));
  share.Charge("alice", 50, kStart);
  share.Charge("bob", 50, kStart);
  std::map<std::string, double> f = share.Factors(kStart);
  EXPECT_NEAR(f.at("alice"), 0.5, 1e-9);
  EXPECT_NEAR(f.at("bob"), 0.5, 1e-9);
}

TEST(FairShareTest, RestoredUsageDecaysFromItsTime) {
  FairShare share(absl::Hours(1));
  share.Restore("alice", 80, kStart);
  EXPECT_NEAR(share.Usage("alice", kStart + absl::Hours(3)), 10, 1e-9);
  ASSERT_EQ(share.Entries().size(), 1u);
  EXPECT_EQ(share.Entries()[0].user, "alice");
}

PendingJob OneSlotJob(int64_t id, const std::string& owner, absl::Time queued) {
  return PendingJob{
      .job_id = id, .world_size = 1, .queued_since = queued, .owner = owner};
}

// Alice queues 20 one-slot jobs, then Bob 5, at equal priority, on a 2-slot
// worker where each job runs 60 s: the real JobManager over an in-memory store
// and a fake clock, its own charging loop (AccrueUsageLocked) feeding its own
// scheduler. Returns the owners of the first `limit` starts, in order.
class FairShareRun {
 public:
  explicit FairShareRun(bool fair_share) {
    auto store = SqliteStore::Open(":memory:");
    EXPECT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
    writer_ = std::make_unique<StoreWriter>(store_.get());
    JobManagerOptions options;
    options.fair_share = fair_share;
    // Only the fair-share order differs between the two runs: no slot-share cap.
    options.user_limits.max_slot_share = 1.0;
    options.worker_suspect_after = absl::Minutes(10);
    options.worker_dead_after = absl::Minutes(20);
    manager_ =
        std::make_unique<JobManager>(store_.get(), writer_.get(), &clock_, options);
  }
  ~FairShareRun() { EXPECT_EQ(manager_->illegal_transitions(), 0); }

  std::vector<std::string> Starts(size_t limit) {
    v1::RegisterWorkerRequest reg;
    reg.set_name("w");
    reg.set_slots(2);
    absl::StatusOr<v1::RegisterWorkerResponse> registered =
        manager_->workers().RegisterWorker(reg);
    EXPECT_TRUE(registered.ok()) << registered.status();
    epoch_ = registered->epoch();
    for (int i = 0; i < 20; ++i) SubmitAs("alice");
    Beat({});  // Alice's first two jobs start and hold the worker
    for (int i = 0; i < 5; ++i) SubmitAs("bob");
    for (int round = 0; round < 40 && starts_.size() < limit; ++round) {
      // Run 60 s, heartbeating and renewing leases, then report the exits.
      for (int s = 0; s < 12; ++s) {
        clock_.Advance(absl::Seconds(5));
        std::vector<v1::LocalRank> ranks;
        for (const auto& [id, order] : running_) {
          ranks.push_back(Rank(order, false));
          v1::RenewLeaseRequest lease;
          lease.set_job_id(id);
          lease.set_attempt(order.attempt());
          lease.set_rank(order.rank());
          EXPECT_TRUE(manager_->ranks().RenewLease(lease).ok());
        }
        Beat(ranks);
      }
      std::vector<v1::LocalRank> exits;
      for (const auto& [id, order] : running_) exits.push_back(Rank(order, true));
      running_.clear();
      Beat(exits);
    }
    starts_.resize(std::min(starts_.size(), limit));
    return starts_;
  }

 private:
  void SubmitAs(const std::string& owner) {
    v1::JobSpec spec;
    spec.set_name("job");
    spec.set_world_size(1);
    spec.mutable_trainer()->set_model("vit-micro");
    spec.mutable_trainer()->set_dataset("synthetic");
    spec.mutable_trainer()->set_batch_size(8);
    spec.mutable_trainer()->set_epochs(1);
    JobOrigin origin;
    origin.owner = owner;
    absl::StatusOr<int64_t> id = manager_->jobs().Submit(spec, "", "", origin);
    ASSERT_TRUE(id.ok()) << id.status();
    owners_[*id] = owner;
  }
  static v1::LocalRank Rank(const v1::LaunchOrder& o, bool exited) {
    v1::LocalRank r;
    r.set_job_id(o.job_id());
    r.set_attempt(o.attempt());
    r.set_rank(o.rank());
    r.set_pid(1000 + static_cast<int>(o.job_id()));
    r.set_exited(exited);
    return r;
  }
  // One heartbeat; every launch it orders joins its rendezvous (world size
  // 1), so the job is RUNNING and charged to its owner.
  void Beat(const std::vector<v1::LocalRank>& ranks) {
    v1::HeartbeatRequest req;
    req.set_name("w");
    req.set_epoch(epoch_);
    for (const v1::LocalRank& r : ranks) *req.add_ranks() = r;
    absl::StatusOr<v1::HeartbeatResponse> resp = manager_->workers().Heartbeat(req);
    ASSERT_TRUE(resp.ok()) << resp.status();
    for (const v1::LaunchOrder& order : resp->launch()) {
      starts_.push_back(owners_.at(order.job_id()));
      running_[order.job_id()] = order;
      v1::RendezvousRequest join;
      join.set_job_id(order.job_id());
      join.set_attempt(order.attempt());
      join.set_rank(order.rank());
      join.set_bootstrap("127.0.0.1:1234");
      manager_->ranks().Rendezvous(join, [](absl::StatusOr<v1::RendezvousResponse>) {});
    }
  }

  FakeClock clock_{kStart};
  std::unique_ptr<SqliteStore> store_;
  std::unique_ptr<StoreWriter> writer_;
  std::unique_ptr<JobManager> manager_;
  int64_t epoch_ = 0;
  std::map<int64_t, std::string> owners_;
  std::map<int64_t, v1::LaunchOrder> running_;
  std::vector<std::string> starts_;
};

// Starts after Bob queued (the first two are Alice's, before he did) until
// his first one.
int64_t StartsBeforeBob(const std::vector<std::string>& starts) {
  auto first = std::find(starts.begin() + 2, starts.end(), "bob");
  return first == starts.end() ? -1 : first - (starts.begin() + 2);
}

TEST(FairShareSchedulingTest, LightUserIsNotStarvedByHeavyUsersQueue) {
  const std::vector<std::string> starts = FairShareRun(/*fair_share=*/true).Starts(12);
  ASSERT_EQ(starts.size(), 12u);
  EXPECT_EQ(starts[0], "alice");
  EXPECT_EQ(starts[1], "alice");
  std::vector<std::string> next(starts.begin() + 2, starts.end());
  const int64_t before_bob = StartsBeforeBob(starts);
  std::cout << "FIGURE fair_share_starts_before_light_user=" << before_bob << "\n";
  ASSERT_GE(before_bob, 0) << "Bob never started";
  EXPECT_LT(before_bob, 3) << "Bob's first job is among the next 3 starts";
  EXPECT_GE(std::count(next.begin(), next.end(), "bob"), 4);
}

TEST(FairShareSchedulingTest, WithoutFairShareFifoWouldStarveTheLightUser) {
  // The same queue and the same cluster with --no-fair-share: every one of
  // Alice's 18 waiting jobs starts before Bob's first, 9 rounds of 60 s later.
  const std::vector<std::string> starts = FairShareRun(/*fair_share=*/false).Starts(25);
  ASSERT_EQ(starts.size(), 25u);
  const int64_t before_bob = StartsBeforeBob(starts);
  std::cout << "FIGURE fifo_starts_before_light_user=" << before_bob << "\n";
  EXPECT_EQ(before_bob, 18);
  EXPECT_EQ(std::count(starts.begin(), starts.begin() + 20, "bob"), 0);
}

TEST(OwnerLimitsTest, RunningRanksLimitHoldsTheJobAndNamesTheFlag) {
  SchedulerOptions options;
  options.max_ranks_per_owner = 2;
  options.placed_by_owner["alice"] = 2;
  ScheduleResult result =
      Schedule({OneSlotJob(1, "alice", kStart)},
               {WorkerInventory{.worker = "w", .slots = 8}}, kStart, options);
  EXPECT_TRUE(result.placements.empty());
  EXPECT_NE(result.pending_reasons[1].find("--max-running-ranks"), std::string::npos);
}

TEST(OwnerLimitsTest, SlotShareAppliesOnlyWhileAnotherUserWaits) {
  SchedulerOptions options;
  options.max_slot_share = 0.5;
  options.placed_by_owner["alice"] = 1;
  const std::vector<WorkerInventory> cluster = {
      WorkerInventory{.worker = "w", .slots = 2, .used_slots = {0}}};
  // Alone in the queue, Alice may take the whole cluster.
  ScheduleResult alone =
      Schedule({OneSlotJob(1, "alice", kStart)}, cluster, kStart, options);
  EXPECT_EQ(alone.placements.size(), 1u);
  // With Bob waiting (for a slot that Alice's job would take), Alice is held.
  PendingJob bob =
      PendingJob{.job_id = 2, .world_size = 2, .queued_since = kStart, .owner = "bob"};
  ScheduleResult shared =
      Schedule({OneSlotJob(1, "alice", kStart), bob}, cluster, kStart, options);
  EXPECT_TRUE(shared.placements.empty());
  EXPECT_NE(shared.pending_reasons[1].find("--max-slot-share"), std::string::npos);
}

TEST(OwnerLimitsTest, ExemptOwnersAreNotLimited) {
  SchedulerOptions options;
  options.max_ranks_per_owner = 1;
  options.placed_by_owner["root"] = 5;
  PendingJob job = OneSlotJob(1, "root", kStart);
  job.exempt = true;
  ScheduleResult result =
      Schedule({job}, {WorkerInventory{.worker = "w", .slots = 8}}, kStart, options);
  EXPECT_EQ(result.placements.size(), 1u);
}

}  // namespace
}  // namespace tessera
