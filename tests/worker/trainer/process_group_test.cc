// Forms process groups the three ways tessera-train does: through a coordinator
// (a fake TrainerService served over real gRPC on loopback), through a static
// TCPStore, and standalone.
#include "worker/trainer/dist/process_group.h"

#include <grpcpp/grpcpp.h>
#include <torch/torch.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tessera/v1/tessera.grpc.pb.h"
#include "worker/trainer/dist/gloo_communicator.h"
#include "worker/trainer/run/grpc_coordinator_client.h"
#include "worker/trainer/run/progress.h"

namespace tessera::trainer {
namespace {

using ::testing::HasSubstr;

// Answers Rendezvous once `world_size` ranks have joined, with rank 0's
// bootstrap; records metrics, results and lease renewals.
class FakeTrainerService final : public tessera::v1::TrainerService::Service {
 public:
  explicit FakeTrainerService(int world_size) : world_size_(world_size) {}

  // Makes every answer claim this world size instead.
  void AnswerWorldSize(int world_size) {
    absl::MutexLock lock(&mu_);
    answer_world_size_ = world_size;
  }

  grpc::Status Rendezvous(grpc::ServerContext* /*context*/,
                          const tessera::v1::RendezvousRequest* request,
                          tessera::v1::RendezvousResponse* response) override {
    absl::MutexLock lock(&mu_);
    if (request->rank() == 0) bootstrap_ = request->bootstrap();
    backends_.push_back(request->backend());
    ++joined_;
    mu_.Await(absl::Condition(
        +[](FakeTrainerService* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu_) {
          return s->joined_ >= s->world_size_;
        },
        this));
    response->set_rank(request->rank());
    response->set_local_rank(request->rank());
    response->set_world_size(answer_world_size_ > 0 ? answer_world_size_ : world_size_);
    response->set_attempt(request->attempt());
    response->set_bootstrap(bootstrap_);
    response->set_backend("gloo");
    return grpc::Status::OK;
  }

  grpc::Status ReportMetrics(grpc::ServerContext* /*context*/,
                             const tessera::v1::ReportMetricsRequest* request,
                             tessera::v1::ReportMetricsResponse* /*response*/) override {
    absl::MutexLock lock(&mu_);
    metrics_.push_back(*request);
    return grpc::Status::OK;
  }

  grpc::Status ReportResult(grpc::ServerContext* /*context*/,
                            const tessera::v1::ReportResultRequest* request,
                            tessera::v1::ReportResultResponse* /*response*/) override {
    absl::MutexLock lock(&mu_);
    results_.push_back(*request);
    return grpc::Status::OK;
  }

  grpc::Status RenewLease(grpc::ServerContext* /*context*/,
                          const tessera::v1::RenewLeaseRequest* request,
                          tessera::v1::RenewLeaseResponse* response) override {
    absl::MutexLock lock(&mu_);
    renewals_.push_back(*request);
    response->set_lease_ms(90000);
    response->set_report_every_ms(2000);
    return grpc::Status::OK;
  }

  std::string bootstrap() const {
    absl::MutexLock lock(&mu_);
    return bootstrap_;
  }
  std::vector<tessera::v1::RenewLeaseRequest> renewals() const {
    absl::MutexLock lock(&mu_);
    return renewals_;
  }
  std::vector<std::string> backends() const {
    absl::MutexLock lock(&mu_);
    return backends_;
  }
  std::vector<tessera::v1::ReportMetricsRequest> metrics() const {
    absl::MutexLock lock(&mu_);
    return metrics_;
  }
  std::vector<tessera::v1::ReportResultRequest> results() const {
    absl::MutexLock lock(&mu_);
    return results_;
  }

 private:
  const int world_size_;
  mutable absl::Mutex mu_;
  int joined_ ABSL_GUARDED_BY(mu_) = 0;
  int answer_world_size_ ABSL_GUARDED_BY(mu_) = 0;
  std::string bootstrap_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> backends_ ABSL_GUARDED_BY(mu_);
  std::vector<tessera::v1::ReportMetricsRequest> metrics_ ABSL_GUARDED_BY(mu_);
  std::vector<tessera::v1::ReportResultRequest> results_ ABSL_GUARDED_BY(mu_);
  std::vector<tessera::v1::RenewLeaseRequest> renewals_ ABSL_GUARDED_BY(mu_);
};

class CoordinatorGroupTest : public ::testing::Test {
 protected:
  void Serve(int world_size) {
    service_ = std::make_unique<FakeTrainerService>(world_size);
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_GT(port_, 0);
  }
  void TearDown() override {
    if (server_ != nullptr) server_->Shutdown();
  }

