// The worker's files: the work and state dirs must be the worker's own and
// closed to group and others; per-attempt directories and credential files
// are created through directory descriptors and never through a planted
// symlink; removal never follows one; the credential file is 0600. Also the
// rank environment's allowlist. Cases that plant links to a directory of
// another owner need root (CI runs as root) and are skipped otherwise.
#include "worker/work_dir.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/test_util.h"
#include "worker/credential_file.h"
#include "worker/worker_agent.h"

namespace tessera {
namespace {

using ::tessera::testing::TempDir;
using ::testing::HasSubstr;
using ::testing::UnorderedElementsAre;

// An account id that owns nothing on a test machine.
constexpr uid_t kStranger = 54321;

struct stat Stat(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::lstat(path.c_str(), &st), 0) << path;
  return st;
}

std::vector<std::string> Entries(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    out.push_back(e.path().filename().string());
  }
  return out;
}

// A directory outside the work dir that belongs to someone else (when root),
// with a file in it: a planted link points here.
class OutsideDir {
 public:
  explicit OutsideDir(const TempDir& dir) : path_(dir.File("outside")) {
    std::filesystem::create_directory(path_);
    std::ofstream(path_ + "/precious") << "keep me\n";
    ::chmod(path_.c_str(), 0750);
    if (::geteuid() == 0) {
      EXPECT_EQ(::lchown(path_.c_str(), kStranger, kStranger), 0);
      EXPECT_EQ(::lchown((path_ + "/precious").c_str(), kStranger, kStranger), 0);
    }
    before_ = Stat(path_);
  }
  const std::string& path() const { return path_; }
  // Owner, mode and contents as they were.
  void ExpectUnchanged() const {
    const struct stat now = Stat(path_);
    EXPECT_EQ(now.st_uid, before_.st_uid);
    EXPECT_EQ(now.st_gid, before_.st_gid);
    EXPECT_EQ(now.st_mode, before_.st_mode);
    EXPECT_THAT(Entries(path_), UnorderedElementsAre("precious"));
    EXPECT_EQ(testing::ReadFile(path_ + "/precious"), "keep me\n");
    const struct stat file = Stat(path_ + "/precious");
    EXPECT_EQ(file.st_uid, ::geteuid() == 0 ? kStranger : ::geteuid());
  }

 private:
  std::string path_;
  struct stat before_ {};
};

TEST(WorkDirTest, DefaultsAreAbsolute) {
  WorkerOptions options;
  EXPECT_EQ(options.work_dir.front(), '/');
  EXPECT_EQ(options.state_dir.front(), '/');
}

TEST(WorkDirTest, MissingWorkDirIsCreatedClosedToOthers) {
  TempDir dir;
  const std::string work = dir.File("a/work");
  absl::StatusOr<ScopedFd> fd = OpenWorkDir(work);
  ASSERT_TRUE(fd.ok()) << fd.status();
  const struct stat st = Stat(work);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(st.st_uid, ::geteuid());
  EXPECT_EQ(st.st_mode & 0022, 0) << std::oct << st.st_mode;
}

TEST(WorkDirTest, WorkDirWritableByGroupOrOthersIsRefused) {
  TempDir dir;
  const std::string work = dir.File("work");
  std::filesystem::create_directory(work);
  for (mode_t mode : {0777, 0775, 0757}) {
    ::chmod(work.c_str(), mode);
    absl::StatusOr<ScopedFd> fd = OpenWorkDir(work);
    ASSERT_TRUE(absl::IsFailedPrecondition(fd.status())) << std::oct << mode;
    EXPECT_THAT(fd.status().message(), HasSubstr("writable by group or others"));
    EXPECT_THAT(fd.status().message(), HasSubstr(work));
  }
  ::chmod(work.c_str(), 0755);
  EXPECT_TRUE(OpenWorkDir(work).ok());
}

TEST(WorkDirTest, PrivateWorkDirGetsSearchButNotListPermissionForRanks) {
  TempDir dir;
  const std::string work = dir.File("work");
  std::filesystem::create_directory(work);
  ::chmod(work.c_str(), 0700);
  ASSERT_TRUE(OpenWorkDir(work).ok());
  EXPECT_EQ(Stat(work).st_mode & 07777, 0711u) << std::oct << Stat(work).st_mode;
}

