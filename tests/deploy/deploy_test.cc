// The systemd units verify, and the daemons speak the sd_notify protocol
// (readiness, watchdog, stopping) to a NOTIFY_SOCKET this test owns.
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/test_util.h"

namespace tessera {
namespace {

using ::tessera::testing::ChildProcess;
using ::tessera::testing::TempDir;

TEST(DeployTest, SystemdUnitsPassSystemdAnalyzeVerify) {
  if (access("/usr/bin/systemd-analyze", X_OK) != 0) {
    GTEST_SKIP() << "systemd-analyze is not installed";
  }
  TempDir dir;
  for (const char* unit : {"tessera-coordinator.service", "tessera-worker.service"}) {
    std::string text = testing::ReadFile(testing::SourceDir() + "/deploy/" + unit);
    ASSERT_FALSE(text.empty()) << unit;
    // Point ExecStart at the binaries just built, which verify checks exist.
    std::ofstream(dir.File(unit))
        << absl::StrReplaceAll(text, {{"/usr/local/bin", testing::BinDir()}});
  }
  auto verify = ChildProcess::Start(
      {"/usr/bin/systemd-analyze", "verify", dir.File("tessera-coordinator.service"),
       dir.File("tessera-worker.service")},
      dir.File("verify.log"));
  ASSERT_TRUE(verify.ok());
  std::optional<int> status = (*verify)->Wait(absl::Seconds(60));
  ASSERT_TRUE(status.has_value());
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << (*verify)->Log();
  EXPECT_EQ((*verify)->Log(), "") << "systemd-analyze reported problems";
}

// A datagram socket standing in for the service manager.
class NotifySocket {
 public:
  explicit NotifySocket(const std::string& path) : path_(path) {
    fd_ = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
    bound_ = bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
    timeval tv{.tv_sec = 0, .tv_usec = 200000};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  }
  ~NotifySocket() { close(fd_); }
  bool bound() const { return bound_; }

  // Collects messages until every one of `wanted` was seen or `timeout` passes.
  std::set<std::string> Await(const std::set<std::string>& wanted,
                              absl::Duration timeout) {
    const absl::Time until = absl::Now() + timeout;
    while (absl::Now() < until) {
      char buf[4096];
      ssize_t n = recv(fd_, buf, sizeof(buf), 0);
      if (n > 0) {
        for (absl::string_view line : absl::StrSplit(absl::string_view(buf, n), '\n')) {
          seen_.insert(std::string(line));
        }
      }
      bool all = true;
      for (const auto& w : wanted) all = all && seen_.contains(w);
      if (all) break;
    }
    return seen_;
  }

 private:
  std::string path_;
  int fd_ = -1;
  bool bound_ = false;
  std::set<std::string> seen_;
};

class NotifyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    socket_ = std::make_unique<NotifySocket>(dir_.File("notify.sock"));
    ASSERT_TRUE(socket_->bound());
    setenv("NOTIFY_SOCKET", dir_.File("notify.sock").c_str(), 1);
    setenv("WATCHDOG_USEC", "400000", 1);
  }
  void TearDown() override {
    unsetenv("NOTIFY_SOCKET");
    unsetenv("WATCHDOG_USEC");
  }
  TempDir dir_;
  std::unique_ptr<NotifySocket> socket_;
};

TEST_F(NotifyTest, CoordinatorReportsReadyPetsWatchdogAndStops) {
  auto c = ChildProcess::Start(
      {testing::BinDir() + "/tessera-coordinator", "--listen", "127.0.0.1:0", "--http",
       "127.0.0.1:0", "--db", dir_.File("t.db")},
      dir_.File("coordinator.log"));
  ASSERT_TRUE(c.ok());
  std::set<std::string> seen =
      socket_->Await({"READY=1", "WATCHDOG=1"}, absl::Seconds(20));
  EXPECT_TRUE(seen.contains("READY=1")) << (*c)->Log();
  EXPECT_TRUE(seen.contains("WATCHDOG=1"));
  (*c)->Signal(SIGTERM);
  seen = socket_->Await({"STOPPING=1"}, absl::Seconds(20));
  EXPECT_TRUE(seen.contains("STOPPING=1"));
  ASSERT_TRUE((*c)->Wait(absl::Seconds(20)).has_value());
}

TEST_F(NotifyTest, WorkerReportsReadyAndPetsWatchdogEvenWithoutCoordinator) {
  auto w = ChildProcess::Start({testing::BinDir() + "/tessera-worker", "--coordinator",
                                absl::StrCat("127.0.0.1:", testing::PickUnusedPort()),
                                "--name", "notify-test", "--work-dir", dir_.File("work"),
                                "--state-dir", dir_.File("state"), "--no-cgroups"},
                               dir_.File("worker.log"));
  ASSERT_TRUE(w.ok());
  std::set<std::string> seen =
      socket_->Await({"READY=1", "WATCHDOG=1"}, absl::Seconds(20));
  EXPECT_TRUE(seen.contains("READY=1")) << (*w)->Log();
  EXPECT_TRUE(seen.contains("WATCHDOG=1"));
  (*w)->Signal(SIGTERM);
  ASSERT_TRUE((*w)->Wait(absl::Seconds(20)).has_value());
}

}  // namespace
}  // namespace tessera
