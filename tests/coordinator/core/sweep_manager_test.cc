// SweepManager over a JobManager with a fake clock and an in-memory store: a
// simulated worker runs each point's ranks and reports their metrics. The
// report of a sweep whose jobs database retention has cut to their kept
// metrics is the report it was.
#include "coordinator/core/sweep_manager.h"

#include <future>

#include "absl/strings/str_cat.h"
#include "common/device_figures.h"
#include "common/metric_names.h"
#include "common/sweep_spec.h"
#include "coordinator/core/job_manager.h"
#include "coordinator/store/db_retention.h"
#include "coordinator/store/sqlite_store.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

namespace v1 = ::tessera::v1;
using ::testing::DoubleNear;
using ::testing::HasSubstr;

class SweepManagerTest : public ::testing::Test {
 protected:
  // Every state change the test caused followed the table in common/job_state.h.
  void TearDown() override {
    if (jobs_ != nullptr) EXPECT_EQ(jobs_->illegal_transitions(), 0);
  }

  void SetUp() override {
    auto store = SqliteStore::Open(":memory:");
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
    Start();
  }

  // (Re)creates the managers over the same store, as a coordinator restart does.
  void Start() {
    sweeps_.reset();
    jobs_.reset();
    writer_ = std::make_unique<StoreWriter>(store_.get());
    jobs_ = std::make_unique<JobManager>(store_.get(), writer_.get(), &clock_,
                                         JobManagerOptions());
    ASSERT_TRUE(jobs_->Recover().ok());
    sweeps_ = std::make_unique<SweepManager>(store_.get(), &jobs_->jobs(), &clock_,
                                             SpecLimits());
    ASSERT_TRUE(sweeps_->Recover().ok());
    v1::RegisterWorkerRequest req;
    req.set_name("w");
    req.set_slots(4);
    auto resp = jobs_->workers().RegisterWorker(req);
    ASSERT_TRUE(resp.ok()) << resp.status();
    epoch_ = resp->epoch();
  }

  v1::SweepSpec Spec(int max_parallel = 1) {
    auto spec = ParseSweepSpec(
        "name: study\n"
        "max_parallel: " +
        std::to_string(max_parallel) +
        "\n"
        "grid:\n  world_size: [1, 2]\n  batch_size: [16, 32]\n"
        "base:\n  trainer:\n    model: vit-micro\n    dataset: synthetic\n"
        "    epochs: 1\n    batch_size: 8\n");
    EXPECT_TRUE(spec.ok()) << spec.status();
    return *spec;
  }

  void Report(const v1::LaunchOrder& o,
              const std::vector<std::pair<std::string, double>>& values, int64_t step) {
    v1::ReportMetricsRequest req;
    req.set_job_id(o.job_id());
    req.set_attempt(o.attempt());
    req.set_rank(o.rank());
    for (const auto& [name, value] : values) {
      v1::MetricPoint* p = req.add_points();
      p->set_step(step);
      p->set_name(name);
      p->set_value(value);
    }
    std::promise<absl::Status> done;
    jobs_->ranks().ReportMetrics(req, [&done](absl::Status s) { done.set_value(s); });
    ASSERT_TRUE(done.get_future().get().ok());
  }

  // Runs every launched rank to a clean exit; each rank reports an epoch time
  // of `epoch_seconds(world_size)`, then whatever `also_report` adds. Returns
  // the number of jobs finished.
  int RunLaunched(
      const std::function<double(int)>& epoch_seconds,
      const std::function<void(const v1::LaunchOrder&)>& also_report = nullptr) {
    v1::HeartbeatRequest beat;
    beat.set_name("w");
    beat.set_epoch(epoch_);
    auto orders = jobs_->workers().Heartbeat(beat);
    EXPECT_TRUE(orders.ok()) << orders.status();
    std::set<int64_t> finished;
    for (const v1::LaunchOrder& o : orders->launch()) {
      const double t = epoch_seconds(o.world_size());
      Report(o, {{"steps_per_epoch", 10}}, 0);
      Report(o, {{"time_comm_ms", 25}, {"time_step_ms", 100}, {"images_per_sec", 50}},
             10);
      Report(o, {{"epoch_seconds", t}, {"test_accuracy", 0.5 + 0.01 * o.world_size()}},
             10);
      if (also_report) also_report(o);
      v1::LocalRank* r = beat.add_ranks();
      r->set_job_id(o.job_id());
      r->set_attempt(o.attempt());
      r->set_rank(o.rank());
      r->set_pid(100 + o.rank());
      r->set_exited(true);
      finished.insert(o.job_id());
    }
    EXPECT_TRUE(jobs_->workers().Heartbeat(beat).ok());
    return static_cast<int>(finished.size());
  }

