// Network partitions: a worker cut off mid-job is declared dead within the
// threshold, the surviving ranks are stopped, and after the partition heals
// the worker's session is fenced and it stops its stale trainers. What runs is
// read from /proc throughout and compared with the store's record of attempts.
#include <map>
#include <set>
#include <tuple>

#include "absl/strings/match.h"
#include "tests/faults/fault_fixture.h"

namespace tessera::faults {
namespace {

using Sighting = RankSampler::Sighting;

// The job's first event whose reason mentions `text`, or null.
const v1::JobEvent* EventWith(const v1::Job& job, const std::string& text) {
  for (const v1::JobEvent& e : job.events()) {
    if (absl::StrContains(e.reason(), text)) return &e;
  }
  return nullptr;
}

// The overlaps as runs of consecutive samples with the same processes.
std::string Describe(const std::vector<RankSampler::Overlap>& overlaps) {
  std::string out;
  auto text = [](const std::vector<TrainerProcess>& processes) {
    std::string t;
    for (const TrainerProcess& p : processes) {
      absl::StrAppend(&t, " [pid ", p.pid, " job ", p.job_id, " attempt ", p.attempt,
                      " rank ", p.rank, " on ", p.node, "]");
    }
    return t;
  };
  auto time = [](absl::Time t) {
    return absl::FormatTime("%H:%M:%E3S", t, absl::LocalTimeZone());
  };
  for (size_t i = 0; i < overlaps.size();) {
    size_t j = i + 1;
    while (j < overlaps.size() &&
           text(overlaps[j].processes) == text(overlaps[i].processes)) {
      ++j;
    }
    absl::StrAppend(&out, time(overlaps[i].at), " to ", time(overlaps[j - 1].at), " (",
                    j - i, " samples):", text(overlaps[i].processes), "\n");
    i = j;
  }
  return out;
}

bool Contains(const std::vector<TrainerProcess>& processes, pid_t pid) {
  for (const TrainerProcess& p : processes) {
    if (p.pid == pid) return true;
  }
  return false;
}

class PartitionTest : public FaultTest {
 protected:
  // Checks every trainer process seen against the store: its (job, attempt,
  // rank) was placed by the coordinator, on the worker whose namespace it ran in.
  void ExpectSightingsMatchStore(const std::map<pid_t, Sighting>& sightings) {
    absl::StatusOr<std::string> rows =
        Sql(db_path_, "SELECT job_id, attempt, rank, worker FROM ranks;");
    ASSERT_TRUE(rows.ok()) << rows.status();
    std::map<std::tuple<int64_t, int32_t, int32_t>, std::string> placed;
    for (absl::string_view line : absl::StrSplit(*rows, '\n', absl::SkipEmpty())) {
      std::vector<std::string> f = absl::StrSplit(line, '|');
      int64_t job = 0;
      int32_t attempt = 0, rank = 0;
      ASSERT_EQ(f.size(), 4u) << line;
      ASSERT_TRUE(absl::SimpleAtoi(f[0], &job) && absl::SimpleAtoi(f[1], &attempt) &&
                  absl::SimpleAtoi(f[2], &rank))
          << line;
      placed[{job, attempt, rank}] = f[3];
    }
    for (const auto& [pid, s] : sightings) {
      const TrainerProcess& p = s.process;
      auto it = placed.find({p.job_id, p.attempt, p.rank});
      ASSERT_NE(it, placed.end())
          << "pid " << pid << " runs job " << p.job_id << " attempt " << p.attempt
          << " rank " << p.rank << ", which the store never placed";
      EXPECT_EQ(it->second, p.node)
          << "pid " << pid << " (job " << p.job_id << " attempt " << p.attempt << " rank "
          << p.rank << ") ran in " << p.node << "'s namespace; the store placed it on "
          << it->second;
    }
  }
};

// One cycle per TESSERA_FAULT_PARTITIONS (default 1). Each cycle runs a 2-rank
// gang (one rank per worker, one restart allowed, checkpoints) and a 1-rank job
// on the worker that is then cut off. The 1-rank job's trainer has no peer to
// notice the partition, so only the fence can stop it once the link is back.
TEST_F(PartitionTest, PartitionedWorkerIsDeclaredDeadFencedAndNoRankRunsTwice) {
  const int cycles = EnvInt("TESSERA_FAULT_PARTITIONS", 1);
  ASSERT_NO_FATAL_FAILURE(StartCluster(/*slots_per_worker=*/2));
  RankSampler sampler(net_.get(), CoordinatorAddress());
  std::vector<double> detection_ms, survivor_stop_ms, reregister_ms, fence_kill_ms;
  int gang_stale_alive_at_heal = 0, gang_stale_killed_by_fence = 0;

  for (int cycle = 0; cycle < cycles; ++cycle) {
    SCOPED_TRACE(absl::StrCat("partition cycle ", cycle));
    JobOptions gang;
    gang.name = absl::StrCat("partition-gang-", cycle);
    gang.world_size = 2;
    gang.nodes = 2;
    gang.per_node = 1;
    gang.max_restarts = 1;
    gang.max_steps = 200;
    gang.checkpoint_dir = dir_.File(absl::StrCat("ckpt-", cycle));
    gang.checkpoint_every = 20;
    JobOptions single;
    single.name = absl::StrCat("partition-single-", cycle);
    single.world_size = 1;
    single.max_steps = 100000000;  // runs until stopped
    absl::StatusOr<int64_t> a = Submit(gang);
    ASSERT_TRUE(a.ok()) << a.status();
    absl::StatusOr<int64_t> b = Submit(single);
    ASSERT_TRUE(b.ok()) << b.status();
    ASSERT_NO_FATAL_FAILURE(WaitForTraining(*a, 2, absl::Minutes(2)));
    ASSERT_NO_FATAL_FAILURE(WaitForTraining(*b, 1, absl::Minutes(2)));
    ASSERT_TRUE(WaitUntil(
        [&] { return std::filesystem::exists(gang.checkpoint_dir + "/latest"); },
        absl::Minutes(1)))
        << "no checkpoint\n"
        << DumpLogs();

    // Who runs where, from /proc: the victim is the single rank's worker.
    const std::vector<TrainerProcess> single_procs = sampler.Fresh(*b);
    ASSERT_EQ(single_procs.size(), 1u);
    const std::string victim = single_procs[0].node;
    ASSERT_TRUE(victim == "w1" || victim == "w2") << "trainer outside the cluster";
    const std::string other = victim == "w1" ? "w2" : "w1";
    const pid_t stale_single = single_procs[0].pid;
    pid_t stale_gang = 0, survivor = 0;
    for (const TrainerProcess& p : sampler.Fresh(*a)) {
      (p.node == victim ? stale_gang : survivor) = p.pid;
    }
    ASSERT_GT(stale_gang, 0) << "the gang has no rank on " << victim;
    ASSERT_GT(survivor, 0) << "the gang has no rank on " << other;
    const int64_t epoch_before = Epoch(victim);

    const absl::Time cut = absl::Now();
    ASSERT_TRUE(net_->Cut(victim).ok());

    // Declared dead: the gang's attempt fails with that reason.
    int64_t declared_ms = 0;
    ASSERT_TRUE(WaitUntil(
        [&] {
          v1::Job job = GetJob(*a);
          const v1::JobEvent* e = EventWith(job, "declared dead");
          if (e != nullptr) declared_ms = e->unix_ms();
          return e != nullptr;
        },
        absl::Seconds(30), absl::Milliseconds(50)))
        << victim << " was not declared dead\n"
        << DumpLogs();
    const double detection = static_cast<double>(declared_ms - absl::ToUnixMillis(cut));
    detection_ms.push_back(detection);
    // Silent for the threshold, counted from its last heartbeat (a moment
    // before the cut; a full second means it was already suspect), plus a
    // monitor tick and scheduling slack on a busy machine.
    EXPECT_GE(detection, kDeadMs - kSuspectMs);
    EXPECT_LE(detection, kDeadMs + 2000);
    EXPECT_GT(Epoch(victim), epoch_before) << "the dead worker's session was not fenced";
    v1::Job single_job = WaitForEnd(*b, absl::Seconds(30));
    EXPECT_EQ(single_job.state(), v1::JOB_STATE_FAILED);
    EXPECT_TRUE(absl::StrContains(single_job.reason(), "declared dead"))
        << single_job.reason();

    // The surviving rank is stopped (SIGTERM, SIGKILL after the grace).
    const absl::Time declared = absl::FromUnixMillis(declared_ms);
    ASSERT_TRUE(WaitUntil([&] { return !Contains(sampler.Fresh(*a), survivor); },
                          absl::Milliseconds(kKillGraceMs) + absl::Seconds(10)))
        << "the surviving rank on " << other << " was not stopped\n"
        << DumpLogs();
    survivor_stop_ms.push_back(absl::ToDoubleMilliseconds(absl::Now() - declared));
    EXPECT_LE(survivor_stop_ms.back(), kKillGraceMs + 3000);

    // Nothing reaches the victim: its trainers run on while it is cut off.
    absl::SleepFor(declared + absl::Seconds(3) - absl::Now());
    ASSERT_TRUE(Contains(sampler.Fresh(*b), stale_single))
        << "the cut-off single rank ended while nothing could reach it\n"
        << DumpLogs();
    const int64_t epoch_dead = Epoch(victim);
    gang_stale_alive_at_heal += Contains(sampler.Fresh(*a), stale_gang) ? 1 : 0;

    const absl::Time heal = absl::Now();
    ASSERT_TRUE(net_->Heal(victim).ok());
    // The worker finds its session fenced and registers again...
    ASSERT_TRUE(WaitUntil(
        [&] {
          for (const v1::Worker& w : Workers()) {
            if (w.name() == victim) return w.alive() && w.epoch() > epoch_dead;
          }
          return false;
        },
        absl::Seconds(40)))
        << victim << " did not register again after the partition healed\n"
        << DumpLogs();
    reregister_ms.push_back(absl::ToDoubleMilliseconds(absl::Now() - heal));
    // ...and stops the trainers that are no longer current.
    ASSERT_TRUE(WaitUntil([&] { return !Contains(sampler.Fresh(*b), stale_single); },
                          absl::Seconds(30)))
        << "the stale single rank survived the fence\n"
        << DumpLogs();
    fence_kill_ms.push_back(absl::ToDoubleMilliseconds(absl::Now() - heal));
    ASSERT_TRUE(WaitUntil(
        [&] {
          for (const TrainerProcess& p : sampler.Fresh(*a)) {
            if (p.pid == stale_gang) return false;
          }
          return true;
        },
        absl::Seconds(30)))
        << "the stale gang rank survived the fence\n"
        << DumpLogs();
    const std::string worker_log = testing::ReadFile(WorkerLog(victim));
    EXPECT_TRUE(absl::StrContains(worker_log, "dropped our session")) << worker_log;
    // The stale single rank is stopped by its worker's stop order, or stops
    // itself first: its next progress report (every 2 s) learns that the
    // coordinator no longer counts it.
    const std::string single_log = testing::ReadFile(
        dir_.File(absl::StrCat("work-", victim, "/job-", *b, "/attempt-1/rank-0.log")));
    EXPECT_TRUE(
        absl::StrContains(worker_log, absl::StrCat("stopping job ", *b,
                                                   " attempt 1 rank 0 as ordered")) ||
        absl::StrContains(single_log, "the coordinator no longer counts this rank"))
        << worker_log << "\n--- rank log ---\n"
        << single_log;
    if (absl::StrContains(worker_log, absl::StrCat("stopping job ", *a, " attempt 1 "))) {
      ++gang_stale_killed_by_fence;
    }

    // The gang's second attempt resumes from the checkpoint and finishes.
    v1::Job gang_job = WaitForEnd(*a, absl::Minutes(4));
    EXPECT_EQ(gang_job.state(), v1::JOB_STATE_SUCCEEDED)
        << gang_job.reason() << DumpLogs();
    EXPECT_EQ(gang_job.attempt(), 2);
    int64_t first_resumed_step = -1;
    for (const v1::MetricPoint& p : Points(*a, "loss")) {
      if (p.attempt() == 2 && (first_resumed_step < 0 || p.step() < first_resumed_step)) {
        first_resumed_step = p.step();
      }
    }
    EXPECT_GT(first_resumed_step, gang.checkpoint_every) << "attempt 2 did not resume";
    Figure(absl::StrCat("cycle", cycle, "_detection_ms"), detection);
    Figure(absl::StrCat("cycle", cycle, "_fence_kill_ms"), fence_kill_ms.back());
  }

  const std::vector<RankSampler::Overlap> overlaps = sampler.Overlaps();
  EXPECT_EQ(sampler.overlap_samples(), 0)
      << "a (job, rank) ran as two processes at once (first samples shown):\n"
      << Describe(overlaps);
  ExpectSightingsMatchStore(sampler.Sightings());

  Figure("partitions", cycles);
  Figure("detection_ms_median", Median(detection_ms));
  Figure("detection_ms_max", Max(detection_ms));
  Figure("survivor_stop_ms_median", Median(survivor_stop_ms));
  Figure("survivor_stop_ms_max", Max(survivor_stop_ms));
  Figure("heal_to_reregister_ms_median", Median(reregister_ms));
  Figure("heal_to_reregister_ms_max", Max(reregister_ms));
  Figure("heal_to_fence_kill_ms_median", Median(fence_kill_ms));
  Figure("heal_to_fence_kill_ms_max", Max(fence_kill_ms));
  Figure("gang_stale_rank_alive_at_heal", gang_stale_alive_at_heal);
  Figure("gang_stale_rank_stopped_by_fence", gang_stale_killed_by_fence);
  Figure("double_run_samples", sampler.overlap_samples());
  Figure("double_run_ms", absl::ToDoubleMilliseconds(sampler.overlap_time()));
  Figure("proc_samples", sampler.samples());
}

// A 1-rank job that may restart, on a worker that is cut off: the restart must
// not start a second copy of the rank while the first may still be running
// behind the partition. With the default lease (90 s) the cut is healed long
// before it runs out: the coordinator waits, the healed worker stops the old
// rank as ordered and reports its exit, and only that releases the restart.
TEST_F(PartitionTest, RestartWaitsWhileTheLostRankMayRunBehindAPartition) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(/*slots_per_worker=*/1));
  RankSampler sampler(net_.get(), CoordinatorAddress());
  JobOptions single;
  single.name = "partition-restartable";
  single.world_size = 1;
  single.max_restarts = 1;
  single.max_steps = 100000000;
  single.checkpoint_dir = dir_.File("ckpt");
  single.checkpoint_every = 20;
  absl::StatusOr<int64_t> id = Submit(single);
  ASSERT_TRUE(id.ok()) << id.status();
  ASSERT_NO_FATAL_FAILURE(WaitForTraining(*id, 1, absl::Minutes(2)));
  const std::vector<TrainerProcess> procs = sampler.Fresh(*id);
  ASSERT_EQ(procs.size(), 1u);
  ASSERT_TRUE(net_->Cut(procs[0].node).ok());
  ASSERT_TRUE(
      WaitUntil([&] { return EventWith(GetJob(*id), "declared dead") != nullptr; },
                absl::Seconds(30)))
      << DumpLogs();
  // The restart waits, and says why.
  const v1::Job queued = GetJob(*id);
  const v1::JobEvent* waiting = EventWith(queued, "lease to expire");
  ASSERT_NE(waiting, nullptr) << "no event says why the restart waits\n" << DumpLogs();
  EXPECT_TRUE(absl::StrContains(waiting->reason(), "waiting up to")) << waiting->reason();
  absl::SleepFor(absl::Seconds(5));
  v1::Job job = GetJob(*id);
  EXPECT_EQ(job.attempt(), 1) << "restarted while the lost rank may still run";
  EXPECT_EQ(job.state(), v1::JOB_STATE_QUEUED);
  ASSERT_TRUE(Contains(sampler.Fresh(*id), procs[0].pid))
      << "the cut-off rank stopped before its lease ran out\n"
      << DumpLogs();

