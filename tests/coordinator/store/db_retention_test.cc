// Database retention (coordinator/store/db_retention.h) over a SQLite file on a
// fake clock: metrics downsampled and logs dropped by age, the oldest finished
// jobs thinned, then pruned, for the size budget, the kept metrics (final,
// evaluation and report inputs) never, job records and running jobs never
// touched, the file within --db-max-size after the vacuum, and how far over it
// is when the kept rows alone exceed it. Also the store's side: the refusal to
// prune a job that is not finished, the switch of an older database to
// incremental auto-vacuum, and `db stats`.
#include "coordinator/store/db_retention.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <iterator>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/device_figures.h"
#include "common/metric_names.h"
#include "coordinator/store/sqlite_store.h"
#include "coordinator/store/store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/test_util.h"

namespace tessera {
namespace {

using v1::JobState;

constexpr int kLogBytes = 4096;
// AddJob's two training series: one that size retention thins (the learning
// rate) and one it keeps whole (images/s, which the sweep report averages).
constexpr char kThinned[] = "lr";
constexpr char kKept[] = "images_per_sec";

// What the trainer reports every interval; size retention thins the first
// ten to their last point and keeps the rest whole, since reports read them.
constexpr const char* kIntervalNames[] = {
    "time_data_ms", "time_forward_ms", "time_backward_ms", "time_optimizer_ms", "lr",
    "epoch", kCudaAllocatedFigure, kCudaReservedFigure, kGpuUtilizationFigure,
    kGpuMemoryUsedFigure,
    // Kept.
    kTrainLossMetricName, kImagesPerSecFigure, kCommTimeMsMetricName, kStepTimeMsFigure,
    kCudaPeakAllocatedFigure};
constexpr int kThinnedIntervalNames = 10;

bool Thinnable(const std::string& name) {
  return std::find(std::begin(kIntervalNames),
                   std::begin(kIntervalNames) + kThinnedIntervalNames,
                   name) != std::begin(kIntervalNames) + kThinnedIntervalNames;
}

// `before` with each series of a thinnable metric cut to its newest point.
std::vector<MetricRow> Thinned(const std::vector<MetricRow>& before) {
  std::map<std::tuple<int32_t, int32_t, std::string>, int64_t> last;
  for (const MetricRow& row : before) {
    int64_t& step = last[{row.attempt, row.rank, row.name}];
    step = std::max(step, row.step);
  }
  std::vector<MetricRow> kept;
  for (const MetricRow& row : before) {
    if (!Thinnable(row.name) || last[{row.attempt, row.rank, row.name}] == row.step) {
      kept.push_back(row);
    }
  }
  return kept;
}

MATCHER(SamePoint, "") {
  const MetricRow& a = std::get<0>(arg);
  const MetricRow& b = std::get<1>(arg);
  return a.attempt == b.attempt && a.rank == b.rank && a.step == b.step &&
         a.name == b.name && a.value == b.value && a.unix_ms == b.unix_ms;
}

class DbRetentionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = dir_.File("tessera.db");
    auto store = SqliteStore::Open(path_);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
  }

  // A job in `state` that ended (or, not finished, last changed) at `ended`,
  // with `train_points` points of two training series (kThinned, kKept) and
  // `eval_points` of two evaluation series on rank 0 of attempt 1, and
  // kLogBytes of log.
  int64_t AddJob(absl::Time ended, JobState state, int64_t train_points,
                 int64_t eval_points) {
    JobRecord job;
    job.name = "job";
    job.attempt = 1;
    job.created_unix_ms = absl::ToUnixMillis(ended - absl::Hours(1));
    job.updated_unix_ms = job.created_unix_ms;
    absl::StatusOr<int64_t> id = store_->CreateJob(job);
    EXPECT_TRUE(id.ok()) << id.status();
    std::vector<MetricRow> rows;
    for (int64_t step = 1; step <= train_points; ++step) {
      for (const char* name : {kThinned, kKept}) {
        rows.push_back({*id, 1, 0, step, name, 1.0 / step, job.created_unix_ms});
      }
    }
    for (int64_t k = 1; k <= eval_points; ++k) {
      const int64_t step = k * std::max<int64_t>(1, train_points / eval_points);
      for (const char* name : {"test_accuracy", "test_loss"}) {
        rows.push_back({*id, 1, 0, step, name, 0.5, job.created_unix_ms});
      }
    }
    EXPECT_TRUE(store_->AppendMetrics(rows).ok());
    EXPECT_TRUE(store_->AppendLog({*id, 1, 0, 0, std::string(kLogBytes, 'x')}).ok());
    job.id = *id;
    job.state = state;
    job.updated_unix_ms = absl::ToUnixMillis(ended);
    EXPECT_TRUE(store_->UpdateJob(job).ok());
    return *id;
  }

