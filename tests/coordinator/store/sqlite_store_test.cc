// Store contract suite, run against every Store backend listed in
// INSTANTIATE_TEST_SUITE_P below (SQLite in memory and in a file, and a
// StoreWrapper over SQLite in memory), followed by
// tests of what only the SQLite file backend promises: persistence, WAL, schema
// versioning, disk-full handling.
#include "coordinator/store/sqlite_store.h"

#include <sqlite3.h>
#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "coordinator/store/store.h"
#include "coordinator/store/store_wrapper.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::SizeIs;
using v1::JobState;

absl::Status StatusOf(const absl::Status& status) { return status; }
template <typename T>
absl::Status StatusOf(const absl::StatusOr<T>& status_or) {
  return status_or.status();
}

MATCHER(IsOk, "is OK") {
  absl::Status status = StatusOf(arg);
  *result_listener << status;
  return status.ok();
}

MATCHER_P(StatusIs, code, absl::StrCat("has code ", absl::StatusCodeToString(code))) {
  absl::Status status = StatusOf(arg);
  *result_listener << status;
  return status.code() == code;
}

// A fresh directory under the test temp dir, removed on destruction.
class TempDir {
 public:
  TempDir() {
    std::string templ = ::testing::TempDir() + "sqlite_store_test.XXXXXX";
    char* made = mkdtemp(templ.data());
    EXPECT_NE(made, nullptr) << "mkdtemp " << templ;
    path_ = templ;
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// ---------------------------------------------------------------------------
// Contract suite.

struct Backend {
  std::string name;
  // Opens an empty store; `dir` is a fresh directory the backend may write in.
  std::function<absl::StatusOr<std::unique_ptr<Store>>(const std::string& dir)> open;
};

// Names the backend in test failure messages.
void PrintTo(const Backend& backend, std::ostream* os) { *os << backend.name; }

Backend SqliteMemoryBackend() {
  return {"SqliteMemory",
          [](const std::string&) -> absl::StatusOr<std::unique_ptr<Store>> {
            auto store = SqliteStore::Open(":memory:");
            if (!store.ok()) return store.status();
            return std::unique_ptr<Store>(std::move(*store));
          }};
}

Backend SqliteFileBackend() {
  return {"SqliteFile",
          [](const std::string& dir) -> absl::StatusOr<std::unique_ptr<Store>> {
            auto store = SqliteStore::Open(dir + "/tessera.db");
            if (!store.ok()) return store.status();
            return std::unique_ptr<Store>(std::move(*store));
          }};
}

// StoreWrapper over SQLite in memory: checks that the wrapper forwards every
// call unchanged.
Backend WrappedSqliteMemoryBackend() {
  return {
      "WrappedSqliteMemory",
      [](const std::string&) -> absl::StatusOr<std::unique_ptr<Store>> {
        auto store = SqliteStore::Open(":memory:");
        if (!store.ok()) return store.status();
        return std::unique_ptr<Store>(std::make_unique<StoreWrapper>(std::move(*store)));
      }};
}

v1::JobSpec MakeSpec(const std::string& name, int world_size) {
  v1::JobSpec spec;
  spec.set_name(name);
  spec.set_world_size(world_size);
  v1::TrainerConfig* trainer = spec.mutable_trainer();
  trainer->set_model("vit-micro");
  trainer->set_dataset("fashion-mnist");
  trainer->set_epochs(3);
  trainer->set_batch_size(64);
  trainer->set_lr(3e-4);
  trainer->set_allreduce(false);
  trainer->set_seed(42);
  return spec;
}

JobRecord MakeJob(const std::string& name, const std::string& client_request_id = "") {
  JobRecord job;
  job.name = name;
  job.state = v1::JOB_STATE_QUEUED;
  job.spec = MakeSpec(name, 2);
  job.spec_yaml = absl::StrCat("name: ", name, "\nworld_size: 2\n");
  job.client_request_id = client_request_id;
  job.created_unix_ms = 1000;
  job.updated_unix_ms = 1000;
  return job;
}

MetricRow Metric(int64_t job_id, int32_t attempt, int32_t rank, int64_t step,
                 const std::string& name, double value) {
  return MetricRow{.job_id = job_id,
                   .attempt = attempt,
                   .rank = rank,
                   .step = step,
                   .name = name,
                   .value = value,
                   .unix_ms = 5000 + step};
}

// (step, rank, name, attempt) of each row, for compact expectations.
std::vector<std::tuple<int64_t, int32_t, std::string, int32_t>> Keys(
    const std::vector<MetricRow>& rows) {
  std::vector<std::tuple<int64_t, int32_t, std::string, int32_t>> keys;
  for (const MetricRow& row : rows) {
    keys.emplace_back(row.step, row.rank, row.name, row.attempt);
  }
  return keys;
}

class StoreContractTest : public ::testing::TestWithParam<Backend> {
 protected:
  void SetUp() override {
    auto store = GetParam().open(dir_.path());
    ASSERT_THAT(store, IsOk());
    store_ = std::move(*store);
  }

  int64_t Create(const JobRecord& job) {
    absl::StatusOr<int64_t> id = store_->CreateJob(job);
    EXPECT_THAT(id, IsOk());
    return id.value_or(-1);
  }

  // Moves an existing job to `state` at time `unix_ms`.
  void SetState(int64_t id, JobState state, int64_t unix_ms = 2000,
                const std::string& reason = "") {
    absl::StatusOr<JobRecord> job = store_->GetJob(id);
    ASSERT_THAT(job, IsOk());
    job->state = state;
    job->reason = reason;
    job->updated_unix_ms = unix_ms;
    ASSERT_THAT(store_->UpdateJob(*job), IsOk());
  }

  TempDir dir_;
  std::unique_ptr<Store> store_;
};

TEST_P(StoreContractTest, CreateThenGetRoundTripsEveryField) {
  JobRecord job = MakeJob("mnist-dp", "req-1");
  job.reason = "submitted by test";
  job.pending_reason = "needs 2 slots; 0 registered";
  job.attempt = 0;
  job.created_unix_ms = 1234;
  job.updated_unix_ms = 5678;
  int64_t id = Create(job);

  absl::StatusOr<JobRecord> got = store_->GetJob(id);
  ASSERT_THAT(got, IsOk());
  EXPECT_EQ(got->id, id);
  EXPECT_EQ(got->name, "mnist-dp");
  EXPECT_EQ(got->state, v1::JOB_STATE_QUEUED);
  EXPECT_EQ(got->reason, "submitted by test");
  EXPECT_EQ(got->pending_reason, "needs 2 slots; 0 registered");
  EXPECT_EQ(got->attempt, 0);
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(got->spec, job.spec))
      << got->spec.DebugString();
  EXPECT_TRUE(got->spec.trainer().has_allreduce());
  EXPECT_EQ(got->spec_yaml, job.spec_yaml);
  EXPECT_EQ(got->client_request_id, "req-1");
  EXPECT_EQ(got->created_unix_ms, 1234);
  EXPECT_EQ(got->updated_unix_ms, 5678);
}

TEST_P(StoreContractTest, AssignsIncreasingIds) {
  int64_t first = Create(MakeJob("a"));
  int64_t second = Create(MakeJob("b"));
  int64_t third = Create(MakeJob("c"));

  EXPECT_GT(first, 0);
  EXPECT_LT(first, second);
  EXPECT_LT(second, third);
}

TEST_P(StoreContractTest, SameClientRequestIdReturnsExistingJobAndStoresOne) {
  int64_t first = Create(MakeJob("original", "req-42"));
  int64_t again = Create(MakeJob("retry", "req-42"));

  EXPECT_EQ(again, first);
  absl::StatusOr<std::vector<JobRecord>> jobs = store_->ListJobs();
  ASSERT_THAT(jobs, IsOk());
  ASSERT_THAT(*jobs, SizeIs(1));
  EXPECT_EQ((*jobs)[0].name, "original");
  absl::StatusOr<std::vector<JobEvent>> events = store_->ListEvents(first);
  ASSERT_THAT(events, IsOk());
  EXPECT_THAT(*events, SizeIs(1));
}

TEST_P(StoreContractTest, JobsWithoutClientRequestIdAreNeverDeduplicated) {
  int64_t first = Create(MakeJob("a"));
  int64_t second = Create(MakeJob("a"));

  EXPECT_NE(first, second);
  absl::StatusOr<std::vector<JobRecord>> jobs = store_->ListJobs();
  ASSERT_THAT(jobs, IsOk());
  EXPECT_THAT(*jobs, SizeIs(2));
}

TEST_P(StoreContractTest, DifferentClientRequestIdsMakeDifferentJobs) {
  int64_t first = Create(MakeJob("a", "req-1"));
  int64_t second = Create(MakeJob("a", "req-2"));

  EXPECT_NE(first, second);
}

TEST_P(StoreContractTest, GetUnknownJobIsNotFound) {
  EXPECT_THAT(store_->GetJob(12345), StatusIs(absl::StatusCode::kNotFound));
}

TEST_P(StoreContractTest, UpdateJobPersistsOnlyTheMutableFields) {
  int64_t id = Create(MakeJob("job"));
  absl::StatusOr<JobRecord> job = store_->GetJob(id);
  ASSERT_THAT(job, IsOk());
  job->state = v1::JOB_STATE_SCHEDULED;
  job->reason = "placed";
  job->pending_reason = "";
  job->attempt = 1;
  job->updated_unix_ms = 7777;
  job->name = "renamed";             // not mutable
  job->spec_yaml = "changed: true";  // not mutable
  ASSERT_THAT(store_->UpdateJob(*job), IsOk());

  absl::StatusOr<JobRecord> got = store_->GetJob(id);
  ASSERT_THAT(got, IsOk());
  EXPECT_EQ(got->state, v1::JOB_STATE_SCHEDULED);
  EXPECT_EQ(got->reason, "placed");
  EXPECT_EQ(got->pending_reason, "");
  EXPECT_EQ(got->attempt, 1);
  EXPECT_EQ(got->updated_unix_ms, 7777);
  EXPECT_EQ(got->created_unix_ms, 1000);
  EXPECT_EQ(got->name, "job");
  EXPECT_EQ(got->spec_yaml, MakeJob("job").spec_yaml);
}

TEST_P(StoreContractTest, CreateRecordsTheInitialStateAsAnEvent) {
  JobRecord job = MakeJob("job");
  job.created_unix_ms = 1500;
  job.reason = "submitted";
  int64_t id = Create(job);

  absl::StatusOr<std::vector<JobEvent>> events = store_->ListEvents(id);
  ASSERT_THAT(events, IsOk());
  ASSERT_THAT(*events, SizeIs(1));
  EXPECT_EQ((*events)[0].job_id, id);
  EXPECT_EQ((*events)[0].unix_ms, 1500);
  EXPECT_EQ((*events)[0].from_state, v1::JOB_STATE_UNSPECIFIED);
  EXPECT_EQ((*events)[0].to_state, v1::JOB_STATE_QUEUED);
  EXPECT_EQ((*events)[0].reason, "submitted");
}

TEST_P(StoreContractTest, UpdateJobAppendsAnEventOnlyWhenTheStateChanges) {
  int64_t id = Create(MakeJob("job"));
  // Same state, new pending reason: no transition.
  absl::StatusOr<JobRecord> job = store_->GetJob(id);
  ASSERT_THAT(job, IsOk());
  job->pending_reason = "needs 2 slots; 1 free";
  ASSERT_THAT(store_->UpdateJob(*job), IsOk());
  SetState(id, v1::JOB_STATE_SCHEDULED, 2000, "placed");
  SetState(id, v1::JOB_STATE_RUNNING, 3000, "all ranks joined");
  SetState(id, v1::JOB_STATE_FAILED, 4000, "rank 1 exited with code 2");

  absl::StatusOr<std::vector<JobEvent>> events = store_->ListEvents(id);
  ASSERT_THAT(events, IsOk());
  ASSERT_THAT(*events, SizeIs(4));
  EXPECT_EQ((*events)[1].from_state, v1::JOB_STATE_QUEUED);
  EXPECT_EQ((*events)[1].to_state, v1::JOB_STATE_SCHEDULED);
  EXPECT_EQ((*events)[1].unix_ms, 2000);
  EXPECT_EQ((*events)[1].reason, "placed");
  EXPECT_EQ((*events)[2].from_state, v1::JOB_STATE_SCHEDULED);
  EXPECT_EQ((*events)[2].to_state, v1::JOB_STATE_RUNNING);
  EXPECT_EQ((*events)[3].from_state, v1::JOB_STATE_RUNNING);
  EXPECT_EQ((*events)[3].to_state, v1::JOB_STATE_FAILED);
  EXPECT_EQ((*events)[3].unix_ms, 4000);
  EXPECT_EQ((*events)[3].reason, "rank 1 exited with code 2");
}

TEST_P(StoreContractTest, UpdateUnknownJobIsNotFoundAndCreatesNothing) {
  JobRecord job = MakeJob("ghost");
  job.id = 999;

  EXPECT_THAT(store_->UpdateJob(job), StatusIs(absl::StatusCode::kNotFound));
  absl::StatusOr<std::vector<JobRecord>> jobs = store_->ListJobs();
  ASSERT_THAT(jobs, IsOk());
  EXPECT_THAT(*jobs, IsEmpty());
}

TEST_P(StoreContractTest, ListEventsOfUnknownJobIsNotFound) {
  EXPECT_THAT(store_->ListEvents(999), StatusIs(absl::StatusCode::kNotFound));
}

TEST_P(StoreContractTest, ListJobsIsNewestFirst) {
  int64_t a = Create(MakeJob("a"));
  int64_t b = Create(MakeJob("b"));
  int64_t c = Create(MakeJob("c"));

  absl::StatusOr<std::vector<JobRecord>> jobs = store_->ListJobs();
  ASSERT_THAT(jobs, IsOk());
  std::vector<int64_t> ids;
  for (const JobRecord& job : *jobs) ids.push_back(job.id);
  EXPECT_THAT(ids, ElementsAre(c, b, a));
}

TEST_P(StoreContractTest, ListActiveJobsExcludesTerminalStatesOldestFirst) {
  int64_t queued = Create(MakeJob("queued"));
  int64_t succeeded = Create(MakeJob("succeeded"));
  int64_t running = Create(MakeJob("running"));
  int64_t failed = Create(MakeJob("failed"));
  int64_t scheduled = Create(MakeJob("scheduled"));
  int64_t cancelled = Create(MakeJob("cancelled"));
  SetState(succeeded, v1::JOB_STATE_SUCCEEDED);
  SetState(running, v1::JOB_STATE_RUNNING);
  SetState(failed, v1::JOB_STATE_FAILED);
  SetState(scheduled, v1::JOB_STATE_SCHEDULED);
  SetState(cancelled, v1::JOB_STATE_CANCELLED);

  absl::StatusOr<std::vector<JobRecord>> active = store_->ListActiveJobs();
  ASSERT_THAT(active, IsOk());
  std::vector<int64_t> ids;
  for (const JobRecord& job : *active) ids.push_back(job.id);
  EXPECT_THAT(ids, ElementsAre(queued, running, scheduled));
  absl::StatusOr<std::vector<JobRecord>> all = store_->ListJobs();
  ASSERT_THAT(all, IsOk());
  EXPECT_THAT(*all, SizeIs(6));
}

TEST_P(StoreContractTest, RejectsInvalidJobState) {
  JobRecord job = MakeJob("bad");
  job.state = static_cast<JobState>(99);

  EXPECT_THAT(store_->CreateJob(job), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_P(StoreContractTest, UpsertWorkerInsertsThenReplacesByName) {
  ASSERT_THAT(store_->UpsertWorker({.name = "w2",
                                    .hostname = "host-b",
                                    .slots = 2,
                                    .device_kind = "cpu",
                                    .epoch = 1,
                                    .last_seen_unix_ms = 100}),
              IsOk());
  ASSERT_THAT(store_->UpsertWorker({.name = "w1",
                                    .hostname = "host-a",
                                    .slots = 4,
                                    .device_kind = "cuda",
                                    .epoch = 1,
                                    .last_seen_unix_ms = 100}),
              IsOk());
  ASSERT_THAT(store_->UpsertWorker({.name = "w2",
                                    .hostname = "host-b2",
                                    .slots = 8,
                                    .device_kind = "cpu",
                                    .epoch = 2,
                                    .last_seen_unix_ms = 900}),
              IsOk());

  absl::StatusOr<std::vector<WorkerRecord>> workers = store_->ListWorkers();
  ASSERT_THAT(workers, IsOk());
  ASSERT_THAT(*workers, SizeIs(2));
  EXPECT_EQ((*workers)[0].name, "w1");
  EXPECT_EQ((*workers)[0].hostname, "host-a");
  EXPECT_EQ((*workers)[0].slots, 4);
  EXPECT_EQ((*workers)[0].device_kind, "cuda");
  EXPECT_EQ((*workers)[1].name, "w2");
  EXPECT_EQ((*workers)[1].hostname, "host-b2");
  EXPECT_EQ((*workers)[1].slots, 8);
  EXPECT_EQ((*workers)[1].epoch, 2);
  EXPECT_EQ((*workers)[1].last_seen_unix_ms, 900);
}

TEST_P(StoreContractTest, PutRanksThenGetRanksOfOneAttemptOrderedByRank) {
  int64_t id = Create(MakeJob("job"));
  std::vector<RankRecord> ranks = {
      {.job_id = id,
       .attempt = 1,
       .rank = 1,
       .worker = "w2",
       .slot = 0,
       .state = RankState::kAssigned},
      {.job_id = id,
       .attempt = 1,
       .rank = 0,
       .worker = "w1",
       .slot = 3,
       .state = RankState::kRunning,
       .pid = 4242},
      {.job_id = id,
       .attempt = 2,
       .rank = 0,
       .worker = "w9",
       .slot = 1,
       .state = RankState::kAssigned},
  };
  ASSERT_THAT(store_->PutRanks(ranks), IsOk());

  absl::StatusOr<std::vector<RankRecord>> got = store_->GetRanks(id, 1);
  ASSERT_THAT(got, IsOk());
  ASSERT_THAT(*got, SizeIs(2));
  EXPECT_EQ((*got)[0].rank, 0);
  EXPECT_EQ((*got)[0].worker, "w1");
  EXPECT_EQ((*got)[0].slot, 3);
  EXPECT_EQ((*got)[0].state, RankState::kRunning);
  EXPECT_EQ((*got)[0].pid, 4242);
  EXPECT_EQ((*got)[1].rank, 1);
  EXPECT_EQ((*got)[1].worker, "w2");
  absl::StatusOr<std::vector<RankRecord>> other = store_->GetRanks(id, 2);
  ASSERT_THAT(other, IsOk());
  ASSERT_THAT(*other, SizeIs(1));
  EXPECT_EQ((*other)[0].worker, "w9");
}

TEST_P(StoreContractTest, PutRanksReplacesARankWithTheSameKey) {
  int64_t id = Create(MakeJob("job"));
  ASSERT_THAT(store_->PutRanks({{.job_id = id,
                                 .attempt = 1,
                                 .rank = 0,
                                 .worker = "w1",
                                 .slot = 0,
                                 .state = RankState::kRunning,
                                 .pid = 10}}),
              IsOk());
  ASSERT_THAT(store_->PutRanks({{.job_id = id,
                                 .attempt = 1,
                                 .rank = 0,
                                 .worker = "w1",
                                 .slot = 0,
                                 .state = RankState::kExited,
                                 .pid = 10,
                                 .exit_code = 3,
                                 .signal = 9,
                                 .has_result = true,
                                 .param_hash = "abc123",
                                 .test_accuracy = 0.875,
                                 .test_loss = 0.25}}),
              IsOk());

  absl::StatusOr<std::vector<RankRecord>> got = store_->GetRanks(id, 1);
  ASSERT_THAT(got, IsOk());
  ASSERT_THAT(*got, SizeIs(1));
  const RankRecord& rank = (*got)[0];
  EXPECT_EQ(rank.job_id, id);
  EXPECT_EQ(rank.attempt, 1);
  EXPECT_EQ(rank.state, RankState::kExited);
  EXPECT_EQ(rank.exit_code, 3);
  EXPECT_EQ(rank.signal, 9);
  EXPECT_TRUE(rank.has_result);
  EXPECT_EQ(rank.param_hash, "abc123");
  EXPECT_DOUBLE_EQ(rank.test_accuracy, 0.875);
  EXPECT_DOUBLE_EQ(rank.test_loss, 0.25);
}

TEST_P(StoreContractTest, AnEvalResultIsKeptWithItsRankByteForByte) {
  int64_t id = Create(MakeJob("eval"));
  // A serialized message holds any byte, zeros included.
  const std::string result("\x0a\x04test\x10\x00\x22\x08\xff\x00", 12);
  RankRecord evaluated{.job_id = id,
                       .attempt = 1,
                       .rank = 0,
                       .worker = "w1",
                       .state = RankState::kExited,
                       .has_result = true,
                       .test_accuracy = 0.5};
  evaluated.eval_result = result;
  RankRecord other{.job_id = id, .attempt = 1, .rank = 1, .worker = "w1"};
  ASSERT_THAT(store_->PutRanks({evaluated, other}), IsOk());
  absl::StatusOr<std::vector<RankRecord>> got = store_->GetRanks(id, 1);
  ASSERT_THAT(got, IsOk());
  ASSERT_THAT(*got, SizeIs(2));
  EXPECT_EQ((*got)[0].eval_result, result);
  EXPECT_EQ((*got)[1].eval_result, "");
}

TEST_P(StoreContractTest, PutRanksOfUnknownJobIsNotFound) {
  EXPECT_THAT(store_->PutRanks({{.job_id = 777,
                                 .attempt = 1,
                                 .rank = 0,
                                 .worker = "w1",
                                 .state = RankState::kAssigned}}),
              StatusIs(absl::StatusCode::kNotFound));
}

TEST_P(StoreContractTest, QueryMetricsReturnsRowsOrderedByStepRankName) {
  int64_t id = Create(MakeJob("job"));
  ASSERT_THAT(store_->AppendMetrics({
                  Metric(id, 1, 1, 20, "loss", 0.5),
                  Metric(id, 1, 0, 20, "loss", 0.6),
                  Metric(id, 1, 0, 10, "loss", 0.9),
                  Metric(id, 1, 0, 10, "accuracy", 0.1),
                  Metric(id, 1, 1, 10, "loss", 0.8),
              }),
              IsOk());

  absl::StatusOr<std::vector<MetricRow>> rows = store_->QueryMetrics({.job_id = id});
  ASSERT_THAT(rows, IsOk());
  EXPECT_THAT(
      Keys(*rows),
      ElementsAre(std::make_tuple(10, 0, "accuracy", 1),
                  std::make_tuple(10, 0, "loss", 1), std::make_tuple(10, 1, "loss", 1),
                  std::make_tuple(20, 0, "loss", 1), std::make_tuple(20, 1, "loss", 1)));
  const MetricRow& first_loss = (*rows)[1];
  EXPECT_EQ(first_loss.job_id, id);
  EXPECT_DOUBLE_EQ(first_loss.value, 0.9);
  EXPECT_EQ(first_loss.unix_ms, 5010);
}

TEST_P(StoreContractTest, QueryMetricsHonoursJobAfterStepNameAndLimit) {
  int64_t id = Create(MakeJob("job"));
  int64_t other = Create(MakeJob("other"));
  std::vector<MetricRow> rows;
  for (int64_t step = 1; step <= 5; ++step) {
    rows.push_back(Metric(id, 1, 0, step, "loss", 1.0 / step));
    rows.push_back(Metric(id, 1, 0, step, "images_per_s", 100.0 * step));
    rows.push_back(Metric(other, 1, 0, step, "loss", 9.0));
  }
  ASSERT_THAT(store_->AppendMetrics(rows), IsOk());

  absl::StatusOr<std::vector<MetricRow>> after =
      store_->QueryMetrics({.job_id = id, .after_step = 3});
  ASSERT_THAT(after, IsOk());
  EXPECT_THAT(Keys(*after), ElementsAre(std::make_tuple(4, 0, "images_per_s", 1),
                                        std::make_tuple(4, 0, "loss", 1),
                                        std::make_tuple(5, 0, "images_per_s", 1),
                                        std::make_tuple(5, 0, "loss", 1)));

  absl::StatusOr<std::vector<MetricRow>> named =
      store_->QueryMetrics({.job_id = id, .name = "loss"});
  ASSERT_THAT(named, IsOk());
  ASSERT_THAT(*named, SizeIs(5));
  for (const MetricRow& row : *named) {
    EXPECT_EQ(row.name, "loss");
    EXPECT_EQ(row.job_id, id);
  }

  absl::StatusOr<std::vector<MetricRow>> limited =
      store_->QueryMetrics({.job_id = id, .after_step = 1, .name = "loss", .limit = 2});
  ASSERT_THAT(limited, IsOk());
  EXPECT_THAT(Keys(*limited), ElementsAre(std::make_tuple(2, 0, "loss", 1),
                                          std::make_tuple(3, 0, "loss", 1)));

  absl::StatusOr<std::vector<MetricRow>> none =
      store_->QueryMetrics({.job_id = id, .after_step = 5});
  ASSERT_THAT(none, IsOk());
  EXPECT_THAT(*none, IsEmpty());
}

TEST_P(StoreContractTest, DuplicateMetricRowsAreIgnored) {
  int64_t id = Create(MakeJob("job"));
  ASSERT_THAT(store_->AppendMetrics(
                  {Metric(id, 1, 0, 10, "loss", 0.5), Metric(id, 1, 0, 10, "loss", 0.7)}),
              IsOk());
  // A retried report with a different value for the same key.
  ASSERT_THAT(store_->AppendMetrics(
                  {Metric(id, 1, 0, 10, "loss", 0.9), Metric(id, 1, 0, 11, "loss", 0.4)}),
              IsOk());

  absl::StatusOr<std::vector<MetricRow>> rows = store_->QueryMetrics({.job_id = id});
  ASSERT_THAT(rows, IsOk());
  ASSERT_THAT(*rows, SizeIs(2));
  EXPECT_DOUBLE_EQ((*rows)[0].value, 0.5);
  EXPECT_EQ((*rows)[1].step, 11);
}

TEST_P(StoreContractTest, SameStepOfAnotherAttemptIsKept) {
  int64_t id = Create(MakeJob("job"));
  ASSERT_THAT(store_->AppendMetrics(
                  {Metric(id, 2, 0, 10, "loss", 0.4), Metric(id, 1, 0, 10, "loss", 0.5)}),
              IsOk());

  absl::StatusOr<std::vector<MetricRow>> rows = store_->QueryMetrics({.job_id = id});
  ASSERT_THAT(rows, IsOk());
  EXPECT_THAT(Keys(*rows), ElementsAre(std::make_tuple(10, 0, "loss", 1),
                                       std::make_tuple(10, 0, "loss", 2)));
}

TEST_P(StoreContractTest, NanMetricValueRoundTrips) {
  int64_t id = Create(MakeJob("job"));
  ASSERT_THAT(store_->AppendMetrics({Metric(id, 1, 0, 1, "loss", std::nan("")),
                                     Metric(id, 1, 0, 2, "loss", INFINITY)}),
              IsOk());

  absl::StatusOr<std::vector<MetricRow>> rows = store_->QueryMetrics({.job_id = id});
  ASSERT_THAT(rows, IsOk());
  ASSERT_THAT(*rows, SizeIs(2));
  EXPECT_TRUE(std::isnan((*rows)[0].value));
  EXPECT_TRUE(std::isinf((*rows)[1].value));
}

TEST_P(StoreContractTest, AppendMetricsForUnknownJobFailsAndStoresNothing) {
  int64_t id = Create(MakeJob("job"));

  EXPECT_THAT(store_->AppendMetrics({Metric(id, 1, 0, 1, "loss", 0.5),
                                     Metric(424242, 1, 0, 1, "loss", 0.5)}),
              StatusIs(absl::StatusCode::kNotFound));
  absl::StatusOr<std::vector<MetricRow>> rows = store_->QueryMetrics({.job_id = id});
  ASSERT_THAT(rows, IsOk());
  EXPECT_THAT(*rows, IsEmpty());
}

TEST_P(StoreContractTest, QueryMetricsRejectsNonPositiveLimit) {
  int64_t id = Create(MakeJob("job"));

  EXPECT_THAT(store_->QueryMetrics({.job_id = id, .limit = 0}),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_P(StoreContractTest, ConcurrentCallersAllLand) {
  constexpr int kThreads = 4;
  constexpr int kJobsPerThread = 20;
  constexpr int kStepsPerJob = 10;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([this, t] {
      for (int j = 0; j < kJobsPerThread; ++j) {
        absl::StatusOr<int64_t> id =
            store_->CreateJob(MakeJob("job", absl::StrCat("req-", t, "-", j)));
        ASSERT_THAT(id, IsOk());
        std::vector<MetricRow> rows;
        for (int step = 0; step < kStepsPerJob; ++step) {
          rows.push_back(Metric(*id, 1, 0, step, "loss", step));
        }
        ASSERT_THAT(store_->AppendMetrics(rows), IsOk());
      }
    });
  }
  for (std::thread& thread : threads) thread.join();

  absl::StatusOr<std::vector<JobRecord>> jobs = store_->ListJobs();
  ASSERT_THAT(jobs, IsOk());
  ASSERT_THAT(*jobs, SizeIs(kThreads * kJobsPerThread));
  for (const JobRecord& job : *jobs) {
    absl::StatusOr<std::vector<MetricRow>> rows =
        store_->QueryMetrics({.job_id = job.id});
    ASSERT_THAT(rows, IsOk());
    EXPECT_THAT(*rows, SizeIs(kStepsPerJob));
  }
}

TEST_P(StoreContractTest, LogChunksAppendInOrderSkipRetriesAndRejectGaps) {
  const int64_t id = Create(MakeJob("logs", ""));
  LogChunk a{id, 1, 0, 0, "hello "};
  ASSERT_THAT(store_->AppendLog(a), IsOk());
  ASSERT_THAT(store_->AppendLog(a), IsOk());  // a retried chunk is not stored twice
  // Overlapping chunk: only the new tail is kept.
  ASSERT_THAT(store_->AppendLog(LogChunk{id, 1, 0, 3, "lo world\n"}), IsOk());
  absl::StatusOr<int64_t> end = store_->LogEnd(id, 1, 0);
  ASSERT_THAT(end, IsOk());
  EXPECT_EQ(*end, 12);
  EXPECT_EQ(store_->AppendLog(LogChunk{id, 1, 0, 20, "gap"}).code(),
            absl::StatusCode::kFailedPrecondition);

  absl::StatusOr<std::string> all = store_->ReadLog(id, 1, 0, 0, 1 << 20);
  ASSERT_THAT(all, IsOk());
  EXPECT_EQ(*all, "hello world\n");
  absl::StatusOr<std::string> tail = store_->ReadLog(id, 1, 0, 6, 3);
  ASSERT_THAT(tail, IsOk());
  EXPECT_EQ(*tail, "wor");
  // Other ranks and attempts are separate logs.
  absl::StatusOr<std::string> other = store_->ReadLog(id, 1, 1, 0, 100);
  ASSERT_THAT(other, IsOk());
  EXPECT_EQ(*other, "");
}

TEST_P(StoreContractTest, RankExitReasonRoundTrips) {
  const int64_t id = Create(MakeJob("reason", ""));
  RankRecord r;
  r.job_id = id;
  r.attempt = 1;
  r.rank = 0;
  r.worker = "w1";
  r.state = RankState::kExited;
  r.exit_code = 255;
  r.exit_reason = "worker w1 declared dead";
  ASSERT_THAT(store_->PutRanks({r}), IsOk());
  absl::StatusOr<std::vector<RankRecord>> got = store_->GetRanks(id, 1);
  ASSERT_THAT(got, IsOk());
  ASSERT_EQ(got->size(), 1u);
  EXPECT_EQ((*got)[0].exit_reason, "worker w1 declared dead");
}

// The Slurm allocations a coordinator submitted (slurm_pool_manager.h).
SlurmAllocationRecord Allocation(const std::string& slurm_job_id, int64_t submitted_ms) {
  SlurmAllocationRecord a;
  a.slurm_job_id = slurm_job_id;
  a.pool = "gpu";
  a.job_id = 7;
  a.owner = "alice";
  a.submitted_as = "alice";
  a.nodes = 2;
  a.state = "PD";
  a.credential_path = "/shared/slurm/slurm-gpu-job7-1.token";
  a.credential_id = 12;
  a.submitted_unix_ms = submitted_ms;
  return a;
}

TEST_P(StoreContractTest, SlurmAllocationsRoundTripReplaceByIdAndListOldestFirst) {
  ASSERT_THAT(store_->PutSlurmAllocation(Allocation("1235", 2000)), IsOk());
  SlurmAllocationRecord first = Allocation("1234", 1000);
  ASSERT_THAT(store_->PutSlurmAllocation(first), IsOk());
  first.state = "R";
  first.cancel_sent = true;
  first.credential_path.clear();
  first.credential_id = 0;
  first.running_since_unix_ms = 1500;
  ASSERT_THAT(store_->PutSlurmAllocation(first), IsOk());

  absl::StatusOr<std::vector<SlurmAllocationRecord>> got = store_->ListSlurmAllocations();
  ASSERT_THAT(got, IsOk());
  ASSERT_EQ(got->size(), 2u);
  const SlurmAllocationRecord& a = (*got)[0];
  EXPECT_EQ(a.slurm_job_id, "1234");
  EXPECT_EQ(a.pool, "gpu");
  EXPECT_EQ(a.job_id, 7);
  EXPECT_EQ(a.owner, "alice");
  EXPECT_EQ(a.submitted_as, "alice");
  EXPECT_EQ(a.nodes, 2);
  EXPECT_EQ(a.state, "R");
  EXPECT_TRUE(a.cancel_sent);
  EXPECT_EQ(a.credential_path, "");
  EXPECT_EQ(a.credential_id, 0);
  EXPECT_EQ(a.submitted_unix_ms, 1000);
  EXPECT_EQ(a.running_since_unix_ms, 1500);
  EXPECT_EQ((*got)[1].slurm_job_id, "1235");
  EXPECT_EQ((*got)[1].credential_id, 12);
  EXPECT_FALSE((*got)[1].cancel_sent);
}

TEST_P(StoreContractTest, DeletedSlurmAllocationIsGoneAndUnknownDeleteIsFine) {
  ASSERT_THAT(store_->PutSlurmAllocation(Allocation("1234", 1000)), IsOk());
  ASSERT_THAT(store_->DeleteSlurmAllocation("1234"), IsOk());
  EXPECT_THAT(store_->DeleteSlurmAllocation("1234"), IsOk());
  absl::StatusOr<std::vector<SlurmAllocationRecord>> got = store_->ListSlurmAllocations();
  ASSERT_THAT(got, IsOk());
  EXPECT_TRUE(got->empty());
  EXPECT_TRUE(absl::IsInvalidArgument(store_->PutSlurmAllocation(Allocation("", 1000))));
}

SearchRecord MakeSearch(const std::string& name, const std::string& client_request_id) {
  SearchRecord search;
  search.name = name;
  search.reason = "submitted";
  search.spec.set_name(name);
  search.spec.mutable_search()->set_method("asha");
  search.spec.mutable_search()->set_max_trials(27);
  *search.spec.mutable_base() = MakeSpec("base", 1);
  search.spec_yaml = "name: " + name + "\n";
  search.client_request_id = client_request_id;
  search.created_unix_ms = 1000;
  search.updated_unix_ms = 1000;
  search.owner = "alice";
  return search;
}

TEST_P(StoreContractTest, SearchesRoundTripDeduplicateByRequestIdAndUpdate) {
  absl::StatusOr<int64_t> first = store_->CreateSearch(MakeSearch("a", "req-a"));
  ASSERT_THAT(first, IsOk());
  absl::StatusOr<int64_t> again = store_->CreateSearch(MakeSearch("other", "req-a"));
  ASSERT_THAT(again, IsOk());
  EXPECT_EQ(*again, *first) << "a repeated request id stores nothing";
  absl::StatusOr<int64_t> second = store_->CreateSearch(MakeSearch("b", ""));
  ASSERT_THAT(second, IsOk());
  EXPECT_GT(*second, *first);

  absl::StatusOr<SearchRecord> got = store_->GetSearch(*first);
  ASSERT_THAT(got, IsOk());
  EXPECT_EQ(got->name, "a");
  EXPECT_EQ(got->state, v1::SEARCH_STATE_RUNNING);
  EXPECT_EQ(got->owner, "alice");
  EXPECT_EQ(got->client_request_id, "req-a");
  EXPECT_EQ(got->spec.search().max_trials(), 27);
  EXPECT_EQ(got->spec.base().trainer().model(), "vit-micro");
  EXPECT_EQ(got->spec_yaml, "name: a\n");

  got->state = v1::SEARCH_STATE_CANCELLED;
  got->reason = "cancelled by user";
  got->updated_unix_ms = 3000;
  got->name = "not updated";
  ASSERT_THAT(store_->UpdateSearch(*got), IsOk());
  absl::StatusOr<std::vector<SearchRecord>> all = store_->ListSearches();
  ASSERT_THAT(all, IsOk());
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ((*all)[0].id, *second) << "newest first";
  EXPECT_EQ((*all)[1].state, v1::SEARCH_STATE_CANCELLED);
  EXPECT_EQ((*all)[1].reason, "cancelled by user");
  EXPECT_EQ((*all)[1].updated_unix_ms, 3000);
  EXPECT_EQ((*all)[1].name, "a");

  EXPECT_THAT(store_->GetSearch(999), StatusIs(absl::StatusCode::kNotFound));
  got->id = 999;
  EXPECT_THAT(store_->UpdateSearch(*got), StatusIs(absl::StatusCode::kNotFound));
}

TEST_P(StoreContractTest, SearchJobsReplaceByTrialAndRungAndListInThatOrder) {
  absl::StatusOr<int64_t> id = store_->CreateSearch(MakeSearch("s", ""));
  ASSERT_THAT(id, IsOk());
  SearchJobRecord decided;
  decided.search_id = *id;
  decided.trial = 1;
  decided.rung = 0;
  decided.updated_unix_ms = 100;
  ASSERT_THAT(store_->PutSearchJob(decided), IsOk());
  SearchJobRecord done = decided;
  done.trial = 0;
  done.job_id = 7;
  done.outcome = SearchJobRecord::Outcome::kDone;
  done.job_state = v1::JOB_STATE_SUCCEEDED;
  done.metric = 0.875;
  done.steps = 300;
  ASSERT_THAT(store_->PutSearchJob(done), IsOk());
  SearchJobRecord failed = done;
  failed.rung = 1;
  failed.job_id = 9;
  failed.outcome = SearchJobRecord::Outcome::kFailed;
  failed.job_state = v1::JOB_STATE_FAILED;
  failed.metric.reset();
  failed.reason = "FAILED: rank 0 exited with code 1";
  ASSERT_THAT(store_->PutSearchJob(failed), IsOk());
  // The decided job, submitted: the same row, now with its job.
  decided.job_id = 8;
  ASSERT_THAT(store_->PutSearchJob(decided), IsOk());

  absl::StatusOr<std::vector<SearchJobRecord>> rows = store_->ListSearchJobs(*id);
  ASSERT_THAT(rows, IsOk());
  ASSERT_EQ(rows->size(), 3u);
  const SearchJobRecord& a = (*rows)[0];
  EXPECT_EQ(std::make_tuple(a.trial, a.rung, a.job_id),
            std::make_tuple(0, 0, int64_t{7}));
  EXPECT_EQ(a.outcome, SearchJobRecord::Outcome::kDone);
  EXPECT_EQ(a.job_state, v1::JOB_STATE_SUCCEEDED);
  ASSERT_TRUE(a.metric.has_value());
  EXPECT_EQ(*a.metric, 0.875);
  EXPECT_EQ(a.steps, 300);
  const SearchJobRecord& b = (*rows)[1];
  EXPECT_EQ(std::make_tuple(b.trial, b.rung, b.job_id),
            std::make_tuple(0, 1, int64_t{9}));
  EXPECT_EQ(b.outcome, SearchJobRecord::Outcome::kFailed);
  EXPECT_FALSE(b.metric.has_value());
  EXPECT_EQ(b.reason, "FAILED: rank 0 exited with code 1");
  const SearchJobRecord& c = (*rows)[2];
  EXPECT_EQ(std::make_tuple(c.trial, c.rung, c.job_id),
            std::make_tuple(1, 0, int64_t{8}));
  EXPECT_EQ(c.outcome, SearchJobRecord::Outcome::kRunning);
  EXPECT_EQ(c.job_state, v1::JOB_STATE_UNSPECIFIED);

  SearchJobRecord nan = done;
  nan.trial = 2;
  nan.metric = std::nan("");
  ASSERT_THAT(store_->PutSearchJob(nan), IsOk());
  rows = store_->ListSearchJobs(*id);
  ASSERT_THAT(rows, IsOk());
  ASSERT_TRUE(rows->back().metric.has_value()) << "a NaN metric is still a metric";
  EXPECT_TRUE(std::isnan(*rows->back().metric));

  SearchJobRecord orphan = done;
  orphan.search_id = *id + 100;
  EXPECT_THAT(store_->PutSearchJob(orphan), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(store_->ListSearchJobs(*id + 100), IsOk());
  EXPECT_TRUE(store_->ListSearchJobs(*id + 100)->empty());
}

INSTANTIATE_TEST_SUITE_P(Backends, StoreContractTest,
                         ::testing::Values(SqliteMemoryBackend(), SqliteFileBackend(),
                                           WrappedSqliteMemoryBackend()),
                         [](const ::testing::TestParamInfo<Backend>& info) {
                           return info.param.name;
                         });

// ---------------------------------------------------------------------------
// What only SqliteStore promises.

class SqliteStoreFileTest : public ::testing::Test {
 protected:
  std::string DbPath() const { return dir_.path() + "/tessera.db"; }

  TempDir dir_;
};

TEST_F(SqliteStoreFileTest, MigratesAVersionOneDatabaseKeepingItsData) {
  const std::string path = dir_.path() + "/old.db";
  const int64_t id = 1;
  {
    SqliteStore::Options v1;
    v1.migrate_to_version = 1;
    auto old = SqliteStore::Open(path, v1);
    ASSERT_THAT(old, IsOk());
    EXPECT_EQ(*(*old)->SchemaVersion(), 1);
  }
  {
    // A job row as a version-1 coordinator wrote it (today's code writes
    // columns that version 1 lacks).
    std::string spec;
    ASSERT_TRUE(MakeJob("from-v1", "req-old").spec.SerializeToString(&spec));
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    sqlite3_stmt* insert = nullptr;
    ASSERT_EQ(
        sqlite3_prepare_v2(db,
                           "INSERT INTO jobs (id, name, state, reason, pending_reason, "
                           "attempt, spec, spec_yaml, client_request_id, created_ms, "
                           "updated_ms) VALUES (1, 'from-v1', 'QUEUED', 'submitted', '', "
                           "0, ?1, '', 'req-old', 1, 1)",
                           -1, &insert, nullptr),
        SQLITE_OK);
    sqlite3_bind_blob(insert, 1, spec.data(), static_cast<int>(spec.size()),
                      SQLITE_TRANSIENT);
    EXPECT_EQ(sqlite3_step(insert), SQLITE_DONE);
    sqlite3_finalize(insert);
    sqlite3_close(db);
  }
  auto store = SqliteStore::Open(path);
  ASSERT_THAT(store, IsOk());
  EXPECT_EQ(*(*store)->SchemaVersion(), SqliteStore::kSchemaVersion);
  absl::StatusOr<JobRecord> job = (*store)->GetJob(id);
  ASSERT_THAT(job, IsOk());
  EXPECT_EQ(job->name, "from-v1");
  EXPECT_EQ(job->sweep_id, 0) << "version 3 columns take their defaults";
  // The tables added by versions 2 and 3 work.
  EXPECT_THAT((*store)->AppendLog(LogChunk{id, 1, 0, 0, "x"}), IsOk());
  SweepRecord sweep;
  sweep.name = "s";
  EXPECT_THAT((*store)->CreateSweep(sweep), IsOk());
}

TEST_F(SqliteStoreFileTest, JobStateCommitsFullySyncedAndMetricsNormally) {
  auto store = SqliteStore::Open(DbPath());
  ASSERT_THAT(store, IsOk());
  absl::StatusOr<int64_t> id = (*store)->CreateJob(MakeJob("durable", ""));
  ASSERT_THAT(id, IsOk());
  EXPECT_EQ(*(*store)->SynchronousLevel(), 2) << "job state needs synchronous=FULL";
  MetricRow row;
  row.job_id = *id;
  row.step = 1;
  row.name = "loss";
  ASSERT_THAT((*store)->AppendMetrics({row}), IsOk());
  EXPECT_EQ(*(*store)->SynchronousLevel(), 1) << "metrics batch with synchronous=NORMAL";
}

TEST_F(SqliteStoreFileTest, DataSurvivesReopen) {
  int64_t id = 0;
  {
    absl::StatusOr<std::unique_ptr<SqliteStore>> store = SqliteStore::Open(DbPath());
    ASSERT_THAT(store, IsOk());
    absl::StatusOr<int64_t> created = (*store)->CreateJob(MakeJob("durable", "req-d"));
    ASSERT_THAT(created, IsOk());
    id = *created;
    JobRecord job = MakeJob("durable", "req-d");
    job.id = id;
    job.state = v1::JOB_STATE_RUNNING;
    job.attempt = 1;
    job.updated_unix_ms = 3000;
    ASSERT_THAT((*store)->UpdateJob(job), IsOk());
    ASSERT_THAT((*store)->UpsertWorker({.name = "w1", .hostname = "h", .slots = 2}),
                IsOk());
    ASSERT_THAT((*store)->PutRanks({{.job_id = id,
                                     .attempt = 1,
                                     .rank = 0,
                                     .worker = "w1",
                                     .state = RankState::kRunning}}),
                IsOk());
    ASSERT_THAT((*store)->AppendMetrics({Metric(id, 1, 0, 1, "loss", 0.5)}), IsOk());
  }

  absl::StatusOr<std::unique_ptr<SqliteStore>> reopened = SqliteStore::Open(DbPath());
  ASSERT_THAT(reopened, IsOk());
  absl::StatusOr<JobRecord> job = (*reopened)->GetJob(id);
  ASSERT_THAT(job, IsOk());
  EXPECT_EQ(job->name, "durable");
  EXPECT_EQ(job->state, v1::JOB_STATE_RUNNING);
  EXPECT_EQ(job->attempt, 1);
  EXPECT_EQ(job->spec.trainer().batch_size(), 64);
  absl::StatusOr<std::vector<JobEvent>> events = (*reopened)->ListEvents(id);
  ASSERT_THAT(events, IsOk());
  EXPECT_THAT(*events, SizeIs(2));
  absl::StatusOr<std::vector<WorkerRecord>> workers = (*reopened)->ListWorkers();
  ASSERT_THAT(workers, IsOk());
  EXPECT_THAT(*workers, SizeIs(1));
  absl::StatusOr<std::vector<RankRecord>> ranks = (*reopened)->GetRanks(id, 1);
  ASSERT_THAT(ranks, IsOk());
  EXPECT_THAT(*ranks, SizeIs(1));
  absl::StatusOr<std::vector<MetricRow>> rows = (*reopened)->QueryMetrics({.job_id = id});
  ASSERT_THAT(rows, IsOk());
  EXPECT_THAT(*rows, SizeIs(1));
  // The request id still deduplicates after a restart.
  absl::StatusOr<int64_t> again = (*reopened)->CreateJob(MakeJob("retry", "req-d"));
  ASSERT_THAT(again, IsOk());
  EXPECT_EQ(*again, id);
  // Ids keep increasing after a restart.
  absl::StatusOr<int64_t> next = (*reopened)->CreateJob(MakeJob("next"));
  ASSERT_THAT(next, IsOk());
  EXPECT_GT(*next, id);
}

TEST_F(SqliteStoreFileTest, FileDatabaseRunsInWalMode) {
  absl::StatusOr<std::unique_ptr<SqliteStore>> store = SqliteStore::Open(DbPath());
  ASSERT_THAT(store, IsOk());
  ASSERT_THAT((*store)->CreateJob(MakeJob("job")), IsOk());

  absl::StatusOr<std::string> mode = (*store)->JournalMode();
  ASSERT_THAT(mode, IsOk());
  EXPECT_EQ(*mode, "wal");
  // A WAL database writes its commits to the -wal file beside it.
  EXPECT_TRUE(std::filesystem::exists(DbPath() + "-wal"));
}

// Heartbeats and metric batches, one commit each, as a coordinator writes
// them; returns the largest size the -wal file reached.
int64_t LargestJournalOver(SqliteStore& store, const std::string& path, int commits) {
  absl::StatusOr<int64_t> id = store.CreateJob(MakeJob("journal"));
  if (!id.ok()) return -1;
  int64_t largest = 0;
  for (int i = 0; i < commits; ++i) {
    WorkerRecord worker;
    worker.name = absl::StrCat("w", i % 2);
    worker.last_seen_unix_ms = i;
    if (!store.UpsertWorker(worker).ok()) return -1;
    std::vector<MetricRow> rows;
    for (const char* name : {"loss", "accuracy", "images_per_s", "lr"}) {
      rows.push_back(MetricRow{*id, 1, i % 2, i, name, 0.5, i});
    }
    if (!store.AppendMetrics(rows).ok()) return -1;
    std::error_code error;
    const std::uintmax_t size = std::filesystem::file_size(path + "-wal", error);
    if (!error) largest = std::max<int64_t>(largest, static_cast<int64_t>(size));
  }
  return largest;
}

TEST_F(SqliteStoreFileTest, LimitedJournalStaysWithinItsLimitAtEveryCommit) {
  // Unlimited, SQLite's WAL grows to 1,000 pages before it checkpoints: more
  // than a small disk's reserve.
  const std::string unlimited_path = dir_.path() + "/unlimited.db";
  absl::StatusOr<std::unique_ptr<SqliteStore>> unlimited =
      SqliteStore::Open(unlimited_path);
  ASSERT_THAT(unlimited, IsOk());
  EXPECT_GT(LargestJournalOver(**unlimited, unlimited_path, 200), 512 * 1024);

  absl::StatusOr<std::unique_ptr<SqliteStore>> store = SqliteStore::Open(DbPath());
  ASSERT_THAT(store, IsOk());
  constexpr int64_t kLimit = 16 * 1024;
  ASSERT_THAT((*store)->LimitJournal(kLimit), IsOk());
  // At most the limit plus the one transaction that crossed it.
  const int64_t largest = LargestJournalOver(**store, DbPath(), 200);
  EXPECT_GT(largest, 0);
  EXPECT_LE(largest, 2 * kLimit + 4 * 4096);
  // Nothing written is lost by the checkpoints.
  absl::StatusOr<std::vector<WorkerRecord>> workers = (*store)->ListWorkers();
  ASSERT_THAT(workers, IsOk());
  EXPECT_THAT(*workers, SizeIs(2));
}

TEST_F(SqliteStoreFileTest, SecondConnectionSeesCommittedWrites) {
  absl::StatusOr<std::unique_ptr<SqliteStore>> writer = SqliteStore::Open(DbPath());
  ASSERT_THAT(writer, IsOk());
  absl::StatusOr<std::unique_ptr<SqliteStore>> reader = SqliteStore::Open(DbPath());
  ASSERT_THAT(reader, IsOk());

  absl::StatusOr<int64_t> id = (*writer)->CreateJob(MakeJob("shared"));
  ASSERT_THAT(id, IsOk());

  absl::StatusOr<JobRecord> job = (*reader)->GetJob(*id);
  ASSERT_THAT(job, IsOk());
  EXPECT_EQ(job->name, "shared");
}

TEST_F(SqliteStoreFileTest, VersionElevenDatabaseKeepsItsJobsAndGainsTheShedCounts) {
  int64_t id = 0;
  {
    SqliteStore::Options v11;
    v11.migrate_to_version = 11;
    auto old = SqliteStore::Open(DbPath(), v11);
    ASSERT_THAT(old, IsOk());
    JobRecord job;
    job.name = "before";
    job.spec.set_world_size(1);
    auto created = (*old)->CreateJob(job);
    ASSERT_THAT(created, IsOk());
    id = *created;
  }
  auto store = SqliteStore::Open(DbPath());
  ASSERT_THAT(store, IsOk());
  EXPECT_EQ(*(*store)->SchemaVersion(), SqliteStore::kSchemaVersion);
  auto job = (*store)->GetJob(id);
  ASSERT_THAT(job, IsOk());
  EXPECT_EQ(job->metrics_not_stored, 0);
  job->metrics_not_stored = 1234;
  job->log_lines_not_stored = 56;
  ASSERT_THAT((*store)->UpdateJob(*job), IsOk());
  EXPECT_EQ((*store)->GetJob(id)->metrics_not_stored, 1234);
  EXPECT_EQ((*store)->GetJob(id)->log_lines_not_stored, 56);
}

TEST_F(SqliteStoreFileTest, VersionTenDatabaseGainsTheSlurmAllocationsTable) {
  {
    SqliteStore::Options v10;
    v10.migrate_to_version = 10;
    auto old = SqliteStore::Open(DbPath(), v10);
    ASSERT_THAT(old, IsOk());
    EXPECT_EQ(*(*old)->SchemaVersion(), 10);
    EXPECT_FALSE((*old)->ListSlurmAllocations().ok()) << "no table before version 11";
  }
  {
    auto store = SqliteStore::Open(DbPath());
    ASSERT_THAT(store, IsOk());
    EXPECT_EQ(*(*store)->SchemaVersion(), SqliteStore::kSchemaVersion);
    ASSERT_THAT((*store)->PutSlurmAllocation(Allocation("99", 5)), IsOk());
    EXPECT_EQ(*(*store)->SynchronousLevel(), 2) << "allocations commit fully synced";
  }
  // What a restarted coordinator reads back.
  auto reopened = SqliteStore::Open(DbPath());
  ASSERT_THAT(reopened, IsOk());
  absl::StatusOr<std::vector<SlurmAllocationRecord>> got =
      (*reopened)->ListSlurmAllocations();
  ASSERT_THAT(got, IsOk());
  ASSERT_EQ(got->size(), 1u);
  EXPECT_EQ((*got)[0].slurm_job_id, "99");
}

TEST_F(SqliteStoreFileTest, RecordsSchemaVersionOnceAcrossReopens) {
  for (int open = 0; open < 2; ++open) {
    absl::StatusOr<std::unique_ptr<SqliteStore>> store = SqliteStore::Open(DbPath());
    ASSERT_THAT(store, IsOk());
    absl::StatusOr<int> version = (*store)->SchemaVersion();
    ASSERT_THAT(version, IsOk());
    EXPECT_EQ(*version, SqliteStore::kSchemaVersion);
  }
}

TEST_F(SqliteStoreFileTest, FullDatabaseFailsWithResourceExhaustedAndKeepsData) {
  SqliteStore::Options options;
  options.max_size_bytes = 256 * 1024;
  absl::StatusOr<std::unique_ptr<SqliteStore>> store =
      SqliteStore::Open(DbPath(), options);
  ASSERT_THAT(store, IsOk());
  absl::StatusOr<int64_t> id = (*store)->CreateJob(MakeJob("job"));
  ASSERT_THAT(id, IsOk());

  constexpr int kBatch = 500;
  int64_t stored_batches = 0;
  absl::Status status;
  for (int batch = 0; batch < 1000 && status.ok(); ++batch) {
    std::vector<MetricRow> rows;
    for (int i = 0; i < kBatch; ++i) {
      rows.push_back(Metric(*id, 1, 0, int64_t{batch} * kBatch + i,
                            "a_fairly_long_metric_name_to_fill_pages", i));
    }
    status = (*store)->AppendMetrics(rows);
    if (status.ok()) ++stored_batches;
  }

  EXPECT_THAT(status, StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_GT(stored_batches, 0);
  // The failed batch left nothing behind and the store still serves reads.
  absl::StatusOr<std::vector<MetricRow>> rows =
      (*store)->QueryMetrics({.job_id = *id, .limit = 1000000});
  ASSERT_THAT(rows, IsOk());
  EXPECT_EQ(static_cast<int64_t>(rows->size()), stored_batches * kBatch);
  absl::StatusOr<JobRecord> job = (*store)->GetJob(*id);
  ASSERT_THAT(job, IsOk());
  EXPECT_EQ(job->name, "job");
}

TEST_F(SqliteStoreFileTest, OpenRejectsAFileThatIsNotADatabase) {
  {
    std::ofstream file(DbPath());
    file << std::string(4096, 'x');
  }
  std::filesystem::permissions(
      DbPath(), std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);

  EXPECT_THAT(SqliteStore::Open(DbPath()), StatusIs(absl::StatusCode::kDataLoss));
}

TEST_F(SqliteStoreFileTest, CreatesTheDatabaseOwnerOnlyAndRefusesOneOthersCanRead) {
  ASSERT_THAT(SqliteStore::Open(DbPath()), IsOk());
  EXPECT_EQ(std::filesystem::status(DbPath()).permissions(),
            std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  std::filesystem::permissions(DbPath(), std::filesystem::perms::group_read,
                               std::filesystem::perm_options::add);
  absl::StatusOr<std::unique_ptr<SqliteStore>> refused = SqliteStore::Open(DbPath());
  EXPECT_THAT(refused, StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(std::string(refused.status().message()), ::testing::HasSubstr("mode 0640"));
}

TEST_F(SqliteStoreFileTest, OpenInMissingDirectoryFails) {
  absl::StatusOr<std::unique_ptr<SqliteStore>> store =
      SqliteStore::Open(dir_.path() + "/no/such/dir/tessera.db");

  EXPECT_THAT(store, StatusIs(absl::StatusCode::kInternal));
}

TEST(SqliteStoreMemoryTest, MemoryDatabaseRecordsSchemaVersionWithoutWal) {
  absl::StatusOr<std::unique_ptr<SqliteStore>> store = SqliteStore::Open(":memory:");
  ASSERT_THAT(store, IsOk());

  absl::StatusOr<int> version = (*store)->SchemaVersion();
  ASSERT_THAT(version, IsOk());
  EXPECT_EQ(*version, SqliteStore::kSchemaVersion);
  absl::StatusOr<std::string> mode = (*store)->JournalMode();
  ASSERT_THAT(mode, IsOk());
  EXPECT_EQ(*mode, "memory");
}

}  // namespace
}  // namespace tessera