  // tessctl eval JOB: runs a job of kind eval of `evaluated` whose rank 0
  // reports top-1 `top1`, as a result and as its eval_* metrics, to success;
  // returns its id.
  int64_t RunEvalJob(int64_t evaluated, double top1) {
    v1::JobSpec spec;
    spec.set_name("study-eval");
    spec.set_world_size(1);
    spec.set_kind("eval");
    spec.set_eval_of(evaluated);
    spec.mutable_trainer()->set_model("vit-micro");
    spec.mutable_trainer()->set_dataset("synthetic");
    spec.mutable_trainer()->set_eval_only(true);
    spec.mutable_trainer()->set_resume(true);
    spec.mutable_trainer()->set_checkpoint_dir("/ckpt/study");
    EXPECT_TRUE(jobs_->jobs().Submit(spec, "", absl::StrCat("eval-", evaluated)).ok());
    v1::HeartbeatRequest beat;
    beat.set_name("w");
    beat.set_epoch(epoch_);
    auto orders = jobs_->workers().Heartbeat(beat);
    EXPECT_TRUE(orders.ok());
    EXPECT_EQ(orders->launch_size(), 1);
    if (!orders.ok() || orders->launch_size() != 1) return 0;
    const v1::LaunchOrder& o = orders->launch(0);
    Report(o, {{"eval_top1", top1}, {"eval_samples", 100}}, 0);
    v1::ReportResultRequest result;
    result.set_job_id(o.job_id());
    result.set_attempt(o.attempt());
    result.set_test_accuracy(top1);
    result.mutable_eval()->set_top1(top1);
    result.mutable_eval()->set_samples(100);
    EXPECT_TRUE(jobs_->ranks().ReportResult(result).ok());
    v1::LocalRank* r = beat.add_ranks();
    r->set_job_id(o.job_id());
    r->set_attempt(o.attempt());
    r->set_pid(200);
    r->set_exited(true);
    EXPECT_TRUE(jobs_->workers().Heartbeat(beat).ok());
    return o.job_id();
  }

  FakeClock clock_;
  std::unique_ptr<SqliteStore> store_;
  std::unique_ptr<StoreWriter> writer_;
  std::unique_ptr<JobManager> jobs_;
  std::unique_ptr<SweepManager> sweeps_;
  int64_t epoch_ = 0;
};