  // A finished job as the trainer reports it, on each of 2 ranks of attempt
  // 1: the run's shape and sizes at step 0; every 10 steps the interval's
  // training telemetry (kIntervalNames); at each epoch's end its time and the
  // test and validation metrics; at the end the training time and steps.
  // Each value is its step plus its rank's tenth, so that a kept point is
  // told from another. And kLogBytes of log.
  int64_t AddRun(absl::Time ended, int epochs) {
    const int64_t id = AddJob(ended - absl::Minutes(1), v1::JOB_STATE_RUNNING, 0, 0);
    constexpr int kStepsPerEpoch = 200;
    std::vector<MetricRow> rows;
    auto add = [&](int32_t rank, int64_t step, const std::string& name) {
      rows.push_back(
          {id, 1, rank, step, name, step + rank / 10.0, absl::ToUnixMillis(ended)});
    };
    for (int32_t rank = 0; rank < 2; ++rank) {
      for (const char* name : {kTotalStepsMetricName, kStepsPerEpochMetricName,
                               kOptimizerStateBytesMetricName, kGradientBytesMetricName,
                               kParameterBytesMetricName}) {
        add(rank, 0, name);
      }
      for (int64_t step = 10; step <= epochs * kStepsPerEpoch; step += 10) {
        for (const char* name : kIntervalNames) add(rank, step, name);
        if (step % kStepsPerEpoch != 0) continue;
        for (const char* name :
             {kEpochSecondsMetricName, kTestAccuracyMetricName, kTestLossMetricName,
              kValAccuracyMetricName, kValLossMetricName}) {
          add(rank, step, name);
        }
      }
      add(rank, epochs * kStepsPerEpoch, kTrainSecondsMetricName);
      add(rank, epochs * kStepsPerEpoch, kTrainStepsMetricName);
    }
    EXPECT_TRUE(store_->AppendMetrics(rows).ok());
    JobRecord job = *store_->GetJob(id);
    job.state = v1::JOB_STATE_SUCCEEDED;
    job.updated_unix_ms = absl::ToUnixMillis(ended);
    EXPECT_TRUE(store_->UpdateJob(job).ok());
    return id;
  }

  // Every stored point of the job, in the store's order.
  std::vector<MetricRow> Points(int64_t job) {
    absl::StatusOr<std::vector<MetricRow>> rows =
        store_->QueryMetrics({job, -1, "", 10'000'000});
    EXPECT_TRUE(rows.ok()) << rows.status();
    return rows.ok() ? *rows : std::vector<MetricRow>();
  }

  int64_t Rows(int64_t job, const std::string& name = "") {
    absl::StatusOr<std::vector<MetricRow>> rows =
        store_->QueryMetrics({job, -1, name, 10'000'000});
    EXPECT_TRUE(rows.ok()) << rows.status();
    return rows.ok() ? static_cast<int64_t>(rows->size()) : -1;
  }
  int64_t LogBytes(int64_t job) { return store_->LogEnd(job, 1, 0).value_or(-1); }

  // The database file and its WAL on disk.
  int64_t FileBytes() {
    std::error_code ec;
    int64_t bytes = static_cast<int64_t>(std::filesystem::file_size(path_));
    const auto wal = std::filesystem::file_size(path_ + "-wal", ec);
    return ec ? bytes : bytes + static_cast<int64_t>(wal);
  }

  bool HasEvent(int64_t job, const std::string& text) {
    absl::StatusOr<std::vector<JobEvent>> events = store_->ListEvents(job);
    if (!events.ok()) return false;
    return std::any_of(events->begin(), events->end(), [&](const JobEvent& e) {
      return absl::StrContains(e.reason, text);
    });
  }

  static DbRetention::Options Keep() {
    DbRetention::Options options;
    options.retain_metrics = absl::InfiniteDuration();
    options.retain_logs = absl::InfiniteDuration();
    return options;
  }

  testing::TempDir dir_;
  std::string path_;
  std::unique_ptr<SqliteStore> store_;
};

JobState FinishedState(int i) {
  if (i % 10 == 3) return v1::JOB_STATE_FAILED;
  if (i % 10 == 7) return v1::JOB_STATE_CANCELLED;
  return v1::JOB_STATE_SUCCEEDED;
}

