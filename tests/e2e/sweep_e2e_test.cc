// End-to-end sweeps: a real tessera-coordinator, two tessera-worker daemons with
// one CPU slot each and real tessera-train ranks on 127.0.0.1. A 2 x 2 sweep on
// synthetic data runs to completion and its report is checked against the
// stored metrics; a cancelled sweep stops its running point and submits no
// more.
#include <chrono>
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/job_spec.h"
#include "common/sweep_spec.h"
#include "gtest/gtest.h"
#include "tests/e2e/cluster_fixture.h"
#include "tests/testing/test_util.h"

namespace tessera {
namespace {

// Per-call deadline for the quick unary RPCs.
constexpr auto kRpcDeadline = std::chrono::seconds(10);

// World size 1 and 2 x per-rank batch 16 and 32, strong scaling, one point at
// a time. `trainer` is the base trainer config, indented as in the YAML.
std::string SweepYaml(const std::string& name, const std::string& trainer) {
  return absl::StrCat("name: ", name, R"(
max_parallel: 1
grid:
  world_size: [1, 2]
  batch_size: [16, 32]
  scaling: [strong]
base:
  trainer:
    model: vit-micro
    dataset: synthetic
    device: cpu
    threads: 1
    seed: 3
)",
                      trainer);
}

void SetDeadline(grpc::ClientContext& ctx) {
  ctx.set_deadline(std::chrono::system_clock::now() + kRpcDeadline);
}

bool SweepEnded(v1::SweepState s) {
  return s == v1::SWEEP_STATE_SUCCEEDED || s == v1::SWEEP_STATE_FAILED ||
         s == v1::SWEEP_STATE_CANCELLED;
}

class SweepTest : public ClusterTest {
 protected:
  void StartCluster() {
    StartCoordinator();
    StartWorker("w1", port_);
    StartWorker("w2", port_);
    WaitForWorkers(2);
  }