TEST(WorkDirTest, WorkDirOfAnotherUserIsRefused) {
  if (::geteuid() != 0) GTEST_SKIP() << "giving a directory away needs root";
  TempDir dir;
  const std::string work = dir.File("work");
  std::filesystem::create_directory(work);
  ASSERT_EQ(::chown(work.c_str(), kStranger, kStranger), 0);
  absl::StatusOr<ScopedFd> fd = OpenWorkDir(work);
  ASSERT_TRUE(absl::IsFailedPrecondition(fd.status())) << fd.status();
  EXPECT_THAT(fd.status().message(), HasSubstr("belongs to uid 54321"));
}

TEST(WorkDirTest, SymlinkPlantedAsTheJobDirIsNotFollowed) {
  TempDir dir;
  const std::string work = dir.File("work");
  ASSERT_TRUE(OpenWorkDir(work).ok());
  OutsideDir outside(dir);
  std::filesystem::create_directory_symlink(outside.path(), work + "/job-7");
  absl::StatusOr<ScopedFd> attempt = OpenAttemptDir(work, 7, 1);
  ASSERT_TRUE(absl::IsFailedPrecondition(attempt.status())) << attempt.status();
  EXPECT_THAT(attempt.status().message(), HasSubstr("job-7 is a symlink"));
  outside.ExpectUnchanged();
}

TEST(WorkDirTest, SymlinkPlantedAsTheAttemptDirIsNotFollowed) {
  TempDir dir;
  const std::string work = dir.File("work");
  ASSERT_TRUE(OpenAttemptDir(work, 7, 1).ok());  // job-7 exists and is ours
  OutsideDir outside(dir);
  std::filesystem::create_directory_symlink(outside.path(), work + "/job-7/attempt-2");
  absl::StatusOr<ScopedFd> attempt = OpenAttemptDir(work, 7, 2);
  ASSERT_TRUE(absl::IsFailedPrecondition(attempt.status())) << attempt.status();
  outside.ExpectUnchanged();
}

TEST(WorkDirTest, CredentialDirPlantedAsASymlinkIsReplacedNotFollowed) {
  TempDir dir;
  const std::string work = dir.File("work");
  absl::StatusOr<ScopedFd> attempt = OpenAttemptDir(work, 3, 1);
  ASSERT_TRUE(attempt.ok()) << attempt.status();
  OutsideDir outside(dir);
  const std::string private_dir = work + "/job-3/attempt-1/rank-0.private";
  std::filesystem::create_directory_symlink(outside.path(), private_dir);

  std::optional<UnixAccount> owner;
  if (::geteuid() == 0) owner = UnixAccount{"someone", 4242, 4242, {4242}, "/"};
  ASSERT_TRUE(
      WriteCredentialAt(attempt->get(), "rank-0.private", "tsr_trainer_x", owner).ok());
  // The link is gone: a fresh directory of the rank's owner holds the file.
  const struct stat st = Stat(private_dir);
  ASSERT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0700);
  const struct stat file = Stat(private_dir + "/credential");
  EXPECT_EQ(file.st_mode & 07777, 0600);
  if (owner) {
    EXPECT_EQ(st.st_uid, 4242u);
    EXPECT_EQ(file.st_uid, 4242u);
  }
  EXPECT_EQ(testing::ReadFile(private_dir + "/credential"), "tsr_trainer_x");
  outside.ExpectUnchanged();
}

