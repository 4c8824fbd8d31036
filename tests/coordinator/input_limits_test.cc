// Input limits and job ownership at the coordinator: the spec's env map and
// path checks, the gRPC message and HTTP body limits, the owner recorded from
// the submitting token (and handed to workers as run_as), and the store's v5
// migration that adds owners to existing databases.
#include <sqlite3.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "common/job_spec.h"
#include "coordinator/coordinator_server.h"
#include "coordinator/core/auth.h"
#include "coordinator/store/sqlite_store.h"
#include "gmock/gmock.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "tests/testing/grpc_auth.h"
#include "tests/testing/test_util.h"

namespace tessera {
namespace {

namespace v1 = ::tessera::v1;
using ::testing::HasSubstr;

constexpr char kBase[] = R"(name: demo
world_size: 1
trainer:
  model: vit-micro
  dataset: synthetic
  batch_size: 8
  epochs: 1
)";

absl::StatusOr<v1::JobSpec> Parse(const std::string& extra) {
  return ParseAndValidateJobSpec(absl::StrCat(kBase, extra), SpecLimits{});
}

// ---- env ----

TEST(SpecEnvTest, EnvMapParsesIntoTheSpec) {
  absl::StatusOr<v1::JobSpec> spec =
      Parse("env:\n  OMP_NUM_THREADS: 4\n  _PRIVATE_1: \"a b; $(c)\"\n");
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_EQ(spec->env_size(), 2);
  EXPECT_EQ(spec->env().at("OMP_NUM_THREADS"), "4");
  EXPECT_EQ(spec->env().at("_PRIVATE_1"), "a b; $(c)");
}

TEST(SpecEnvTest, BadNamesAreRefusedWithTheReason) {
  struct Case {
    const char* name;
    const char* message;
  };
  for (const Case& c :
       {Case{"lower", "must match [A-Z_][A-Z0-9_]*"},
        Case{"1ABC", "must match [A-Z_][A-Z0-9_]*"},
        Case{"A-B", "must match [A-Z_][A-Z0-9_]*"}, Case{"LD_PRELOAD", "reserved"},
        Case{"LD_LIBRARY_PATH", "reserved"}, Case{"TESSERA_JOB_ID", "reserved"},
        Case{"CUDA_VISIBLE_DEVICES", "set by the worker"}}) {
    absl::StatusOr<v1::JobSpec> spec = Parse(absl::StrCat("env:\n  ", c.name, ": x\n"));
    ASSERT_TRUE(absl::IsInvalidArgument(spec.status())) << c.name;
    EXPECT_THAT(spec.status().message(), HasSubstr(c.message)) << c.name;
    EXPECT_THAT(spec.status().message(), HasSubstr(absl::StrCat("'", c.name, "'")));
  }
}

TEST(SpecEnvTest, SizeLimitsHold) {
  std::string many = "env:\n";
  for (int i = 0; i <= kMaxEnvEntries; ++i) absl::StrAppend(&many, "  V", i, ": x\n");
  absl::StatusOr<v1::JobSpec> spec = Parse(many);
  ASSERT_TRUE(absl::IsInvalidArgument(spec.status()));
  EXPECT_THAT(spec.status().message(), HasSubstr("env: has 65 entries, limit 64"));

  spec =
      Parse(absl::StrCat("env:\n  BIG: ", std::string(kMaxEnvValueBytes + 1, 'v'), "\n"));
  ASSERT_TRUE(absl::IsInvalidArgument(spec.status()));
  EXPECT_THAT(spec.status().message(), HasSubstr("too long"));

  spec = Parse(absl::StrCat("env:\n  ", std::string(kMaxEnvNameBytes + 1, 'N'), ": x\n"));
  EXPECT_TRUE(absl::IsInvalidArgument(spec.status()));

  spec = Parse("env:\n  NUL: \"a\\0b\"\n");
  EXPECT_TRUE(absl::IsInvalidArgument(spec.status()));
  spec = Parse("env:\n  A: x\n  A: y\n");
  EXPECT_TRUE(absl::IsInvalidArgument(spec.status()));
  spec = Parse("env:\n  - A\n");
  EXPECT_TRUE(absl::IsInvalidArgument(spec.status()));
}

// ---- paths ----

TEST(SpecPathTest, DirectoriesMustBeAbsoluteWithoutDotDot) {
  EXPECT_TRUE(Parse("  data_dir: /data/fm\n  checkpoint_dir: /shared/c/run\n").ok());
  for (const char* bad : {"data_dir: data/fm", "data_dir: /data/../etc",
                          "checkpoint_dir: /shared/..", "checkpoint_dir: ./ckpt"}) {
    absl::StatusOr<v1::JobSpec> spec = Parse(absl::StrCat("  ", bad, "\n"));
    ASSERT_TRUE(absl::IsInvalidArgument(spec.status())) << bad;
    EXPECT_THAT(spec.status().message(), HasSubstr("trainer.")) << bad;
  }
}

// ---- the coordinator's edges ----

v1::JobSpec Spec() {
  v1::JobSpec spec;
  spec.set_name("j");
  spec.set_world_size(1);
  spec.mutable_trainer()->set_model("vit-micro");
  spec.mutable_trainer()->set_dataset("synthetic");
  spec.mutable_trainer()->set_batch_size(8);
  spec.mutable_trainer()->set_epochs(1);
  return spec;
}

class CoordinatorLimitsTest : public ::testing::Test {
 protected:
  void Start(bool auth) {
    CoordinatorOptions options;
    options.listen = "127.0.0.1:0";
    options.http = "127.0.0.1:0";
    options.db_path = ":memory:";
    options.auth.enabled = auth;
    auto server = CoordinatorServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    RealClock clock;
    user_ = *CreateToken(server_->store(), clock, kUserToken, "alice");
    join_ = *CreateToken(server_->store(), clock, kJoinToken, "rack");
  }
  std::unique_ptr<v1::JobService::Stub> Jobs() {
    return v1::JobService::NewStub(
        server_->InProcessChannel(testing::BearerInterceptors(user_)));
  }

