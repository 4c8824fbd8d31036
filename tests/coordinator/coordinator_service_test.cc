// In-process gRPC tests: the real CoordinatorServer with an in-memory store,
// reached through the generated stubs over InProcessChannel().
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/job_spec.h"
#include "coordinator/coordinator_server.h"
#include "gmock/gmock.h"
#include "grpcpp/client_context.h"
#include "gtest/gtest.h"
#include "health.grpc.pb.h"
#include "tessera/v1/tessera.grpc.pb.h"
#include "tests/testing/test_util.h"

namespace tessera {
namespace {

namespace v1 = ::tessera::v1;
using ::testing::HasSubstr;

v1::JobSpec Spec(int world_size, const std::string& name = "job") {
  v1::JobSpec spec;
  spec.set_name(name);
  spec.set_world_size(world_size);
  spec.mutable_trainer()->set_model("vit-micro");
  spec.mutable_trainer()->set_dataset("synthetic");
  spec.mutable_trainer()->set_batch_size(8);
  spec.mutable_trainer()->set_max_steps(5);
  return spec;
}

class CoordinatorServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    CoordinatorOptions options;
    options.listen = "";
    options.db_path = ":memory:";
    options.manager.spec_limits.max_world_size = 64;
    // These tests are about the services' behaviour; auth_test covers tokens.
    options.auth.enabled = false;
    auto server = CoordinatorServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    auto channel = server_->InProcessChannel();
    jobs_ = v1::JobService::NewStub(channel);
    workers_ = v1::WorkerService::NewStub(channel);
    trainers_ = v1::TrainerService::NewStub(channel);
  }

  grpc::Status Submit(const v1::JobSpec& spec, int64_t* id,
                      const std::string& request_id = "") {
    v1::SubmitJobRequest req;
    *req.mutable_spec() = spec;
    req.set_client_request_id(request_id);
    v1::SubmitJobResponse resp;
    grpc::ClientContext ctx;
    grpc::Status s = jobs_->SubmitJob(&ctx, req, &resp);
    *id = resp.job_id();
    return s;
  }

  v1::Job Get(int64_t id) {
    grpc::ClientContext ctx;
    v1::GetJobRequest req;
    req.set_job_id(id);
    v1::GetJobResponse resp;
    EXPECT_TRUE(jobs_->GetJob(&ctx, req, &resp).ok());
    return resp.job();
  }

  int64_t Register(const std::string& name, int slots) {
    grpc::ClientContext ctx;
    v1::RegisterWorkerRequest req;
    req.set_name(name);
    req.set_hostname("host-" + name);
    req.set_slots(slots);
    v1::RegisterWorkerResponse resp;
    EXPECT_TRUE(workers_->RegisterWorker(&ctx, req, &resp).ok());
    return resp.epoch();
  }

  v1::HeartbeatResponse Heartbeat(const std::string& name, int64_t epoch,
                                  std::vector<v1::LocalRank> ranks = {}) {
    grpc::ClientContext ctx;
    v1::HeartbeatRequest req;
    req.set_name(name);
    req.set_epoch(epoch);
    for (auto& r : ranks) *req.add_ranks() = r;
    v1::HeartbeatResponse resp;
    grpc::Status s = workers_->Heartbeat(&ctx, req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp;
  }

  static v1::LocalRank Exited(const v1::LaunchOrder& o, int code) {
    v1::LocalRank r;
    r.set_job_id(o.job_id());
    r.set_attempt(o.attempt());
    r.set_rank(o.rank());
    r.set_pid(1000 + o.rank());
    r.set_exited(true);
    r.set_exit_code(code);
    return r;
  }

  std::unique_ptr<CoordinatorServer> server_;
  std::unique_ptr<v1::JobService::Stub> jobs_;
  std::unique_ptr<v1::WorkerService::Stub> workers_;
  std::unique_ptr<v1::TrainerService::Stub> trainers_;
};

TEST_F(CoordinatorServiceTest, SubmitListAndStatusThroughStubs) {
  int64_t id = 0;
  ASSERT_TRUE(Submit(Spec(2, "first"), &id).ok());
  EXPECT_GT(id, 0);

  grpc::ClientContext ctx;
  v1::ListJobsResponse list;
  ASSERT_TRUE(jobs_->ListJobs(&ctx, v1::ListJobsRequest(), &list).ok());
  ASSERT_EQ(list.jobs_size(), 1);
  EXPECT_EQ(list.jobs(0).id(), id);
  EXPECT_EQ(list.jobs(0).name(), "first");

  v1::Job job = Get(id);
  EXPECT_EQ(job.state(), v1::JOB_STATE_QUEUED);
  EXPECT_EQ(job.spec().world_size(), 2);
  EXPECT_EQ(job.pending_reason(), "needs 2 slots; 0 registered");
}

TEST_F(CoordinatorServiceTest, InvalidSpecIsRejectedAndNothingStored) {
  int64_t id = 0;
  grpc::Status s = Submit(Spec(0), &id);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("world_size"));
  s = Submit(Spec(65), &id);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  v1::JobSpec negative = Spec(1);
  negative.mutable_trainer()->set_batch_size(-4);
  s = Submit(negative, &id);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("batch_size"));

  grpc::ClientContext ctx;
  v1::ListJobsResponse list;
  ASSERT_TRUE(jobs_->ListJobs(&ctx, v1::ListJobsRequest(), &list).ok());
  EXPECT_EQ(list.jobs_size(), 0);
}