  // Submits the sweep through the generated stub, as tessctl does.
  int64_t SubmitSweep(const std::string& yaml, int expected_points) {
    absl::StatusOr<v1::SweepSpec> spec = ParseAndValidateSweepSpec(yaml, SpecLimits{});
    EXPECT_TRUE(spec.ok()) << spec.status();
    if (!spec.ok()) return 0;
    v1::SubmitSweepRequest req;
    *req.mutable_spec() = *spec;
    req.set_spec_yaml(yaml);
    req.set_client_request_id(absl::StrCat("sweep-e2e-", spec->name()));
    v1::SubmitSweepResponse resp;
    grpc::ClientContext ctx;
    SetDeadline(ctx);
    grpc::Status s = jobs_->SubmitSweep(&ctx, req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(resp.points(), expected_points);
    return resp.sweep_id();
  }

  v1::Sweep GetSweep(int64_t id) {
    grpc::ClientContext ctx;
    SetDeadline(ctx);
    v1::GetSweepRequest req;
    req.set_sweep_id(id);
    v1::GetSweepResponse resp;
    grpc::Status s = jobs_->GetSweep(&ctx, req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp.sweep();
  }

  std::vector<v1::Job> SweepJobs(int64_t sweep_id) {
    grpc::ClientContext ctx;
    SetDeadline(ctx);
    v1::ListJobsRequest req;
    req.set_sweep_id(sweep_id);
    v1::ListJobsResponse resp;
    grpc::Status s = jobs_->ListJobs(&ctx, req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return {resp.jobs().begin(), resp.jobs().end()};
  }

  // One line per point: index, coordinates, job and its state.
  static std::string Progress(const v1::Sweep& sweep) {
    std::string out =
        absl::StrCat("sweep ", sweep.id(), " ", v1::SweepState_Name(sweep.state()), " (",
                     sweep.reason(), ")\n");
    for (const v1::SweepPoint& p : sweep.points()) {
      absl::StrAppend(&out, "  point ", p.index(), " world ", p.world_size(), " batch ",
                      p.batch_size(), ": job ", p.job_id(), " ",
                      v1::JobState_Name(p.state()), "\n");
    }
    return out;
  }

  // Polls GetSweep every second until the sweep has ended or `timeout` runs out.
  v1::Sweep WaitForSweepEnd(int64_t id, absl::Duration timeout) {
    const absl::Time until = absl::Now() + timeout;
    v1::Sweep sweep;
    while (absl::Now() < until) {
      sweep = GetSweep(id);
      if (SweepEnded(sweep.state())) return sweep;
      std::this_thread::sleep_for(std::chrono::seconds(1));
    }
    ADD_FAILURE() << "sweep " << id << " did not end within " << timeout << "\n"
                  << Progress(sweep) << DumpLogs();
    return sweep;
  }

  // The named metric's rank 0 values of the job's final attempt, in step order.
  std::vector<double> Rank0Values(const v1::Job& job, const std::string& name) {
    grpc::ClientContext ctx;
    SetDeadline(ctx);
    v1::GetMetricsRequest req;
    req.set_job_id(job.id());
    req.set_name(name);
    req.set_limit(100000);
    v1::GetMetricsResponse resp;
    grpc::Status s = jobs_->GetMetrics(&ctx, req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    std::vector<double> values;
    for (const v1::MetricPoint& p : resp.points()) {
      if (p.name() == name && p.rank() == 0 && p.attempt() == job.attempt()) {
        values.push_back(p.value());
      }
    }
    return values;
  }

  // A run's epoch time as docs/api.md defines it: the mean of rank 0's
  // epoch_seconds, or train_seconds * steps_per_epoch / train_steps when no
  // whole epoch ran. 0 when neither is stored.
  double StoredEpochTime(const v1::Job& job) {
    const std::vector<double> epochs = Rank0Values(job, "epoch_seconds");
    if (!epochs.empty()) {
      double sum = 0;
      for (double e : epochs) sum += e;
      return sum / static_cast<double>(epochs.size());
    }
    const std::vector<double> train = Rank0Values(job, "train_seconds");
    const std::vector<double> steps = Rank0Values(job, "train_steps");
    const std::vector<double> per_epoch = Rank0Values(job, "steps_per_epoch");
    if (train.empty() || steps.empty() || per_epoch.empty() || steps.back() <= 0) {
      return 0;
    }
    return train.back() * per_epoch.back() / steps.back();
  }

  // Waits until no trainer of this cluster, of any sweep point, is left.
  bool NoTrainersWithin(absl::Duration timeout) {
    const std::vector<std::string> needle = {
        absl::StrCat("--coordinator=127.0.0.1:", port_)};
    const absl::Time until = absl::Now() + timeout;
    while (absl::Now() < until) {
      if (testing::FindProcesses(needle).empty()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return testing::FindProcesses(needle).empty();
  }
};

void ExpectRelativelyNear(double actual, double expected, const std::string& what) {
  ASSERT_NE(expected, 0) << what;
  const double relative_error = std::abs(actual - expected) / std::abs(expected);
  EXPECT_LE(relative_error, 1e-9)
      << what << ": reported " << actual << ", recomputed " << expected;
}

TEST_F(SweepTest, TwoByTwoSweepSucceedsWithReportFromStoredTimes) {
  ASSERT_NO_FATAL_FAILURE(StartCluster());
  // Strong scaling over 1536 images: 96 / 48 steps per epoch at batch 16 and
  // world 1 / 2, 48 / 24 at batch 32.
  const int64_t id = SubmitSweep(SweepYaml("e2e-2x2", R"(    epochs: 1
    train_subset: 1536
    test_subset: 256
    metrics_every: 5
)"),
                                 4);
  ASSERT_GT(id, 0);

  const v1::Sweep sweep = WaitForSweepEnd(id, absl::Minutes(5));
  ASSERT_EQ(sweep.state(), v1::SWEEP_STATE_SUCCEEDED) << Progress(sweep) << DumpLogs();
  ASSERT_EQ(sweep.points_size(), 4);

  // Every point's job is recorded as that point, with the point's coordinates.
  std::map<int64_t, v1::Job> jobs;  // by job id
  std::set<std::pair<int32_t, int32_t>> coordinates;
  for (const v1::SweepPoint& p : sweep.points()) {
    ASSERT_GT(p.job_id(), 0) << Progress(sweep);
    EXPECT_EQ(p.state(), v1::JOB_STATE_SUCCEEDED) << Progress(sweep);
    const v1::Job job = Get(p.job_id());
    EXPECT_EQ(job.state(), v1::JOB_STATE_SUCCEEDED) << job.reason();
    EXPECT_EQ(job.sweep_id(), id);
    EXPECT_EQ(job.sweep_point(), p.index());
    EXPECT_EQ(job.spec().world_size(), p.world_size());
    EXPECT_EQ(job.spec().trainer().batch_size(), p.batch_size());
    EXPECT_EQ(job.spec().trainer().scaling(), "strong");
    coordinates.insert({p.world_size(), p.batch_size()});
    jobs[job.id()] = job;
  }
  EXPECT_EQ(coordinates,
            (std::set<std::pair<int32_t, int32_t>>{{1, 16}, {2, 16}, {1, 32}, {2, 32}}));
  ASSERT_EQ(jobs.size(), 4u) << "every point must have its own job";

  // The sweep filter lists exactly the sweep's four jobs.
  const std::vector<v1::Job> listed = SweepJobs(id);
  std::set<int64_t> listed_ids;
  for (const v1::Job& j : listed) {
    listed_ids.insert(j.id());
    EXPECT_EQ(j.sweep_id(), id);
  }
  EXPECT_EQ(listed.size(), 4u);
  std::set<int64_t> point_ids;
  for (const auto& [job_id, job] : jobs) point_ids.insert(job_id);
  EXPECT_EQ(listed_ids, point_ids);

  grpc::ClientContext ctx;
  SetDeadline(ctx);
  v1::GetSweepReportRequest req;
  req.set_sweep_id(id);
  v1::GetSweepReportResponse resp;
  grpc::Status s = jobs_->GetSweepReport(&ctx, req, &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  const v1::SweepReport& report = resp.report();
  EXPECT_EQ(report.sweep_id(), id);
  ASSERT_EQ(report.rows_size(), 4) << report.DebugString();

  // Epoch time per (world size, batch size), recomputed from the stored metrics.
  std::map<std::pair<int32_t, int32_t>, double> stored_time;
  for (const v1::SweepReportRow& row : report.rows()) {
    SCOPED_TRACE(
        absl::StrCat("row world ", row.world_size(), " batch ", row.batch_size()));
    ASSERT_EQ(row.job_ids_size(), 1);
    ASSERT_TRUE(jobs.contains(row.job_ids(0)));
    const v1::Job& job = jobs[row.job_ids(0)];
    EXPECT_EQ(job.spec().world_size(), row.world_size());
    EXPECT_EQ(job.spec().trainer().batch_size(), row.batch_size());
    const double t = StoredEpochTime(job);
    ASSERT_GT(t, 0) << "job " << job.id() << " stored no epoch time";
    stored_time[{row.world_size(), row.batch_size()}] = t;
  }
  ASSERT_EQ(stored_time.size(), 4u);

  for (const v1::SweepReportRow& row : report.rows()) {
    const std::string where =
        absl::StrCat("world ", row.world_size(), " batch ", row.batch_size());
    SCOPED_TRACE(where);
    EXPECT_EQ(row.runs(), 1);
    EXPECT_EQ(row.scaling(), "strong");
    EXPECT_GT(row.epoch_time_mean_s(), 0);
    EXPECT_EQ(row.epoch_time_std_s(), 0) << "one run has no spread";
    ExpectRelativelyNear(row.epoch_time_mean_s(),
                         stored_time[{row.world_size(), row.batch_size()}],
                         "epoch_time_mean_s");
    EXPECT_EQ(row.baseline_world_size(), 1);
    const double speedup = stored_time[{1, row.batch_size()}] /
                           stored_time[{row.world_size(), row.batch_size()}];
    ExpectRelativelyNear(row.speedup(), speedup, "speedup");
    if (row.world_size() == 1) {
      EXPECT_DOUBLE_EQ(row.speedup(), 1.0);
      EXPECT_DOUBLE_EQ(row.efficiency(), 1.0);
    } else {
      ExpectRelativelyNear(row.efficiency(), speedup / 2, "efficiency");
    }
    EXPECT_GE(row.comm_share(), 0);
    EXPECT_LE(row.comm_share(), 1);
    EXPECT_GT(row.final_accuracy(), 0);
    EXPECT_LE(row.final_accuracy(), 1);
    EXPECT_GT(row.total_time_mean_s(), 0);
    EXPECT_GT(row.images_per_sec(), 0);
    // CPU ranks: the memory per rank is their measured peak RSS, which holds
    // more than the optimizer state and gradients the trainer counts.
    ASSERT_TRUE(row.has_peak_memory_bytes_per_rank());
    EXPECT_EQ(row.memory_source(), "rss");
    EXPECT_GT(row.peak_memory_bytes_per_rank(),
              row.optimizer_state_bytes_per_rank() + row.gradient_bytes_per_rank());
  }
}

TEST_F(SweepTest, CancelledSweepStopsItsRunningPointAndSubmitsNoMore) {
  ASSERT_NO_FATAL_FAILURE(StartCluster());
  // Points that train until stopped.
  const int64_t id = SubmitSweep(SweepYaml("e2e-cancel", R"(    epochs: 1000
    train_subset: 512
    test_subset: 64
    metrics_every: 5
)"),
                                 4);
  ASSERT_GT(id, 0);

  // Wait for the first point's job to train.
  int64_t job_id = 0;
  const absl::Time until = absl::Now() + absl::Minutes(1);
  while (absl::Now() < until && job_id == 0) {
    const v1::Sweep sweep = GetSweep(id);
    if (sweep.points_size() > 0) job_id = sweep.points(0).job_id();
    if (job_id == 0) std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  ASSERT_GT(job_id, 0) << Progress(GetSweep(id)) << DumpLogs();
  ASSERT_NO_FATAL_FAILURE(WaitForTraining(job_id, /*world_size=*/1, absl::Minutes(2)));
  ASSERT_FALSE(TrainerPids(job_id).empty()) << "the first point is not training";

  {
    grpc::ClientContext ctx;
    SetDeadline(ctx);
    v1::CancelSweepRequest req;
    req.set_sweep_id(id);
    v1::CancelSweepResponse resp;
    grpc::Status s = jobs_->CancelSweep(&ctx, req, &resp);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(resp.state(), v1::SWEEP_STATE_CANCELLED);
  }

  const v1::Job job = WaitForEnd(job_id, absl::Seconds(30));
  EXPECT_EQ(job.state(), v1::JOB_STATE_CANCELLED) << job.reason();
  EXPECT_TRUE(NoTrainersWithin(absl::Seconds(10)))
      << "trainer processes of the sweep survive\n"
      << DumpLogs();

  // The coordinator's monitor ticks many times in 3 s; a sweep that went on
  // would submit point 1 as soon as point 0 ended.
  const absl::Time watch_until = absl::Now() + absl::Seconds(3);
  std::vector<v1::Job> listed;
  do {
    listed = SweepJobs(id);
    ASSERT_EQ(listed.size(), 1u) << "a point was submitted after the cancel\n"
                                 << Progress(GetSweep(id));
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  } while (absl::Now() < watch_until);
  EXPECT_EQ(listed[0].id(), job_id);

  const v1::Sweep sweep = GetSweep(id);
  EXPECT_EQ(sweep.state(), v1::SWEEP_STATE_CANCELLED) << Progress(sweep);
  EXPECT_EQ(sweep.reason(), "cancelled by user");
  ASSERT_EQ(sweep.points_size(), 4);
  EXPECT_EQ(sweep.points(0).job_id(), job_id);
  EXPECT_EQ(sweep.points(0).state(), v1::JOB_STATE_CANCELLED);
  for (int i = 1; i < sweep.points_size(); ++i) {
    EXPECT_EQ(sweep.points(i).job_id(), 0) << "point " << i << "\n" << Progress(sweep);
  }
  EXPECT_TRUE(NoTrainersWithin(absl::Seconds(1)));

  // A second cancel finds the sweep ended.
  grpc::ClientContext ctx;
  SetDeadline(ctx);
  v1::CancelSweepRequest req;
  req.set_sweep_id(id);
  v1::CancelSweepResponse resp;
  EXPECT_EQ(jobs_->CancelSweep(&ctx, req, &resp).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
}

}  // namespace
}  // namespace tessera
