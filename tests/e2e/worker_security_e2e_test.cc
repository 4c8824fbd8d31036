// What a worker hands its ranks and how it guards its name, end to end: a
// real tessera-coordinator and real tessera-worker processes on 127.0.0.1.
//
//  - A rank's view of itself: the rank is this test binary (started with
//    --job-id=, it prints its open descriptors, umask and environment), run
//    by a worker that holds an inheritable pipe and an operator secret in its
//    environment.
//  - Spec env names that load code are refused at submit (gRPC).
//  - A symlink planted where a job's directory would be is not followed, and
//    nothing outside the work dir changes owner, mode or contents.
//  - Worker identity: a process claiming a live worker's name without its
//    credential is refused; the worker restarted with its credential is
//    accepted at once with a new epoch; ShipLogs for another worker's rank is
//    refused; no error names an epoch.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gmock/gmock.h"
#include "tests/e2e/cluster_fixture.h"

extern char** environ;

namespace tessera {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::Not;

// An account id that owns nothing on a test machine.
constexpr uid_t kStranger = 54321;

std::string SelfPath() {
  return std::filesystem::read_symlink("/proc/self/exe").string();
}

bool HasDigit(std::string_view text) {
  return std::any_of(text.begin(), text.end(),
                     [](char c) { return c >= '0' && c <= '9'; });
}

std::string JobYaml(const std::string& env_lines = "") {
  std::string yaml =
      "name: probe\nworld_size: 1\ntrainer:\n  model: vit-micro\n  dataset: synthetic\n"
      "  batch_size: 8\n  epochs: 1\n";
  if (!env_lines.empty()) yaml += "env:\n" + env_lines;
  return yaml;
}

class WorkerSecurityTest : public ClusterTest {
 protected:
  std::string Address() const { return absl::StrCat("127.0.0.1:", port_); }

  std::unique_ptr<v1::WorkerService::Stub> JoinStub() {
    return v1::WorkerService::NewStub(testing::ChannelWithToken(Address(), join_token_));
  }

  // The worker `name` as ListWorkers shows it (epoch -1 when absent).
  v1::Worker Worker(const std::string& name) {
    grpc::ClientContext ctx;
    v1::ListWorkersResponse resp;
    v1::Worker out;
    out.set_epoch(-1);
    if (!jobs_->ListWorkers(&ctx, v1::ListWorkersRequest(), &resp).ok()) return out;
    for (const v1::Worker& w : resp.workers()) {
      if (w.name() == name) out = w;
    }
    return out;
  }