TEST_F(CoordinatorServiceTest, UnknownJobIsNotFound) {
  grpc::ClientContext ctx;
  v1::GetJobRequest req;
  req.set_job_id(4242);
  v1::GetJobResponse resp;
  grpc::Status s = jobs_->GetJob(&ctx, req, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(s.error_message(), HasSubstr("4242"));
}

TEST_F(CoordinatorServiceTest, RetriedSubmitWithSameRequestIdMakesOneJob) {
  int64_t a = 0, b = 0;
  ASSERT_TRUE(Submit(Spec(1), &a, "req-1").ok());
  ASSERT_TRUE(Submit(Spec(1), &b, "req-1").ok());
  EXPECT_EQ(a, b);
  grpc::ClientContext ctx;
  v1::ListJobsResponse list;
  ASSERT_TRUE(jobs_->ListJobs(&ctx, v1::ListJobsRequest(), &list).ok());
  EXPECT_EQ(list.jobs_size(), 1);
}

TEST_F(CoordinatorServiceTest, FiftyConcurrentSubmitsWithRetriesMakeFiftyJobs) {
  constexpr int kClients = 50;
  std::vector<std::thread> threads;
  std::vector<int64_t> first(kClients), second(kClients);
  for (int i = 0; i < kClients; ++i) {
    threads.emplace_back([&, i] {
      const std::string request_id = absl::StrCat("client-", i);
      // The retry carries the same request id, as tessctl's does.
      EXPECT_TRUE(Submit(Spec(1, request_id), &first[i], request_id).ok());
      EXPECT_TRUE(Submit(Spec(1, request_id), &second[i], request_id).ok());
    });
  }
  for (auto& t : threads) t.join();
  std::set<int64_t> ids;
  for (int i = 0; i < kClients; ++i) {
    EXPECT_EQ(first[i], second[i]) << "client " << i;
    ids.insert(first[i]);
  }
  EXPECT_EQ(ids.size(), static_cast<size_t>(kClients));
  grpc::ClientContext ctx;
  v1::ListJobsResponse list;
  ASSERT_TRUE(jobs_->ListJobs(&ctx, v1::ListJobsRequest(), &list).ok());
  EXPECT_EQ(list.jobs_size(), kClients);
}

TEST_F(CoordinatorServiceTest, JobLargerThanClusterStaysQueuedWithPendingReason) {
  Register("a", 1);
  Register("b", 1);
  int64_t id = 0;
  ASSERT_TRUE(Submit(Spec(4), &id).ok());
  v1::Job job = Get(id);
  EXPECT_EQ(job.state(), v1::JOB_STATE_QUEUED);
  EXPECT_EQ(job.pending_reason(), "needs 4 slots; 2 registered");
}

TEST_F(CoordinatorServiceTest, GangSpansWorkersAndSucceedsWhenAllRanksExitZero) {
  const int64_t ea = Register("a", 1);
  const int64_t eb = Register("b", 1);
  int64_t id = 0;
  ASSERT_TRUE(Submit(Spec(2), &id).ok());
  EXPECT_EQ(Get(id).state(), v1::JOB_STATE_SCHEDULED);

  v1::HeartbeatResponse ha = Heartbeat("a", ea);
  v1::HeartbeatResponse hb = Heartbeat("b", eb);
  ASSERT_EQ(ha.launch_size(), 1);
  ASSERT_EQ(hb.launch_size(), 1);
  EXPECT_NE(ha.launch(0).rank(), hb.launch(0).rank());
  EXPECT_EQ(ha.launch(0).world_size(), 2);
  EXPECT_EQ(ha.launch(0).trainer().model(), "vit-micro");
  // Each worker holds one rank, so its local slots are just that rank's slot.
  EXPECT_THAT(ha.launch(0).local_slots(), ::testing::ElementsAre(ha.launch(0).slot()));

  Heartbeat("a", ea, {Exited(ha.launch(0), 0)});
  EXPECT_EQ(Get(id).state(), v1::JOB_STATE_SCHEDULED);
  v1::HeartbeatResponse ack = Heartbeat("b", eb, {Exited(hb.launch(0), 0)});
  EXPECT_EQ(ack.acknowledged_exits_size(), 1);
  v1::Job job = Get(id);
  EXPECT_EQ(job.state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(job.ranks_size(), 2);
}

TEST_F(CoordinatorServiceTest, FailedRankFailsJobAndStopsTheOthers) {
  const int64_t ea = Register("a", 1);
  const int64_t eb = Register("b", 1);
  int64_t id = 0;
  ASSERT_TRUE(Submit(Spec(2), &id).ok());
  v1::HeartbeatResponse ha = Heartbeat("a", ea);
  v1::HeartbeatResponse hb = Heartbeat("b", eb);
  ASSERT_EQ(ha.launch_size(), 1);
  ASSERT_EQ(hb.launch_size(), 1);

  Heartbeat("a", ea, {Exited(ha.launch(0), 3)});
  v1::Job job = Get(id);
  EXPECT_EQ(job.state(), v1::JOB_STATE_FAILED);
  EXPECT_THAT(job.reason(), HasSubstr("exited with code 3"));

  v1::LocalRank running = Exited(hb.launch(0), 0);
  running.set_exited(false);
  v1::HeartbeatResponse orders = Heartbeat("b", eb, {running});
  ASSERT_EQ(orders.kill_size(), 1);
  EXPECT_EQ(orders.kill(0).rank(), hb.launch(0).rank());
}

TEST_F(CoordinatorServiceTest, StaleEpochHeartbeatIsAborted) {
  const int64_t first = Register("a", 1);
  const int64_t second = Register("a", 1);
  EXPECT_GT(second, first);
  grpc::ClientContext ctx;
  v1::HeartbeatRequest req;
  req.set_name("a");
  req.set_epoch(first);
  v1::HeartbeatResponse resp;
  EXPECT_EQ(workers_->Heartbeat(&ctx, req, &resp).error_code(),
            grpc::StatusCode::ABORTED);
}

TEST_F(CoordinatorServiceTest, RendezvousGivesEveryRankRankZerosBootstrap) {
  Register("a", 2);
  int64_t id = 0;
  ASSERT_TRUE(Submit(Spec(2), &id).ok());
  const int32_t attempt = Get(id).attempt();
  ASSERT_EQ(attempt, 1);

  v1::RendezvousResponse responses[2];
  grpc::Status statuses[2];
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
      v1::RendezvousRequest req;
      req.set_job_id(id);
      req.set_attempt(attempt);
      req.set_rank(rank);
      req.set_backend("gloo");
      if (rank == 0) req.set_bootstrap("127.0.0.1:29999");
      statuses[rank] = trainers_->Rendezvous(&ctx, req, &responses[rank]);
    });
  }
  for (auto& t : threads) t.join();
  for (int rank = 0; rank < 2; ++rank) {
    ASSERT_TRUE(statuses[rank].ok()) << statuses[rank].error_message();
    EXPECT_EQ(responses[rank].rank(), rank);
    EXPECT_EQ(responses[rank].local_rank(), rank);
    EXPECT_EQ(responses[rank].world_size(), 2);
    EXPECT_EQ(responses[rank].bootstrap(), "127.0.0.1:29999");
  }
  EXPECT_EQ(Get(id).state(), v1::JOB_STATE_RUNNING);
}