TEST_F(DbRetentionTest, ThousandFinishedJobsStayWithinBudgetAndKeepEveryRecord) {
  FakeClock clock;
  const absl::Time start = clock.Now();
  const int64_t running = AddJob(start, v1::JOB_STATE_RUNNING, 300, 10);
  std::vector<int64_t> finished;  // job i ended at start + i hours
  for (int i = 0; i < 1000; ++i) {
    finished.push_back(AddJob(start + absl::Hours(i), FinishedState(i), 300, 10));
  }
  clock.Advance(absl::Hours(1000));  // job i ended 1000 - i hours ago
  ASSERT_TRUE(store_->ReclaimSpace().ok());
  const int64_t bytes_before = FileBytes();
  const int64_t used_before = store_->GetStoreSize()->used_bytes();

  DbRetention::Options options;
  options.retain_metrics = absl::Hours(24 * 14);  // jobs 0..664
  options.retain_logs = absl::Hours(24 * 7);      // jobs 0..832
  options.max_points_per_series = 100;
  options.max_size_bytes = used_before * 2 / 5;
  DbRetention retention(store_.get(), &clock, options);
  absl::StatusOr<DbRetention::Pass> pass = retention.RunOnce();
  ASSERT_TRUE(pass.ok()) << pass.status();
  const int64_t bytes_after = FileBytes();
  std::printf("FIGURE db_bytes_before=%lld\n", static_cast<long long>(bytes_before));
  std::printf("FIGURE db_bytes_after=%lld\n", static_cast<long long>(bytes_after));
  std::printf("FIGURE db_max_size=%lld\n",
              static_cast<long long>(options.max_size_bytes));
  std::printf(
      "FIGURE jobs_downsampled=%lld jobs_logs_dropped=%lld jobs_thinned=%lld "
      "jobs_pruned=%lld metric_rows_thinned=%lld\n",
      static_cast<long long>(pass->jobs_downsampled),
      static_cast<long long>(pass->jobs_logs_dropped),
      static_cast<long long>(pass->jobs_thinned),
      static_cast<long long>(pass->jobs_pruned),
      static_cast<long long>(pass->metric_rows_thinned));
  EXPECT_LE(bytes_after, options.max_size_bytes);
  EXPECT_FALSE(pass->over_budget);
  EXPECT_EQ(pass->bytes_over_budget, 0);
  EXPECT_EQ(pass->jobs_downsampled, 665);
  EXPECT_EQ(pass->jobs_logs_dropped, 833);
  // Thinning the oldest jobs' series was enough: nothing dropped.
  ASSERT_GT(pass->jobs_thinned, 0);
  ASSERT_LT(pass->jobs_thinned, 1000);
  EXPECT_EQ(pass->jobs_pruned, 0);

  EXPECT_EQ(store_->ListJobs()->size(), 1001u);
  EXPECT_EQ(Rows(running), 620);
  EXPECT_EQ(LogBytes(running), kLogBytes);
  for (int i = 0; i < 1000; ++i) {
    const int64_t job = finished[i];
    ASSERT_EQ(store_->GetJob(job)->state, FinishedState(i)) << i;
    const bool thinned = i < pass->jobs_thinned;  // the oldest, for the budget
    EXPECT_EQ(Rows(job, kThinned), thinned ? 1 : i <= 664 ? 100 : 300) << i;
    EXPECT_EQ(Rows(job, kKept), i <= 664 ? 100 : 300) << i;
    EXPECT_EQ(Rows(job, "test_accuracy"), 10) << i;
    EXPECT_EQ(Rows(job, "test_loss"), 10) << i;
    EXPECT_EQ(LogBytes(job), i <= 832 ? 0 : kLogBytes) << i;
  }
  EXPECT_TRUE(HasEvent(finished[0], "metrics thinned"));
  EXPECT_TRUE(HasEvent(finished[0], "--db-max-size"));
  EXPECT_TRUE(HasEvent(finished[800], "logs dropped 7d after the job ended"));
  EXPECT_TRUE(HasEvent(finished[664], "metrics downsampled to at most 100 points"));

  absl::StatusOr<DbRetention::Pass> again = retention.RunOnce();
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->rows_deleted, 0);
}