  std::string KeptCredential(const std::string& name) {
    return std::string(absl::StripAsciiWhitespace(testing::ReadFile(
        dir_.File(absl::StrCat("state-", name, "/worker-", name, ".credential")))));
  }
};

TEST_F(WorkerSecurityTest, RankSeesOnlyAllowlistedEnvNoInheritedDescriptorsAndUmask077) {
  ASSERT_NO_FATAL_FAILURE(StartCoordinator());
  // The worker inherits a pipe without O_CLOEXEC and an operator secret.
  int leaked[2];
  ASSERT_EQ(::pipe(leaked), 0);
  ::setenv("TESSERA_TEST_OPERATOR_SECRET", "s3cret", 1);
  ::setenv("TESSERA_TEST_PASSED", "yes", 1);
  ::setenv("LANG", "C.UTF-8", 1);
  const mode_t old_umask = ::umask(022);
  ASSERT_NO_FATAL_FAILURE(StartWorker(
      "alpha", port_, {"--trainer", SelfPath(), "--pass-env", "TESSERA_TEST_PASSED"}));
  ::umask(old_umask);
  ::close(leaked[0]);
  ::close(leaked[1]);
  ::unsetenv("TESSERA_TEST_OPERATOR_SECRET");
  ::unsetenv("TESSERA_TEST_PASSED");
  ASSERT_NO_FATAL_FAILURE(WaitForWorkers(1));

  const int64_t id = Submit(JobYaml("  MY_SETTING: \"on\"\n"));
  const v1::Job job = WaitForEnd(id, absl::Seconds(60));
  ASSERT_EQ(job.state(), v1::JOB_STATE_SUCCEEDED) << DumpLogs();
  const std::string log = testing::ReadFile(
      dir_.File(absl::StrCat("work-alpha/job-", id, "/attempt-1/rank-0.log")));

  std::set<int> fds;
  std::string umask_seen;
  std::map<std::string, std::string> env;
  for (absl::string_view line : absl::StrSplit(log, '\n', absl::SkipEmpty())) {
    if (absl::ConsumePrefix(&line, "fd ")) {
      fds.insert(std::stoi(std::string(line)));
    } else if (absl::ConsumePrefix(&line, "umask ")) {
      umask_seen = std::string(line);
    } else if (absl::ConsumePrefix(&line, "env ")) {
      const size_t eq = line.find('=');
      env[std::string(line.substr(0, eq))] = std::string(line.substr(eq + 1));
    }
  }
  std::printf("FIGURE rank_open_fds=%zu\nFIGURE rank_env_names=%zu\n", fds.size(),
              env.size());
  EXPECT_EQ(fds, (std::set<int>{0, 1, 2})) << log;
  EXPECT_EQ(umask_seen, "0077") << log;

  const std::set<std::string> allowed = {"PATH",
                                         "HOME",
                                         "USER",
                                         "LOGNAME",
                                         "LANG",
                                         "LC_ALL",
                                         "TZ",
                                         "RANK",
                                         "WORLD_SIZE",
                                         "LOCAL_RANK",
                                         "TESSERA_JOB_ID",
                                         "TESSERA_ATTEMPT",
                                         "TESSERA_TRAINER_TLS_CA",
                                         "TESSERA_TRAINER_TLS_SERVER_NAME",
                                         "CUDA_VISIBLE_DEVICES",
                                         "TESSERA_TEST_PASSED",
                                         "MY_SETTING"};
  for (const auto& [name, value] : env) {
    EXPECT_TRUE(allowed.contains(name)) << "rank sees " << name << "=" << value;
  }
  EXPECT_EQ(env["PATH"], "/usr/local/bin:/usr/bin:/bin");
  EXPECT_EQ(env["USER"], CurrentUserName());
  EXPECT_EQ(env["LANG"], "C.UTF-8");
  EXPECT_EQ(env["MY_SETTING"], "on");
  EXPECT_EQ(env["TESSERA_TEST_PASSED"], "yes");
  EXPECT_EQ(env["RANK"], "0");
  EXPECT_FALSE(env.contains("TESSERA_TEST_OPERATOR_SECRET"));
  EXPECT_FALSE(env.contains("TESSERA_JOIN_TOKEN"));
}

TEST_F(WorkerSecurityTest, SpecEnvNamesThatLoadCodeAreRefusedAtSubmit) {
  ASSERT_NO_FATAL_FAILURE(StartCoordinator());
  for (const std::string name : {"LD_PRELOAD", "NCCL_NET_PLUGIN", "CUDA_INJECTION64_PATH",
                                 "GCONV_PATH", "PYTHONPATH"}) {
    v1::SubmitJobRequest req;
    v1::JobSpec& spec = *req.mutable_spec();
    spec.set_name("evil");
    spec.set_world_size(1);
    spec.mutable_trainer()->set_model("vit-micro");
    spec.mutable_trainer()->set_dataset("synthetic");
    spec.mutable_trainer()->set_batch_size(8);
    spec.mutable_trainer()->set_epochs(1);
    (*spec.mutable_env())[name] = "/tmp/evil.so";
    v1::SubmitJobResponse resp;
    grpc::ClientContext ctx;
    grpc::Status s = jobs_->SubmitJob(&ctx, req, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << name;
    EXPECT_THAT(s.error_message(), HasSubstr("env: name '" + name + "' is reserved: "));
  }
}

TEST_F(WorkerSecurityTest,
       SymlinkPlantedAsTheJobDirIsNotFollowedAndNothingOutsideChanges) {
  ASSERT_NO_FATAL_FAILURE(StartCoordinator());
  // The worker's work dir, made the way an operator would (0700), with a link
  // where job 1's directory will go, to a directory of someone else.
  const std::string work = dir_.File("work-alpha");
  const std::string outside = dir_.File("outside");
  ASSERT_EQ(::mkdir(work.c_str(), 0700), 0);
  ASSERT_EQ(::mkdir(outside.c_str(), 0750), 0);
  std::ofstream(outside + "/precious") << "keep me\n";
  if (::geteuid() == 0) {
    ASSERT_EQ(::chown(outside.c_str(), kStranger, kStranger), 0);
    ASSERT_EQ(::chown((outside + "/precious").c_str(), kStranger, kStranger), 0);
  }
  struct stat before {};
  ASSERT_EQ(::stat(outside.c_str(), &before), 0);
  std::filesystem::create_directory_symlink(outside, work + "/job-1");

  ASSERT_NO_FATAL_FAILURE(StartWorker("alpha", port_, {"--trainer", SelfPath()}));
  ASSERT_NO_FATAL_FAILURE(WaitForWorkers(1));
  const int64_t id = Submit(JobYaml());
  ASSERT_EQ(id, 1);
  const v1::Job job = WaitForEnd(id, absl::Seconds(60));
  EXPECT_EQ(job.state(), v1::JOB_STATE_FAILED);
  EXPECT_THAT(job.reason(), HasSubstr("is a symlink or not a directory")) << DumpLogs();

  struct stat after {};
  ASSERT_EQ(::stat(outside.c_str(), &after), 0);
  EXPECT_EQ(after.st_uid, before.st_uid);
  EXPECT_EQ(after.st_gid, before.st_gid);
  EXPECT_EQ(after.st_mode, before.st_mode);
  std::vector<std::string> entries;
  for (const auto& e : std::filesystem::directory_iterator(outside)) {
    entries.push_back(e.path().filename().string());
  }
  EXPECT_EQ(entries, std::vector<std::string>{"precious"});
  EXPECT_EQ(testing::ReadFile(outside + "/precious"), "keep me\n");
  EXPECT_TRUE(std::filesystem::is_symlink(work + "/job-1"));
}

TEST_F(WorkerSecurityTest, LiveNameNeedsItsCredentialAndARestartWithItIsAcceptedAtOnce) {
  ASSERT_NO_FATAL_FAILURE(StartCoordinator());
  ASSERT_NO_FATAL_FAILURE(StartWorker("alpha", port_, {"--trainer", SelfPath()}));
  ASSERT_NO_FATAL_FAILURE(WaitForWorkers(1));
  const int64_t first_epoch = Worker("alpha").epoch();
  ASSERT_GT(first_epoch, 0);
  const std::string credential = KeptCredential("alpha");
  EXPECT_THAT(credential, ::testing::StartsWith("tsr_worker_"));
  struct stat st {};
  ASSERT_EQ(::stat(dir_.File("state-alpha/worker-alpha.credential").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600);

  // The join token alone cannot register the live name, nor heartbeat for it.
  auto join = JoinStub();
  {
    v1::RegisterWorkerRequest req;
    req.set_name("alpha");
    req.set_slots(8);
    v1::RegisterWorkerResponse resp;
    grpc::ClientContext ctx;
    grpc::Status s = join->RegisterWorker(&ctx, req, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
    EXPECT_THAT(s.error_message(), HasSubstr("belongs to a live worker"));
    EXPECT_FALSE(HasDigit(s.error_message())) << s.error_message();
  }
  {
    v1::HeartbeatRequest req;
    req.set_name("alpha");
    req.set_epoch(first_epoch);
    v1::HeartbeatResponse resp;
    grpc::ClientContext ctx;
    EXPECT_EQ(join->Heartbeat(&ctx, req, &resp).error_code(),
              grpc::StatusCode::PERMISSION_DENIED);
  }
  // Nor can another worker process without the state dir.
  std::vector<std::string> argv = {testing::BinDir() + "/tessera-worker",
                                   "--coordinator",
                                   Address(),
                                   "--name",
                                   "alpha",
                                   "--cpu-slots",
                                   "1",
                                   "--work-dir",
                                   dir_.File("work-impostor"),
                                   "--state-dir",
                                   dir_.File("state-impostor"),
                                   "--join-token-file",
                                   dir_.File("join-token"),
                                   "--allow-root-jobs",
                                   "--trainer",
                                   SelfPath()};
  auto impostor = ChildProcess::Start(argv, dir_.File("impostor.log"));
  ASSERT_TRUE(impostor.ok()) << impostor.status();
  const absl::Time until = absl::Now() + absl::Seconds(20);
  while (absl::Now() < until &&
         (*impostor)->Log().find("belongs to a live worker") == std::string::npos) {
    absl::SleepFor(absl::Milliseconds(100));
  }
  EXPECT_THAT((*impostor)->Log(), HasSubstr("belongs to a live worker"));
  EXPECT_EQ(Worker("alpha").epoch(), first_epoch);
  (*impostor)->Signal(SIGTERM);
  ASSERT_TRUE((*impostor)->Wait(absl::Seconds(20)).has_value());

  // The worker dies and is started again with its state dir: back at once.
  workers_[0]->Signal(SIGKILL);
  ASSERT_TRUE(workers_[0]->Wait(absl::Seconds(20)).has_value());
  workers_.clear();
  const absl::Time restarted = absl::Now();
  ASSERT_NO_FATAL_FAILURE(StartWorker("alpha", port_, {"--trainer", SelfPath()}));
  int64_t epoch = first_epoch;
  while (absl::Now() < restarted + absl::Seconds(10) && epoch <= first_epoch) {
    absl::SleepFor(absl::Milliseconds(50));
    epoch = Worker("alpha").epoch();
  }
  const absl::Duration back = absl::Now() - restarted;
  std::printf("FIGURE worker_restart_registered_ms=%lld\n",
              static_cast<long long>(absl::ToInt64Milliseconds(back)));
  EXPECT_GT(epoch, first_epoch) << DumpLogs();
  // Well inside the 15 s after which the coordinator would declare it dead.
  EXPECT_LT(back, absl::Seconds(10));
  EXPECT_EQ(KeptCredential("alpha"), credential) << "the kept credential stays valid";

  // The old session is fenced, and the refusal names no epoch.
  v1::HeartbeatRequest stale;
  stale.set_name("alpha");
  stale.set_epoch(first_epoch);
  stale.set_worker_credential(credential);
  v1::HeartbeatResponse resp;
  grpc::ClientContext ctx;
  grpc::Status s = join->Heartbeat(&ctx, stale, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::ABORTED);
  EXPECT_THAT(s.error_message(), Not(HasSubstr("epoch")));
  EXPECT_FALSE(HasDigit(s.error_message())) << s.error_message();
}

TEST_F(WorkerSecurityTest, ShipLogsForAnotherWorkersRankIsRefused) {
  ASSERT_NO_FATAL_FAILURE(StartCoordinator());
  ASSERT_NO_FATAL_FAILURE(StartWorker("alpha", port_, {"--trainer", SelfPath()}));
  ASSERT_NO_FATAL_FAILURE(WaitForWorkers(1));
  // A second worker, with no slots: nothing is placed on it.
  auto join = JoinStub();
  v1::RegisterWorkerRequest reg;
  reg.set_name("beta");
  reg.set_slots(0);
  v1::RegisterWorkerResponse beta;
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(join->RegisterWorker(&ctx, reg, &beta).ok());
  }
  ASSERT_FALSE(beta.worker_credential().empty());
  const int64_t id = Submit(JobYaml());
  ASSERT_EQ(WaitForEnd(id, absl::Seconds(60)).state(), v1::JOB_STATE_SUCCEEDED)
      << DumpLogs();

  v1::ShipLogsRequest ship;
  ship.set_name("beta");
  ship.set_epoch(beta.epoch());
  ship.set_worker_credential(beta.worker_credential());
  ship.set_job_id(id);
  ship.set_attempt(1);
  ship.set_rank(0);
  ship.set_offset(1 << 20);
  ship.set_data("forged\n");
  v1::ShipLogsResponse resp;
  grpc::ClientContext ctx;
  grpc::Status s = join->ShipLogs(&ctx, ship, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(s.error_message(), HasSubstr("not assigned to worker beta"));
}

}  // namespace

// Started by the worker as a rank: prints what it was given and exits 0.
int RankProbe() {
  std::string out;
  for (int fd = 0; fd < 4096; ++fd) {
    if (::fcntl(fd, F_GETFD) != -1) out += absl::StrCat("fd ", fd, "\n");
  }
  const mode_t mask = ::umask(0);
  ::umask(mask);
  char buf[16];
  std::snprintf(buf, sizeof(buf), "%04o", static_cast<unsigned>(mask));
  out += absl::StrCat("umask ", buf, "\n");
  for (char** e = environ; *e != nullptr; ++e) out += absl::StrCat("env ", *e, "\n");
  return ::write(STDOUT_FILENO, out.data(), out.size()) ==
                 static_cast<ssize_t>(out.size())
             ? 0
             : 1;
}

}  // namespace tessera

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::string_view(argv[i]).substr(0, 9) == "--job-id=")
      return tessera::RankProbe();
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