TEST_F(CoordinatorServiceTest, ReportedMetricsAreStoredOnceAndReadBack) {
  Register("a", 1);
  int64_t id = 0;
  ASSERT_TRUE(Submit(Spec(1), &id).ok());
  v1::ReportMetricsRequest req;
  req.set_job_id(id);
  req.set_attempt(1);
  req.set_rank(0);
  for (int step = 10; step <= 30; step += 10) {
    v1::MetricPoint* p = req.add_points();
    p->set_step(step);
    p->set_name("loss");
    p->set_value(1.0 / step);
    p->set_unix_ms(1000 + step);
  }
  for (int i = 0; i < 2; ++i) {  // a retried report must not duplicate points
    grpc::ClientContext ctx;
    v1::ReportMetricsResponse resp;
    ASSERT_TRUE(trainers_->ReportMetrics(&ctx, req, &resp).ok());
  }
  grpc::ClientContext ctx;
  v1::GetMetricsRequest q;
  q.set_job_id(id);
  q.set_after_step(10);
  v1::GetMetricsResponse resp;
  ASSERT_TRUE(jobs_->GetMetrics(&ctx, q, &resp).ok());
  ASSERT_EQ(resp.points_size(), 2);
  EXPECT_EQ(resp.points(0).step(), 20);
  EXPECT_DOUBLE_EQ(resp.points(1).value(), 1.0 / 30);
}

