// Running ranks as their submitter, and the worker's launch checks: data and
// checkpoint directories under the operator's roots, and the spec's env.
//
// The tests that switch users need root (CI runs as root) and are skipped
// otherwise. They create a throwaway account with a supplementary group
// (useradd/groupadd), run a real coordinator in-process and a real
// WorkerAgent, and look at the launched rank itself in /proc. The rank's
// executable is this test binary: started with --job-id=, it acts as a
// trainer that reads its credential file, prints what it saw and waits.
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "coordinator/coordinator_server.h"
#include "coordinator/core/auth.h"
#include "gmock/gmock.h"
#include "grpcpp/client_context.h"
#include "gtest/gtest.h"
#include "tests/testing/grpc_auth.h"
#include "tests/testing/test_util.h"
#include "worker/supervisor.h"
#include "worker/worker_agent.h"

namespace tessera {
namespace {

namespace v1 = ::tessera::v1;
using ::tessera::testing::ChildProcess;
using ::tessera::testing::TempDir;
using ::testing::HasSubstr;
using ::testing::Not;

// ---- Paths: no root needed ----

class PathRootsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = dir_.File("data");
    std::filesystem::create_directories(root_ + "/fmnist");
    std::filesystem::create_directories(dir_.File("elsewhere"));
  }
  TempDir dir_;
  std::string root_;
};

TEST_F(PathRootsTest, PathInsideARootResolves) {
  absl::StatusOr<std::string> p =
      ResolveUnderRoots("data_dir", root_ + "/fmnist", {root_});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(*p, std::filesystem::canonical(root_ + "/fmnist").string());
  EXPECT_TRUE(ResolveUnderRoots("data_dir", root_, {root_}).ok());
}

TEST_F(PathRootsTest, CheckpointDirNotYetCreatedResolvesThroughItsNearestAncestor) {
  absl::StatusOr<std::string> p =
      ResolveUnderRoots("checkpoint_dir", root_ + "/runs/a/b", {root_});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(*p, std::filesystem::canonical(root_).string() + "/runs/a/b");
}

TEST_F(PathRootsTest, PathOutsideEveryRootIsRefused) {
  absl::StatusOr<std::string> p =
      ResolveUnderRoots("data_dir", dir_.File("elsewhere"), {root_, "/nonexistent-root"});
  ASSERT_TRUE(absl::IsPermissionDenied(p.status())) << p.status();
  EXPECT_THAT(p.status().message(), HasSubstr("outside the allowed roots"));
  // A sibling whose name starts with the root's is not below it.
  std::filesystem::create_directories(root_ + "-evil");
  EXPECT_FALSE(ResolveUnderRoots("data_dir", root_ + "-evil", {root_}).ok());
}

TEST_F(PathRootsTest, SymlinkEscapingARootIsRefused) {
  std::filesystem::create_directory_symlink("/etc", root_ + "/escape");
  absl::StatusOr<std::string> p =
      ResolveUnderRoots("data_dir", root_ + "/escape", {root_});
  ASSERT_TRUE(absl::IsPermissionDenied(p.status())) << p.status();
  EXPECT_THAT(p.status().message(), HasSubstr("/etc"));
  // Also when the rest of the path does not exist yet.
  EXPECT_FALSE(
      ResolveUnderRoots("checkpoint_dir", root_ + "/escape/new/dir", {root_}).ok());
  // A dangling symlink would be followed by whoever creates the directory.
  std::filesystem::create_directory_symlink(dir_.File("elsewhere/not-yet"),
                                            root_ + "/dangling");
  EXPECT_FALSE(ResolveUnderRoots("checkpoint_dir", root_ + "/dangling", {root_}).ok());
}

TEST_F(PathRootsTest, DotDotAndRelativePathsAreRefused) {
  absl::StatusOr<std::string> p =
      ResolveUnderRoots("data_dir", root_ + "/fmnist/../../elsewhere", {root_});
  ASSERT_TRUE(absl::IsInvalidArgument(p.status())) << p.status();
  EXPECT_THAT(p.status().message(), HasSubstr("'..'"));
  EXPECT_TRUE(absl::IsInvalidArgument(
      ResolveUnderRoots("data_dir", root_ + "/fmnist/..", {root_}).status()));
  EXPECT_TRUE(
      absl::IsInvalidArgument(ResolveUnderRoots("data_dir", "data", {root_}).status()));
}