TEST_F(SweepManagerTest, PointsRunOneAtATimeAndReportComputesSpeedupFromStoredTimes) {
  auto submitted = sweeps_->Submit(Spec(), "", "req-1");
  ASSERT_TRUE(submitted.ok()) << submitted.status();
  EXPECT_EQ(submitted->points(), 4);
  const int64_t id = submitted->sweep_id();

  // Epoch time 10 s on one rank, 6 s on two.
  auto times = [](int world) { return world == 1 ? 10.0 : 6.0; };
  for (int point = 0; point < 4; ++point) {
    auto sweep = sweeps_->Get(Caller::Admin(), id);
    ASSERT_TRUE(sweep.ok()) << sweep.status();
    int submitted_points = 0;
    for (const auto& p : sweep->points()) submitted_points += p.job_id() != 0;
    EXPECT_EQ(submitted_points, point + 1) << "max_parallel 1 keeps one point active";
    EXPECT_EQ(RunLaunched(times), 1);
    sweeps_->Tick();
  }
  auto sweep = sweeps_->Get(Caller::Admin(), id);
  ASSERT_TRUE(sweep.ok());
  EXPECT_EQ(sweep->state(), v1::SWEEP_STATE_SUCCEEDED);
  for (const auto& p : sweep->points()) {
    EXPECT_EQ(p.state(), v1::JOB_STATE_SUCCEEDED);
    auto job = jobs_->jobs().GetJob(Caller::Admin(), p.job_id());
    ASSERT_TRUE(job.ok());
    EXPECT_EQ(job->sweep_id(), id);
    EXPECT_EQ(job->sweep_point(), p.index());
  }

  auto report = sweeps_->Report(Caller::Admin(), id);
  ASSERT_TRUE(report.ok()) << report.status();
  ASSERT_EQ(report->rows_size(), 4);
  for (const v1::SweepReportRow& row : report->rows()) {
    EXPECT_EQ(row.runs(), 1);
    EXPECT_EQ(row.baseline_world_size(), 1);
    EXPECT_NEAR(row.comm_share(), 0.25, 1e-9);
    if (row.world_size() == 1) {
      EXPECT_NEAR(row.epoch_time_mean_s(), 10.0, 1e-9);
      EXPECT_NEAR(row.speedup(), 1.0, 1e-9);
      EXPECT_NEAR(row.efficiency(), 1.0, 1e-9);
    } else {
      EXPECT_NEAR(row.epoch_time_mean_s(), 6.0, 1e-9);
      EXPECT_NEAR(row.speedup(), 10.0 / 6.0, 1e-9);
      EXPECT_NEAR(row.efficiency(), 10.0 / 12.0, 1e-9);
      EXPECT_NEAR(row.images_per_sec(), 100.0, 1e-9);
    }
    EXPECT_NEAR(row.final_accuracy(), 0.5 + 0.01 * row.world_size(), 1e-9);
  }
}