TEST(CoordinatorDiskFullTest, FullStoreTurnsHealthNotServingAndSubmitsUnavailable) {
  testing::TempDir dir;
  CoordinatorOptions options;
  options.listen = "";
  options.db_path = dir.File("small.db");
  options.db_max_bytes = 256 * 1024;
  // No reserve: metric rows are refused, not shed, once the cap is reached
  // (store_writer_test and the fault tests cover the reserve).
  options.db_reserve_bytes = 0;
  options.db_reserve_percent = 0;
  options.monitor_interval = absl::Milliseconds(20);
  options.auth.enabled = false;
  auto server = CoordinatorServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  auto channel = (*server)->InProcessChannel();
  auto jobs = v1::JobService::NewStub(channel);
  auto trainers = v1::TrainerService::NewStub(channel);
  auto health = grpc::health::v1::Health::NewStub(channel);
  auto status = [&health] {
    grpc::ClientContext ctx;
    grpc::health::v1::HealthCheckRequest req;
    grpc::health::v1::HealthCheckResponse resp;
    EXPECT_TRUE(health->Check(&ctx, req, &resp).ok());
    return resp.status();
  };
  EXPECT_EQ(status(), grpc::health::v1::HealthCheckResponse::SERVING);
  {
    auto workers = v1::WorkerService::NewStub(channel);
    grpc::ClientContext ctx;
    v1::RegisterWorkerRequest req;
    req.set_name("a");
    req.set_slots(1);
    v1::RegisterWorkerResponse resp;
    ASSERT_TRUE(workers->RegisterWorker(&ctx, req, &resp).ok());
  }

  int64_t id = 0;
  {
    v1::SubmitJobRequest req;
    *req.mutable_spec() = Spec(1);
    v1::SubmitJobResponse resp;
    grpc::ClientContext ctx;
    ASSERT_TRUE(jobs->SubmitJob(&ctx, req, &resp).ok());
    id = resp.job_id();
  }
  // Fill the database with metrics until it refuses them, then with smaller
  // batches until even 10 points do not fit: what is left is too little for
  // a job, wherever the schema's own pages made the large batches stop.
  grpc::Status last;
  grpc::Status first_refusal;
  int64_t step = 0;
  for (int batch = 0, size = 1000; batch < 400 && size >= 10; ++batch) {
    v1::ReportMetricsRequest req;
    req.set_job_id(id);
    req.set_attempt(1);
    req.set_rank(0);
    for (int i = 0; i < size; ++i) {
      v1::MetricPoint* p = req.add_points();
      p->set_step(step++);
      p->set_name("a_rather_long_metric_name_to_fill_pages");
      p->set_value(i);
    }
    grpc::ClientContext ctx;
    v1::ReportMetricsResponse resp;
    last = trainers->ReportMetrics(&ctx, req, &resp);
    if (!last.ok()) {
      if (first_refusal.ok()) first_refusal = last;
      size /= 10;
    }
  }
  ASSERT_FALSE(first_refusal.ok()) << "the size cap never took effect";
  EXPECT_EQ(first_refusal.error_code(), grpc::StatusCode::UNAVAILABLE)
      << first_refusal.error_message();

  grpc::health::v1::HealthCheckResponse::ServingStatus seen = status();
  for (int i = 0; i < 200 && seen != grpc::health::v1::HealthCheckResponse::NOT_SERVING;
       ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    seen = status();
  }
  EXPECT_EQ(seen, grpc::health::v1::HealthCheckResponse::NOT_SERVING);

  // New jobs are refused with a retryable code once what is left of the
  // database (less than one refused metric report) is used; reads still work.
  grpc::Status refused;
  for (int i = 0; i < 8 && refused.ok(); ++i) {
    v1::SubmitJobRequest req;
    *req.mutable_spec() = Spec(1, "while-full");
    req.set_spec_yaml(std::string(32 * 1024, '#'));
    v1::SubmitJobResponse resp;
    grpc::ClientContext ctx;
    refused = jobs->SubmitJob(&ctx, req, &resp);
  }
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::UNAVAILABLE)
      << refused.error_message();
  grpc::ClientContext get_ctx;
  v1::GetJobRequest get;
  get.set_job_id(id);
  v1::GetJobResponse got;
  EXPECT_TRUE(jobs->GetJob(&get_ctx, get, &got).ok());
}