TEST_F(DbRetentionTest, OverBudgetThinsIntervalPointsAndKeepsFinalEvalAndReportMetrics) {
  FakeClock clock;
  std::vector<int64_t> jobs;  // job i ended at hour i
  for (int i = 0; i < 20; ++i) jobs.push_back(AddRun(clock.Now() + absl::Hours(i), 5));
  clock.Advance(absl::Hours(24));
  std::vector<std::vector<MetricRow>> before;
  int64_t rows_before = 0;
  for (int64_t job : jobs) {
    before.push_back(Points(job));
    rows_before += static_cast<int64_t>(before.back().size());
  }
  ASSERT_TRUE(store_->ReclaimSpace().ok());
  const int64_t bytes_before = FileBytes();
  DbRetention::Options options = Keep();
  options.max_size_bytes = store_->GetStoreSize()->used_bytes() * 7 / 10;
  DbRetention retention(store_.get(), &clock, options);
  absl::StatusOr<DbRetention::Pass> pass = retention.RunOnce();
  ASSERT_TRUE(pass.ok()) << pass.status();
  const int64_t bytes_after = FileBytes();
  int64_t rows_after = 0;
  for (int64_t job : jobs) rows_after += Rows(job);
  std::printf("FIGURE db_bytes_before=%lld db_bytes_after=%lld db_max_size=%lld\n",
              static_cast<long long>(bytes_before), static_cast<long long>(bytes_after),
              static_cast<long long>(options.max_size_bytes));
  std::printf(
      "FIGURE metric_rows_before=%lld metric_rows_after=%lld "
      "jobs_thinned=%lld of %zu\n",
      static_cast<long long>(rows_before), static_cast<long long>(rows_after),
      static_cast<long long>(pass->jobs_thinned), jobs.size());
  EXPECT_LE(bytes_after, options.max_size_bytes);
  EXPECT_FALSE(pass->over_budget);
  ASSERT_GT(pass->jobs_thinned, 0);
  ASSERT_LT(pass->jobs_thinned, 20);
  EXPECT_EQ(pass->jobs_pruned, 0);
  EXPECT_EQ(pass->metric_rows_thinned, rows_before - rows_after);
  for (size_t i = 0; i < jobs.size(); ++i) {
    SCOPED_TRACE(absl::StrCat("job ended at hour ", i));
    const bool thinned = static_cast<int64_t>(i) < pass->jobs_thinned;
    EXPECT_THAT(
        Points(jobs[i]),
        ::testing::Pointwise(SamePoint(), thinned ? Thinned(before[i]) : before[i]));
    EXPECT_EQ(LogBytes(jobs[i]), kLogBytes);
  }
  // A thinned job: 10 of its 15 interval series down to 1 point a rank.
  EXPECT_EQ(Rows(jobs[0], "lr"), 2);
  EXPECT_EQ(Rows(jobs[0], kImagesPerSecFigure), 2 * 100);
  EXPECT_EQ(Rows(jobs[0], kValAccuracyMetricName), 2 * 5);
}

TEST_F(DbRetentionTest, SizePruningTakesTheOldestFinishedJobsFirstAndNeverARunningOne) {
  FakeClock clock;
  const absl::Time t = clock.Now();
  // Ids 1..5 ended in the order 4, 2, 5, 1, 3: the end decides, not the id.
  const int ended_hour[] = {3, 1, 4, 0, 2};
  std::vector<std::pair<int, int64_t>> by_end;
  for (int hour : ended_hour) {
    by_end.push_back(
        {hour, AddJob(t + absl::Hours(hour), v1::JOB_STATE_SUCCEEDED, 2000, 0)});
  }
  std::sort(by_end.begin(), by_end.end());
  const int64_t running = AddJob(t - absl::Hours(5), v1::JOB_STATE_RUNNING, 2000, 0);
  const int64_t queued = AddJob(t - absl::Hours(5), v1::JOB_STATE_QUEUED, 2000, 0);
  clock.Advance(absl::Hours(10));
  DbRetention::Options options = Keep();
  // Thinning a job gives back about half of its rows, a 14th of the data.
  options.max_size_bytes = store_->GetStoreSize()->used_bytes() * 8 / 10;
  DbRetention retention(store_.get(), &clock, options);
  absl::StatusOr<DbRetention::Pass> pass = retention.RunOnce();
  ASSERT_TRUE(pass.ok()) << pass.status();
  ASSERT_GE(pass->jobs_thinned, 1);
  ASSERT_LE(pass->jobs_thinned, 4);
  EXPECT_EQ(pass->jobs_pruned, 0);
  for (size_t i = 0; i < by_end.size(); ++i) {
    const bool thinned = static_cast<int64_t>(i) < pass->jobs_thinned;
    EXPECT_EQ(Rows(by_end[i].second, kThinned), thinned ? 1 : 2000)
        << "ended at hour " << i;
    EXPECT_EQ(Rows(by_end[i].second, kKept), 2000) << i;
    EXPECT_EQ(LogBytes(by_end[i].second), kLogBytes) << i;
  }
  EXPECT_EQ(Rows(running), 4000);
  EXPECT_EQ(Rows(queued), 4000);
  EXPECT_LE(store_->GetStoreSize()->file_bytes, options.max_size_bytes);
}

