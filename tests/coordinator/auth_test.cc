// Authentication: tokens in the store, trainer credentials, and the gRPC and
// HTTP edges of a coordinator with authentication on (the default).
#include "coordinator/core/auth.h"

#include <chrono>
#include <future>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/tls.h"
#include "coordinator/coordinator_server.h"
#include "coordinator/store/sqlite_store.h"
#include "gmock/gmock.h"
#include "google/protobuf/descriptor.h"
#include "grpcpp/generic/generic_stub.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "tests/testing/grpc_auth.h"
#include "tests/testing/test_util.h"

namespace tessera {
namespace {

namespace v1 = ::tessera::v1;
using ::testing::HasSubstr;
using ::testing::StartsWith;

class AuthenticatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto store = SqliteStore::Open(":memory:");
    ASSERT_TRUE(store.ok());
    store_ = std::move(*store);
    auto auth = Authenticator::Create(store_.get(), &clock_, Authenticator::Options());
    ASSERT_TRUE(auth.ok()) << auth.status();
    auth_ = std::move(*auth);
  }
  FakeClock clock_;
  std::unique_ptr<SqliteStore> store_;
  std::unique_ptr<Authenticator> auth_;
};

TEST_F(AuthenticatorTest, StoredTokenIsOnlyAHashAndAuthenticatesItsKindOnly) {
  auto token = CreateToken(*store_, clock_, kUserToken, "alice");
  ASSERT_TRUE(token.ok()) << token.status();
  EXPECT_THAT(*token, StartsWith("tsr_user_"));
  auto stored = store_->ListTokens();
  ASSERT_TRUE(stored.ok());
  ASSERT_EQ(stored->size(), 1u);
  EXPECT_EQ((*stored)[0].hash.size(), 32u);
  EXPECT_EQ(token->find((*stored)[0].hash), std::string::npos);

  auto name = auth_->Authenticate("Bearer " + *token, kUserToken);
  ASSERT_TRUE(name.ok()) << name.status();
  EXPECT_EQ(*name, "alice");
  EXPECT_TRUE(absl::IsUnauthenticated(
      auth_->Authenticate("Bearer " + *token, kJoinToken).status()));
  EXPECT_TRUE(absl::IsUnauthenticated(auth_->Authenticate("", kUserToken).status()));
  std::string forged = *token;
  forged.back() = forged.back() == '0' ? '1' : '0';
  EXPECT_TRUE(absl::IsUnauthenticated(
      auth_->Authenticate("Bearer " + forged, kUserToken).status()));
  EXPECT_TRUE(absl::IsUnauthenticated(
      auth_->Authenticate("Bearer tsr_user_99_abcd", kUserToken).status()));
  EXPECT_EQ(auth_->rejected(), 4);
}

