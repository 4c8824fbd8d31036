// The /metrics page: what it shows and how it is bounded (RenderMetricsPage
// over a ClusterMetrics), and who may read it, through a coordinator in
// process. Page sizes print FIGURE lines.
#include "coordinator/api/metrics_page.h"

#include <iostream>
#include <limits>
#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/device_figures.h"
#include "common/search_spec.h"
#include "coordinator/coordinator_server.h"
#include "coordinator/core/auth.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "tests/testing/promtool.h"
#include "tests/testing/test_util.h"

namespace tessera {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// Skips, or fails where TESSERA_REQUIRE_PROMTOOL=1, when promtool is missing;
// otherwise checks `page` with `promtool check metrics`.
void ExpectPromtoolAccepts(const std::string& page) {
  testing::PromtoolResult checked = testing::RunPromtool("check metrics", page);
  EXPECT_EQ(checked.exit_code, 0) << checked.output << "\n--- page ---\n" << page;
}

ClusterMetrics SampleMetrics() {
  ClusterMetrics m;
  m.jobs_by_state = {{"queued", 2}, {"scheduled", 0}, {"running", 1}};
  m.jobs_ended = {{"succeeded", 3}, {"failed", 1}, {"cancelled", 0}};
  m.oldest_queued_seconds = 42.5;
  m.workers_by_state = {
      {"alive", 2}, {"suspect", 0}, {"dead", 1}, {"draining", 0}, {"drained", 0}};
  m.slots["cpu"] = {4, 1};
  m.slots["gpu"] = {8, 6};
  GpuReading gpu{.id = "GPU-fake-1",
                 .utilization_percent = 87.5,
                 .memory_used_bytes = int64_t{2} << 30,
                 .memory_total_bytes = int64_t{16} << 30,
                 .temperature_celsius = 51,
                 .power_watts = 101.5};
  GpuReading unread{.id = "3", .memory_total_bytes = int64_t{16} << 30};
  m.worker_gpus["w1"] = {gpu, unread};
  ClusterMetrics::RunningJob job;
  job.id = 7;
  job.name = "vit \"b/16\"\nsweep";
  job.owner = "alice";
  job.ranks = 2;
  job.restarts = 1;
  job.rank_workers = {"w1", "w2"};
  job.figures[0] = {{kImagesPerSecFigure, 100},
                    {kStepTimeMsFigure, 200},
                    {kCudaPeakAllocatedFigure, 5e9},
                    {kGpuUtilizationFigure, 87}};
  job.figures[1] = {{kImagesPerSecFigure, 110}, {kStepTimeMsFigure, 220}};
  m.running.push_back(job);
  m.slurm_allocations[{"gpu", "running"}] = 1;
  m.search_trials = {{"running", 2}, {"paused", 3}, {"completed", 1}, {"failed", 0}};
  m.metric_rows_written = 1234;
  m.metric_rows_refused = 5;
  LatencyHistogram h;
  h.Observe(absl::Milliseconds(3));
  h.Observe(absl::Seconds(2));
  m.rendezvous = h.Read();
  m.scheduling = LatencyHistogram().Read();
  m.heartbeat = h.Read();
  return m;
}

TEST(MetricsPageTest, ShowsJobsQueueWorkersSlotsAndRunningJobs) {
  DatabaseFigures db{.size_bytes = 1 << 20,
                     .max_bytes = 8 << 20,
                     .disk_free_bytes = 1 << 30,
                     .reserve_bytes = 64 << 20};
  const std::string page = RenderMetricsPage(SampleMetrics(), db);
  EXPECT_THAT(page, HasSubstr("tessera_jobs{state=\"queued\"} 2\n"));
  EXPECT_THAT(page, HasSubstr("tessera_jobs_ended_total{state=\"succeeded\"} 3\n"));
  EXPECT_THAT(page, HasSubstr("tessera_queue_length 2\n"));
  EXPECT_THAT(page, HasSubstr("# TYPE tessera_search_trials gauge\n"));
  EXPECT_THAT(page, HasSubstr("tessera_search_trials{state=\"paused\"} 3\n"));
  EXPECT_THAT(page, HasSubstr("tessera_search_trials{state=\"failed\"} 0\n"));
  EXPECT_THAT(page, HasSubstr("tessera_queue_oldest_wait_seconds 42.5\n"));
  EXPECT_THAT(page, HasSubstr("tessera_workers{state=\"dead\"} 1\n"));
  EXPECT_THAT(page, HasSubstr("tessera_slots{kind=\"gpu\",state=\"free\"} 2\n"));
  EXPECT_THAT(page, HasSubstr("tessera_slots_capacity{kind=\"cpu\"} 4\n"));
  EXPECT_THAT(page, HasSubstr("tessera_job_images_per_second{job_id=\"7\",name=\"vit "
                              "\\\"b/16\\\"_sweep\",owner=\"alice\"} 210\n"));
  EXPECT_THAT(page, HasSubstr("tessera_job_step_seconds{job_id=\"7\""));
  EXPECT_THAT(page, HasSubstr("tessera_job_restarts_total{job_id=\"7\""));
  EXPECT_THAT(
      page,
      HasSubstr(
          "tessera_rank_gpu_utilization_ratio{job_id=\"7\",rank=\"0\",worker=\"w1\"} "
          "0.87"));
  EXPECT_THAT(
      page,
      HasSubstr("tessera_rank_cuda_peak_allocated_bytes{job_id=\"7\",rank=\"0\",worker="
                "\"w1\"} 5000000000\n"));
  EXPECT_THAT(page,
              HasSubstr("tessera_rendezvous_duration_seconds_bucket{le=\"0.005\"} 1\n"));
  EXPECT_THAT(page, HasSubstr("tessera_rendezvous_duration_seconds_count 2\n"));
  EXPECT_THAT(page, HasSubstr("tessera_metric_rows_refused_total 5\n"));
  EXPECT_THAT(page,
              HasSubstr("tessera_slurm_allocations{pool=\"gpu\",state=\"running\"} 1"));
  EXPECT_THAT(page, HasSubstr("tessera_db_max_bytes 8388608\n"));
  EXPECT_THAT(page, HasSubstr("tessera_worker_gpu_utilization_ratio{worker=\"w1\","
                              "gpu=\"GPU-fake-1\"} 0.875\n"));
  EXPECT_THAT(page, HasSubstr("tessera_worker_gpu_memory_used_bytes{worker=\"w1\","
                              "gpu=\"GPU-fake-1\"} 2147483648\n"));
  EXPECT_THAT(page, HasSubstr("tessera_worker_gpu_memory_total_bytes{worker=\"w1\","
                              "gpu=\"3\"} 17179869184\n"));
  EXPECT_THAT(page, HasSubstr("tessera_worker_gpu_temperature_celsius{worker=\"w1\","
                              "gpu=\"GPU-fake-1\"} 51\n"));
  EXPECT_THAT(page, HasSubstr("tessera_worker_gpu_power_watts{worker=\"w1\","
                              "gpu=\"GPU-fake-1\"} 101.5\n"));
  // GPU 3's utilisation was not read: it has no sample, not a zero.
  EXPECT_THAT(page, Not(HasSubstr("gpu=\"3\"} 0")));
  // No rank reported peak RSS: that family is left out, not shown empty.
  EXPECT_THAT(page, Not(HasSubstr("tessera_rank_peak_rss_bytes")));
}

TEST(MetricsPageTest, PromtoolAcceptsThePage) {
  if (std::string why = testing::PromtoolMissing(); !why.empty()) {
    if (testing::PromtoolRequired()) FAIL() << why;
    GTEST_SKIP() << why;
  }
  ExpectPromtoolAccepts(RenderMetricsPage(SampleMetrics(), DatabaseFigures()));
  ExpectPromtoolAccepts(RenderMetricsPage(ClusterMetrics(), DatabaseFigures()));
}

TEST(MetricsPageTest, ShowsTheBytesOverBudgetAndTheRowsRetentionDropped) {
  const DatabaseFigures db{.size_bytes = 1 << 20,
                           .bytes_over_budget = 12345,
                           .metric_rows_downsampled = 1,
                           .metric_rows_thinned = 200,
                           .metric_rows_pruned = 30,
                           .log_chunks_dropped = 4};
  const std::string page = RenderMetricsPage(ClusterMetrics(), db);
  EXPECT_THAT(page, HasSubstr("# TYPE tessera_db_bytes_over_budget gauge\n"));
  EXPECT_THAT(page, HasSubstr("tessera_db_bytes_over_budget 12345\n"));
  EXPECT_THAT(page,
              HasSubstr("# TYPE tessera_db_retention_rows_dropped_total counter\n"));
  EXPECT_THAT(page, HasSubstr("tessera_db_retention_rows_dropped_total{kind=\"metrics_"
                              "downsampled\"} 1\n"));
  EXPECT_THAT(page, HasSubstr("tessera_db_retention_rows_dropped_total{kind=\"metrics_"
                              "thinned\"} 200\n"));
  EXPECT_THAT(page, HasSubstr("tessera_db_retention_rows_dropped_total{kind=\"metrics_"
                              "pruned\"} 30\n"));
  EXPECT_THAT(page, HasSubstr("tessera_db_retention_rows_dropped_total{kind=\"log_"
                              "chunks\"} 4\n"));
  if (testing::PromtoolMissing().empty()) ExpectPromtoolAccepts(page);
  // Without a budget there is nothing to be over: no sample, not a zero.
  EXPECT_THAT(RenderMetricsPage(ClusterMetrics(), DatabaseFigures()),
              Not(HasSubstr("tessera_db_bytes_over_budget")));
}

TEST(MetricsPageTest, LabelValuesAreCutAndPrintable) {
  EXPECT_EQ(BoundedLabelValue("short", 64), "short");
  EXPECT_EQ(BoundedLabelValue("a\tb\xff", 64), "a_b_");
  const std::string cut = BoundedLabelValue(std::string(10000, 'x'), 64);
  EXPECT_EQ(cut.size(), 64u);
  EXPECT_EQ(cut.substr(61), "...");
}

TEST(MetricsPageTest, ThousandRunningJobsWithHugeNamesStayBounded) {
  ClusterMetrics m = SampleMetrics();
  m.running.clear();
  for (int i = 0; i < 1000; ++i) {
    ClusterMetrics::RunningJob job;
    job.id = i + 1;
    job.name = std::string(10000, 'n');
    job.owner = std::string(10000, 'o');
    job.ranks = 1;
    job.figures[0] = {
        {kImagesPerSecFigure, 100}, {kStepTimeMsFigure, 50}, {kPeakRssFigure, 1e9}};
    m.running.push_back(job);
  }
  const std::string page = RenderMetricsPage(m, DatabaseFigures());
  std::cout << "FIGURE metrics_page_bytes_1000_running_10k_names=" << page.size()
            << std::endl;
  // About 800 bytes a running job whatever its name: 1,000 fit in 1 MiB.
  EXPECT_LT(page.size(), 1u << 20);
  EXPECT_THAT(page, Not(HasSubstr(std::string(65, 'n'))));
}

// ---- through the coordinator's HTTP listener ----

class MetricsEndpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    CoordinatorOptions options;
    options.listen = "";
    options.http = "127.0.0.1:0";
    options.db_path = ":memory:";
    auto server = CoordinatorServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    RealClock clock;
    user_ = *CreateToken(server_->store(), clock, kUserToken, "alice");
    admin_ = *CreateToken(server_->store(), clock, kUserToken, "root-ops", true);
    join_ = *CreateToken(server_->store(), clock, kJoinToken, "rack");
    metrics_ = *CreateToken(server_->store(), clock, kMetricsToken, "prometheus");
  }

  httplib::Result Get(const std::string& token) {
    httplib::Client client("127.0.0.1", server_->http_port());
    if (token.empty()) return client.Get("/metrics");
    return client.Get("/metrics", {{"Authorization", "Bearer " + token}});
  }

  int64_t Submit(const std::string& name) {
    v1::JobSpec spec;
    spec.set_name(name);
    spec.set_world_size(1);
    spec.mutable_trainer()->set_model("vit-micro");
    spec.mutable_trainer()->set_dataset("synthetic");
    spec.mutable_trainer()->set_batch_size(8);
    spec.mutable_trainer()->set_epochs(1);
    JobOrigin origin;
    origin.owner = "alice";
    origin.admin = true;  // past the per-user queued-jobs limit
    absl::StatusOr<int64_t> id = server_->manager().jobs().Submit(spec, "", "", origin);
    EXPECT_TRUE(id.ok()) << id.status();
    return id.ok() ? *id : 0;
  }

  std::unique_ptr<CoordinatorServer> server_;
  std::string user_, admin_, join_, metrics_;
};