  std::unique_ptr<CoordinatorServer> server_;
  std::string user_;
  std::string join_;
};

TEST_F(CoordinatorLimitsTest, OwnerIsTheTokenNameAndReachesTheLaunchOrder) {
  Start(/*auth=*/true);
  v1::SubmitJobRequest submit;
  *submit.mutable_spec() = Spec();
  (*submit.mutable_spec()->mutable_env())["OMP_NUM_THREADS"] = "2";
  v1::SubmitJobResponse submitted;
  grpc::ClientContext c1;
  grpc::Status s = Jobs()->SubmitJob(&c1, submit, &submitted);
  ASSERT_TRUE(s.ok()) << s.error_message();

  v1::GetJobRequest get;
  get.set_job_id(submitted.job_id());
  v1::GetJobResponse got;
  grpc::ClientContext c2;
  ASSERT_TRUE(Jobs()->GetJob(&c2, get, &got).ok());
  EXPECT_EQ(got.job().owner(), "alice");
  absl::StatusOr<JobRecord> stored = server_->store().GetJob(submitted.job_id());
  ASSERT_TRUE(stored.ok());
  EXPECT_EQ(stored->owner, "alice");

  auto worker = v1::WorkerService::NewStub(
      server_->InProcessChannel(testing::BearerInterceptors(join_)));
  v1::RegisterWorkerRequest reg;
  reg.set_name("w");
  reg.set_slots(1);
  v1::RegisterWorkerResponse registered;
  grpc::ClientContext c3;
  ASSERT_TRUE(worker->RegisterWorker(&c3, reg, &registered).ok());
  v1::HeartbeatRequest beat;
  beat.set_name("w");
  beat.set_epoch(registered.epoch());
  beat.set_worker_credential(registered.worker_credential());
  v1::HeartbeatResponse orders;
  grpc::ClientContext c4;
  ASSERT_TRUE(worker->Heartbeat(&c4, beat, &orders).ok());
  ASSERT_EQ(orders.launch_size(), 1);
  EXPECT_EQ(orders.launch(0).run_as(), "alice");
  EXPECT_EQ(orders.launch(0).env().at("OMP_NUM_THREADS"), "2");

  // A rank the worker refused is reported with its reason.
  v1::LocalRank* rank = beat.add_ranks();
  rank->set_job_id(submitted.job_id());
  rank->set_attempt(1);
  rank->set_rank(0);
  rank->set_exited(true);
  rank->set_exit_code(127);
  rank->set_launch_error("user alice has no account on worker w");
  grpc::ClientContext c5;
  ASSERT_TRUE(worker->Heartbeat(&c5, beat, &orders).ok());
  absl::StatusOr<v1::Job> job =
      server_->manager().jobs().GetJob(Caller::Admin(), submitted.job_id());
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->state(), v1::JOB_STATE_FAILED);
  EXPECT_THAT(job->reason(), HasSubstr("user alice has no account on worker w"));
}

TEST_F(CoordinatorLimitsTest, WithoutAuthenticationJobsHaveNoOwner) {
  Start(/*auth=*/false);
  auto jobs = v1::JobService::NewStub(server_->InProcessChannel());
  v1::SubmitJobRequest submit;
  *submit.mutable_spec() = Spec();
  v1::SubmitJobResponse submitted;
  grpc::ClientContext c1;
  ASSERT_TRUE(jobs->SubmitJob(&c1, submit, &submitted).ok());
  absl::StatusOr<v1::Job> job =
      server_->manager().jobs().GetJob(Caller::Admin(), submitted.job_id());
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->owner(), "");
}