TEST_F(DbRetentionTest, ABudgetBelowTheKeptRowsPrunesTheRestAndCountsWhatIsOver) {
  FakeClock clock;
  std::vector<int64_t> finished;
  for (int i = 0; i < 5; ++i) {
    finished.push_back(AddJob(clock.Now(), v1::JOB_STATE_SUCCEEDED, 500, 5));
  }
  const int64_t running = AddJob(clock.Now(), v1::JOB_STATE_RUNNING, 500, 5);
  DbRetention::Options options = Keep();
  options.max_size_bytes = 1;
  DbRetention retention(store_.get(), &clock, options);
  absl::StatusOr<DbRetention::Pass> pass = retention.RunOnce();
  ASSERT_TRUE(pass.ok()) << pass.status();
  EXPECT_EQ(pass->jobs_thinned, 5);
  EXPECT_EQ(pass->jobs_pruned, 5);
  EXPECT_EQ(pass->metric_rows_thinned, 5 * 499);
  EXPECT_EQ(pass->metric_rows_pruned, 5 * 1);  // each series' last point
  EXPECT_EQ(pass->log_chunks_dropped, 5);
  EXPECT_TRUE(pass->over_budget);
  EXPECT_EQ(pass->bytes_over_budget, store_->GetStoreSize()->used_bytes() - 1);
  const DbRetention::Totals totals = retention.totals();
  EXPECT_EQ(totals.bytes_over_budget, pass->bytes_over_budget);
  EXPECT_EQ(totals.metric_rows_thinned, 5 * 499);
  EXPECT_EQ(totals.metric_rows_pruned, 5);
  EXPECT_EQ(totals.log_chunks_dropped, 5);
  EXPECT_EQ(totals.metric_rows_downsampled, 0);
  EXPECT_EQ(store_->ListJobs()->size(), 6u);
  // What reports read stays: the kept series and the evaluation points.
  for (int64_t job : finished) {
    EXPECT_EQ(Rows(job, kThinned), 0) << job;
    EXPECT_EQ(Rows(job, kKept), 500) << job;
    EXPECT_EQ(Rows(job, "test_accuracy"), 5) << job;
    EXPECT_EQ(LogBytes(job), 0) << job;
    EXPECT_TRUE(HasEvent(job, "the evaluation metrics and those reports read are kept"));
  }
  EXPECT_EQ(Rows(running), 1010);
  EXPECT_EQ(LogBytes(running), kLogBytes);
  EXPECT_TRUE(store_->ListFinishedJobOutputs()->empty());

  // The next pass finds nothing left to cut and is as far over.
  absl::StatusOr<DbRetention::Pass> again = retention.RunOnce();
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->rows_deleted, 0);
  EXPECT_EQ(again->bytes_over_budget, pass->bytes_over_budget);
  EXPECT_EQ(retention.totals().metric_rows_thinned, 5 * 499);
}

TEST_F(DbRetentionTest, AgesCountFromTheJobsEndOnTheInjectedClock) {
  FakeClock clock;
  const int64_t job = AddJob(clock.Now(), v1::JOB_STATE_SUCCEEDED, 2000, 20);
  DbRetention::Options options;
  options.retain_logs = absl::Hours(24 * 7);
  options.retain_metrics = absl::Hours(24 * 30);
  options.max_points_per_series = 300;
  DbRetention retention(store_.get(), &clock, options);

  clock.Advance(absl::Hours(24 * 7) - absl::Minutes(1));
  ASSERT_TRUE(retention.RunOnce().ok());
  EXPECT_EQ(LogBytes(job), kLogBytes);
  clock.Advance(absl::Minutes(2));
  ASSERT_TRUE(retention.RunOnce().ok());
  EXPECT_EQ(LogBytes(job), 0);
  EXPECT_EQ(Rows(job), 4040);
  clock.Advance(absl::Hours(24 * 23));
  ASSERT_TRUE(retention.RunOnce().ok());
  EXPECT_EQ(Rows(job, kThinned), 300);
  EXPECT_EQ(Rows(job, "test_accuracy"), 20);
  EXPECT_TRUE(HasEvent(job, "--retain-logs"));
  EXPECT_TRUE(HasEvent(job, "--retain-metrics"));
}

