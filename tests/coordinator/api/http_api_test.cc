// The JSON API through the real HTTP server of an in-process coordinator.
#include <atomic>
#include <functional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/search_spec.h"
#include "coordinator/coordinator_server.h"
#include "coordinator/core/auth.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "nlohmann/json.hpp"

namespace tessera {
namespace {

using ::testing::HasSubstr;

class HttpApiTest : public ::testing::Test {
 protected:
  // Tests of routes and streams run without authentication; the Auth* tests
  // turn it on.
  void SetUp() override {
    CoordinatorOptions options;
    options.auth.enabled = false;
    StartServer(options);
  }

  void StartServer(CoordinatorOptions options) {
    options.listen = "";
    options.http = "127.0.0.1:0";
    options.db_path = ":memory:";
    auto server = CoordinatorServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    client_ = std::make_unique<httplib::Client>("127.0.0.1", server_->http_port());
  }

  int64_t SubmitJob(const std::string& name, int world_size = 1) {
    tessera::v1::JobSpec spec;
    spec.set_name(name);
    spec.set_world_size(world_size);
    spec.mutable_trainer()->set_model("vit-micro");
    spec.mutable_trainer()->set_dataset("synthetic");
    spec.mutable_trainer()->set_batch_size(8);
    spec.mutable_trainer()->set_epochs(1);
    absl::StatusOr<int64_t> id = server_->manager().jobs().Submit(spec, "", "");
    EXPECT_TRUE(id.ok()) << id.status();
    return *id;
  }

  // Reads an event stream until `enough` holds for the text so far or the
  // deadline passes; returns the text read.
  std::string ReadStream(const std::string& path,
                         const std::function<bool(const std::string&)>& enough,
                         absl::Duration deadline = absl::Seconds(10)) {
    httplib::Client c("127.0.0.1", server_->http_port());
    c.set_read_timeout(std::chrono::seconds(20));
    std::string text;
    const absl::Time end = absl::Now() + deadline;
    c.Get(path.c_str(), [&](const char* data, size_t n) {
      text.append(data, n);
      return !enough(text) && absl::Now() < end;
    });
    return text;
  }