TEST_F(PathRootsTest, TrainerConfigGetsResolvedPathsOrTheRankIsRefused) {
  std::filesystem::create_directory_symlink(root_ + "/fmnist", root_ + "/link");
  WorkerOptions options;
  options.data_roots = {root_};
  options.checkpoint_roots = {dir_.File("ckpt")};
  v1::TrainerConfig config;
  config.set_data_dir(root_ + "/link");
  config.set_checkpoint_dir(dir_.File("ckpt/run1"));
  absl::StatusOr<v1::TrainerConfig> checked = CheckTrainerPaths(options, config);
  ASSERT_TRUE(checked.ok()) << checked.status();
  EXPECT_EQ(checked->data_dir(), std::filesystem::canonical(root_ + "/fmnist").string());
  config.set_checkpoint_dir(root_ + "/ckpt");  // a data root is no checkpoint root
  EXPECT_TRUE(absl::IsPermissionDenied(CheckTrainerPaths(options, config).status()));
}

// ---- Env: no root needed ----

TEST(RankEnvTest, GoodEntriesBecomeNameValueAndReservedNamesAreRefused) {
  v1::LaunchOrder order;
  (*order.mutable_env())["OMP_NUM_THREADS"] = "4";
  (*order.mutable_env())["MY_FLAG"] = "a b;c";  // no shell: taken literally
  absl::StatusOr<std::vector<std::string>> env = RankEnv(order);
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_THAT(*env, ::testing::ElementsAre("MY_FLAG=a b;c", "OMP_NUM_THREADS=4"));
  for (const char* bad : {"LD_PRELOAD", "TESSERA_JOB_ID", "lower", "1X", "RANK"}) {
    v1::LaunchOrder o;
    (*o.mutable_env())[bad] = "x";
    EXPECT_TRUE(absl::IsInvalidArgument(RankEnv(o).status())) << bad;
  }
}

// ---- Who a rank runs as ----

TEST(AccountForRankTest, WorkerNotRunningAsRootRunsEveryRankAsItself) {
  WorkerOptions options;
  for (const char* owner : {"", "root", "no-such-user-xyz"}) {
    absl::StatusOr<std::optional<UnixAccount>> account =
        AccountForRank(options, owner, /*worker_is_root=*/false);
    ASSERT_TRUE(account.ok()) << account.status();
    EXPECT_FALSE(account->has_value()) << owner;
  }
}

TEST(AccountForRankTest, UnknownUserIsRefusedNamingUserAndWorker) {
  WorkerOptions options;
  options.name = "w7";
  absl::StatusOr<std::optional<UnixAccount>> account =
      AccountForRank(options, "tsr-no-such-user", /*worker_is_root=*/true);
  ASSERT_FALSE(account.ok());
  EXPECT_EQ(account.status().message(),
            "user tsr-no-such-user has no account on worker w7");
}

TEST(AccountForRankTest, RootOwnerOrNoOwnerIsRefusedUnlessAllowed) {
  WorkerOptions options;
  options.name = "w1";
  absl::StatusOr<std::optional<UnixAccount>> root = AccountForRank(options, "root", true);
  ASSERT_TRUE(absl::IsPermissionDenied(root.status())) << root.status();
  EXPECT_THAT(root.status().message(), HasSubstr("--allow-root-jobs"));
  absl::StatusOr<std::optional<UnixAccount>> none = AccountForRank(options, "", true);
  ASSERT_TRUE(absl::IsPermissionDenied(none.status())) << none.status();
  EXPECT_THAT(none.status().message(), HasSubstr("no owner"));

  options.job_user = "nobody";
  absl::StatusOr<std::optional<UnixAccount>> ownerless =
      AccountForRank(options, "", true);
  ASSERT_TRUE(ownerless.ok()) << ownerless.status();
  ASSERT_TRUE(ownerless->has_value());
  EXPECT_EQ((*ownerless)->name, "nobody");
  EXPECT_NE((*ownerless)->uid, 0u);

  options.allow_root_jobs = true;
  absl::StatusOr<std::optional<UnixAccount>> allowed =
      AccountForRank(options, "root", true);
  ASSERT_TRUE(allowed.ok()) << allowed.status();
  EXPECT_FALSE(allowed->has_value());  // as the worker, which is root
}

// ---- Real ranks as a throwaway account (root only) ----

// Runs a command to completion (no shell); true on exit status 0.
bool RunCommand(const std::vector<std::string>& argv, const std::string& log) {
  auto p = ChildProcess::Start(argv, log);
  if (!p.ok()) return false;
  std::optional<int> status = (*p)->Wait(absl::Seconds(30));
  return status && WIFEXITED(*status) && WEXITSTATUS(*status) == 0;
}

