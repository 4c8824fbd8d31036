// SlurmPoolManager (coordinator/core/slurm/slurm_pool_manager.h) over a fake
// SlurmClient and a fake clock: submissions with their script, account and
// credential file, the pending reasons from Slurm's states, idle cancels,
// forgetting ended allocations, failed commands.
#include "coordinator/core/slurm/slurm_pool_manager.h"

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/clock.h"
#include "coordinator/store/sqlite_store.h"
#include "gtest/gtest.h"
#include "tests/testing/fake_slurm_client.h"

namespace tessera {
namespace {

using ::tessera::testing::FakeSlurmClient;

SlurmPoolConfig CpuPool() {
  SlurmPoolConfig p;
  p.name = "cpu";
  p.cpus_per_node = 2;
  p.max_nodes = 2;
  p.idle_timeout = absl::Minutes(5);
  return p;
}

WaitingJob Job(int64_t id, int32_t world, const std::string& owner = "alice") {
  return {.job_id = id, .world_size = world, .owner = owner};
}

SlurmPoolConfig GpuPool() {
  SlurmPoolConfig p = CpuPool();
  p.name = "gpu";
  p.gpus_per_node = 4;
  return p;
}

// A waiting job of `world` ranks whose spec's trainer says `device` and
// `precision` (empty: unset), as the JobManager hands it to the pools.
WaitingJob SpecJob(int64_t id, int32_t world, const std::string& device,
                   const std::string& precision) {
  v1::TrainerConfig trainer;
  trainer.set_device(device);
  trainer.set_precision(precision);
  WaitingJob job = Job(id, world);
  job.kind = SlurmNodeKindOf(trainer);
  return job;
}

class SlurmPoolManagerTest : public ::testing::Test {
 protected:
  SlurmPoolManager Make(bool can_submit_as_owner, SlurmPoolConfig pool = CpuPool()) {
    return Make(can_submit_as_owner, std::vector<SlurmPoolConfig>{pool});
  }
  // A manager on store_: a second one made on the same store is the
  // manager of a restarted coordinator.
  SlurmPoolManager Make(bool can_submit_as_owner, std::vector<SlurmPoolConfig> pools) {
    return SlurmPoolManager(
        std::move(pools), &slurm_, store_.get(), &clock_,
        [this](const SlurmSubmitDecision& d, const std::string& run_as) {
          credential_requests_.push_back(absl::StrCat(d.job_id, ":", run_as));
          absl::StatusOr<int64_t> id = JoinToken(SlurmCredentialName(d.pool, d.job_id));
          if (!id.ok()) return absl::StatusOr<SlurmCredential>(id.status());
          return absl::StatusOr<SlurmCredential>(
              SlurmCredential{absl::StrCat("/shared/join/job", d.job_id,
                                           run_as.empty() ? "" : "-" + run_as),
                              *id});
        },
        {.coordinator_address = "coord:50051",
         .can_submit_as_owner = can_submit_as_owner},
        [this](const SlurmCredential& c) {
          revoked_.push_back(c.path);
          revoked_ids_.push_back(c.id);
          if (c.id != 0) EXPECT_TRUE(store_->RevokeToken(c.id).ok());
        });
  }

  // A join token in store_, as the coordinator's credential writer makes one.
  absl::StatusOr<int64_t> JoinToken(const std::string& name) {
    TokenRecord t;
    t.kind = "join";
    t.name = name;
    t.hash = absl::StrCat("hash-of-", name, "-", credential_requests_.size());
    return store_->CreateToken(t);
  }

  static std::unique_ptr<Store> OpenStore() {
    absl::StatusOr<std::unique_ptr<SqliteStore>> store = SqliteStore::Open(":memory:");
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? std::move(*store) : nullptr;
  }

  // What the store holds, by Slurm job id.
  std::map<std::string, SlurmAllocationRecord> Stored() {
    absl::StatusOr<std::vector<SlurmAllocationRecord>> all =
        store_->ListSlurmAllocations();
    EXPECT_TRUE(all.ok()) << all.status();
    std::map<std::string, SlurmAllocationRecord> by_id;
    if (!all.ok()) return by_id;
    for (const SlurmAllocationRecord& r : *all) by_id[r.slurm_job_id] = r;
    return by_id;
  }