  // The data of every event named `name`, parsed.
  static std::vector<nlohmann::json> Events(const std::string& text,
                                            const std::string& name) {
    std::vector<nlohmann::json> out;
    const std::string marker = "event: " + name + "\ndata: ";
    for (size_t at = text.find(marker); at != std::string::npos;
         at = text.find(marker, at + 1)) {
      const size_t begin = at + marker.size();
      const size_t end = text.find('\n', begin);
      if (end == std::string::npos) break;
      out.push_back(nlohmann::json::parse(text.substr(begin, end - begin)));
    }
    return out;
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
  absl::StatusOr<int64_t> id = server_->manager().jobs().Submit(spec, "", "");
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

TEST_F(HttpApiTest, JobListFiltersByStateAndLimit) {
  const int64_t a = SubmitJob("a");
  SubmitJob("b");
  SubmitJob("c");
  ASSERT_TRUE(server_->manager().jobs().CancelJob(Caller::Admin(), a).ok());

  auto cancelled = client_->Get("/api/v1/jobs?state=cancelled");
  ASSERT_TRUE(cancelled);
  auto jobs = nlohmann::json::parse(cancelled->body)["jobs"];
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_EQ(jobs[0]["name"], "a");

  auto limited = client_->Get("/api/v1/jobs?limit=2");
  ASSERT_TRUE(limited);
  auto newest = nlohmann::json::parse(limited->body)["jobs"];
  ASSERT_EQ(newest.size(), 2u);
  EXPECT_EQ(newest[0]["name"], "c");

  auto bad = client_->Get("/api/v1/jobs?state=sleeping");
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400);
  EXPECT_THAT(bad->body, HasSubstr("unknown job state"));
}

TEST_F(HttpApiTest, CancelIsPostOnlyAndNeedsAuthorizationHeader) {
  const int64_t id = SubmitJob("victim");
  const std::string path = "/api/v1/jobs/" + std::to_string(id) + "/cancel";

  auto get = client_->Get(path.c_str());
  ASSERT_TRUE(get);
  EXPECT_EQ(get->status, 405);

  auto anonymous = client_->Post(path.c_str(), "", "application/json");
  ASSERT_TRUE(anonymous);
  EXPECT_EQ(anonymous->status, 401);
  EXPECT_EQ(server_->manager().jobs().GetJob(Caller::Admin(), id)->state(),
            tessera::v1::JOB_STATE_QUEUED);

  httplib::Headers auth = {{"Authorization", "Bearer dashboard"}};
  auto cancelled = client_->Post(path.c_str(), auth, "", "application/json");
  ASSERT_TRUE(cancelled);
  EXPECT_EQ(cancelled->status, 200);
  EXPECT_EQ(nlohmann::json::parse(cancelled->body)["state"], "JOB_STATE_CANCELLED");
  EXPECT_EQ(server_->manager().jobs().GetJob(Caller::Admin(), id)->state(),
            tessera::v1::JOB_STATE_CANCELLED);

  // Cancelling twice is not an error.
  auto again = client_->Post(path.c_str(), auth, "", "application/json");
  ASSERT_TRUE(again);
  EXPECT_EQ(again->status, 200);
}

TEST_F(HttpApiTest, JobStreamSendsStateThenNewMetricsAsTheyArrive) {
  // A worker so that the job is placed and its rank can report.
  tessera::v1::RegisterWorkerRequest reg;
  reg.set_name("w");
  reg.set_slots(1);
  ASSERT_TRUE(server_->manager().workers().RegisterWorker(reg).ok());
  const int64_t id = SubmitJob("streamed");

  std::atomic<bool> reported{false};
  std::thread reporter([&] {
    absl::SleepFor(absl::Milliseconds(500));
    tessera::v1::ReportMetricsRequest req;
    req.set_job_id(id);
    req.set_attempt(1);
    req.set_rank(0);
    for (int step : {10, 20}) {
      auto* p = req.add_points();
      p->set_step(step);
      p->set_name("loss");
      p->set_value(2.5 - step * 0.01);
    }
    server_->manager().ranks().ReportMetrics(req, [&](absl::Status s) {
      EXPECT_TRUE(s.ok()) << s;
      reported = true;
    });
  });
  const std::string text =
      ReadStream("/api/v1/stream/jobs/" + std::to_string(id), [&](const std::string& t) {
        for (const auto& m : Events(t, "metrics")) {
          if (m["points"].size() == 2) return true;
        }
        return false;
      });
  reporter.join();
  ASSERT_TRUE(reported);
  std::vector<nlohmann::json> jobs = Events(text, "job");
  ASSERT_FALSE(jobs.empty()) << text;
  EXPECT_EQ(jobs[0]["name"], "streamed");
  std::vector<nlohmann::json> metrics = Events(text, "metrics");
  ASSERT_GE(metrics.size(), 2u) << text;
  // The first event is the (empty) history; the points follow once stored.
  EXPECT_EQ(metrics[0]["reset"], true);
  EXPECT_EQ(metrics[0]["points"].size(), 0u);
  EXPECT_EQ(metrics.back()["points"].size(), 2u);
  EXPECT_EQ(metrics.back()["points"][1]["step"], "20");
}

TEST_F(HttpApiTest, JobStreamEndsAfterTheJobEnds) {
  const int64_t id = SubmitJob("short");
  ASSERT_TRUE(server_->manager().jobs().CancelJob(Caller::Admin(), id).ok());
  const std::string text = ReadStream("/api/v1/stream/jobs/" + std::to_string(id),
                                      [](const std::string&) { return false; });
  EXPECT_EQ(Events(text, "end").size(), 1u) << text;
  EXPECT_EQ(Events(text, "job").back()["state"], "JOB_STATE_CANCELLED");
}

TEST_F(HttpApiTest, StreamsOverTheLimitGet503AndPlainRequestsStillWork) {
  server_.reset();
  CoordinatorOptions options;
  options.auth.enabled = false;
  options.http_max_streams = 2;
  StartServer(options);
  std::atomic<bool> stop{false};
  std::vector<std::thread> open;
  std::atomic<int> opened{0};
  for (int i = 0; i < 2; ++i) {
    open.emplace_back([&] {
      httplib::Client c("127.0.0.1", server_->http_port());
      c.set_read_timeout(std::chrono::seconds(30));
      bool counted = false;
      c.Get("/api/v1/stream/workers", [&](const char*, size_t) {
        if (!counted) {
          counted = true;
          ++opened;
        }
        return !stop.load();
      });
    });
  }
  for (int i = 0; i < 100 && opened < 2; ++i) absl::SleepFor(absl::Milliseconds(50));
  ASSERT_EQ(opened, 2);
  auto third = client_->Get("/api/v1/stream/jobs");
  ASSERT_TRUE(third) << httplib::to_string(third.error());
  EXPECT_EQ(third->status, 503);
  EXPECT_THAT(third->body, HasSubstr("too many event streams"));
  // The API still answers while the streams hold their threads.
  for (int i = 0; i < 20; ++i) {
    auto workers = client_->Get("/api/v1/workers");
    ASSERT_TRUE(workers);
    EXPECT_EQ(workers->status, 200);
  }
  stop = true;
  // Wake the streams so that they notice the client has gone.
  server_->manager().changes().Notify();
  for (auto& t : open) t.join();
}

TEST_F(HttpApiTest, SweepRoutesServeTheSweepAndItsReport) {
  tessera::v1::SweepSpec spec;
  spec.set_name("study");
  spec.mutable_grid()->add_world_size(1);
  spec.mutable_grid()->add_world_size(2);
  auto* base = spec.mutable_base();
  base->mutable_trainer()->set_model("vit-micro");
  base->mutable_trainer()->set_dataset("synthetic");
  base->mutable_trainer()->set_batch_size(8);
  base->mutable_trainer()->set_epochs(1);
  std::shared_ptr<grpc::Channel> channel = server_->InProcessChannel();
  auto stub = tessera::v1::JobService::NewStub(channel);
  grpc::ClientContext ctx;
  tessera::v1::SubmitSweepRequest req;
  *req.mutable_spec() = spec;
  tessera::v1::SubmitSweepResponse resp;
  ASSERT_TRUE(stub->SubmitSweep(&ctx, req, &resp).ok());
  const std::string id = std::to_string(resp.sweep_id());

  auto sweep = client_->Get(("/api/v1/sweeps/" + id).c_str());
  ASSERT_TRUE(sweep);
  ASSERT_EQ(sweep->status, 200);
  auto json = nlohmann::json::parse(sweep->body);
  EXPECT_EQ(json["state"], "SWEEP_STATE_RUNNING");
  ASSERT_EQ(json["points"].size(), 2u);
  EXPECT_NE(json["points"][0]["job_id"], "0");

  auto report = client_->Get(("/api/v1/sweeps/" + id + "/report").c_str());
  ASSERT_TRUE(report);
  EXPECT_EQ(nlohmann::json::parse(report->body)["rows"].size(), 2u);

  auto jobs = client_->Get(("/api/v1/jobs?sweep=" + id).c_str());
  ASSERT_TRUE(jobs);
  EXPECT_EQ(nlohmann::json::parse(jobs->body)["jobs"].size(), 1u);

  const std::string text = ReadStream(
      "/api/v1/stream/sweeps/" + id,
      [](const std::string& t) { return t.find("event: report") != std::string::npos; });
  EXPECT_EQ(Events(text, "sweep").size(), 1u);
  EXPECT_EQ(Events(text, "report").size(), 1u);

  httplib::Headers auth = {{"Authorization", "Bearer t"}};
  auto cancel = client_->Post(("/api/v1/sweeps/" + id + "/cancel").c_str(), auth, "",
                              "application/json");
  ASSERT_TRUE(cancel);
  EXPECT_EQ(nlohmann::json::parse(cancel->body)["state"], "SWEEP_STATE_CANCELLED");
}

// A search as its owner's dashboard reads it: the search with its trials,
// their values and jobs; another user's search is NotFound, as a sweep is.
TEST_F(HttpApiTest, SearchRoutesServeTheSearchWithItsTrialsToItsOwnerOnly) {
  server_.reset();
  CoordinatorOptions options;
  options.auth.enabled = true;
  StartServer(options);
  v1::RegisterWorkerRequest reg;
  reg.set_name("cpu-node");
  reg.set_hostname("cpu-node.example");
  reg.set_device_kind("cpu");
  reg.set_slots(2);
  ASSERT_TRUE(server_->manager().workers().RegisterWorker(reg).ok());
  RealClock clock;
  const std::string alice = *CreateToken(server_->store(), clock, kUserToken, "alice");
  const std::string bob = *CreateToken(server_->store(), clock, kUserToken, "bob");
  absl::StatusOr<v1::SearchSpec> spec = ParseAndValidateSearchSpec(R"(name: lr
search:
  method: grid
  metric: val_accuracy
  max_concurrent: 2
  max_length: 100
  parameters:
    lr: {choice: [0.001, 0.01]}
base:
  world_size: 1
  trainer: {model: vit-micro, dataset: synthetic, batch_size: 8, val_fraction: 0.1}
)",
                                                                   SpecLimits{});
  ASSERT_TRUE(spec.ok()) << spec.status();
  absl::StatusOr<v1::SubmitSearchResponse> submitted =
      server_->searches().Submit(*spec, "", "", "alice");
  ASSERT_TRUE(submitted.ok()) << submitted.status();
  const std::string path = absl::StrCat("/api/v1/searches/", submitted->search_id());
  const httplib::Headers as_alice = {{"Authorization", "Bearer " + alice}};
  const httplib::Headers as_bob = {{"Authorization", "Bearer " + bob}};

