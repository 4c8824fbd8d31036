// Database retention (coordinator/store/db_retention.h) over a SQLite file on a
// fake clock: metrics downsampled and logs dropped by age, the oldest finished
// jobs pruned for the size budget, job records and running jobs never touched,
// and the file within --db-max-size after the vacuum. Also the store's side:
// the refusal to prune a job that is not finished, the switch of an older
// database to incremental auto-vacuum, and `db stats`.
#include "coordinator/store/db_retention.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "coordinator/store/sqlite_store.h"
#include "coordinator/store/store.h"
#include "gtest/gtest.h"
#include "tests/testing/test_util.h"

namespace tessera {
namespace {

using v1::JobState;

constexpr int kLogBytes = 4096;

class DbRetentionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = dir_.File("tessera.db");
    auto store = SqliteStore::Open(path_);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
  }

  // A job in `state` that ended (or, not finished, last changed) at `ended`,
  // with `train_points` points of two training series and `eval_points` of
  // two evaluation series on rank 0 of attempt 1, and kLogBytes of log.
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
      for (const char* name : {"loss", "images_per_sec"}) {
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
  options.max_size_bytes = used_before / 3;
  DbRetention retention(store_.get(), &clock, options);
  absl::StatusOr<DbRetention::Pass> pass = retention.RunOnce();
  ASSERT_TRUE(pass.ok()) << pass.status();
  const int64_t bytes_after = FileBytes();
  std::printf("FIGURE db_bytes_before=%lld\n", static_cast<long long>(bytes_before));
  std::printf("FIGURE db_bytes_after=%lld\n", static_cast<long long>(bytes_after));
  std::printf("FIGURE db_max_size=%lld\n",
              static_cast<long long>(options.max_size_bytes));
  std::printf("FIGURE jobs_downsampled=%lld jobs_logs_dropped=%lld jobs_pruned=%lld\n",
              static_cast<long long>(pass->jobs_downsampled),
              static_cast<long long>(pass->jobs_logs_dropped),
              static_cast<long long>(pass->jobs_pruned));
  EXPECT_LE(bytes_after, options.max_size_bytes);
  EXPECT_FALSE(pass->over_budget);
  EXPECT_EQ(pass->jobs_downsampled, 665);
  EXPECT_EQ(pass->jobs_logs_dropped, 833);
  ASSERT_GT(pass->jobs_pruned, 0);
  ASSERT_LT(pass->jobs_pruned, 1000);

  EXPECT_EQ(store_->ListJobs()->size(), 1001u);
  EXPECT_EQ(Rows(running), 620);
  EXPECT_EQ(LogBytes(running), kLogBytes);
  for (int i = 0; i < 1000; ++i) {
    const int64_t job = finished[i];
    ASSERT_EQ(store_->GetJob(job)->state, FinishedState(i)) << i;
    if (i < pass->jobs_pruned) {  // the oldest, pruned for the budget
      EXPECT_EQ(Rows(job), 0) << i;
      EXPECT_EQ(LogBytes(job), 0) << i;
      continue;
    }
    EXPECT_EQ(Rows(job, "loss"), i <= 664 ? 100 : 300) << i;
    EXPECT_EQ(Rows(job, "images_per_sec"), i <= 664 ? 100 : 300) << i;
    EXPECT_EQ(Rows(job, "test_accuracy"), 10) << i;
    EXPECT_EQ(Rows(job, "test_loss"), 10) << i;
    EXPECT_EQ(LogBytes(job), i <= 832 ? 0 : kLogBytes) << i;
  }
  EXPECT_TRUE(HasEvent(finished[0], "--db-max-size"));
  EXPECT_TRUE(HasEvent(finished[800], "logs dropped 7d after the job ended"));
  EXPECT_TRUE(HasEvent(finished[664], "metrics downsampled to at most 100 points"));

  absl::StatusOr<DbRetention::Pass> again = retention.RunOnce();
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->rows_deleted, 0);
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
  options.max_size_bytes = store_->GetStoreSize()->used_bytes() * 6 / 10;
  DbRetention retention(store_.get(), &clock, options);
  absl::StatusOr<DbRetention::Pass> pass = retention.RunOnce();
  ASSERT_TRUE(pass.ok()) << pass.status();
  ASSERT_GE(pass->jobs_pruned, 1);
  ASSERT_LE(pass->jobs_pruned, 4);
  for (size_t i = 0; i < by_end.size(); ++i) {
    const bool pruned = static_cast<int64_t>(i) < pass->jobs_pruned;
    EXPECT_EQ(Rows(by_end[i].second), pruned ? 0 : 4000) << "ended at hour " << i;
    EXPECT_EQ(LogBytes(by_end[i].second), pruned ? 0 : kLogBytes) << i;
  }
  EXPECT_EQ(Rows(running), 4000);
  EXPECT_EQ(Rows(queued), 4000);
  EXPECT_LE(store_->GetStoreSize()->file_bytes, options.max_size_bytes);
}

TEST_F(DbRetentionTest, ABudgetBelowTheRecordsPrunesEveryFinishedJobButNoRecord) {
  FakeClock clock;
  for (int i = 0; i < 5; ++i) {
    AddJob(clock.Now(), v1::JOB_STATE_SUCCEEDED, 500, 5);
  }
  const int64_t running = AddJob(clock.Now(), v1::JOB_STATE_RUNNING, 500, 5);
  DbRetention::Options options = Keep();
  options.max_size_bytes = 1;
  DbRetention retention(store_.get(), &clock, options);
  absl::StatusOr<DbRetention::Pass> pass = retention.RunOnce();
  ASSERT_TRUE(pass.ok()) << pass.status();
  EXPECT_EQ(pass->jobs_pruned, 5);
  EXPECT_TRUE(pass->over_budget);
  EXPECT_EQ(store_->ListJobs()->size(), 6u);
  EXPECT_EQ(Rows(running), 1010);
  EXPECT_EQ(LogBytes(running), kLogBytes);
  EXPECT_TRUE(store_->ListFinishedJobOutputs()->empty());
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
  EXPECT_EQ(Rows(job, "loss"), 300);
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
  ASSERT_TRUE(store_->DropMetrics(first, {}).ok());
  absl::StatusOr<StoreStats> stats = store_->GetStoreStats();
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->auto_vacuum, "incremental");
  EXPECT_EQ(stats->oldest_job, first);
  EXPECT_EQ(stats->oldest_metrics_job, second);
  EXPECT_EQ(stats->oldest_logs_job, first);
  EXPECT_EQ(stats->jobs_metrics_dropped, 1);
  bool saw_metrics = false;
  for (const StoreStats::Table& table : stats->tables) {
    if (table.name != "metrics") continue;
    saw_metrics = true;
    EXPECT_EQ(table.rows, 202);
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