TEST(WorkDirTest, RemovalOfATreeWithSymlinksDeletesNothingOutside) {
  TempDir dir;
  OutsideDir outside(dir);
  const std::string tree = dir.File("tree");
  std::filesystem::create_directories(tree + "/a/b/c");
  std::ofstream(tree + "/a/b/c/file") << "x";
  std::filesystem::create_directory_symlink(outside.path(), tree + "/a/link-to-dir");
  std::filesystem::create_symlink(outside.path() + "/precious",
                                  tree + "/a/b/link-to-file");
  std::filesystem::create_directory_symlink(outside.path(), tree + "/a/b/c/deeper");
  ScopedFd parent(::open(dir.path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  ASSERT_GE(parent.get(), 0);
  absl::Status removed = RemoveTreeAt(parent.get(), "tree");
  ASSERT_TRUE(removed.ok()) << removed;
  EXPECT_FALSE(std::filesystem::exists(std::filesystem::symlink_status(tree)));
  outside.ExpectUnchanged();
  // A link as the tree itself is removed, not its target.
  std::filesystem::create_directory_symlink(outside.path(), tree);
  ASSERT_TRUE(RemoveTreeAt(parent.get(), "tree").ok());
  EXPECT_FALSE(std::filesystem::exists(std::filesystem::symlink_status(tree)));
  outside.ExpectUnchanged();
  EXPECT_TRUE(RemoveTreeAt(parent.get(), "tree").ok()) << "missing is fine";
  EXPECT_TRUE(absl::IsInvalidArgument(RemoveTreeAt(parent.get(), "../x")));
}

TEST(CredentialFileTest, KeptWithMode0600AndReadBack) {
  TempDir dir;
  const std::string state = dir.File("state");
  absl::StatusOr<std::string> none = LoadWorkerCredential(state, "w1");
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(*none, "");
  ASSERT_TRUE(SaveWorkerCredential(state, "w1", "tsr_worker_abc").ok());
  const std::string file = state + "/" + WorkerCredentialFileName("w1");
  EXPECT_EQ(Stat(file).st_mode & 07777, 0600);
  EXPECT_EQ(*LoadWorkerCredential(state, "w1"), "tsr_worker_abc");
  ASSERT_TRUE(SaveWorkerCredential(state, "w1", "tsr_worker_def").ok());
  EXPECT_EQ(*LoadWorkerCredential(state, "w1"), "tsr_worker_def");
  EXPECT_EQ(*LoadWorkerCredential(state, "w2"), "");

  // A file others may read is not trusted with the name.
  ::chmod(file.c_str(), 0644);
  EXPECT_TRUE(absl::IsFailedPrecondition(LoadWorkerCredential(state, "w1").status()));
  // Nor is a state dir others may write.
  ::chmod(file.c_str(), 0600);
  ::chmod(state.c_str(), 0777);
  EXPECT_TRUE(absl::IsFailedPrecondition(LoadWorkerCredential(state, "w1").status()));
  EXPECT_FALSE(SaveWorkerCredential(state, "w1", "x").ok());
}

TEST(RankEnvironmentTest, OnlyAllowlistedNamesPassAndSpecEntriesComeLast) {
  WorkerOptions options;
  options.pass_env = {"NCCL_SOCKET_IFNAME"};
  const std::map<std::string, std::string> worker_env = {{"PATH", "/root/bin:/usr/sbin"},
                                                         {"HOME", "/root"},
                                                         {"LANG", "C.UTF-8"},
                                                         {"TZ", "UTC"},
                                                         {"OPERATOR_SECRET", "s"},
                                                         {"LD_PRELOAD", "x.so"},
                                                         {"NCCL_SOCKET_IFNAME", "eth1"},
                                                         {"TESSERA_JOIN_TOKEN", "t"}};
  const auto lookup = [&worker_env](const char* name) -> const char* {
    auto it = worker_env.find(name);
    return it == worker_env.end() ? nullptr : it->second.c_str();
  };
  const UnixAccount account{"alice", 1001, 1001, {1001}, "/home/alice"};
  std::vector<std::string> env =
      RankEnvironment(options, account, {"RANK=0", "CUDA_VISIBLE_DEVICES="},
                      {"MY_SETTING=1", "TZ=CET"}, lookup);
  EXPECT_THAT(env, UnorderedElementsAre("CUDA_VISIBLE_DEVICES=", "HOME=/home/alice",
                                        "LANG=C.UTF-8", "LOGNAME=alice", "MY_SETTING=1",
                                        "NCCL_SOCKET_IFNAME=eth1",
                                        std::string("PATH=") + kRankPath, "RANK=0",
                                        "TZ=CET", "USER=alice"));
}

}  // namespace
}  // namespace tessera