TEST_F(SweepManagerTest, AnEvalJobsTopOneTakesThePlaceOfItsPointsLastEpoch) {
  auto submitted = sweeps_->Submit(Spec(/*max_parallel=*/4), "", "req-eval");
  ASSERT_TRUE(submitted.ok()) << submitted.status();
  const int64_t id = submitted->sweep_id();
  int finished = 0;
  for (int round = 0; round < 4 && finished < 4; ++round) {
    finished += RunLaunched([](int) { return 10.0; });
    sweeps_->Tick();
  }
  ASSERT_EQ(finished, 4);
  auto sweep = sweeps_->Get(Caller::Admin(), id);
  ASSERT_TRUE(sweep.ok());
  const int64_t evaluated = sweep->points(0).job_id();

  const int64_t eval_id = RunEvalJob(evaluated, 0.9);
  ASSERT_NE(eval_id, 0);
  auto eval_job = jobs_->jobs().GetJob(Caller::Admin(), eval_id);
  ASSERT_TRUE(eval_job.ok());
  ASSERT_EQ(eval_job->state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_DOUBLE_EQ(eval_job->ranks(0).eval().top1(), 0.9);

  auto report = sweeps_->Report(Caller::Admin(), id);
  ASSERT_TRUE(report.ok()) << report.status();
  int marked = 0;
  for (const v1::SweepReportRow& row : report->rows()) {
    const bool has_eval = row.job_ids(0) == evaluated;
    EXPECT_EQ(row.eval_runs(), has_eval ? 1 : 0);
    EXPECT_NEAR(row.final_accuracy(), has_eval ? 0.9 : 0.5 + 0.01 * row.world_size(),
                1e-9);
    marked += has_eval;
  }
  EXPECT_EQ(marked, 1);
}

TEST_F(SweepManagerTest, ReportGivesEachZeroStagesBytesPerRankAndItsOwnBaseline) {
  auto spec = ParseSweepSpec(
      "name: zero\nmax_parallel: 4\n"
      "grid:\n  world_size: [1, 2]\n  zero_stage: [0, 2]\n"
      "base:\n  trainer:\n    model: vit-micro\n    dataset: synthetic\n"
      "    epochs: 1\n    batch_size: 8\n");
  ASSERT_TRUE(spec.ok()) << spec.status();
  auto submitted = sweeps_->Submit(*spec, "", "req-zero");
  ASSERT_TRUE(submitted.ok()) << submitted.status();
  ASSERT_EQ(submitted->points(), 4);
  // Stage 2 shards both figures over the ranks (rank r holds r more bytes, so
  // that the mean over ranks shows); stage 0 at one rank reports neither.
  auto memory = [this](const v1::LaunchOrder& o) {
    const int n = o.world_size();
    if (o.trainer().zero_stage() == 0 && n == 1) return;
    const double shard = o.trainer().zero_stage() == 2 ? 1.0 / n : 1.0;
    Report(o,
           {{kOptimizerStateBytesMetricName, 8000 * shard + o.rank()},
            {kGradientBytesMetricName, 4000 * shard + o.rank()}},
           0);
  };
  auto times = [](int world) { return world == 1 ? 10.0 : 6.0; };
  int finished = 0;
  for (int round = 0; round < 4 && finished < 4; ++round) {
    finished += RunLaunched(times, memory);
    sweeps_->Tick();
  }
  ASSERT_EQ(finished, 4);

  auto report = sweeps_->Report(Caller::Admin(), submitted->sweep_id());
  ASSERT_TRUE(report.ok()) << report.status();
  ASSERT_EQ(report->rows_size(), 4);
  const int expected[4][2] = {{0, 1}, {0, 2}, {2, 1}, {2, 2}};  // (stage, world)
  for (int i = 0; i < 4; ++i) {
    const v1::SweepReportRow& row = report->rows(i);
    EXPECT_EQ(row.zero_stage(), expected[i][0]);
    EXPECT_EQ(row.world_size(), expected[i][1]);
    EXPECT_EQ(row.runs(), 1);
    // Each stage is its own baseline: no row is measured against another stage.
    EXPECT_EQ(row.baseline_world_size(), 1);
    EXPECT_NEAR(row.speedup(), row.world_size() == 1 ? 1.0 : 10.0 / 6.0, 1e-9);
  }
  EXPECT_FALSE(report->rows(0).has_optimizer_state_bytes_per_rank());
  EXPECT_FALSE(report->rows(0).has_gradient_bytes_per_rank());
  // Stage 0 at two ranks: every rank holds all of it (ranks 0 and 1: +0.5).
  EXPECT_NEAR(report->rows(1).optimizer_state_bytes_per_rank(), 8000.5, 1e-9);
  EXPECT_NEAR(report->rows(1).gradient_bytes_per_rank(), 4000.5, 1e-9);
  EXPECT_NEAR(report->rows(2).optimizer_state_bytes_per_rank(), 8000, 1e-9);
  EXPECT_NEAR(report->rows(2).gradient_bytes_per_rank(), 4000, 1e-9);
  EXPECT_NEAR(report->rows(3).optimizer_state_bytes_per_rank(), 4000.5, 1e-9);
  EXPECT_NEAR(report->rows(3).gradient_bytes_per_rank(), 2000.5, 1e-9);

  auto sweep = sweeps_->Get(Caller::Admin(), submitted->sweep_id());
  ASSERT_TRUE(sweep.ok());
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(sweep->points(i).zero_stage(), expected[i][0]);
    auto job = jobs_->jobs().GetJob(Caller::Admin(), sweep->points(i).job_id());
    ASSERT_TRUE(job.ok());
    EXPECT_EQ(job->spec().trainer().zero_stage(), expected[i][0]);
  }
}