  auto search = client_->Get(path.c_str(), as_alice);
  ASSERT_TRUE(search);
  ASSERT_EQ(search->status, 200) << search->body;
  const nlohmann::json json = nlohmann::json::parse(search->body);
  EXPECT_EQ(json["state"], "SEARCH_STATE_RUNNING");
  EXPECT_EQ(json["owner"], "alice");
  EXPECT_EQ(json["best_trial"], -1);
  ASSERT_EQ(json["trials"].size(), 2u);
  EXPECT_EQ(json["trials"][1]["parameters"]["lr"], "0.01");
  EXPECT_EQ(json["trials"][1]["status"], "running");
  EXPECT_EQ(json["trials"][1]["job_ids"].size(), 1u);

  auto mine = client_->Get("/api/v1/searches", as_alice);
  ASSERT_TRUE(mine);
  EXPECT_EQ(nlohmann::json::parse(mine->body)["searches"].size(), 1u);
  auto theirs = client_->Get("/api/v1/searches", as_bob);
  ASSERT_TRUE(theirs);
  ASSERT_EQ(theirs->status, 200);
  EXPECT_TRUE(nlohmann::json::parse(theirs->body)["searches"].empty());
  auto hidden = client_->Get(path.c_str(), as_bob);
  ASSERT_TRUE(hidden);
  EXPECT_EQ(hidden->status, 404);
  auto bad = client_->Get("/api/v1/searches/x1", as_alice);
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400);

