// StoreWriter over a store whose writes fail on demand, as on a full disk:
// heartbeat writes are coalesced so the backlog does not grow with the outage,
// state writes are never dropped, and metric batches are never acknowledged
// unless stored (refused at once past the backlog cap).
#include "coordinator/store/store_writer.h"

#include <atomic>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "coordinator/store/sqlite_store.h"
#include "coordinator/store/store_wrapper.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

namespace v1 = ::tessera::v1;

// An in-memory SQLite store whose job, worker, rank and metric writes fail with
// ResourceExhausted (as SqliteStore on a full disk) while `full` is set.
class FullableStore final : public StoreWrapper {
 public:
  using StoreWrapper::StoreWrapper;

  std::atomic<bool> full{false};
  std::atomic<int> worker_writes{0};  // UpsertWorker calls that reached the store

  absl::Status UpdateJob(const JobRecord& job) override {
    return full ? Full() : StoreWrapper::UpdateJob(job);
  }
  absl::Status UpsertWorker(const WorkerRecord& worker) override {
    ++worker_writes;
    return full ? Full() : StoreWrapper::UpsertWorker(worker);
  }
  absl::Status PutRanks(const std::vector<RankRecord>& ranks) override {
    return full ? Full() : StoreWrapper::PutRanks(ranks);
  }
  absl::Status AppendMetrics(const std::vector<MetricRow>& rows) override {
    return full ? Full() : StoreWrapper::AppendMetrics(rows);
  }
  // The file system's free space as the reserve sees it.
  absl::StatusOr<DiskSpace> GetDiskSpace() override {
    return DiskSpace{free_bytes.load(), int64_t{1} << 30};
  }
  absl::Status CompactJournal() override {
    ++compactions;
    return absl::OkStatus();
  }
  absl::Status LimitJournal(int64_t bytes) override {
    journal_limit = bytes;
    return absl::OkStatus();
  }
  std::atomic<int64_t> free_bytes{int64_t{1} << 30};
  std::atomic<int> compactions{0};
  std::atomic<int64_t> journal_limit{-1};  // -1: never limited

 private:
  static absl::Status Full() {
    return absl::ResourceExhaustedError("database or disk is full");
  }
};

class StoreWriterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto inner = SqliteStore::Open(":memory:");
    ASSERT_TRUE(inner.ok()) << inner.status();
    store_ = std::make_unique<FullableStore>(std::move(*inner));
  }

  void MakeWriter(StoreWriter::Options options = {}) {
    writer_ = std::make_unique<StoreWriter>(store_.get(), options);
  }

  int64_t CreateJob() {
    JobRecord job;
    job.name = "job";
    job.state = v1::JOB_STATE_QUEUED;
    job.reason = "submitted";
    job.spec.set_world_size(1);
    absl::StatusOr<int64_t> id = store_->CreateJob(job);
    EXPECT_TRUE(id.ok()) << id.status();
    return id.value_or(0);
  }

  static RankRecord Rank(int64_t job, int32_t rank, RankState state) {
    RankRecord r;
    r.job_id = job;
    r.attempt = 1;
    r.rank = rank;
    r.worker = "w1";
    r.state = state;
    return r;
  }

  static WorkerRecord Worker(const std::string& name, int64_t seen) {
    WorkerRecord w;
    w.name = name;
    w.slots = 2;
    w.epoch = 1;
    w.last_seen_unix_ms = seen;
    return w;
  }

  std::unique_ptr<FullableStore> store_;
  std::unique_ptr<StoreWriter> writer_;  // after store_: stopped before it goes
};

TEST_F(StoreWriterTest, RepeatedWorkerUpdatesWhileTheDiskIsFullDoNotGrowTheBacklog) {
  MakeWriter();
  store_->full = true;
  for (int64_t beat = 1; beat <= 2000; ++beat) {
    writer_->UpsertWorker(Worker("w1", beat));
    writer_->UpsertWorker(Worker("w2", beat));
    // At most one queued and one being retried per worker.
    ASSERT_LE(writer_->backlog(), 4u) << "after heartbeat " << beat;
  }
  EXPECT_GE(writer_->coalesced_writes(), 2 * 2000 - 4);

  store_->full = false;
  ASSERT_TRUE(writer_->Flush(absl::Seconds(30)));
  EXPECT_TRUE(writer_->healthy());
  EXPECT_EQ(writer_->backlog(), 0u);
  // The newest row of each worker is stored.
  absl::StatusOr<std::vector<WorkerRecord>> workers = store_->ListWorkers();
  ASSERT_TRUE(workers.ok()) << workers.status();
  ASSERT_EQ(workers->size(), 2u);
  for (const WorkerRecord& w : *workers) EXPECT_EQ(w.last_seen_unix_ms, 2000) << w.name;
  // Far fewer store calls than heartbeats: retries applied the newest row only.
  EXPECT_LT(store_->worker_writes.load(), 1000);
}