TEST_F(SweepManagerTest,
       ReportGivesTheMeasuredPeakOfTheHighestRankBesideTheCountedBytes) {
  auto submitted = sweeps_->Submit(Spec(/*max_parallel=*/4), "", "req-peak");
  ASSERT_TRUE(submitted.ok()) << submitted.status();
  constexpr double kMiB = 1 << 20;
  // Batch 16: CPU ranks, whose peak RSS grows between reports and is larger on
  // rank 1. Batch 32 at one rank: a GPU rank, whose allocator peak is the
  // figure (its host RSS is not what the device held). Batch 32 at two ranks
  // reports no measured figure, only the counted bytes.
  auto memory = [this](const v1::LaunchOrder& o) {
    const int batch = o.trainer().batch_size();
    Report(o,
           {{kOptimizerStateBytesMetricName, 8 * kMiB},
            {kGradientBytesMetricName, 4 * kMiB},
            {kParameterBytesMetricName, (2 + o.rank()) * kMiB}},
           0);
    if (batch == 16) {
      Report(o, {{kPeakRssFigure, (100 + o.rank()) * kMiB}}, 5);
      Report(o, {{kPeakRssFigure, (300 + 50 * o.rank()) * kMiB}}, 10);
    } else if (o.world_size() == 1) {
      Report(o,
             {{kPeakRssFigure, 900 * kMiB},
              {kCudaPeakAllocatedFigure, 700 * kMiB},
              {kCudaAllocatedFigure, 200 * kMiB}},
             10);
    }
  };
  int finished = 0;
  for (int round = 0; round < 4 && finished < 4; ++round) {
    finished += RunLaunched([](int) { return 10.0; }, memory);
    sweeps_->Tick();
  }
  ASSERT_EQ(finished, 4);

  auto report = sweeps_->Report(Caller::Admin(), submitted->sweep_id());
  ASSERT_TRUE(report.ok()) << report.status();
  ASSERT_EQ(report->rows_size(), 4);
  int checked = 0;
  for (const v1::SweepReportRow& row : report->rows()) {
    SCOPED_TRACE(absl::StrCat("world ", row.world_size(), " batch ", row.batch_size()));
    // The counted bytes stay, whatever was measured.
    EXPECT_NEAR(row.optimizer_state_bytes_per_rank(), 8 * kMiB, 1e-9);
    EXPECT_NEAR(row.gradient_bytes_per_rank(), 4 * kMiB, 1e-9);
    // Mean over the ranks, as the other counted bytes.
    EXPECT_NEAR(row.parameter_bytes_per_rank(), (row.world_size() == 1 ? 2 : 2.5) * kMiB,
                1e-9);
    if (row.batch_size() == 16) {
      ASSERT_TRUE(row.has_peak_memory_bytes_per_rank());
      EXPECT_EQ(row.memory_source(), "rss");
      // The highest rank's newest peak: rank 1's 350 MiB at two ranks.
      EXPECT_NEAR(row.peak_memory_bytes_per_rank(),
                  (row.world_size() == 1 ? 300 : 350) * kMiB, 1e-9);
      ++checked;
    } else if (row.world_size() == 1) {
      ASSERT_TRUE(row.has_peak_memory_bytes_per_rank());
      EXPECT_EQ(row.memory_source(), "cuda");
      EXPECT_NEAR(row.peak_memory_bytes_per_rank(), 700 * kMiB, 1e-9);
      ++checked;
    } else {
      // Not reported is not zero bytes.
      EXPECT_FALSE(row.has_peak_memory_bytes_per_rank());
      EXPECT_EQ(row.memory_source(), "");
      ++checked;
    }
  }
  EXPECT_EQ(checked, 4);
}