TEST_F(DbRetentionTest, StoreRefusesToPruneAJobThatIsNotFinished) {
  FakeClock clock;
  const int64_t running = AddJob(clock.Now(), v1::JOB_STATE_RUNNING, 10, 1);
  EXPECT_EQ(store_->DropLogs(running, {}).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(store_->DropMetrics(running, {}).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(store_->DownsampleMetrics(running, 2, {}).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(store_->DropLogs(running + 100, {}).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(Rows(running), 22);
  EXPECT_EQ(LogBytes(running), kLogBytes);
}

TEST_F(DbRetentionTest, AnOlderDatabaseIsSwitchedToIncrementalVacuumWhenOpened) {
  const std::string old_path = dir_.File("old.db");
  {
    SqliteStore::Options old;
    old.migrate_to_version = 12;
    old.incremental_vacuum = false;
    auto store = SqliteStore::Open(old_path, old);
    ASSERT_TRUE(store.ok()) << store.status();
    EXPECT_EQ(*(*store)->AutoVacuumMode(), 0);
    JobRecord job;
    job.name = "before";
    ASSERT_TRUE((*store)->CreateJob(job).ok());
  }
  auto store = SqliteStore::Open(old_path);
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ(*(*store)->AutoVacuumMode(), 2);
  EXPECT_EQ(*(*store)->SchemaVersion(), SqliteStore::kSchemaVersion);
  EXPECT_EQ((*store)->ListJobs()->size(), 1u);
  EXPECT_EQ(*store_->AutoVacuumMode(), 2);  // a new one is made in the mode
}

TEST_F(DbRetentionTest, StatsNameEachTableAndTheOldestKeptData) {
  FakeClock clock;
  const int64_t first = AddJob(clock.Now(), v1::JOB_STATE_SUCCEEDED, 100, 1);
  const int64_t second = AddJob(clock.Now(), v1::JOB_STATE_SUCCEEDED, 100, 1);
  ASSERT_TRUE(store_->DropMetrics(first, {}).ok());   // 102 kept: kKept, test_*
  ASSERT_TRUE(store_->ThinMetrics(second, {}).ok());  // 103: and kThinned's last
  ASSERT_TRUE(store_->DropLogs(first, {}).ok());
  absl::StatusOr<StoreStats> stats = store_->GetStoreStats();
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->auto_vacuum, "incremental");
  EXPECT_EQ(stats->oldest_job, first);
  EXPECT_EQ(stats->oldest_metrics_job, first);  // its kept metrics
  EXPECT_EQ(stats->oldest_logs_job, second);
  EXPECT_EQ(stats->jobs_metrics_dropped, 1);
  EXPECT_EQ(stats->jobs_metrics_thinned, 1);
  EXPECT_EQ(stats->jobs_logs_dropped, 1);
  bool saw_metrics = false;
  for (const StoreStats::Table& table : stats->tables) {
    if (table.name != "metrics") continue;
    saw_metrics = true;
    EXPECT_EQ(table.rows, 102 + 103);
    EXPECT_GT(table.bytes, 0);
  }
  EXPECT_TRUE(saw_metrics);
}

TEST(RetentionAgeTest, ParsesAgesAndNever) {
  EXPECT_EQ(*ParseRetentionAge("90d", "--retain-metrics"), absl::Hours(24 * 90));
  EXPECT_EQ(*ParseRetentionAge("2w", "--retain-logs"), absl::Hours(24 * 14));
  EXPECT_EQ(*ParseRetentionAge("12h", "x"), absl::Hours(12));
  EXPECT_EQ(*ParseRetentionAge("never", "x"), absl::InfiniteDuration());
  EXPECT_EQ(*ParseRetentionAge("0", "x"), absl::InfiniteDuration());
  EXPECT_FALSE(ParseRetentionAge("90", "x").ok());
  EXPECT_FALSE(ParseRetentionAge("-3d", "x").ok());
  EXPECT_FALSE(ParseRetentionAge("", "x").ok());
  EXPECT_EQ(FormatRetentionAge(absl::Hours(24 * 30)), "30d");
}

}  // namespace
}  // namespace tessera