TEST_F(CoordinatorLimitsTest, SubmitRefusesBadEnvAndPathsWithAClearError) {
  Start(/*auth=*/true);
  v1::SubmitJobRequest submit;
  *submit.mutable_spec() = Spec();
  (*submit.mutable_spec()->mutable_env())["LD_PRELOAD"] = "/tmp/evil.so";
  v1::SubmitJobResponse submitted;
  grpc::ClientContext c1;
  grpc::Status s = Jobs()->SubmitJob(&c1, submit, &submitted);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("env: name 'LD_PRELOAD' is reserved"));

  *submit.mutable_spec() = Spec();
  submit.mutable_spec()->mutable_trainer()->set_checkpoint_dir("/shared/../etc");
  grpc::ClientContext c2;
  s = Jobs()->SubmitJob(&c2, submit, &submitted);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(),
              HasSubstr("trainer.checkpoint_dir: must not contain '..'"));
}

TEST_F(CoordinatorLimitsTest, GrpcMessagesOverTheLimitAreRefused) {
  Start(/*auth=*/true);
  grpc::ChannelArguments args;
  args.SetMaxSendMessageSize(-1);
  auto jobs =
      v1::JobService::NewStub(grpc::experimental::CreateCustomChannelWithInterceptors(
          absl::StrCat("127.0.0.1:", server_->port()), grpc::InsecureChannelCredentials(),
          args, testing::BearerInterceptors(user_)));
  const int limit = CoordinatorOptions().max_message_bytes;
  ASSERT_EQ(limit, 16 * 1024 * 1024);
  v1::SubmitJobRequest submit;
  *submit.mutable_spec() = Spec();
  v1::SubmitJobResponse submitted;
  // Above gRPC's 4 MiB default but within the configured limit: the message
  // arrives, and the handler refuses the oversized spec text itself.
  submit.set_spec_yaml(std::string(8 * 1024 * 1024, 'x'));
  grpc::ClientContext within;
  within.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  grpc::Status s = jobs->SubmitJob(&within, submit, &submitted);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr("spec_yaml"));

  submit.set_spec_yaml(std::string(limit + 1, 'x'));
  grpc::ClientContext over;
  over.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  s = jobs->SubmitJob(&over, submit, &submitted);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
}

TEST_F(CoordinatorLimitsTest, HttpBodiesOverTheLimitAreRefused) {
  Start(/*auth=*/true);
  httplib::Client http("127.0.0.1", server_->http_port());
  httplib::Headers bearer = {{"Authorization", "Bearer " + user_}};
  auto big =
      http.Post("/api/v1/session", bearer, std::string(2 << 20, 'x'), "application/json");
  ASSERT_TRUE(big) << httplib::to_string(big.error());
  EXPECT_EQ(big->status, 413);
}

// ---- store ----

TEST(StoreOwnerTest, MigrationToV5KeepsJobsAndGivesThemNoOwner) {
  testing::TempDir dir;
  const std::string path = dir.File("old.db");
  {
    SqliteStore::Options options;
    options.migrate_to_version = 4;
    auto old = SqliteStore::Open(path, options);
    ASSERT_TRUE(old.ok()) << old.status();
  }
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    std::string spec;
    ASSERT_TRUE(Spec().SerializeToString(&spec));
    sqlite3_stmt* insert = nullptr;
    ASSERT_EQ(
        sqlite3_prepare_v2(
            db,
            "INSERT INTO jobs (name, state, reason, pending_reason, attempt, spec, "
            "spec_yaml, created_ms, updated_ms) VALUES ('old', 'SUCCEEDED', 'done', '', "
            "1, ?1, 'name: old', 5, 6)",
            -1, &insert, nullptr),
        SQLITE_OK);
    sqlite3_bind_blob(insert, 1, spec.data(), static_cast<int>(spec.size()),
                      SQLITE_TRANSIENT);
    EXPECT_EQ(sqlite3_step(insert), SQLITE_DONE);
    sqlite3_finalize(insert);
    sqlite3_close(db);
  }
  auto store = SqliteStore::Open(path);
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ(*(*store)->SchemaVersion(), SqliteStore::kSchemaVersion);
  absl::StatusOr<JobRecord> old = (*store)->GetJob(1);
  ASSERT_TRUE(old.ok()) << old.status();
  EXPECT_EQ(old->name, "old");
  EXPECT_EQ(old->spec_yaml, "name: old");
  EXPECT_EQ(old->owner, "");

  JobRecord job;
  job.name = "new";
  job.spec = Spec();
  job.owner = "bob";
  absl::StatusOr<int64_t> id = (*store)->CreateJob(job);
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ((*store)->GetJob(*id)->owner, "bob");
  SweepRecord sweep;
  sweep.name = "s";
  sweep.owner = "carol";
  absl::StatusOr<int64_t> sweep_id = (*store)->CreateSweep(sweep);
  ASSERT_TRUE(sweep_id.ok()) << sweep_id.status();
  EXPECT_EQ((*store)->GetSweep(*sweep_id)->owner, "carol");
}

}  // namespace
}  // namespace tessera