  FakeSlurmClient slurm_;
  FakeClock clock_;
  std::unique_ptr<Store> store_ = OpenStore();
  std::vector<std::string> credential_requests_;
  std::vector<std::string> revoked_;
  std::vector<int64_t> revoked_ids_;
};

TEST_F(SlurmPoolManagerTest, SubmitsTheRenderedScriptAndReportsSlurmsState) {
  SlurmPoolManager m = Make(/*can_submit_as_owner=*/false);
  SlurmPoolManager::TickResult r = m.Tick({Job(7, 2)}, {});
  ASSERT_EQ(slurm_.submitted.size(), 1u);
  const std::string& script = slurm_.submitted[0].script;
  EXPECT_TRUE(absl::StrContains(script, "#SBATCH --nodes=1\n")) << script;
  EXPECT_TRUE(absl::StrContains(script, "--coordinator 'coord:50051'")) << script;
  EXPECT_TRUE(absl::StrContains(script, "--join-token-file '/shared/join/job7'"))
      << script;
  EXPECT_EQ(slurm_.submitted[0].run_as, "");
  EXPECT_EQ(r.pending_reasons[7], "waiting for Slurm allocation 100 (PD)");
  ASSERT_TRUE(m.Allocation(7).has_value());
  EXPECT_EQ(m.Allocation(7)->slurm_job_id, "100");
  EXPECT_EQ(m.Allocation(7)->owner,
            "alice");  // recorded, though submitted as the service

  slurm_.jobs["100"].reason = "Resources";
  r = m.Tick({Job(7, 2)}, {});
  EXPECT_EQ(slurm_.submitted.size(), 1u);
  EXPECT_EQ(r.pending_reasons[7], "waiting for Slurm allocation 100 (PD: Resources)");
}

TEST_F(SlurmPoolManagerTest, AWorkerThatJoinedShowsItsAllocationRunningBeforeSqueueDoes) {
  SlurmPoolManager m = Make(/*can_submit_as_owner=*/false);
  m.Tick({Job(7, 2)}, {});
  ASSERT_EQ(m.Allocation(7)->state, "PD");
  m.WorkerJoined("999");  // not ours
  EXPECT_EQ(m.Allocation(7)->state, "PD");

  clock_.Advance(absl::Seconds(3));
  m.WorkerJoined("100");
  EXPECT_EQ(m.Allocation(7)->state, "R");
  EXPECT_EQ(m.Allocation(7)->running_since, clock_.Now());

  // squeue still says PD on the next round; the registered worker wins.
  SlurmPoolWorker w{.name = "node1", .pool = "cpu", .slurm_job_id = "100"};
  m.Tick({}, {w});
  EXPECT_EQ(m.Allocation(7)->state, "R");
}

TEST_F(SlurmPoolManagerTest, SubmitsAsTheOwnerWhenItMay) {
  SlurmPoolManager m = Make(/*can_submit_as_owner=*/true);
  m.Tick({Job(7, 2, "alice"), Job(8, 2, "root"), Job(9, 2, "")}, {});
  ASSERT_EQ(slurm_.submitted.size(), 3u);
  EXPECT_EQ(slurm_.submitted[0].run_as, "alice");
  EXPECT_EQ(slurm_.submitted[1].run_as, "");  // never as root
  EXPECT_EQ(slurm_.submitted[2].run_as, "");  // no owner: the service account
  EXPECT_EQ(credential_requests_, (std::vector<std::string>{"7:alice", "8:", "9:"}));
}

TEST_F(SlurmPoolManagerTest, OwnerWithoutAnAccountIsSubmittedAsTheService) {
  SlurmPoolManager m = Make(/*can_submit_as_owner=*/true);
  slurm_.submit_errors = {absl::NotFoundError("no user carol")};
  SlurmPoolManager::TickResult r = m.Tick({Job(7, 2, "carol")}, {});
  ASSERT_EQ(slurm_.submitted.size(), 2u);
  EXPECT_EQ(slurm_.submitted[0].run_as, "carol");
  EXPECT_EQ(slurm_.submitted[1].run_as, "");
  // The credential file is written again, for the account that submits now.
  EXPECT_EQ(credential_requests_, (std::vector<std::string>{"7:carol", "7:"}));
  EXPECT_EQ(m.Allocation(7)->owner, "carol");
  EXPECT_EQ(r.pending_reasons[7], "waiting for Slurm allocation 100 (PD)");
}

TEST_F(SlurmPoolManagerTest, CancelsTheIdleAllocationAndForgetsItOnceEnded) {
  SlurmPoolManager m = Make(false);
  m.Tick({Job(7, 2)}, {});
  slurm_.jobs["100"].state = "R";
  SlurmPoolWorker w{.name = "n1-slurm-100", .pool = "cpu", .slurm_job_id = "100"};
  SlurmPoolManager::TickResult r = m.Tick({Job(7, 2)}, {w});
  EXPECT_EQ(r.reserved_workers, (std::map<std::string, int64_t>{{"n1-slurm-100", 7}}));
  EXPECT_EQ(m.ReservedWorkers(), r.reserved_workers);
  // The job runs there for a while, then finishes: the worker is idle from
  // the first round that sees it without ranks.
  w.running_ranks = 2;
  clock_.Advance(absl::Minutes(10));
  m.Tick({}, {w});
  EXPECT_TRUE(slurm_.cancelled.empty());
  w.running_ranks = 0;
  m.Tick({}, {w});
  clock_.Advance(absl::Minutes(4));
  m.Tick({}, {w});
  EXPECT_TRUE(slurm_.cancelled.empty());
  clock_.Advance(absl::Minutes(1));
  r = m.Tick({}, {w});
  EXPECT_EQ(slurm_.cancelled, (std::vector<std::string>{"100"}));
  ASSERT_FALSE(r.events.empty());
  EXPECT_TRUE(absl::StrContains(r.events.back(), "idle for 5m")) << r.events.back();
  // Not cancelled twice; forgotten once Slurm shows it ended.
  m.Tick({}, {w});
  EXPECT_EQ(slurm_.cancelled.size(), 1u);
  EXPECT_TRUE(m.Allocations().empty());
}

// A source that hands out what the test put in it and counts the snapshots.
class FakeSource : public SlurmPoolSource {
 public:
  SlurmPoolSnapshot SlurmSnapshot() override {
    ++snapshots;
    return snapshot;
  }
  SlurmPoolSnapshot snapshot;
  int snapshots = 0;
};

TEST_F(SlurmPoolManagerTest, TickIfDueReadsTheSourceOncePerIntervalAndKeepsTheOutcome) {
  SlurmPoolManager m = Make(false);
  FakeSource source;
  source.snapshot.waiting = {Job(7, 2)};
  EXPECT_TRUE(m.TickIfDue(source));
  EXPECT_EQ(m.PendingReason(7), "waiting for Slurm allocation 100 (PD)");
  EXPECT_EQ(m.PendingReason(8), std::nullopt);

  clock_.Advance(absl::Seconds(1));
  EXPECT_FALSE(m.TickIfDue(source));  // the default interval is 2 s
  EXPECT_EQ(source.snapshots, 1);

  // Its worker registers: it is reserved for job 7, whose reason follows
  // Slurm's state.
  slurm_.jobs["100"].state = "R";
  source.snapshot.workers = {{.name = "n1", .pool = "cpu", .slurm_job_id = "100"}};
  clock_.Advance(absl::Seconds(1));
  EXPECT_TRUE(m.TickIfDue(source));
  EXPECT_EQ(source.snapshots, 2);
  EXPECT_EQ(m.ReservedWorkers(), (std::map<std::string, int64_t>{{"n1", 7}}));
  EXPECT_EQ(m.PendingReason(7),
            "waiting for Slurm allocation 100 (R: 1 of 1 workers registered)");

  // Job 7 was placed: nothing waits, nothing is reserved.
  source.snapshot.waiting.clear();
  clock_.Advance(absl::Seconds(2));
  EXPECT_TRUE(m.TickIfDue(source));
  EXPECT_EQ(m.PendingReason(7), std::nullopt);
  EXPECT_TRUE(m.ReservedWorkers().empty());
}

TEST_F(SlurmPoolManagerTest, FailedQueryDoesNotLookLikeEndedAllocations) {
  SlurmPoolManager m = Make(false);
  m.Tick({Job(7, 2)}, {});
  slurm_.query_error = absl::UnavailableError("Unable to contact slurm controller");
  SlurmPoolManager::TickResult r = m.Tick({Job(7, 2)}, {});
  EXPECT_EQ(m.Allocations().size(), 1u);
  EXPECT_EQ(slurm_.submitted.size(), 1u);  // no second allocation either
  EXPECT_EQ(r.pending_reasons[7], "waiting for Slurm allocation 100 (PD)");
  EXPECT_TRUE(absl::StrContains(r.events[0], "cannot query Slurm")) << r.events[0];
}

TEST_F(SlurmPoolManagerTest,
       JoinCredentialsAreRevokedWhenUnusedAndWhenTheAllocationEnds) {
  SlurmPoolManager m = Make(/*can_submit_as_owner=*/true);
  // carol has no account here: the credential written for her goes unused.
  slurm_.submit_errors = {absl::NotFoundError("no user carol")};
  m.Tick({Job(7, 2, "carol")}, {});
  EXPECT_EQ(revoked_, (std::vector<std::string>{"/shared/join/job7-carol"}));
  EXPECT_EQ(m.Allocation(7)->credential.path, "/shared/join/job7");
  // A failed submission's credential is revoked at once.
  slurm_.submit_errors = {
      absl::FailedPreconditionError("sbatch: error: Invalid account")};
  m.Tick({Job(7, 2, "carol"), Job(8, 2, "root")}, {});
  EXPECT_EQ(revoked_,
            (std::vector<std::string>{"/shared/join/job7-carol", "/shared/join/job8"}));

  // Allocation 100 is still pending when job 7 stops waiting: it is cancelled,
  // and its credential revoked only once Slurm shows it ended.
  m.Tick({}, {});
  EXPECT_EQ(slurm_.cancelled, (std::vector<std::string>{"100"}));
  EXPECT_EQ(revoked_.size(), 2u);
  slurm_.jobs.erase("100");
  m.Tick({}, {});
  EXPECT_FALSE(m.Allocation(7).has_value());
  EXPECT_EQ(revoked_,
            (std::vector<std::string>{"/shared/join/job7-carol", "/shared/join/job8",
                                      "/shared/join/job7"}));
}

TEST_F(SlurmPoolManagerTest, FailedSubmissionIsReportedAndRetriedLater) {
  SlurmPoolManager m = Make(false);
  slurm_.submit_errors = {absl::FailedPreconditionError(
      "sbatch failed (exit code 1): sbatch: error: Invalid account")};
  SlurmPoolManager::TickResult r = m.Tick({Job(7, 2)}, {});
  EXPECT_EQ(r.pending_reasons[7],
            "Slurm submission to pool cpu failed: sbatch failed (exit code 1): sbatch: "
            "error: Invalid account");
  r = m.Tick({Job(7, 2)}, {});
  EXPECT_EQ(slurm_.submitted.size(), 1u);
  EXPECT_TRUE(absl::StrContains(r.pending_reasons[7], "retrying in"))
      << r.pending_reasons[7];
  clock_.Advance(absl::Seconds(61));
  r = m.Tick({Job(7, 2)}, {});
  EXPECT_EQ(slurm_.submitted.size(), 2u);
  EXPECT_EQ(r.pending_reasons[7], "waiting for Slurm allocation 100 (PD)");
}

TEST_F(SlurmPoolManagerTest, AllocationKilledBySlurmIsReplacedForItsJob) {
  SlurmPoolManager m = Make(false);
  m.Tick({Job(7, 2)}, {});
  slurm_.jobs.erase("100");  // ended (e.g. node failure) and purged
  SlurmPoolManager::TickResult r = m.Tick({Job(7, 2)}, {});
  ASSERT_EQ(slurm_.submitted.size(), 2u);
  EXPECT_EQ(m.Allocation(7)->slurm_job_id, "101");
  EXPECT_EQ(r.pending_reasons[7], "waiting for Slurm allocation 101 (PD)");
}

// ---- The allocations in the store, and a restarted coordinator ----

TEST_F(SlurmPoolManagerTest, StoredAllocationFollowsItsStateAndIsRemovedOnceEnded) {
  SlurmPoolManager m = Make(false);
  m.Tick({Job(7, 2)}, {});
  ASSERT_EQ(Stored().size(), 1u);
  SlurmAllocationRecord r = Stored()["100"];
  EXPECT_EQ(r.pool, "cpu");
  EXPECT_EQ(r.job_id, 7);
  EXPECT_EQ(r.owner, "alice");
  EXPECT_EQ(r.submitted_as, "");
  EXPECT_EQ(r.nodes, 1);
  EXPECT_EQ(r.state, "PD");
  EXPECT_EQ(r.credential_path, "/shared/join/job7");
  EXPECT_EQ(r.credential_id, 1);
  EXPECT_EQ(r.submitted_unix_ms, absl::ToUnixMillis(clock_.Now()));
  EXPECT_EQ(r.running_since_unix_ms, 0);

  slurm_.jobs["100"].state = "R";
  clock_.Advance(absl::Seconds(5));
  m.Tick({Job(7, 2)}, {});
  EXPECT_EQ(Stored()["100"].state, "R");
  EXPECT_EQ(Stored()["100"].running_since_unix_ms, absl::ToUnixMillis(clock_.Now()));

  m.Tick({}, {});  // job 7 no longer waits and no worker registered: cancelled
  EXPECT_EQ(slurm_.cancelled, (std::vector<std::string>{"100"}));
  EXPECT_TRUE(Stored()["100"].cancel_sent);
  slurm_.jobs.erase("100");
  m.Tick({}, {});
  EXPECT_TRUE(Stored().empty());
}

TEST_F(SlurmPoolManagerTest,
       RestartCancelsTheIdleAllocationItSubmittedAndRevokesItsCredential) {
  SlurmPoolWorker w{.name = "n1", .pool = "cpu", .slurm_job_id = "100"};
  {
    SlurmPoolManager before = Make(false);
    before.Tick({Job(7, 2)}, {});
    slurm_.jobs["100"].state = "R";
    w.running_ranks = 2;  // job 7 runs there, then the coordinator dies
    before.Tick({}, {w});
  }
  ASSERT_TRUE(slurm_.cancelled.empty());
  // Job 7 finished while no coordinator ran; its worker is idle. The new
  // coordinator does not wait out the pool's 5 minute idle_timeout.
  w.running_ranks = 0;
  SlurmPoolManager after = Make(false);
  SlurmPoolManager::TickResult r = after.Tick({}, {w});
  EXPECT_EQ(slurm_.cancelled, (std::vector<std::string>{"100"}));
  EXPECT_EQ(revoked_, (std::vector<std::string>{"/shared/join/job7"}));
  ASSERT_FALSE(r.events.empty());
  EXPECT_TRUE(absl::StrContains(absl::StrJoin(r.events, "\n"),
                                "cancelled Slurm allocation 100: no job needs it after a "
                                "coordinator restart"))
      << absl::StrJoin(r.events, "\n");
  EXPECT_TRUE(Stored()["100"].cancel_sent);
  EXPECT_EQ(Stored()["100"].credential_path, "");

  // Once Slurm shows it ended it is forgotten; the credential is not revoked twice.
  slurm_.jobs.erase("100");
  after.Tick({}, {});
  EXPECT_EQ(slurm_.cancelled.size(), 1u);
  EXPECT_EQ(revoked_.size(), 1u);
  EXPECT_TRUE(Stored().empty());
  EXPECT_TRUE(after.Allocations().empty());
}

TEST_F(SlurmPoolManagerTest,
       RestartRevokesTheCredentialOfAnAllocationThatEndedMeanwhile) {
  {
    SlurmPoolManager before = Make(false);
    before.Tick({Job(7, 2)}, {});
  }
  slurm_.jobs.erase("100");  // its time limit ended it while no coordinator ran
  SlurmPoolManager after = Make(false);
  after.Tick({}, {});
  EXPECT_EQ(revoked_, (std::vector<std::string>{"/shared/join/job7"}));
  EXPECT_TRUE(slurm_.cancelled.empty());
  EXPECT_TRUE(Stored().empty());
}

TEST_F(SlurmPoolManagerTest,
       RestartRevokesTheCredentialOfASubmissionTheLastCoordinatorDidNotStore) {
  {
    SlurmPoolManager before = Make(false);
    before.Tick({Job(7, 2)}, {});  // allocation 100, stored with its credential
  }
  // The last coordinator wrote job 9's credential, then died before sbatch
  // returned (or before storing what it returned). Other join tokens: a
  // static worker's, another pool's, one already revoked.
  absl::StatusOr<int64_t> orphan = JoinToken(SlurmCredentialName("cpu", 9));
  absl::StatusOr<int64_t> rack = JoinToken("rack-3");
  absl::StatusOr<int64_t> other_pool = JoinToken(SlurmCredentialName("gpu", 4));
  absl::StatusOr<int64_t> revoked = JoinToken(SlurmCredentialName("cpu", 5));
  ASSERT_TRUE(orphan.ok() && rack.ok() && other_pool.ok() && revoked.ok());
  ASSERT_TRUE(store_->RevokeToken(*revoked).ok());

  SlurmPoolManager after = Make(false);
  SlurmPoolManager::TickResult r = after.Tick({Job(7, 2)}, {});
  EXPECT_EQ(revoked_ids_, (std::vector<int64_t>{*orphan}));
  EXPECT_TRUE(store_->GetToken(*orphan)->revoked);
  EXPECT_FALSE(store_->GetToken(*rack)->revoked);
  EXPECT_FALSE(store_->GetToken(*other_pool)->revoked);
  // Job 7's allocation, which the store holds, keeps its credential.
  ASSERT_TRUE(after.Allocation(7).has_value());
  EXPECT_FALSE(store_->GetToken(after.Allocation(7)->credential.id)->revoked);
  EXPECT_TRUE(absl::StrContains(absl::StrJoin(r.events, "\n"),
                                absl::StrCat("revoked join credential ", *orphan,
                                             " (slurm-cpu-job9): no stored allocation")))
      << absl::StrJoin(r.events, "\n");
  // Only the first round looks.
  ASSERT_TRUE(JoinToken(SlurmCredentialName("cpu", 10)).ok());
  after.Tick({Job(7, 2)}, {});
  EXPECT_EQ(revoked_ids_.size(), 1u);
}

TEST_F(SlurmPoolManagerTest, RestartKeepsTheAllocationsThatJobsStillNeed) {
  SlurmPoolWorker w{.name = "n1", .pool = "cpu", .slurm_job_id = "100"};
  {
    SlurmPoolManager before = Make(false);
    before.Tick({Job(7, 2), Job(8, 2)}, {});
    ASSERT_EQ(slurm_.submitted.size(), 2u);
    slurm_.jobs["100"].state = "R";  // job 7 runs on it; 101 still pends for job 8
    w.running_ranks = 2;
    before.Tick({Job(8, 2)}, {w});
  }
  SlurmPoolManager after = Make(false);
  SlurmPoolManager::TickResult r = after.Tick({Job(8, 2)}, {w});
  EXPECT_TRUE(slurm_.cancelled.empty());
  EXPECT_TRUE(revoked_.empty());
  EXPECT_EQ(slurm_.submitted.size(), 2u) << "job 8 keeps its allocation";
  ASSERT_TRUE(after.Allocation(8).has_value());
  EXPECT_EQ(after.Allocation(8)->slurm_job_id, "101");
  EXPECT_EQ(after.Allocation(8)->credential.path, "/shared/join/job8");
  EXPECT_EQ(r.pending_reasons[8], "waiting for Slurm allocation 101 (PD)");
  ASSERT_TRUE(after.Allocation(7).has_value());
  EXPECT_EQ(after.Allocation(7)->state, "R");
  EXPECT_EQ(Stored().size(), 2u);
}

// ---- Which pool serves a job (docs/slurm.md) ----

TEST_F(SlurmPoolManagerTest, Bf16AutoJobGetsAGpuAllocationAndACpuJobStillDoesNot) {
  // Job 7 leaves device at its default ("auto"); bf16 works only on CUDA. Job
  // 8 asks for the CPU, whatever its precision.
  SlurmPoolManager m = Make(false, std::vector<SlurmPoolConfig>{CpuPool(), GpuPool()});
  SlurmPoolManager::TickResult r =
      m.Tick({SpecJob(7, 2, "", "bf16"), SpecJob(8, 2, "cpu", "bf16")}, {});
  ASSERT_EQ(slurm_.submitted.size(), 2u) << r.pending_reasons[7];
  EXPECT_EQ(m.Allocation(7)->pool, "gpu");
  EXPECT_TRUE(
      absl::StrContains(slurm_.submitted[0].script, "#SBATCH --gpus-per-node=4\n"))
      << slurm_.submitted[0].script;
  EXPECT_EQ(m.Allocation(8)->pool, "cpu");
}

TEST_F(SlurmPoolManagerTest, Fp32AutoJobTakesACpuPoolFirstAndAGpuPoolWhenOnlyThatFits) {
  SlurmPoolManager both = Make(false, std::vector<SlurmPoolConfig>{GpuPool(), CpuPool()});
  both.Tick({SpecJob(7, 2, "auto", "")}, {});
  ASSERT_EQ(slurm_.submitted.size(), 1u);
  EXPECT_EQ(both.Allocation(7)->pool, "cpu") << "GPUs are not spent on it while CPUs do";

  store_ = OpenStore();  // another coordinator
  SlurmPoolManager gpu_only = Make(false, GpuPool());
  SlurmPoolManager::TickResult r = gpu_only.Tick({SpecJob(8, 2, "", "fp32")}, {});
  ASSERT_EQ(slurm_.submitted.size(), 2u) << r.pending_reasons[8];
  EXPECT_EQ(gpu_only.Allocation(8)->pool, "gpu");
}

}  // namespace
}  // namespace tessera
