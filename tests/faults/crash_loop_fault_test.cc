// Crash loop: the coordinator is killed with SIGKILL again and again while
// trainers stream metrics into it and a client submits jobs. After every kill
// the database passes PRAGMA integrity_check and holds every job whose submit
// was acknowledged.
#include <map>
#include <random>
#include <set>

#include "absl/synchronization/mutex.h"
#include "tests/faults/fault_fixture.h"

namespace tessera::faults {
namespace {

// Submits small jobs one after another, each retried with its request id until
// acknowledged, and cancels each once acknowledged (so the queue stays short).
// Remembers what was acknowledged.
class Submitter {
 public:
  Submitter(v1::JobService::Stub* stub, v1::JobSpec spec)
      : stub_(stub), spec_(std::move(spec)), thread_([this] { Loop(); }) {}
  ~Submitter() {
    stop_.Notify();
    thread_.join();
  }

  std::set<int64_t> acknowledged() const {
    absl::MutexLock lock(&mu_);
    return acknowledged_;
  }
  std::set<int64_t> cancelled() const {
    absl::MutexLock lock(&mu_);
    return cancelled_;
  }

 private:
  template <typename Call>
  bool Retry(Call call) {
    while (!stop_.HasBeenNotified()) {
      grpc::ClientContext ctx;
      ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(3)));
      if (call(ctx).ok()) return true;
      stop_.WaitForNotificationWithTimeout(absl::Milliseconds(100));
    }
    return false;
  }

  void Loop() {
    for (int n = 0; !stop_.HasBeenNotified(); ++n) {
      v1::SubmitJobRequest submit;
      *submit.mutable_spec() = spec_;
      submit.set_client_request_id(absl::StrCat("crash-loop-", getpid(), "-", n));
      v1::SubmitJobResponse submitted;
      if (!Retry([&](grpc::ClientContext& ctx) {
            return stub_->SubmitJob(&ctx, submit, &submitted);
          })) {
        return;
      }
      {
        absl::MutexLock lock(&mu_);
        acknowledged_.insert(submitted.job_id());
      }
      v1::CancelJobRequest cancel;
      cancel.set_job_id(submitted.job_id());
      v1::CancelJobResponse cancelled;
      if (!Retry([&](grpc::ClientContext& ctx) {
            grpc::Status s = stub_->CancelJob(&ctx, cancel, &cancelled);
            // Cancelled before the coordinator died, and now already ended.
            return s.error_code() == grpc::StatusCode::FAILED_PRECONDITION
                       ? grpc::Status::OK
                       : s;
          })) {
        return;
      }
      {
        absl::MutexLock lock(&mu_);
        cancelled_.insert(submitted.job_id());
      }
      stop_.WaitForNotificationWithTimeout(absl::Milliseconds(200));
    }
  }

  v1::JobService::Stub* const stub_;  // Not owned.
  const v1::JobSpec spec_;
  mutable absl::Mutex mu_;
  std::set<int64_t> acknowledged_ ABSL_GUARDED_BY(mu_);
  std::set<int64_t> cancelled_ ABSL_GUARDED_BY(mu_);
  absl::Notification stop_;
  std::thread thread_;
};