TEST_F(CoordinatorServiceTest, SearchCallsReachTheSearchManagerWithTheirStatusCodes) {
  v1::SubmitSearchRequest submit;
  v1::SearchSpec& spec = *submit.mutable_spec();
  spec.set_name("lr");
  *spec.mutable_base() = Spec(1, "");
  spec.mutable_base()->mutable_trainer()->clear_max_steps();
  v1::SearchConfig& search = *spec.mutable_search();
  search.set_method("random");
  search.set_metric("loss");
  search.set_max_trials(2);
  search.set_max_length(10);
  v1::SearchParameter& lr = *search.add_parameters();
  lr.set_key("lr");
  lr.add_loguniform(1e-4);
  lr.add_loguniform(1e-2);
  v1::SubmitSearchResponse submitted;
  {
    grpc::ClientContext ctx;
    const grpc::Status s = jobs_->SubmitSearch(&ctx, submit, &submitted);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(s.error_message(), HasSubstr("search.max_concurrent"))
        << "no worker, no slot";
  }
  Register("w1", 2);
  {
    grpc::ClientContext ctx;
    const grpc::Status s = jobs_->SubmitSearch(&ctx, submit, &submitted);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }
  EXPECT_EQ(submitted.max_trials(), 2);
  v1::GetSearchRequest get;
  get.set_search_id(submitted.search_id());
  v1::GetSearchResponse got;
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(jobs_->GetSearch(&ctx, get, &got).ok());
  }
  EXPECT_EQ(got.search().state(), v1::SEARCH_STATE_RUNNING);
  ASSERT_EQ(got.search().trials_size(), 1);
  EXPECT_EQ(Get(got.search().trials(0).job_ids(0)).spec().trainer().max_steps(), 10);
  v1::ListSearchesResponse list;
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(jobs_->ListSearches(&ctx, v1::ListSearchesRequest(), &list).ok());
  }
  EXPECT_EQ(list.searches_size(), 1);
  v1::CancelSearchRequest cancel;
  cancel.set_search_id(submitted.search_id());
  v1::CancelSearchResponse cancelled;
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(jobs_->CancelSearch(&ctx, cancel, &cancelled).ok());
  }
  EXPECT_EQ(cancelled.state(), v1::SEARCH_STATE_CANCELLED);
  {
    grpc::ClientContext ctx;
    EXPECT_EQ(jobs_->CancelSearch(&ctx, cancel, &cancelled).error_code(),
              grpc::StatusCode::FAILED_PRECONDITION);
  }
  get.set_search_id(submitted.search_id() + 1);
  grpc::ClientContext ctx;
  EXPECT_EQ(jobs_->GetSearch(&ctx, get, &got).error_code(), grpc::StatusCode::NOT_FOUND);
}

}  // namespace
}  // namespace tessera