TEST_F(MetricsEndpointTest, RefusesNoTokenAUserTokenAndAJoinToken) {
  auto none = Get("");
  ASSERT_TRUE(none);
  EXPECT_EQ(none->status, 401) << none->body;
  auto user = Get(user_);
  ASSERT_TRUE(user);
  EXPECT_EQ(user->status, 403) << user->body;
  EXPECT_THAT(user->body, Not(HasSubstr("tessera_jobs")));
  auto join = Get(join_);
  ASSERT_TRUE(join);
  EXPECT_EQ(join->status, 401) << join->body;
  // The session cookie a user's page holds does not open it either.
  httplib::Client client("127.0.0.1", server_->http_port());
  auto cookie = client.Get("/metrics", {{"Cookie", "tessera_token=" + admin_}});
  ASSERT_TRUE(cookie);
  EXPECT_EQ(cookie->status, 401);
}

TEST_F(MetricsEndpointTest, ServesAMetricsTokenAndAnAdminToken) {
  for (const std::string& token : {metrics_, admin_}) {
    auto page = Get(token);
    ASSERT_TRUE(page);
    EXPECT_EQ(page->status, 200) << page->body;
    EXPECT_EQ(page->get_header_value("Content-Type"), kMetricsContentType);
    EXPECT_THAT(page->body, HasSubstr("tessera_workers{state=\"alive\"} 0\n"));
  }
  // A metrics token reads /metrics and nothing else.
  httplib::Client client("127.0.0.1", server_->http_port());
  auto jobs = client.Get("/api/v1/jobs", {{"Authorization", "Bearer " + metrics_}});
  ASSERT_TRUE(jobs);
  EXPECT_EQ(jobs->status, 401);
}