  std::string address() const { return absl::StrCat("127.0.0.1:", port_); }

  std::unique_ptr<GrpcCoordinatorClient> Client(int rank) const {
    TrainerIdentity identity;
    identity.job_id = 42;
    identity.attempt = 3;
    identity.rank = rank;
    return std::make_unique<GrpcCoordinatorClient>(
        grpc::CreateChannel(address(), grpc::InsecureChannelCredentials()), identity);
  }

  LaunchOptions Launch(int rank, int world_size) const {
    LaunchOptions launch;
    launch.coordinator = address();
    launch.job_id = 42;
    launch.attempt = 3;
    launch.rank = rank;
    launch.world_size = world_size;
    return launch;
  }

  std::unique_ptr<FakeTrainerService> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

TEST_F(CoordinatorGroupTest, TwoRanksMeetThroughRankZerosStoreAndAllReduce) {
  Serve(2);
  std::vector<float> results(2);
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < 2; ++rank) {
    ranks.emplace_back([&, rank] {
      const auto client = Client(rank);
      absl::StatusOr<ProcessGroup> group =
          JoinProcessGroup(Launch(rank, 2), client.get());
      ASSERT_TRUE(group.ok()) << group.status();
      EXPECT_EQ(group->rank, rank);
      EXPECT_EQ(group->world_size, 2);
      EXPECT_EQ(group->communicator->backend(), "gloo");
      torch::Tensor value = torch::full({3}, static_cast<float>(rank + 1));
      ASSERT_TRUE(group->communicator->AllReduceSum(value).ok());
      results[static_cast<size_t>(rank)] = value[0].item<float>();
    });
  }
  for (std::thread& thread : ranks) thread.join();
  EXPECT_EQ(results, (std::vector<float>{3.0f, 3.0f}));
  // Rank 0 advertised the store on the address it reaches the coordinator from.
  EXPECT_THAT(service_->bootstrap(),
              ::testing::MatchesRegex("127\\.0\\.0\\.1:[1-9][0-9]*"));
  EXPECT_EQ(service_->backends(), (std::vector<std::string>{"gloo", "gloo"}));
}

TEST_F(CoordinatorGroupTest, SingleRankJobRendezvousesWithoutAStore) {
  Serve(1);
  const auto client = Client(0);
  absl::StatusOr<ProcessGroup> group = JoinProcessGroup(Launch(0, 1), client.get());
  ASSERT_TRUE(group.ok()) << group.status();
  EXPECT_EQ(group->communicator->backend(), "local");
  EXPECT_EQ(service_->bootstrap(), "");
}

TEST_F(CoordinatorGroupTest, AnswerContradictingTheLaunchFlagsIsFailedPrecondition) {
  Serve(1);
  service_->AnswerWorldSize(3);
  const auto client = Client(0);
  absl::StatusOr<ProcessGroup> group = JoinProcessGroup(Launch(0, 1), client.get());
  EXPECT_EQ(group.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(group.status().message(), HasSubstr("rank 0 of 3"));
}

TEST_F(CoordinatorGroupTest, ClientSendsMetricsAndResultForItsRankAndAttempt) {
  Serve(1);
  const auto client = Client(1);
  ASSERT_TRUE(
      client->ReportMetrics({{10, "loss", 0.75, 1234}, {10, "epoch", 0.5, 1234}}).ok());
  ASSERT_TRUE(client->ReportResult({"00112233aabbccdd", 0.875, 0.25}).ok());

  const auto metrics = service_->metrics();
  ASSERT_EQ(metrics.size(), 1u);
  EXPECT_EQ(metrics[0].job_id(), 42);
  EXPECT_EQ(metrics[0].attempt(), 3);
  EXPECT_EQ(metrics[0].rank(), 1);
  ASSERT_EQ(metrics[0].points_size(), 2);
  EXPECT_EQ(metrics[0].points(0).name(), "loss");
  EXPECT_EQ(metrics[0].points(0).step(), 10);
  EXPECT_EQ(metrics[0].points(0).value(), 0.75);
  EXPECT_EQ(metrics[0].points(0).unix_ms(), 1234);

  const auto results = service_->results();
  ASSERT_EQ(results.size(), 1u);
  EXPECT_EQ(results[0].param_hash(), "00112233aabbccdd");
  EXPECT_EQ(results[0].test_accuracy(), 0.875);
  EXPECT_EQ(results[0].test_loss(), 0.25);
  EXPECT_EQ(results[0].rank(), 1);
}

TEST_F(CoordinatorGroupTest, LeaseRenewalCarriesTheProgressReportAndReadsThePeriod) {
  Serve(1);
  const auto client = Client(1);
  ProgressReport progress;
  progress.step = 412;
  progress.phase = "collective";
  progress.collective = "allreduce #412 (bucket 3)";
  progress.phase_elapsed_ms = 64000;
  progress.step_time_ms = 95.5;
  progress.phase_ms = {{"forward", 20}, {"collective", 75.5}};
  progress.window_steps = 20;
  progress.collective_ready = true;
  progress.device_phase_ms = {{"forward", 61.5}, {"comm", 4}};
  progress.device_window_steps = 10;
  const absl::StatusOr<LeaseGrant> grant = client->RenewLease(absl::Seconds(5), progress);
  ASSERT_TRUE(grant.ok()) << grant.status();
  EXPECT_EQ(grant->lease, absl::Seconds(90));
  EXPECT_EQ(grant->report_every, absl::Seconds(2));

  const auto renewals = service_->renewals();
  ASSERT_EQ(renewals.size(), 1u);
  EXPECT_EQ(renewals[0].job_id(), 42);
  EXPECT_EQ(renewals[0].attempt(), 3);
  EXPECT_EQ(renewals[0].rank(), 1);
  const tessera::v1::RankProgress& sent = renewals[0].progress();
  EXPECT_EQ(sent.step(), 412);
  EXPECT_EQ(sent.phase(), "collective");
  EXPECT_EQ(sent.collective(), "allreduce #412 (bucket 3)");
  EXPECT_EQ(sent.phase_elapsed_ms(), 64000);
  EXPECT_EQ(sent.step_time_ms(), 95.5);
  EXPECT_EQ(sent.window_steps(), 20);
  ASSERT_EQ(sent.phase_ms_size(), 2);
  EXPECT_EQ(sent.phase_ms().at("forward"), 20);
  EXPECT_EQ(sent.phase_ms().at("collective"), 75.5);
  EXPECT_TRUE(sent.collective_ready());
  EXPECT_EQ(sent.device_window_steps(), 10);
  ASSERT_EQ(sent.device_phase_ms_size(), 2);
  EXPECT_EQ(sent.device_phase_ms().at("forward"), 61.5);
  EXPECT_EQ(sent.device_phase_ms().at("comm"), 4);
}

TEST(GrpcCoordinatorClientTest, UnreachableCoordinatorIsUnavailableAfterTheRetryWindow) {
  int port = 0;
  {
    // A port nothing listens on once the probe is gone.
    auto probe = RendezvousStore::Host("127.0.0.1", 0, absl::Seconds(5));
    ASSERT_TRUE(probe.ok()) << probe.status();
    port = (*probe)->port();
  }
  GrpcCoordinatorClientOptions options;
  options.retry_window = absl::Milliseconds(300);
  options.initial_backoff = absl::Milliseconds(20);
  GrpcCoordinatorClient client(grpc::CreateChannel(absl::StrCat("127.0.0.1:", port),
                                                   grpc::InsecureChannelCredentials()),
                               TrainerIdentity{1, 0, 0}, options);
  EXPECT_EQ(client.Rendezvous("", "gloo").status().code(),
            absl::StatusCode::kUnavailable);
}

TEST(StaticStoreGroupTest, RanksMeetAtAFixedStoreAddress) {
  int port = 0;
  {
    auto probe = RendezvousStore::Host("127.0.0.1", 0, absl::Seconds(5));
    ASSERT_TRUE(probe.ok()) << probe.status();
    port = (*probe)->port();
  }
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < 2; ++rank) {
    ranks.emplace_back([&, rank] {
      LaunchOptions launch;
      launch.rendezvous_store = absl::StrCat("127.0.0.1:", port);
      launch.rank = rank;
      launch.world_size = 2;
      absl::StatusOr<ProcessGroup> group = JoinProcessGroup(launch, nullptr);
      ASSERT_TRUE(group.ok()) << group.status();
      EXPECT_EQ(group->communicator->world_size(), 2);
      EXPECT_TRUE(group->communicator->Barrier().ok());
    });
  }
  for (std::thread& thread : ranks) thread.join();
}

TEST(StandaloneGroupTest, WorldOfOneNeedsNoCoordinator) {
  absl::StatusOr<ProcessGroup> group = JoinProcessGroup(LaunchOptions(), nullptr);
  ASSERT_TRUE(group.ok()) << group.status();
  EXPECT_EQ(group->communicator->backend(), "local");

  LaunchOptions two;
  two.world_size = 2;
  EXPECT_EQ(JoinProcessGroup(two, nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tessera::trainer