TEST_F(StoreWriterTest, StateWritesQueuedWhileFullAreAllStoredInOrderAfterwards) {
  MakeWriter();
  const int64_t id = CreateJob();
  store_->full = true;
  JobRecord job;
  ASSERT_TRUE(store_->GetJob(id).ok());
  job = *store_->GetJob(id);
  for (v1::JobState state : {v1::JOB_STATE_SCHEDULED, v1::JOB_STATE_RUNNING}) {
    job.state = state;
    job.reason = v1::JobState_Name(state);
    writer_->UpdateJob(job);
    writer_->UpsertWorker(Worker("w1", state));
  }
  writer_->PutRanks({Rank(id, 0, RankState::kRunning)});
  writer_->PutRanks({Rank(id, 0, RankState::kExited)});
  EXPECT_EQ(store_->GetJob(id)->state, v1::JOB_STATE_QUEUED) << "stored on a full disk";

  store_->full = false;
  ASSERT_TRUE(writer_->Flush(absl::Seconds(30)));
  absl::StatusOr<JobRecord> stored = store_->GetJob(id);
  ASSERT_TRUE(stored.ok());
  EXPECT_EQ(stored->state, v1::JOB_STATE_RUNNING);
  // Both transitions were written, not only the last.
  absl::StatusOr<std::vector<JobEvent>> events = store_->ListEvents(id);
  ASSERT_TRUE(events.ok());
  ASSERT_EQ(events->size(), 3u);
  EXPECT_EQ((*events)[1].to_state, v1::JOB_STATE_SCHEDULED);
  EXPECT_EQ((*events)[2].to_state, v1::JOB_STATE_RUNNING);
  absl::StatusOr<std::vector<RankRecord>> ranks = store_->GetRanks(id, 1);
  ASSERT_TRUE(ranks.ok());
  ASSERT_EQ(ranks->size(), 1u);
  EXPECT_EQ((*ranks)[0].state, RankState::kExited);
}