  const absl::Time heal = absl::Now();
  ASSERT_TRUE(net_->Heal(procs[0].node).ok());
  ASSERT_TRUE(WaitUntil([&] { return !Contains(sampler.Fresh(*id), procs[0].pid); },
                        absl::Seconds(30)));
  // The worker's report of the exit releases the restart long before the
  // 90 s lease would have.
  ASSERT_TRUE(WaitUntil(
      [&] {
        job = GetJob(*id);
        return job.attempt() == 2 && job.state() == v1::JOB_STATE_RUNNING;
      },
      absl::Seconds(60)))
      << "attempt 2 did not start after the old rank was confirmed stopped\n"
      << DumpLogs();
  const double restart_ms = absl::ToDoubleMilliseconds(absl::Now() - heal);
  EXPECT_EQ(sampler.overlap_samples(), 0)
      << "a (job, rank) ran as two processes at once (first samples shown):\n"
      << Describe(sampler.Overlaps());
  ExpectSightingsMatchStore(sampler.Sightings());
  Figure("heal_to_attempt2_running_ms", restart_ms);
  Figure("double_run_samples", sampler.overlap_samples());
  Figure("double_run_ms", absl::ToDoubleMilliseconds(sampler.overlap_time()));
  EXPECT_TRUE(Cancel(*id));
}

