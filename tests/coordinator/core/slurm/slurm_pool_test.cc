// PlanSlurmPools and AllocationNodes (coordinator/core/slurm/slurm_pool.h): which
// allocations to submit, cancel and forget, and the pending reasons.
#include "coordinator/core/slurm/slurm_pool.h"

#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

const absl::Time kNow = absl::FromUnixSeconds(1'700'000'000);

SlurmPoolConfig Pool(const std::string& name, int32_t cpus, int32_t max_nodes = 2) {
  SlurmPoolConfig p;
  p.name = name;
  p.cpus_per_node = cpus;
  p.max_nodes = max_nodes;
  p.idle_timeout = absl::Minutes(5);
  p.register_timeout = absl::Minutes(3);
  p.max_allocations = 2;
  return p;
}

WaitingJob Job(int64_t id, int32_t world, int32_t nodes = 0, int32_t per_node = 0) {
  return {.job_id = id,
          .world_size = world,
          .nodes = nodes,
          .per_node = per_node,
          .owner = "alice"};
}

SlurmAllocation Alloc(const std::string& slurm_id, int64_t job, const std::string& state,
                      int32_t nodes = 1, const std::string& reason = "None") {
  SlurmAllocation a;
  a.pool = "cpu";
  a.slurm_job_id = slurm_id;
  a.job_id = job;
  a.nodes = nodes;
  a.state = state;
  a.reason = reason;
  a.submitted_at = kNow - absl::Minutes(1);
  if (state == "R") a.running_since = kNow - absl::Seconds(30);
  return a;
}

SlurmPoolWorker Worker(const std::string& name, const std::string& slurm_id,
                       int32_t ranks, absl::Time idle_since, bool draining = false) {
  return {.name = name,
          .pool = "cpu",
          .slurm_job_id = slurm_id,
          .running_ranks = ranks,
          .idle_since = idle_since,
          .draining = draining};
}

TEST(AllocationNodesTest, SizesTheAllocationToTheJobsShape) {
  const SlurmPoolConfig pool = Pool("cpu", 2, 4);
  EXPECT_EQ(*AllocationNodes(pool, Job(1, 2)), 1);        // 2 ranks on one 2-slot node
  EXPECT_EQ(*AllocationNodes(pool, Job(1, 3)), 2);        // 3 ranks need 2 nodes
  EXPECT_EQ(*AllocationNodes(pool, Job(1, 4, 4, 1)), 4);  // fixed 4x1
  EXPECT_EQ(*AllocationNodes(pool, Job(1, 4, 0, 1)), 4);  // one per node
  EXPECT_EQ(*AllocationNodes(pool, Job(1, 2, 2)), 2);     // nodes fixed
}

TEST(AllocationNodesTest, SaysWhyAPoolCannotHostAJob) {
  const SlurmPoolConfig pool = Pool("cpu", 2, 2);
  absl::StatusOr<int32_t> n = AllocationNodes(pool, Job(1, 6));
  EXPECT_TRUE(absl::StrContains(n.status().message(), "needs 3 nodes, at most 2"))
      << n.status();
  n = AllocationNodes(pool, Job(1, 4, 1, 4));
  EXPECT_TRUE(absl::StrContains(n.status().message(), "needs 4 ranks per node"))
      << n.status();
  WaitingJob gpu = Job(1, 1);
  gpu.kind = SlurmNodeKind::kGpu;
  n = AllocationNodes(pool, gpu);
  EXPECT_TRUE(absl::StrContains(n.status().message(), "has CPU nodes")) << n.status();
}

TEST(SlurmPoolPlanTest, SubmitsAnAllocationForAWaitingJob) {
  SlurmPoolState state;
  state.waiting = {Job(7, 2)};
  SlurmPoolPlan plan = PlanSlurmPools({Pool("cpu", 2)}, state, kNow);
  ASSERT_EQ(plan.submit.size(), 1u);
  EXPECT_EQ(plan.submit[0].pool, "cpu");
  EXPECT_EQ(plan.submit[0].job_id, 7);
  EXPECT_EQ(plan.submit[0].nodes, 1);
  EXPECT_EQ(plan.submit[0].owner, "alice");
  EXPECT_EQ(plan.pending_reasons[7],
            "submitting a Slurm allocation of 1 node in pool cpu");
  EXPECT_TRUE(plan.cancel.empty());
}

TEST(SlurmPoolPlanTest, PendingAllocationGivesItsSlurmStateAsTheReason) {
  SlurmPoolState state;
  state.waiting = {Job(7, 2)};
  state.allocations = {Alloc("1234", 7, "PD", 1, "Resources")};
  SlurmPoolPlan plan = PlanSlurmPools({Pool("cpu", 2)}, state, kNow);
  EXPECT_TRUE(plan.submit.empty());  // never a second allocation for one job
  EXPECT_EQ(plan.pending_reasons[7], "waiting for Slurm allocation 1234 (PD: Resources)");
  state.allocations[0].reason = "None";
  plan = PlanSlurmPools({Pool("cpu", 2)}, state, kNow);
  EXPECT_EQ(plan.pending_reasons[7], "waiting for Slurm allocation 1234 (PD)");
}

TEST(SlurmPoolPlanTest, RunningAllocationReasonCountsItsRegisteredWorkers) {
  SlurmPoolState state;
  state.waiting = {Job(7, 4)};
  state.allocations = {Alloc("1234", 7, "R", 2)};
  state.workers = {Worker("n1-slurm-1234", "1234", 0, kNow)};
  SlurmPoolPlan plan = PlanSlurmPools({Pool("cpu", 2)}, state, kNow);
  EXPECT_EQ(plan.pending_reasons[7],
            "waiting for Slurm allocation 1234 (R: 1 of 2 workers registered)");
  // Its workers are kept for the job that caused the allocation.
  EXPECT_EQ(plan.reserved_workers,
            (std::map<std::string, int64_t>{{"n1-slurm-1234", 7}}));
}

TEST(SlurmPoolPlanTest, TakesTheFirstPoolThatCanHostTheJob) {
  SlurmPoolState state;
  state.waiting = {Job(7, 4, 1, 4)};  // 4 ranks on one node
  SlurmPoolPlan plan = PlanSlurmPools({Pool("small", 2), Pool("big", 8)}, state, kNow);
  ASSERT_EQ(plan.submit.size(), 1u);
  EXPECT_EQ(plan.submit[0].pool, "big");
}

TEST(SlurmPoolPlanTest, JobNoPoolCanHostSaysWhy) {
  SlurmPoolState state;
  state.waiting = {Job(7, 10)};
  SlurmPoolPlan plan = PlanSlurmPools({Pool("cpu", 2, 2)}, state, kNow);
  EXPECT_TRUE(plan.submit.empty());
  EXPECT_EQ(plan.pending_reasons[7],
            "no Slurm allocation: pool cpu: needs 5 nodes, at most 2");
  // Without pools the pools say nothing; the scheduler's reason stands.
  EXPECT_TRUE(PlanSlurmPools({}, state, kNow).pending_reasons.empty());
}

TEST(SlurmPoolPlanTest, HoldsAtThePoolsAllocationLimit) {
  SlurmPoolState state;
  state.waiting = {Job(1, 1), Job(2, 1), Job(3, 1)};
  state.allocations = {Alloc("100", 1, "PD")};
  SlurmPoolPlan plan = PlanSlurmPools({Pool("cpu", 2)}, state, kNow);  // limit 2
  ASSERT_EQ(plan.submit.size(), 1u);
  EXPECT_EQ(plan.submit[0].job_id, 2);
  EXPECT_EQ(plan.pending_reasons[3],
            "no Slurm allocation: Slurm pool cpu has 2 of 2 allocations in flight");
}

TEST(SlurmPoolPlanTest, RetriesAFailedPoolOnlyAfterTheDelay) {
  SlurmPoolState state;
  state.waiting = {Job(7, 1)};
  state.failures = {{"cpu", 7, "Invalid account", kNow - absl::Seconds(20)}};
  SlurmPoolPlan plan = PlanSlurmPools({Pool("cpu", 2)}, state, kNow);
  EXPECT_TRUE(plan.submit.empty());
  EXPECT_EQ(plan.pending_reasons[7],
            "no Slurm allocation: Slurm submission to pool cpu failed: Invalid account; "
            "retrying in 40s");
  plan = PlanSlurmPools({Pool("cpu", 2)}, state, kNow + absl::Seconds(41));
  EXPECT_EQ(plan.submit.size(), 1u);
}

TEST(SlurmPoolPlanTest, CancelsAPendingAllocationItsJobNoLongerNeeds) {
  SlurmPoolState state;  // job 7 was placed elsewhere or cancelled
  state.allocations = {Alloc("1234", 7, "PD")};
  SlurmPoolPlan plan = PlanSlurmPools({Pool("cpu", 2)}, state, kNow);
  ASSERT_EQ(plan.cancel.size(), 1u);
  EXPECT_EQ(plan.cancel[0].slurm_job_id, "1234");
  EXPECT_EQ(plan.cancel[0].reason, "job 7 no longer waits for it");
  // Once the cancel is sent it is not sent again.
  state.allocations[0].cancel_sent = true;
  EXPECT_TRUE(PlanSlurmPools({Pool("cpu", 2)}, state, kNow).cancel.empty());
}

TEST(SlurmPoolPlanTest, CancelsAnAllocationIdlePastTheIdleTimeout) {
  SlurmPoolState state;  // its job ran on it and finished
  state.allocations = {Alloc("1234", 7, "R", 2)};
  state.workers = {Worker("a", "1234", 0, kNow - absl::Minutes(6)),
                   Worker("b", "1234", 0, kNow - absl::Minutes(4))};
  // b became idle 4 minutes ago: not yet.
  EXPECT_TRUE(PlanSlurmPools({Pool("cpu", 2)}, state, kNow).cancel.empty());
  SlurmPoolPlan plan = PlanSlurmPools({Pool("cpu", 2)}, state, kNow + absl::Minutes(1));
  ASSERT_EQ(plan.cancel.size(), 1u);
  EXPECT_EQ(plan.cancel[0].reason, "its workers were idle for 5m");
  // A busy worker keeps it.
  state.workers[1].running_ranks = 1;
  EXPECT_TRUE(
      PlanSlurmPools({Pool("cpu", 2)}, state, kNow + absl::Hours(1)).cancel.empty());
}

TEST(SlurmPoolPlanTest, KeepsAnIdleAllocationWhileItsJobWaits) {
  SlurmPoolState state;
  state.waiting = {Job(7, 2)};
  state.allocations = {Alloc("1234", 7, "R", 1)};
  state.workers = {Worker("a", "1234", 0, kNow - absl::Hours(1))};
  SlurmPoolPlan plan = PlanSlurmPools({Pool("cpu", 2)}, state, kNow);
  EXPECT_TRUE(plan.cancel.empty());
  EXPECT_TRUE(plan.submit.empty());
}

TEST(SlurmPoolPlanTest, CancelsAnAllocationWhoseWorkersDrained) {
  SlurmPoolState state;
  state.waiting = {Job(7, 2)};  // requeued after the preemption
  state.allocations = {Alloc("1234", 7, "R", 1)};
  state.workers = {Worker("a", "1234", 0, kNow, /*draining=*/true)};
  SlurmPoolPlan plan = PlanSlurmPools({Pool("cpu", 2)}, state, kNow);
  ASSERT_EQ(plan.cancel.size(), 1u);
  EXPECT_EQ(plan.cancel[0].reason, "its workers have drained");
  // The job gets a new allocation at once.
  ASSERT_EQ(plan.submit.size(), 1u);
  EXPECT_EQ(plan.submit[0].job_id, 7);
  // While ranks still run there, it stays.
  state.workers[0].running_ranks = 1;
  EXPECT_TRUE(PlanSlurmPools({Pool("cpu", 2)}, state, kNow).cancel.empty());
}

TEST(SlurmPoolPlanTest, CancelsAnAllocationWhoseWorkersNeverRegistered) {
  SlurmPoolState state;
  state.waiting = {Job(7, 4)};
  state.allocations = {Alloc("1234", 7, "R", 2)};
  state.allocations[0].running_since = kNow - absl::Minutes(2);
  state.workers = {Worker("a", "1234", 0, kNow)};
  EXPECT_TRUE(PlanSlurmPools({Pool("cpu", 2)}, state, kNow).cancel.empty());
  SlurmPoolPlan plan = PlanSlurmPools({Pool("cpu", 2)}, state, kNow + absl::Minutes(1));
  ASSERT_EQ(plan.cancel.size(), 1u);
  EXPECT_EQ(plan.cancel[0].reason, "only 1 of 2 workers registered within 3m");
}

TEST(SlurmPoolPlanTest, ForgetsEndedAllocationsAndResubmitsForTheirJob) {
  SlurmPoolState state;
  state.waiting = {Job(7, 2)};  // lost its workers with the allocation
  state.allocations = {Alloc("1234", 7, "TO"), Alloc("1300", 8, "")};
  SlurmPoolPlan plan = PlanSlurmPools({Pool("cpu", 2)}, state, kNow);
  EXPECT_EQ(plan.forget, (std::vector<std::string>{"1234", "1300"}));
  EXPECT_TRUE(plan.cancel.empty());
  ASSERT_EQ(plan.submit.size(), 1u);
  EXPECT_EQ(plan.submit[0].job_id, 7);
}

TEST(SlurmPoolPlanTest, CompletingAllocationIsLeftToEnd) {
  SlurmPoolState state;
  state.allocations = {Alloc("1234", 7, "CG")};
  state.workers = {Worker("a", "1234", 0, kNow - absl::Hours(1))};
  SlurmPoolPlan plan = PlanSlurmPools({Pool("cpu", 2)}, state, kNow);
  EXPECT_TRUE(plan.cancel.empty());
  EXPECT_TRUE(plan.forget.empty());
}

}  // namespace
}  // namespace tessera