// A heartbeat's GPU readings reach the page: only the worker's registered
// GPUs, at most kMaxWorkerGpuReadings, values that are not finite left out.
TEST_F(MetricsEndpointTest, ServesTheGpuReadingsOfEachWorkersLatestHeartbeat) {
  v1::RegisterWorkerRequest reg;
  reg.set_name("gpu-node");
  reg.set_hostname("gpu-node.example");
  reg.set_device_kind("cuda");
  reg.set_slots(100);
  for (int i = 0; i < 100; ++i) reg.add_gpu_ids(absl::StrCat(i));
  auto registered = server_->manager().workers().RegisterWorker(reg);
  ASSERT_TRUE(registered.ok()) << registered.status();
  v1::HeartbeatRequest beat;
  beat.set_name("gpu-node");
  beat.set_epoch(registered->epoch());
  for (int i = 0; i < 100; ++i) {
    v1::WorkerGpuReading* g = beat.add_gpus();
    g->set_gpu_id(absl::StrCat(i));
    g->set_utilization_percent(i == 0 ? 250 : 40);
    g->set_memory_used_bytes(i == 0 ? -5 : int64_t{1} << 30);
    g->set_memory_total_bytes(int64_t{80} << 30);
    g->set_temperature_celsius(i == 0 ? std::numeric_limits<double>::quiet_NaN() : 60);
    g->set_power_watts(i == 0 ? std::numeric_limits<double>::infinity() : 300);
  }
  beat.add_gpus()->set_gpu_id("GPU-not-this-workers");
  ASSERT_TRUE(server_->manager().workers().Heartbeat(beat).ok());
  auto page = Get(metrics_);
  ASSERT_TRUE(page);
  ASSERT_EQ(page->status, 200) << page->body;
  EXPECT_THAT(page->body, HasSubstr("tessera_worker_gpu_utilization_ratio{worker=\"gpu-"
                                    "node\",gpu=\"0\"} 1\n"));
  EXPECT_THAT(page->body, HasSubstr("tessera_worker_gpu_power_watts{worker=\"gpu-node\","
                                    "gpu=\"5\"} 300\n"));
  EXPECT_THAT(page->body, Not(HasSubstr("gpu=\"64\"")));
  EXPECT_THAT(page->body, Not(HasSubstr("GPU-not-this-workers")));
  EXPECT_THAT(page->body, Not(HasSubstr("NaN")));
  EXPECT_THAT(page->body, Not(HasSubstr("Inf\n")));
  EXPECT_THAT(page->body,
              Not(HasSubstr("tessera_worker_gpu_memory_used_bytes{worker=\"gpu-"
                            "node\",gpu=\"0\"}")));
  size_t samples = 0;
  for (size_t at = page->body.find("tessera_worker_gpu_power_watts{");
       at != std::string::npos;
       at = page->body.find("tessera_worker_gpu_power_watts{", at + 1)) {
    ++samples;
  }
  EXPECT_EQ(samples, static_cast<size_t>(kMaxWorkerGpuReadings) - 1);  // GPU 0's is out
  if (testing::PromtoolMissing().empty()) ExpectPromtoolAccepts(page->body);
}