TEST_F(SweepManagerTest, ReportIsTheSameAfterRetentionCutsItsJobsToTheKeptMetrics) {
  auto submitted = sweeps_->Submit(Spec(/*max_parallel=*/4), "", "req-retention");
  ASSERT_TRUE(submitted.ok()) << submitted.status();
  // Besides RunLaunched's figures, 50 intervals of the trainer's telemetry, of
  // which retention thins lr and time_data_ms and keeps what the report
  // reads, the sizes, and the run's time at its end.
  auto telemetry = [this](const v1::LaunchOrder& o) {
    for (int64_t step = 1; step <= 50; ++step) {
      Report(o,
             {{"lr", 0.1 / step},
              {"time_data_ms", 1.0 * step},
              {kTrainLossMetricName, 2.0 / step},
              {kImagesPerSecFigure, 40.0 + step % 7 + o.rank()},
              {kCommTimeMsMetricName, 10.0 + step % 5},
              {kStepTimeMsFigure, 100.0 + step % 3},
              {kPeakRssFigure, 1000.0 + step * (step % 2)}},
             step);
    }
    Report(o,
           {{kOptimizerStateBytesMetricName, 8000 + o.rank()},
            {kGradientBytesMetricName, 4000.0},
            {kParameterBytesMetricName, 2000.0}},
           0);
    Report(o, {{kTrainSecondsMetricName, 60.0}, {kTrainStepsMetricName, 50}}, 50);
  };
  int finished = 0;
  for (int round = 0; round < 4 && finished < 4; ++round) {
    finished += RunLaunched([](int world) { return 10.0 / world; }, telemetry);
    sweeps_->Tick();
  }
  ASSERT_EQ(finished, 4);
  auto sweep = sweeps_->Get(Caller::Admin(), submitted->sweep_id());
  ASSERT_TRUE(sweep.ok());
  const int64_t evaluated = sweep->points(0).job_id();
  const int64_t eval_id = RunEvalJob(evaluated, 0.9);
  ASSERT_NE(eval_id, 0);
  auto before = sweeps_->Report(Caller::Admin(), submitted->sweep_id());
  ASSERT_TRUE(before.ok()) << before.status();
  ASSERT_EQ(before->rows_size(), 4);
  for (const v1::SweepReportRow& row : before->rows()) ASSERT_EQ(row.runs(), 1);

  // A budget no database meets: every finished job is cut to its kept metrics.
  ASSERT_TRUE(writer_->Flush());
  DbRetention::Options options;
  options.retain_metrics = absl::InfiniteDuration();
  options.retain_logs = absl::InfiniteDuration();
  options.max_size_bytes = 1;
  DbRetention retention(store_.get(), &clock_, options);
  auto pass = retention.RunOnce();
  ASSERT_TRUE(pass.ok()) << pass.status();
  EXPECT_EQ(pass->jobs_thinned, 5);
  EXPECT_EQ(pass->jobs_pruned, 5);
  EXPECT_TRUE(pass->over_budget);
  auto rows = [this](int64_t job, const std::string& name) {
    auto points = store_->QueryMetrics({job, -1, name, 100000});
    EXPECT_TRUE(points.ok()) << points.status();
    return points.ok() ? points->size() : 0;
  };
  for (const v1::SweepPoint& p : sweep->points()) {
    EXPECT_EQ(rows(p.job_id(), "lr"), 0u);
    EXPECT_EQ(rows(p.job_id(), "time_data_ms"), 0u);
    EXPECT_EQ(rows(p.job_id(), kTrainLossMetricName), 50u * p.world_size());
    EXPECT_EQ(rows(p.job_id(), kTestAccuracyMetricName), 1u * p.world_size());
  }
  EXPECT_EQ(rows(eval_id, "eval_top1"), 1u);

  auto after = sweeps_->Report(Caller::Admin(), submitted->sweep_id());
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(*before, *after))
      << "before:\n"
      << before->DebugString() << "after:\n"
      << after->DebugString();
  EXPECT_EQ(after->rows(0).eval_runs(), 1);
}

TEST_F(SweepManagerTest, RetriedSubmitReturnsTheSameSweep) {
  auto first = sweeps_->Submit(Spec(), "", "same");
  auto second = sweeps_->Submit(Spec(), "", "same");
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_EQ(first->sweep_id(), second->sweep_id());
  auto list = sweeps_->List(Caller::Admin());
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(list->size(), 1u);
}

TEST_F(SweepManagerTest, SweepCarriesOnAfterCoordinatorRestartWithoutDuplicatePoints) {
  auto submitted = sweeps_->Submit(Spec(/*max_parallel=*/2), "", "");
  ASSERT_TRUE(submitted.ok());
  const int64_t id = submitted->sweep_id();
  writer_->Flush();
  Start();  // a new coordinator over the same database
  sweeps_->Tick();
  auto sweep = sweeps_->Get(Caller::Admin(), id);
  ASSERT_TRUE(sweep.ok());
  EXPECT_EQ(sweep->state(), v1::SWEEP_STATE_RUNNING);
  JobFilter filter;
  filter.sweep_id = id;
  auto jobs = jobs_->jobs().ListJobs(Caller::Admin(), filter);
  ASSERT_TRUE(jobs.ok());
  EXPECT_EQ(jobs->jobs.size(), 2u)
      << "the restart must not submit the first points again";

  auto times = [](int world) { return 5.0 / world; };
  for (int round = 0;
       round < 4 && sweeps_->Get(Caller::Admin(), id)->state() == v1::SWEEP_STATE_RUNNING;
       ++round) {
    RunLaunched(times);
    sweeps_->Tick();
  }
  EXPECT_EQ(sweeps_->Get(Caller::Admin(), id)->state(), v1::SWEEP_STATE_SUCCEEDED);
  jobs = jobs_->jobs().ListJobs(Caller::Admin(), filter);
  EXPECT_EQ(jobs->jobs.size(), 4u);
}