TEST_F(AuthenticatorTest, TokenIdOfNamesTheStoredTokenWithOrWithoutAPin) {
  auto first = CreateToken(*store_, clock_, kUserToken, "alice");
  auto second = CreateToken(*store_, clock_, kJoinToken, "rack-1");
  ASSERT_TRUE(first.ok() && second.ok());
  auto stored = store_->ListTokens();
  ASSERT_TRUE(stored.ok());
  ASSERT_EQ(stored->size(), 2u);
  EXPECT_EQ(TokenIdOf(*first).value_or(-1), (*stored)[0].id);
  EXPECT_EQ(TokenIdOf(*second).value_or(-1), (*stored)[1].id);
  EXPECT_EQ(TokenIdOf(AddPinToToken(*second, std::string(64, 'a'))).value_or(-1),
            (*stored)[1].id);
  EXPECT_TRUE(absl::IsInvalidArgument(TokenIdOf("tsr_user_x_abcd").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(TokenIdOf("Bearer abc").status()));
}

TEST_F(AuthenticatorTest, RevokedTokenStopsWorkingOnceTheCacheExpires) {
  auto token = CreateToken(*store_, clock_, kJoinToken, "rack-1");
  ASSERT_TRUE(token.ok());
  ASSERT_TRUE(auth_->Authenticate("Bearer " + *token, kJoinToken).ok());
  ASSERT_TRUE(store_->RevokeToken(1).ok());
  clock_.Advance(absl::Seconds(31));
  auto after = auth_->Authenticate("Bearer " + *token, kJoinToken);
  EXPECT_TRUE(absl::IsUnauthenticated(after.status()));
  EXPECT_THAT(after.status().message(), HasSubstr("revoked"));
}

TEST_F(AuthenticatorTest, AForgottenRevokedTokenIsRefusedAtOnce) {
  auto token = CreateToken(*store_, clock_, kJoinToken, "slurm-allocation");
  ASSERT_TRUE(token.ok());
  ASSERT_TRUE(auth_->Authenticate("Bearer " + *token, kJoinToken).ok());
  ASSERT_TRUE(store_->RevokeToken(1).ok());
  // Still cached: a revocation elsewhere takes up to cache_ttl.
  EXPECT_TRUE(auth_->Authenticate("Bearer " + *token, kJoinToken).ok());
  auth_->Forget(1);
  auto after = auth_->Authenticate("Bearer " + *token, kJoinToken);
  EXPECT_TRUE(absl::IsUnauthenticated(after.status()));
  EXPECT_THAT(after.status().message(), HasSubstr("revoked"));
}

TEST(AuthenticatorExternalTest, ATokenRevokedByAnotherProcessIsRefusedWithinASecond) {
  // The coordinator's store and, on the same file, the connection of a
  // `tessera-coordinator token revoke` run beside it.
  testing::TempDir dir;
  auto store = SqliteStore::Open(dir.File("tessera.db"));
  ASSERT_TRUE(store.ok()) << store.status();
  FakeClock clock;
  auto auth = Authenticator::Create(store->get(), &clock, Authenticator::Options());
  ASSERT_TRUE(auth.ok()) << auth.status();
  auto token = CreateToken(**store, clock, kJoinToken, "rack-2");
  ASSERT_TRUE(token.ok());
  absl::StatusOr<int64_t> id = TokenIdOf(*token);
  ASSERT_TRUE(id.ok());
  ASSERT_TRUE((*auth)->Authenticate("Bearer " + *token, kJoinToken).ok());

  auto other = SqliteStore::Open(dir.File("tessera.db"));
  ASSERT_TRUE(other.ok()) << other.status();
  ASSERT_TRUE((*other)->RevokeToken(*id).ok());
  clock.Advance(absl::Seconds(1));
  auto after = (*auth)->Authenticate("Bearer " + *token, kJoinToken);
  EXPECT_TRUE(absl::IsUnauthenticated(after.status())) << "cached for cache_ttl (30 s)";
  EXPECT_THAT(after.status().message(), HasSubstr("revoked"));

  // The coordinator's own writes do not drop the cache: another token stays
  // cached across them.
  auto kept = CreateToken(**store, clock, kJoinToken, "rack-3");
  ASSERT_TRUE(kept.ok());
  ASSERT_TRUE((*auth)->Authenticate("Bearer " + *kept, kJoinToken).ok());
  absl::StatusOr<int64_t> kept_id = TokenIdOf(*kept);
  ASSERT_TRUE(kept_id.ok());
  ASSERT_TRUE((*store)->RevokeToken(*kept_id).ok());  // as if cached, unseen
  clock.Advance(absl::Seconds(2));
  EXPECT_TRUE((*auth)->Authenticate("Bearer " + *kept, kJoinToken).ok());
}

TEST_F(AuthenticatorTest, TrainerCredentialIsScopedToItsRankAndExpires) {
  const std::string cred = auth_->IssueTrainerCredential(7, 2, 1);
  EXPECT_TRUE(auth_->CheckTrainer("Bearer " + cred, 7, 2, 1).ok());
  EXPECT_TRUE(absl::IsPermissionDenied(auth_->CheckTrainer("Bearer " + cred, 7, 2, 0)));
  EXPECT_TRUE(absl::IsPermissionDenied(auth_->CheckTrainer("Bearer " + cred, 8, 2, 1)));
  EXPECT_TRUE(absl::IsPermissionDenied(auth_->CheckTrainer("Bearer " + cred, 7, 3, 1)));
  // Changing the scope inside the text breaks the MAC.
  std::string widened = cred;
  widened.replace(widened.find("_7_2_1_"), 7, "_8_2_1_");
  EXPECT_TRUE(absl::IsUnauthenticated(auth_->CheckTrainer("Bearer " + widened, 8, 2, 1)));
  clock_.Advance(absl::Hours(73));
  EXPECT_TRUE(absl::IsUnauthenticated(auth_->CheckTrainer("Bearer " + cred, 7, 2, 1)));
}

TEST_F(AuthenticatorTest, CredentialKeySurvivesARestart) {
  const std::string cred = auth_->IssueTrainerCredential(1, 1, 0);
  auto again = Authenticator::Create(store_.get(), &clock_, Authenticator::Options());
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE((*again)->CheckTrainer("Bearer " + cred, 1, 1, 0).ok());
}

// A coordinator with authentication on, as it runs by default.
class ClosedCoordinatorTest : public ::testing::Test {
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
    join_ = *CreateToken(server_->store(), clock, kJoinToken, "rack");
  }

  std::unique_ptr<v1::JobService::Stub> Jobs(const std::string& token) {
    grpc::ChannelArguments args;
    return v1::JobService::NewStub(
        token.empty() ? server_->InProcessChannel()
                      : server_->InProcessChannel(testing::BearerInterceptors(token)));
  }

  std::unique_ptr<CoordinatorServer> server_;
  std::string user_;
  std::string join_;
};