// The trials of a running search reach the page by state, fed by the
// coordinator's SearchManager; once the search ends they leave it.
TEST_F(MetricsEndpointTest, ServesTheTrialsOfRunningSearchesByState) {
  auto before = Get(metrics_);
  ASSERT_TRUE(before);
  EXPECT_THAT(before->body, HasSubstr("tessera_search_trials{state=\"running\"} 0\n"));
  v1::RegisterWorkerRequest reg;
  reg.set_name("cpu-node");
  reg.set_hostname("cpu-node.example");
  reg.set_device_kind("cpu");
  reg.set_slots(2);
  ASSERT_TRUE(server_->manager().workers().RegisterWorker(reg).ok());
  absl::StatusOr<v1::SearchSpec> spec = ParseAndValidateSearchSpec(R"(name: lr
search:
  method: random
  metric: val_accuracy
  max_trials: 5
  max_concurrent: 2
  max_length: 100
  parameters:
    lr: {loguniform: [1e-4, 1e-2]}
base:
  world_size: 1
  trainer: {model: vit-micro, dataset: synthetic, batch_size: 8, val_fraction: 0.1}
)",
                                                                   SpecLimits{});
  ASSERT_TRUE(spec.ok()) << spec.status();
  absl::StatusOr<v1::SubmitSearchResponse> submitted =
      server_->searches().Submit(*spec, "", "", "alice");
  ASSERT_TRUE(submitted.ok()) << submitted.status();

  auto page = Get(metrics_);
  ASSERT_TRUE(page);
  ASSERT_EQ(page->status, 200) << page->body;
  EXPECT_THAT(page->body, HasSubstr("tessera_search_trials{state=\"running\"} 2\n"));
  EXPECT_THAT(page->body, HasSubstr("tessera_search_trials{state=\"failed\"} 0\n"));

  ASSERT_TRUE(server_->searches().Cancel(Caller::Admin(), submitted->search_id()).ok());
  auto after = Get(metrics_);
  ASSERT_TRUE(after);
  EXPECT_THAT(after->body, HasSubstr("tessera_search_trials{state=\"running\"} 0\n"));
}