// The same with a cut that outlasts a short lease (4 s): the cut-off trainer
// stops itself (exit code 3) while nothing can reach it, and the coordinator
// restarts the job on the other worker once the lease has run out by its own
// clock (first contact lease 15 s * 1.1 + 1 s after the last renewal), before
// the cut heals.
TEST_F(PartitionTest,
       CutOffRankStopsItselfWhenItsLeaseRunsOutAndTheJobRestartsElsewhere) {
  coordinator_flags_ = {"--trainer-lease-ms", "4000"};
  ASSERT_NO_FATAL_FAILURE(StartCluster(/*slots_per_worker=*/1));
  RankSampler sampler(net_.get(), CoordinatorAddress());
  JobOptions single;
  single.name = "partition-lease";
  single.world_size = 1;
  single.max_restarts = 1;
  single.max_steps = 100000000;
  single.checkpoint_dir = dir_.File("ckpt");
  single.checkpoint_every = 20;
  absl::StatusOr<int64_t> id = Submit(single);
  ASSERT_TRUE(id.ok()) << id.status();
  ASSERT_NO_FATAL_FAILURE(WaitForTraining(*id, 1, absl::Minutes(2)));
  const std::vector<TrainerProcess> procs = sampler.Fresh(*id);
  ASSERT_EQ(procs.size(), 1u);
  const std::string victim = procs[0].node;
  const std::string other = victim == "w1" ? "w2" : "w1";

  const absl::Time cut = absl::Now();
  ASSERT_TRUE(net_->Cut(victim).ok());
  // The trainer stops itself about 4 s after its last renewal.
  ASSERT_TRUE(WaitUntil([&] { return !Contains(sampler.Fresh(*id), procs[0].pid); },
                        absl::Seconds(20)))
      << "the cut-off rank did not stop itself\n"
      << DumpLogs();
  const double fenced_ms = absl::ToDoubleMilliseconds(absl::Now() - cut);
  EXPECT_LE(fenced_ms, 4000 + 2000);
  const std::string rank_log = testing::ReadFile(
      dir_.File(absl::StrCat("work-", victim, "/job-", *id, "/attempt-1/rank-0.log")));
  EXPECT_TRUE(absl::StrContains(rank_log, "stopping so the rank cannot run twice"))
      << rank_log;

  // Attempt 2 runs on the other worker while the cut still holds.
  v1::Job job;
  ASSERT_TRUE(WaitUntil(
      [&] {
        job = GetJob(*id);
        return job.attempt() == 2 && job.state() == v1::JOB_STATE_RUNNING;
      },
      absl::Seconds(60)))
      << "no restart after the lease ran out\n"
      << DumpLogs();
  const double restart_ms = absl::ToDoubleMilliseconds(absl::Now() - cut);
  ASSERT_EQ(job.ranks_size(), 1);
  EXPECT_EQ(job.ranks(0).worker(), other);
  // Not before the coordinator's deadline: 15 s * 1.1 + 1 s after the last
  // renewal, which came at most 1 s before the cut.
  EXPECT_GE(restart_ms, 16500);

  ASSERT_TRUE(net_->Heal(victim).ok());
  // The healed worker comes back; it has nothing left to stop.
  ASSERT_TRUE(WaitUntil(
      [&] {
        for (const v1::Worker& w : Workers()) {
          if (w.name() == victim) return w.alive();
        }
        return false;
      },
      absl::Seconds(40)))
      << victim << " did not register again after the partition healed\n"
      << DumpLogs();
  EXPECT_FALSE(absl::StrContains(testing::ReadFile(WorkerLog(victim)),
                                 absl::StrCat("stopping job ", *id, " attempt 1 ")))
      << "the cut-off rank was still running when the partition healed";
  EXPECT_EQ(sampler.overlap_samples(), 0)
      << "a (job, rank) ran as two processes at once (first samples shown):\n"
      << Describe(sampler.Overlaps());
  ExpectSightingsMatchStore(sampler.Sightings());
  Figure("cut_to_fenced_ms", fenced_ms);
  Figure("cut_to_attempt2_running_ms", restart_ms);
  Figure("double_run_samples", sampler.overlap_samples());
  EXPECT_TRUE(Cancel(*id));
}

}  // namespace
}  // namespace tessera::faults