TEST_F(ClosedCoordinatorTest, JobServiceRefusesCallsWithoutAUserToken) {
  grpc::ClientContext anonymous;
  v1::ListJobsResponse list;
  grpc::Status s = Jobs("")->ListJobs(&anonymous, v1::ListJobsRequest(), &list);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED);

  grpc::ClientContext with_join;
  s = Jobs(join_)->ListJobs(&with_join, v1::ListJobsRequest(), &list);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED)
      << "a join token is not a user";

  grpc::ClientContext with_user;
  s = Jobs(user_)->ListJobs(&with_user, v1::ListJobsRequest(), &list);
  EXPECT_TRUE(s.ok()) << s.error_message();
}

TEST_F(ClosedCoordinatorTest, WorkersNeedTheJoinTokenAndLaunchOrdersCarryCredentials) {
  grpc::ChannelArguments args;
  auto anonymous = v1::WorkerService::NewStub(server_->InProcessChannel());
  v1::RegisterWorkerRequest reg;
  reg.set_name("w");
  reg.set_slots(1);
  v1::RegisterWorkerResponse registered;
  grpc::ClientContext c1;
  EXPECT_EQ(anonymous->RegisterWorker(&c1, reg, &registered).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);

  auto worker = v1::WorkerService::NewStub(
      server_->InProcessChannel(testing::BearerInterceptors(join_)));
  grpc::ClientContext c2;
  ASSERT_TRUE(worker->RegisterWorker(&c2, reg, &registered).ok());

  v1::JobSpec spec;
  spec.set_name("j");
  spec.set_world_size(1);
  spec.mutable_trainer()->set_model("vit-micro");
  spec.mutable_trainer()->set_dataset("synthetic");
  spec.mutable_trainer()->set_batch_size(8);
  spec.mutable_trainer()->set_epochs(1);
  ASSERT_TRUE(server_->manager().jobs().Submit(spec, "", "").ok());
  v1::HeartbeatRequest beat;
  beat.set_name("w");
  beat.set_epoch(registered.epoch());
  beat.set_worker_credential(registered.worker_credential());
  v1::HeartbeatResponse orders;
  grpc::ClientContext c3;
  ASSERT_TRUE(worker->Heartbeat(&c3, beat, &orders).ok());
  ASSERT_EQ(orders.launch_size(), 1);
  const std::string cred = orders.launch(0).credential();
  EXPECT_THAT(cred, StartsWith("tsr_trainer_1_1_0_"));

  // The rank's credential reports for its rank, and for no other.
  auto trainer = v1::TrainerService::NewStub(
      server_->InProcessChannel(testing::BearerInterceptors(cred)));
  v1::ReportResultRequest result;
  result.set_job_id(1);
  result.set_attempt(1);
  result.set_rank(0);
  v1::ReportResultResponse ok;
  grpc::ClientContext c4;
  EXPECT_TRUE(trainer->ReportResult(&c4, result, &ok).ok());
  v1::ReportMetricsRequest other;
  other.set_job_id(1);
  other.set_attempt(1);
  other.set_rank(1);
  v1::ReportMetricsResponse none;
  grpc::ClientContext c5;
  EXPECT_EQ(trainer->ReportMetrics(&c5, other, &none).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  auto user_as_trainer = v1::TrainerService::NewStub(
      server_->InProcessChannel(testing::BearerInterceptors(user_)));
  grpc::ClientContext c6;
  EXPECT_EQ(user_as_trainer->ReportResult(&c6, result, &ok).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
}

TEST_F(ClosedCoordinatorTest, HttpApiNeedsATokenAndTheSessionCookieOnlyReads) {
  httplib::Client http("127.0.0.1", server_->http_port());
  auto anonymous = http.Get("/api/v1/jobs");
  ASSERT_TRUE(anonymous);
  EXPECT_EQ(anonymous->status, 401);
  auto health = http.Get("/healthz");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);

  httplib::Headers bearer = {{"Authorization", "Bearer " + user_}};
  auto listed = http.Get("/api/v1/jobs", bearer);
  ASSERT_TRUE(listed);
  EXPECT_EQ(listed->status, 200);
  auto wrong = http.Get("/api/v1/jobs", {{"Authorization", "Bearer " + join_}});
  ASSERT_TRUE(wrong);
  EXPECT_EQ(wrong->status, 401);

  auto session = http.Post("/api/v1/session", bearer, "", "application/json");
  ASSERT_TRUE(session);
  ASSERT_EQ(session->status, 200);
  const std::string cookie = session->get_header_value("Set-Cookie");
  EXPECT_THAT(cookie, HasSubstr("HttpOnly"));
  EXPECT_THAT(cookie, HasSubstr("SameSite=Strict"));
  const std::string pair = cookie.substr(0, cookie.find(';'));
  httplib::Headers with_cookie = {{"Cookie", pair}};
  auto read = http.Get("/api/v1/workers", with_cookie);
  ASSERT_TRUE(read);
  EXPECT_EQ(read->status, 200);
  // A cookie is sent by the browser on any request to this host, so it never
  // authorizes a change.
  auto change = http.Post("/api/v1/jobs/1/cancel", with_cookie, "", "application/json");
  ASSERT_TRUE(change);
  EXPECT_EQ(change->status, 401);
}

// Every RPC of every service and every /api/ route, called with each kind of
// bad credential: none, garbage, a forged secret, a revoked token and a valid
// token of the wrong kind. Every call must be refused before it does anything.
TEST_F(ClosedCoordinatorTest, EveryRpcAndRouteRefusesEveryKindOfBadCredential) {
  RealClock clock;
  const std::string revoked =
      *CreateToken(server_->store(), clock, kUserToken, "mallory");
  auto tokens = server_->store().ListTokens();
  ASSERT_TRUE(tokens.ok());
  for (const auto& t : *tokens) {
    if (t.name == "mallory") ASSERT_TRUE(server_->store().RevokeToken(t.id).ok());
  }
  std::string forged = user_;
  forged.back() = forged.back() == '0' ? '1' : '0';
  // A freshly revoked token may still be cached; this one never was.
  struct Bad {
    std::string what;
    std::string token;  // empty: no authorization header at all
  };
  const std::vector<Bad> common = {{"no token", ""},
                                   {"garbage", "not-a-token"},
                                   {"forged secret", forged},
                                   {"revoked", revoked}};
  const std::vector<std::pair<std::string, std::string>> services = {
      {"tessera.v1.JobService", join_},      // a join token is not a user
      {"tessera.v1.WorkerService", user_},   // a user token is not a worker
      {"tessera.v1.TrainerService", join_},  // nor is either a trainer
  };
  int attempts = 0;
  int refused = 0;
  for (const auto& [name, wrong_kind] : services) {
    const google::protobuf::ServiceDescriptor* service =
        google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(name);
    ASSERT_NE(service, nullptr) << name;
    std::vector<Bad> bad = common;
    bad.push_back({"wrong kind", wrong_kind});
    for (int m = 0; m < service->method_count(); ++m) {
      const std::string method =
          absl::StrCat("/", service->full_name(), "/", service->method(m)->name());
      for (const Bad& b : bad) {
        grpc::GenericStub stub(
            b.token.empty()
                ? server_->InProcessChannel()
                : server_->InProcessChannel(testing::BearerInterceptors(b.token)));
        grpc::ClientContext context;
        context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
        // An empty message (every field at its default): one empty slice.
        grpc::Slice empty("", 0);
        grpc::ByteBuffer request(&empty, 1);
        grpc::ByteBuffer response;
        std::promise<grpc::Status> done;
        stub.UnaryCall(
            &context, method, grpc::StubOptions(), &request, &response,
            [&done](grpc::Status status) { done.set_value(std::move(status)); });
        const grpc::Status status = done.get_future().get();
        ++attempts;
        if (status.error_code() == grpc::StatusCode::UNAUTHENTICATED) {
          ++refused;
        } else {
          ADD_FAILURE() << method << " with " << b.what << " answered "
                        << status.error_code() << " " << status.error_message();
        }
      }
    }
  }
  httplib::Client http("127.0.0.1", server_->http_port());
  const std::vector<std::pair<std::string, std::string>> routes = {
      {"GET", "/api/v1/jobs"},
      {"GET", "/api/v1/jobs/1"},
      {"GET", "/api/v1/jobs/1/metrics"},
      {"GET", "/api/v1/jobs/1/logs"},
      {"GET", "/api/v1/workers"},
      {"GET", "/api/v1/sweeps"},
      {"GET", "/api/v1/sweeps/1"},
      {"GET", "/api/v1/sweeps/1/report"},
      {"GET", "/api/v1/stream/jobs"},
      {"POST", "/api/v1/jobs/1/cancel"},
      {"POST", "/api/v1/sweeps/1/cancel"}};
  std::vector<Bad> bad_http = common;
  bad_http.push_back({"wrong kind", join_});
  for (const auto& [verb, path] : routes) {
    for (const Bad& b : bad_http) {
      httplib::Headers headers;
      if (!b.token.empty()) headers.emplace("Authorization", "Bearer " + b.token);
      auto answer = verb == "GET" ? http.Get(path, headers)
                                  : http.Post(path, headers, "", "application/json");
      ++attempts;
      ASSERT_TRUE(answer) << verb << " " << path;
      if (answer->status == 401) {
        ++refused;
      } else {
        ADD_FAILURE() << verb << " " << path << " with " << b.what << " answered "
                      << answer->status;
      }
    }
  }
  EXPECT_EQ(refused, attempts);
  // docs/performance.md's robustness table quotes this line.
  std::cout << "FIGURE unauthenticated_attempts=" << attempts << " refused=" << refused
            << std::endl;
}

}  // namespace
}  // namespace tessera