// A budget below what the records alone take: retention's pass cannot meet
// it, and the page says by how much.
TEST(MetricsEndpointRetentionTest, ACoordinatorOverItsBudgetShowsTheBytesOver) {
  CoordinatorOptions options;
  options.listen = "";
  options.http = "127.0.0.1:0";
  options.db_path = ":memory:";
  options.retention.max_size_bytes = 1;
  options.retention.interval = absl::Milliseconds(10);
  auto server = CoordinatorServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  RealClock clock;
  const std::string token =
      *CreateToken((*server)->store(), clock, kMetricsToken, "prometheus");
  httplib::Client client("127.0.0.1", (*server)->http_port());
  std::string page;
  const bool over = testing::WaitFor(
      [&] {
        auto got = client.Get("/metrics", {{"Authorization", "Bearer " + token}});
        if (!got || got->status != 200) return false;
        page = got->body;
        return absl::StrContains(page, "tessera_db_bytes_over_budget ") &&
               !absl::StrContains(page, "tessera_db_bytes_over_budget 0\n");
      },
      absl::Seconds(10));
  EXPECT_TRUE(over) << "the first pass's figure did not reach /metrics:\n" << page;
  EXPECT_THAT(page, HasSubstr("tessera_db_retention_rows_dropped_total{kind=\"metrics_"
                              "thinned\"} 0\n"));
  if (testing::PromtoolMissing().empty()) ExpectPromtoolAccepts(page);
}

TEST_F(MetricsEndpointTest, AThousandQueuedJobsKeepThePageSmall) {
  // A name that long never gets in: the spec's limit refuses it at submit.
  v1::JobSpec spec;
  spec.set_name(std::string(10000, 'x'));
  spec.set_world_size(1);
  spec.mutable_trainer()->set_model("vit-micro");
  spec.mutable_trainer()->set_dataset("synthetic");
  spec.mutable_trainer()->set_batch_size(8);
  EXPECT_TRUE(absl::IsInvalidArgument(
      server_->manager()
          .jobs()
          .Submit(spec, "", "", JobOrigin{.owner = "alice", .admin = true})
          .status()));
  for (int i = 0; i < 1000; ++i)
    Submit(absl::StrCat("queued-", i, std::string(100, 'q')));
  auto page = Get(metrics_);
  ASSERT_TRUE(page);
  ASSERT_EQ(page->status, 200);
  std::cout << "FIGURE metrics_page_bytes_1000_queued=" << page->body.size() << std::endl;
  EXPECT_THAT(page->body, HasSubstr("tessera_queue_length 1000\n"));
  EXPECT_LT(page->body.size(), 16u * 1024);
}

}  // namespace
}  // namespace tessera