TEST_F(StoreWriterTest, MetricsAreRefusedNotAcknowledgedPastTheBacklogCap) {
  MakeWriter(StoreWriter::Options{.max_backlog = 4});
  const int64_t id = CreateJob();
  store_->full = true;
  for (int32_t r = 0; r < 4; ++r) writer_->PutRanks({Rank(id, r, RankState::kRunning)});
  ASSERT_EQ(writer_->backlog(), 4u);

  // Answered at once, in this thread, and never with OK.
  std::optional<absl::Status> answer;
  writer_->AppendMetrics({MetricRow{id, 1, 0, 5, "loss", 1.0, 0}},
                         [&answer](absl::Status s) { answer = s; });
  ASSERT_TRUE(answer.has_value());
  EXPECT_TRUE(absl::IsUnavailable(*answer)) << *answer;
  // State writes are still taken past the cap.
  writer_->PutRanks({Rank(id, 4, RankState::kRunning)});
  EXPECT_EQ(writer_->backlog(), 5u);

  store_->full = false;
  ASSERT_TRUE(writer_->Flush(absl::Seconds(30)));
  absl::StatusOr<std::vector<RankRecord>> ranks = store_->GetRanks(id, 1);
  ASSERT_TRUE(ranks.ok());
  EXPECT_EQ(ranks->size(), 5u);
  // The refused point was not stored behind the sender's back.
  MetricQuery query;
  query.job_id = id;
  absl::StatusOr<std::vector<MetricRow>> rows = store_->QueryMetrics(query);
  ASSERT_TRUE(rows.ok());
  EXPECT_TRUE(rows->empty());

  // Once drained, metrics are taken and acknowledged after they are stored.
  absl::Notification stored;
  absl::Status status = absl::UnknownError("not called");
  writer_->AppendMetrics({MetricRow{id, 1, 0, 5, "loss", 1.0, 0}}, [&](absl::Status s) {
    status = s;
    stored.Notify();
  });
  ASSERT_TRUE(stored.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_TRUE(status.ok()) << status;
  rows = store_->QueryMetrics(query);
  ASSERT_TRUE(rows.ok());
  EXPECT_EQ(rows->size(), 1u);
}

TEST_F(StoreWriterTest, MetricsFailBackWhileTheDiskIsFull) {
  MakeWriter();
  const int64_t id = CreateJob();
  store_->full = true;
  absl::Notification answered;
  absl::Status status;
  writer_->AppendMetrics({MetricRow{id, 1, 0, 5, "loss", 1.0, 0}}, [&](absl::Status s) {
    status = s;
    answered.Notify();
  });
  ASSERT_TRUE(answered.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_TRUE(absl::IsUnavailable(status)) << status;
  EXPECT_EQ(writer_->backlog(), 0u) << "a failed metric batch was kept";
}

// The reserve: below it metric batches are acknowledged, counted per job and
// not stored, while state writes go on.
TEST_F(StoreWriterTest, BelowTheReserveMetricsAreShedAndCountedWhileStateIsStored) {
  MakeWriter({.reserve_bytes = 64 * 1024});
  const int64_t id = CreateJob();
  store_->free_bytes = 10 * 1024;
  absl::Notification answered;
  absl::Status status = absl::UnknownError("not answered");
  writer_->AppendMetrics({MetricRow{id, 1, 0, 5, "loss", 1.0, 0},
                          MetricRow{id, 1, 0, 5, "accuracy", 0.5, 0}},
                         [&](absl::Status s) {
                           status = s;
                           answered.Notify();
                         });
  ASSERT_TRUE(answered.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_TRUE(status.ok()) << status;
  JobRecord job = *store_->GetJob(id);
  job.state = v1::JOB_STATE_SCHEDULED;
  job.reason = "placed";
  writer_->UpdateJob(job);
  ASSERT_TRUE(writer_->Flush());
  EXPECT_EQ(store_->GetJob(id)->state, v1::JOB_STATE_SCHEDULED);
  EXPECT_TRUE(store_->QueryMetrics(MetricQuery{.job_id = id})->empty());
  EXPECT_EQ(writer_->TakeShed(id).metric_rows, 2);
  EXPECT_EQ(writer_->TakeShed(id).metric_rows, 0);
  EXPECT_TRUE(writer_->shedding());
  EXPECT_TRUE(writer_->healthy());
  EXPECT_GT(store_->compactions.load(), 0);

  // Space again (the check is cached for 250 ms): stored, not shed.
  store_->free_bytes = int64_t{1} << 30;
  absl::SleepFor(absl::Milliseconds(300));
  EXPECT_FALSE(writer_->BelowReserve());
  EXPECT_FALSE(writer_->shedding());
  writer_->AppendMetrics({MetricRow{id, 1, 0, 6, "loss", 0.9, 0}});
  ASSERT_TRUE(writer_->Flush());
  EXPECT_EQ(store_->QueryMetrics(MetricQuery{.job_id = id})->size(), 1u);
  EXPECT_EQ(writer_->TakeShed(id).metric_rows, 0);
}

TEST_F(StoreWriterTest, MetricsOnAFullDiskAreShedWhenAReserveIsSet) {
  MakeWriter({.reserve_bytes = 64 * 1024});
  const int64_t id = CreateJob();
  store_->full = true;  // filled between two space checks
  absl::Notification answered;
  absl::Status status = absl::UnknownError("not answered");
  writer_->AppendMetrics({MetricRow{id, 1, 0, 5, "loss", 1.0, 0}}, [&](absl::Status s) {
    status = s;
    answered.Notify();
  });
  ASSERT_TRUE(answered.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_EQ(writer_->TakeShed(id).metric_rows, 1);
}

TEST_F(StoreWriterTest, AReserveKeepsTheJournalUnderAQuarterOfIt) {
  MakeWriter();
  EXPECT_EQ(store_->journal_limit.load(), -1) << "no reserve, SQLite's own journal size";
  writer_.reset();
  MakeWriter({.reserve_bytes = 64 * 1024});
  EXPECT_EQ(store_->journal_limit.load(), 16 * 1024);
}

TEST_F(StoreWriterTest, JobsWithStateWritesKeptForRetryAreNamedUnstored) {
  MakeWriter();
  const int64_t id = CreateJob();
  const int64_t other = CreateJob();
  EXPECT_TRUE(writer_->UnstoredJobs().empty());
  store_->full = true;
  JobRecord job = *store_->GetJob(id);
  job.state = v1::JOB_STATE_SCHEDULED;
  writer_->UpdateJob(job);
  EXPECT_EQ(writer_->UnstoredJobs(), std::set<int64_t>{id});  // queued
  writer_->Flush(absl::Milliseconds(500));  // the barrier passes the kept write
  EXPECT_FALSE(writer_->healthy());
  EXPECT_EQ(writer_->UnstoredJobs(), std::set<int64_t>{id});  // kept for retry
  EXPECT_FALSE(writer_->UnstoredJobs().contains(other));
  store_->full = false;
  // A barrier queued now is applied after the kept write.
  ASSERT_TRUE(writer_->Flush(absl::Seconds(20)));
  EXPECT_TRUE(writer_->UnstoredJobs().empty());
  EXPECT_EQ(store_->GetJob(id)->state, v1::JOB_STATE_SCHEDULED);
}

}  // namespace
}  // namespace tessera
