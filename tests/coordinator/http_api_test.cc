// The JSON API through the real HTTP server of an in-process coordinator.
#include "coordinator/coordinator_server.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "nlohmann/json.hpp"

namespace tessera {
namespace {

using ::testing::HasSubstr;

class HttpApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    CoordinatorOptions options;
    options.listen = "";
    options.http = "127.0.0.1:0";
    options.db_path = ":memory:";
    auto server = CoordinatorServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    client_ = std::make_unique<httplib::Client>("127.0.0.1", server_->http_port());
  }

  std::unique_ptr<CoordinatorServer> server_;
  std::unique_ptr<httplib::Client> client_;
};

TEST_F(HttpApiTest, JobIsServedAsJsonWithStateName) {
  tessera::v1::JobSpec spec;
  spec.set_name("<img src=x onerror=alert(1)>");
  spec.set_world_size(2);
  spec.mutable_trainer()->set_model("vit-micro");
  spec.mutable_trainer()->set_dataset("synthetic");
  spec.mutable_trainer()->set_batch_size(8);
  spec.mutable_trainer()->set_epochs(1);
  absl::StatusOr<int64_t> id = server_->manager().Submit(spec, "", "");
  ASSERT_TRUE(id.ok()) << id.status();

  auto res = client_->Get(("/api/v1/jobs/" + std::to_string(*id)).c_str());
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_THAT(res->get_header_value("Content-Type"), HasSubstr("application/json"));
  EXPECT_THAT(res->get_header_value("Content-Security-Policy"),
              HasSubstr("default-src 'self'"));
  nlohmann::json job = nlohmann::json::parse(res->body);
  EXPECT_EQ(job["state"], "JOB_STATE_QUEUED");
  EXPECT_EQ(job["name"], "<img src=x onerror=alert(1)>");

  auto list = client_->Get("/api/v1/jobs");
  ASSERT_TRUE(list);
  EXPECT_EQ(nlohmann::json::parse(list->body)["jobs"].size(), 1u);
}

TEST_F(HttpApiTest, UnknownJobIs404AndBadIdIs400) {
  auto missing = client_->Get("/api/v1/jobs/999");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
  EXPECT_EQ(nlohmann::json::parse(missing->body)["code"], "NOT_FOUND");

  auto bad = client_->Get("/api/v1/jobs/abc");
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400);

  auto nowhere = client_->Get("/api/v2/jobs");
  ASSERT_TRUE(nowhere);
  EXPECT_EQ(nowhere->status, 404);
}

}  // namespace
}  // namespace tessera
