// The coordinator's files are its own: the database it creates (with its -wal
// and -shm files) is 0600 even under a permissive umask, and it refuses to
// start on a database that group or others can read. Real processes.
#include <sys/stat.h>
#include <sys/wait.h>

#include <filesystem>
#include <fstream>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "tests/testing/test_util.h"

namespace tessera {
namespace {

using ::tessera::testing::ChildProcess;
using ::tessera::testing::TempDir;

mode_t ModeOf(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return 0;
  return st.st_mode & 07777;
}

TEST(CoordinatorFileModesTest, DatabaseAndItsWalAndShmAreOwnerOnly) {
  TempDir dir;
  const std::string db = dir.File("tessera.db");
  // A permissive umask in the parent must not leak into the files.
  const mode_t old = umask(022);
  auto coordinator = ChildProcess::Start(
      {testing::BinDir() + "/tessera-coordinator", "--listen", "127.0.0.1:0", "--http",
       "127.0.0.1:0", "--db", db, "--port-file", dir.File("port"), "--tls-self-signed"},
      dir.File("coordinator.log"));
  umask(old);
  ASSERT_TRUE(coordinator.ok()) << coordinator.status();
  ASSERT_TRUE(testing::WaitForPortFile(dir.File("port"), absl::Seconds(30)).ok())
      << (*coordinator)->Log();
  for (const std::string& file : {db, db + "-wal", db + "-shm"}) {
    ASSERT_TRUE(std::filesystem::exists(file)) << file;
    EXPECT_EQ(ModeOf(file), 0600) << file;
  }
  (*coordinator)->Signal(SIGTERM);
  std::optional<int> status = (*coordinator)->Wait(absl::Seconds(20));
  ASSERT_TRUE(status.has_value());
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << (*coordinator)->Log();
}

TEST(CoordinatorFileModesTest, RefusesToStartOnADatabaseOthersCanRead) {
  TempDir dir;
  const std::string db = dir.File("tessera.db");
  // Made by a token command (a 0600 file), then opened up by mistake.
  auto token = ChildProcess::Start({testing::BinDir() + "/tessera-coordinator", "--db",
                                    db, "token", "create", "--name", "alice"},
                                   dir.File("token.out"));
  ASSERT_TRUE(token.ok());
  ASSERT_TRUE((*token)->Wait(absl::Seconds(30)).has_value());
  EXPECT_EQ(ModeOf(db), 0600);
  ASSERT_EQ(::chmod(db.c_str(), 0644), 0);
  auto coordinator =
      ChildProcess::Start({testing::BinDir() + "/tessera-coordinator", "--listen",
                           "127.0.0.1:0", "--http", "127.0.0.1:0", "--db", db},
                          dir.File("coordinator.log"));
  ASSERT_TRUE(coordinator.ok());
  std::optional<int> status = (*coordinator)->Wait(absl::Seconds(30));
  ASSERT_TRUE(status.has_value()) << "the coordinator started on a 0644 database";
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) != 0);
  const std::string log = (*coordinator)->Log();
  EXPECT_TRUE(absl::StrContains(log, "mode 0644")) << log;
  EXPECT_TRUE(absl::StrContains(log, "chmod 600")) << log;
}

}  // namespace
}  // namespace tessera