std::map<std::string, std::string> ProcStatus(pid_t pid) {
  std::map<std::string, std::string> out;
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  for (std::string line; std::getline(in, line);) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string value = line.substr(colon + 1);
    while (!value.empty() && (value.front() == '\t' || value.front() == ' ')) {
      value.erase(0, 1);
    }
    out[line.substr(0, colon)] = value;
  }
  return out;
}

std::vector<std::string> ProcEnviron(pid_t pid) {
  const std::string raw = testing::ReadFile(absl::StrCat("/proc/", pid, "/environ"));
  return absl::StrSplit(raw, '\0', absl::SkipEmpty());
}

class RunAsClusterTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (geteuid() != 0) return;
    user_ = absl::StrCat("tsr-ra", getpid());
    group_ = absl::StrCat("tsr-rg", getpid());
    const std::string log = "/dev/null";
    if (!RunCommand({"/usr/sbin/groupadd", group_}, log) ||
        !RunCommand({"/usr/sbin/useradd", "-M", "-N", "-s", "/usr/sbin/nologin", "-G",
                     group_, user_},
                    log)) {
      user_.clear();
    }
  }
  static void TearDownTestSuite() {
    if (user_.empty()) return;
    RunCommand({"/usr/sbin/userdel", user_}, "/dev/null");
    RunCommand({"/usr/sbin/groupdel", group_}, "/dev/null");
  }

  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "switching users needs root";
    if (user_.empty()) GTEST_SKIP() << "cannot create a throwaway user (useradd)";
    // Everything the rank needs lies in a tree every account can search.
    std::filesystem::permissions(dir_.path(), std::filesystem::perms(0755));
    probe_ = dir_.File("probe");
    std::filesystem::copy_file("/proc/self/exe", probe_);
    std::filesystem::permissions(probe_, std::filesystem::perms(0755));
    std::filesystem::create_directories(dir_.File("data/set"));

    CoordinatorOptions options;
    options.listen = "";
    options.db_path = ":memory:";
    options.manager.heartbeat_interval = absl::Milliseconds(100);
    auto server = CoordinatorServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    auto join = CreateToken(server_->store(), clock_, kJoinToken, "workers");
    ASSERT_TRUE(join.ok()) << join.status();
    join_ = *join;
  }

  void TearDown() override {
    if (agent_ != nullptr) {
      agent_->Stop();
      agent_thread_.join();
    }
    if (server_ != nullptr) server_->Shutdown();
  }

  void StartWorker(WorkerOptions options) {
    options.name = "w1";
    options.cpu_slots = 1;
    options.work_dir = dir_.File("work");
    options.state_dir = dir_.File("state");
    options.trainer_path = probe_;
    options.join_token = join_;
    options.data_roots = {dir_.File("data")};
    options.checkpoint_roots = {dir_.File("ckpt")};
    options.kill_grace = absl::Seconds(2);
    agent_ =
        std::make_unique<WorkerAgent>(options, server_->InProcessChannel(), &launcher_);
    agent_thread_ = std::thread([this] { agent_->Run(); });
  }

  // Submits as the user `owner` (a user token of that name).
  int64_t Submit(const std::string& owner) {
    auto token = CreateToken(server_->store(), clock_, kUserToken, owner);
    EXPECT_TRUE(token.ok()) << token.status();
    jobs_ = v1::JobService::NewStub(
        server_->InProcessChannel(testing::BearerInterceptors(*token)));
    v1::SubmitJobRequest request;
    v1::JobSpec& spec = *request.mutable_spec();
    spec.set_name("run-as");
    spec.set_world_size(1);
    spec.mutable_trainer()->set_model("vit-micro");
    spec.mutable_trainer()->set_dataset("synthetic");
    spec.mutable_trainer()->set_data_dir(dir_.File("data/set"));
    spec.mutable_trainer()->set_checkpoint_dir(dir_.File("ckpt/run"));
    spec.mutable_trainer()->set_batch_size(8);
    spec.mutable_trainer()->set_epochs(1);
    (*spec.mutable_env())["RUN_AS_TEST"] = "hello world";
    v1::SubmitJobResponse response;
    grpc::ClientContext ctx;
    grpc::Status s = jobs_->SubmitJob(&ctx, request, &response);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return response.job_id();
  }

  v1::Job Get(int64_t id) {
    grpc::ClientContext ctx;
    v1::GetJobRequest request;
    request.set_job_id(id);
    v1::GetJobResponse response;
    grpc::Status s = jobs_->GetJob(&ctx, request, &response);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return response.job();
  }

  // Waits until the rank's log says the probe is up; returns its pid.
  pid_t WaitForRank(int64_t id) {
    const std::string log =
        dir_.File(absl::StrCat("work/job-", id, "/attempt-1/rank-0.log"));
    const absl::Time until = absl::Now() + absl::Seconds(30);
    while (absl::Now() < until) {
      const std::string text = testing::ReadFile(log);
      if (text.find("probe ready") != std::string::npos) {
        const v1::Job job = Get(id);
        for (const v1::RankStatus& r : job.ranks()) {
          if (r.pid() > 0) return r.pid();
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ADD_FAILURE() << "rank did not start; log:\n" << testing::ReadFile(log);
    return 0;
  }

  v1::Job WaitForEnd(int64_t id) {
    const absl::Time until = absl::Now() + absl::Seconds(30);
    v1::Job job;
    while (absl::Now() < until) {
      job = Get(id);
      if (job.state() == v1::JOB_STATE_FAILED || job.state() == v1::JOB_STATE_SUCCEEDED ||
          job.state() == v1::JOB_STATE_CANCELLED) {
        return job;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ADD_FAILURE() << "job " << id << " did not end: " << job.ShortDebugString();
    return job;
  }

  void Cancel(int64_t id) {
    grpc::ClientContext ctx;
    v1::CancelJobRequest request;
    request.set_job_id(id);
    v1::CancelJobResponse response;
    (void)jobs_->CancelJob(&ctx, request, &response);
  }

  static std::string user_;
  static std::string group_;
  TempDir dir_;
  std::string probe_;
  RealClock clock_;
  std::unique_ptr<CoordinatorServer> server_;
  std::string join_;
  std::unique_ptr<v1::JobService::Stub> jobs_;
  PosixLauncher launcher_;
  std::unique_ptr<WorkerAgent> agent_;
  std::thread agent_thread_;
};

std::string RunAsClusterTest::user_;
std::string RunAsClusterTest::group_;

TEST_F(RunAsClusterTest, RankRunsWithTheOwnersUidGidGroupsAndEnv) {
  StartWorker(WorkerOptions());
  const int64_t id = Submit(user_);
  EXPECT_EQ(Get(id).owner(), user_);
  const pid_t pid = WaitForRank(id);
  ASSERT_GT(pid, 0);
  absl::StatusOr<UnixAccount> account = LookUpUnixAccount(user_);
  ASSERT_TRUE(account.ok()) << account.status();
  const group* extra = getgrnam(group_.c_str());
  ASSERT_NE(extra, nullptr);

  std::map<std::string, std::string> status = ProcStatus(pid);
  // Real, effective, saved and filesystem ids.
  const std::string uid = absl::StrCat(account->uid);
  const std::string gid = absl::StrCat(account->gid);
  EXPECT_EQ(status["Uid"], absl::StrCat(uid, "\t", uid, "\t", uid, "\t", uid));
  EXPECT_EQ(status["Gid"], absl::StrCat(gid, "\t", gid, "\t", gid, "\t", gid));
  std::vector<std::string> groups =
      absl::StrSplit(status["Groups"], ' ', absl::SkipEmpty());
  EXPECT_THAT(groups, ::testing::Contains(absl::StrCat(extra->gr_gid)));
  EXPECT_THAT(groups, Not(::testing::Contains("0")));

  std::vector<std::string> env = ProcEnviron(pid);
  EXPECT_THAT(env, ::testing::Contains("RUN_AS_TEST=hello world"));
  EXPECT_THAT(env, ::testing::Contains("USER=" + user_));
  EXPECT_THAT(env, ::testing::Contains("RANK=0"));

  // The credential file was readable by the rank, and removable by it.
  const std::string log = testing::ReadFile(
      dir_.File(absl::StrCat("work/job-", id, "/attempt-1/rank-0.log")));
  EXPECT_THAT(log, HasSubstr("credential: tsr_trainer_"));
  EXPECT_THAT(log, HasSubstr("credential removed"));
  Cancel(id);
  WaitForEnd(id);
}

TEST_F(RunAsClusterTest, OwnerWithoutAnAccountFailsTheRankWithAClearReason) {
  StartWorker(WorkerOptions());
  const int64_t id = Submit("tsr-ghost-user");
  v1::Job job = WaitForEnd(id);
  EXPECT_EQ(job.state(), v1::JOB_STATE_FAILED);
  EXPECT_THAT(job.reason(), HasSubstr("user tsr-ghost-user has no account on worker w1"));
  ASSERT_EQ(job.ranks_size(), 1);
  EXPECT_THAT(job.ranks(0).exit_reason(), HasSubstr("could not be launched"));
  const std::string log = testing::ReadFile(
      dir_.File(absl::StrCat("work/job-", id, "/attempt-1/rank-0.log")));
  EXPECT_THAT(log, HasSubstr("has no account on worker w1"));
}

TEST_F(RunAsClusterTest, RootOwnerIsRefusedWithoutAllowRootJobs) {
  StartWorker(WorkerOptions());
  const int64_t id = Submit("root");
  v1::Job job = WaitForEnd(id);
  EXPECT_EQ(job.state(), v1::JOB_STATE_FAILED);
  EXPECT_THAT(job.reason(), HasSubstr("--allow-root-jobs"));
}

TEST_F(RunAsClusterTest, RootOwnerRunsAsRootWithAllowRootJobs) {
  WorkerOptions options;
  options.allow_root_jobs = true;
  StartWorker(options);
  const int64_t id = Submit("root");
  const pid_t pid = WaitForRank(id);
  ASSERT_GT(pid, 0);
  EXPECT_EQ(ProcStatus(pid)["Uid"], "0\t0\t0\t0");
  Cancel(id);
  WaitForEnd(id);
}

TEST_F(RunAsClusterTest, DataDirOutsideTheRootsFailsTheRank) {
  StartWorker(WorkerOptions());
  std::filesystem::create_directory_symlink("/etc", dir_.File("data/set/etc"));
  auto token = CreateToken(server_->store(), clock_, kUserToken, user_);
  ASSERT_TRUE(token.ok());
  jobs_ = v1::JobService::NewStub(
      server_->InProcessChannel(testing::BearerInterceptors(*token)));
  v1::SubmitJobRequest request;
  v1::JobSpec& spec = *request.mutable_spec();
  spec.set_name("escape");
  spec.set_world_size(1);
  spec.mutable_trainer()->set_model("vit-micro");
  spec.mutable_trainer()->set_dataset("synthetic");
  spec.mutable_trainer()->set_data_dir(dir_.File("data/set/etc"));
  spec.mutable_trainer()->set_batch_size(8);
  spec.mutable_trainer()->set_epochs(1);
  v1::SubmitJobResponse response;
  grpc::ClientContext ctx;
  ASSERT_TRUE(jobs_->SubmitJob(&ctx, request, &response).ok());
  v1::Job job = WaitForEnd(response.job_id());
  EXPECT_EQ(job.state(), v1::JOB_STATE_FAILED);
  EXPECT_THAT(job.reason(), HasSubstr("outside the allowed roots"));
}

// Launcher level: the switch happens even without a worker agent, and a
// failed switch is an error, not a rank running as root.
TEST(PosixLauncherRunAsTest, ChildRunsAsNobody) {
  if (geteuid() != 0) GTEST_SKIP() << "switching users needs root";
  absl::StatusOr<UnixAccount> nobody = LookUpUnixAccount("nobody");
  if (!nobody.ok()) GTEST_SKIP() << "no account nobody: " << nobody.status();
  TempDir dir;
  ProcessSpec spec;
  spec.argv = {"/bin/sleep", "30"};
  spec.log_path = dir.File("log");
  spec.run_as = *nobody;
  PosixLauncher launcher;
  absl::StatusOr<pid_t> pid = launcher.Launch(spec);
  ASSERT_TRUE(pid.ok()) << pid.status();
  const std::string uid = absl::StrCat(nobody->uid);
  EXPECT_EQ(ProcStatus(*pid)["Uid"], absl::StrCat(uid, "\t", uid, "\t", uid, "\t", uid));
  launcher.SignalGroup(*pid, SIGKILL);
  int status = 0;
  waitpid(*pid, &status, 0);
}

}  // namespace

// Started by the worker as a rank's trainer: reads and removes the credential
// file, reports, and waits to be stopped.
int RunAsProbe(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    constexpr std::string_view kFlag = "--credential-file=";
    if (arg.substr(0, kFlag.size()) != kFlag) continue;
    const std::string path(arg.substr(kFlag.size()));
    std::ifstream in(path);
    std::string credential;
    std::getline(in, credential);
    std::cout << "credential: " << credential << "\n";
    if (std::remove(path.c_str()) == 0) std::cout << "credential removed\n";
  }
  std::cout << "probe ready" << std::endl;
  pause();
  return 0;
}

}  // namespace tessera

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::string_view(argv[i]).substr(0, 9) == "--job-id=") {
      return tessera::RunAsProbe(argc, argv);
    }
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