  auto refused =
      client_->Post((path + "/cancel").c_str(), as_bob, "", "application/json");
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 404);
  auto cancel =
      client_->Post((path + "/cancel").c_str(), as_alice, "", "application/json");
  ASSERT_TRUE(cancel);
  ASSERT_EQ(cancel->status, 200) << cancel->body;
  EXPECT_EQ(nlohmann::json::parse(cancel->body)["state"], "SEARCH_STATE_CANCELLED");
}

TEST_F(HttpApiTest, StaticFilesAreServedWithTheirTypeAndUnknownPathsAre404) {
  static const StaticFile kIndex{"text/html; charset=utf-8", "<!doctype html><p>hi"};
  server_.reset();
  CoordinatorOptions options;
  options.auth.enabled = false;
  options.static_files = [](std::string_view path) -> const StaticFile* {
    return path == "/" || path == "/index.html" ? &kIndex : nullptr;
  };
  StartServer(options);
  auto index = client_->Get("/");
  ASSERT_TRUE(index);
  EXPECT_EQ(index->status, 200);
  EXPECT_EQ(index->body, "<!doctype html><p>hi");
  EXPECT_THAT(index->get_header_value("Content-Type"), HasSubstr("text/html"));
  EXPECT_THAT(index->get_header_value("Content-Security-Policy"),
              HasSubstr("script-src 'self'"));
  auto missing = client_->Get("/nothing.js");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
}

}  // namespace
}  // namespace tessera