TEST_F(SweepManagerTest, EveryPointBelongsToTheSweepsOwnerAcrossARestart) {
  auto submitted = sweeps_->Submit(Spec(/*max_parallel=*/2), "", "", "alice");
  ASSERT_TRUE(submitted.ok()) << submitted.status();
  const int64_t id = submitted->sweep_id();
  writer_->Flush();
  Start();  // the later points are submitted by a new coordinator
  for (int round = 0;
       round < 4 && sweeps_->Get(Caller::Admin(), id)->state() == v1::SWEEP_STATE_RUNNING;
       ++round) {
    RunLaunched([](int) { return 1.0; });
    sweeps_->Tick();
  }
  JobFilter filter;
  filter.sweep_id = id;
  auto jobs = jobs_->jobs().ListJobs(Caller::Admin(), filter);
  ASSERT_TRUE(jobs.ok());
  ASSERT_EQ(jobs->jobs.size(), 4u);
  for (const auto& job : jobs->jobs)
    EXPECT_EQ(job.owner(), "alice") << "job " << job.id();
}

TEST_F(SweepManagerTest, CancelStopsActivePointsAndSubmitsNoMore) {
  auto submitted = sweeps_->Submit(Spec(), "", "");
  ASSERT_TRUE(submitted.ok());
  const int64_t id = submitted->sweep_id();
  auto state = sweeps_->Cancel(Caller::Admin(), id);
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_EQ(*state, v1::SWEEP_STATE_CANCELLED);
  sweeps_->Tick();
  auto sweep = sweeps_->Get(Caller::Admin(), id);
  ASSERT_TRUE(sweep.ok());
  EXPECT_EQ(sweep->state(), v1::SWEEP_STATE_CANCELLED);
  int submitted_points = 0;
  for (const auto& p : sweep->points()) {
    if (p.job_id() == 0) continue;
    ++submitted_points;
    EXPECT_EQ(p.state(), v1::JOB_STATE_CANCELLED);
  }
  EXPECT_EQ(submitted_points, 1);
  EXPECT_TRUE(absl::IsFailedPrecondition(sweeps_->Cancel(Caller::Admin(), id).status()));
}

TEST_F(SweepManagerTest, FailedPointMakesTheSweepFailWithCount) {
  auto submitted = sweeps_->Submit(Spec(/*max_parallel=*/4), "", "");
  ASSERT_TRUE(submitted.ok());
  const int64_t id = submitted->sweep_id();
  auto sweep = sweeps_->Get(Caller::Admin(), id);
  ASSERT_TRUE(sweep.ok());
  ASSERT_TRUE(jobs_->jobs().CancelJob(Caller::Admin(), sweep->points(0).job_id()).ok());
  // Four slots cannot hold every point at once: run them in rounds.
  for (int round = 0; round < 4; ++round) {
    RunLaunched([](int) { return 1.0; });
    sweeps_->Tick();
  }
  sweep = sweeps_->Get(Caller::Admin(), id);
  EXPECT_EQ(sweep->state(), v1::SWEEP_STATE_FAILED);
  EXPECT_THAT(sweep->reason(), HasSubstr("1 of 4 points did not succeed"));
}

TEST_F(SweepManagerTest, InvalidSpecIsRejectedAndNothingStored) {
  v1::SweepSpec spec = Spec();
  spec.mutable_grid()->add_scaling("sideways");
  auto submitted = sweeps_->Submit(spec, "", "");
  EXPECT_TRUE(absl::IsInvalidArgument(submitted.status()));
  EXPECT_TRUE(sweeps_->List(Caller::Admin())->empty());
}

}  // namespace
}  // namespace tessera