// TESSERA_FAULT_KILLS kills (default 5), at random moments
// (TESSERA_FAULT_SEED) once metrics flow again after each restart.
TEST_F(FaultTest,
       CoordinatorKilledDuringMetricIngestionKeepsStoreIntactAndAcknowledgedJobs) {
  const int kills = EnvInt("TESSERA_FAULT_KILLS", 5);
  const int seed = EnvInt("TESSERA_FAULT_SEED",
                          static_cast<int>(absl::ToUnixMicros(absl::Now()) % 1000000));
  std::mt19937 random(seed);
  std::uniform_int_distribution<int> delay_ms(0, 1500);
  // The default worker thresholds: with 3 s a restart that takes a few seconds
  // costs the workers their ranks (README.md, "Known failures").
  suspect_ms_ = 3000;
  dead_ms_ = 15000;
  ASSERT_NO_FATAL_FAILURE(StartCluster(/*slots_per_worker=*/1));

  JobOptions ingest;
  ingest.name = "crash-loop-ingest";
  ingest.max_steps = 100000000;  // runs until cancelled
  ingest.metrics_every = 1;
  absl::StatusOr<int64_t> id = Submit(ingest);
  ASSERT_TRUE(id.ok()) << id.status();
  ASSERT_NO_FATAL_FAILURE(WaitForTraining(*id, 2, absl::Minutes(2)));

  // world_size 3 never fits the cluster's 2 slots: a queued job, then cancelled.
  absl::StatusOr<v1::JobSpec> small = ParseAndValidateJobSpec(
      JobYaml(JobOptions{.name = "acknowledged", .world_size = 3}), SpecLimits{});
  ASSERT_TRUE(small.ok()) << small.status();
  auto submitter = std::make_unique<Submitter>(jobs_.get(), *small);

  int integrity_failures = 0;
  std::set<int64_t> lost_jobs, lost_cancels;
  int64_t last_step = 0;
  for (int k = 0; k < kills; ++k) {
    SCOPED_TRACE(absl::StrCat("kill ", k + 1, " of ", kills, " (seed ", seed, ")"));
    // Metrics flow into the coordinator: loss points past the last one seen.
    const int64_t step_before = last_step;
    ASSERT_TRUE(WaitUntil(
        [&] {
          for (const v1::MetricPoint& p : Points(*id, "loss", step_before)) {
            last_step = std::max(last_step, p.step());
          }
          return last_step > step_before;
        },
        absl::Seconds(60), absl::Milliseconds(50)))
        << "metrics stopped flowing\n"
        << DumpLogs();
    absl::SleepFor(absl::Milliseconds(delay_ms(random)));
    ASSERT_NO_FATAL_FAILURE(KillCoordinator());

    // What was acknowledged before the kill must be in the file. The checks
    // run on a copy while the next coordinator starts.
    const std::set<int64_t> acknowledged = submitter->acknowledged();
    const std::set<int64_t> cancelled = submitter->cancelled();
    absl::StatusOr<std::string> copy = CopyDatabase();
    ASSERT_TRUE(copy.ok()) << copy.status();
    ASSERT_NO_FATAL_FAILURE(StartCoordinator());
    absl::StatusOr<std::string> integrity = IntegrityCheck(*copy);
    ASSERT_TRUE(integrity.ok()) << integrity.status();
    EXPECT_EQ(*integrity, "ok") << "after kill " << k + 1;
    integrity_failures += *integrity == "ok" ? 0 : 1;
    absl::StatusOr<std::string> rows = Sql(*copy, "SELECT id, state FROM jobs;");
    ASSERT_TRUE(rows.ok()) << rows.status();
    std::map<int64_t, std::string> stored;
    for (absl::string_view line : absl::StrSplit(*rows, '\n', absl::SkipEmpty())) {
      std::vector<std::string> f = absl::StrSplit(line, '|');
      int64_t job = 0;
      if (f.size() == 2 && absl::SimpleAtoi(f[0], &job)) stored[job] = f[1];
    }
    for (int64_t j : acknowledged) {
      if (!stored.contains(j)) lost_jobs.insert(j);
    }
    for (int64_t j : cancelled) {
      if (stored.contains(j) && stored[j] != "CANCELLED") lost_cancels.insert(j);
    }
    EXPECT_TRUE(lost_jobs.empty()) << "acknowledged jobs missing after kill " << k + 1;
    std::filesystem::remove_all(std::filesystem::path(*copy).parent_path());
  }

  // Let the trainers deliver what they hold, then stop submitting.
  const int64_t step_before = last_step;
  EXPECT_TRUE(WaitUntil([&] { return !Points(*id, "loss", step_before + 20).empty(); },
                        absl::Seconds(60)));
  const std::set<int64_t> acknowledged = submitter->acknowledged();
  submitter.reset();
  // Through the API too: every acknowledged job is there.
  for (int64_t j : acknowledged) {
    if (GetJob(j).id() != j) lost_jobs.insert(j);
  }
  EXPECT_TRUE(lost_jobs.empty()) << lost_jobs.size() << " acknowledged jobs lost";

  // The ingesting job was never restarted: no worker was declared dead.
  v1::Job job = GetJob(*id);
  EXPECT_EQ(job.state(), v1::JOB_STATE_RUNNING) << job.reason();
  EXPECT_EQ(job.attempt(), 1);
  // Each rank's stored steps are 1..N with no gap: batches are sent in order
  // and resent until acknowledged, so a gap is an acknowledged batch lost.
  absl::StatusOr<std::string> ranges = Sql(
      db_path_, absl::StrCat("SELECT rank, COUNT(*), MIN(step), MAX(step) FROM metrics "
                             "WHERE job_id = ",
                             *id, " AND name = 'loss' GROUP BY rank;"));
  ASSERT_TRUE(ranges.ok()) << ranges.status();
  int64_t metric_gaps = 0, points = 0;
  int ranks = 0;
  for (absl::string_view line : absl::StrSplit(*ranges, '\n', absl::SkipEmpty())) {
    std::vector<std::string> f = absl::StrSplit(line, '|');
    int64_t count = 0, min_step = 0, max_step = 0;
    ASSERT_TRUE(f.size() == 4 && absl::SimpleAtoi(f[1], &count) &&
                absl::SimpleAtoi(f[2], &min_step) && absl::SimpleAtoi(f[3], &max_step))
        << line;
    ++ranks;
    points += count;
    EXPECT_EQ(min_step, 1) << "rank " << f[0];
    EXPECT_EQ(count, max_step - min_step + 1) << "rank " << f[0] << " has gaps";
    metric_gaps += (max_step - min_step + 1) - count;
  }
  EXPECT_EQ(ranks, 2);
  EXPECT_TRUE(Cancel(*id));

  Figure("kills", kills);
  Figure("seed", seed);
  Figure("integrity_failures", integrity_failures);
  Figure("acknowledged_jobs", static_cast<double>(acknowledged.size()));
  Figure("acknowledged_jobs_lost", static_cast<double>(lost_jobs.size()));
  Figure("acknowledged_cancels_lost", static_cast<double>(lost_cancels.size()));
  Figure("loss_points_stored", static_cast<double>(points));
  Figure("loss_steps_missing", static_cast<double>(metric_gaps));
}

}  // namespace
}  // namespace tessera::faults
