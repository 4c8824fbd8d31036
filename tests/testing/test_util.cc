#include "tests/testing/test_util.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"

namespace tessera::testing {

TempDir::TempDir() {
  const char* base = getenv("TMPDIR");
  std::string tmpl =
      absl::StrCat(base != nullptr ? base : "/tmp", "/tessera-test-XXXXXX");
  char* made = mkdtemp(tmpl.data());
  path_ = made != nullptr ? made : "";
}

TempDir::~TempDir() {
  std::error_code ec;
  if (!path_.empty()) std::filesystem::remove_all(path_, ec);
}

std::string BinDir() {
  const char* d = getenv("TESSERA_BIN_DIR");
  return d != nullptr ? d : TESSERA_DEFAULT_BIN_DIR;
}

std::string SourceDir() {
  const char* d = getenv("TESSERA_SOURCE_DIR");
  return d != nullptr ? d : TESSERA_DEFAULT_SOURCE_DIR;
}

absl::StatusOr<std::unique_ptr<ChildProcess>> ChildProcess::Start(
    std::vector<std::string> argv, const std::string& log_path) {
  std::vector<char*> args;
  for (auto& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  int fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return absl::InternalError("cannot open " + log_path);
  pid_t pid = fork();
  if (pid < 0) return absl::InternalError("fork failed");
  if (pid == 0) {
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    dup2(fd, STDOUT_FILENO);
    dup2(fd, STDERR_FILENO);
    execv(args[0], args.data());
    _exit(127);
  }
  close(fd);
  std::unique_ptr<ChildProcess> child(new ChildProcess());
  child->pid_ = pid;
  child->log_path_ = log_path;
  return child;
}

ChildProcess::~ChildProcess() {
  if (Running()) {
    kill(-pid_, SIGKILL);
    kill(pid_, SIGKILL);
    Wait(absl::Seconds(10));
  }
}

void ChildProcess::Signal(int sig) { kill(pid_, sig); }

std::optional<int> ChildProcess::Wait(absl::Duration timeout) {
  const absl::Time until = absl::Now() + timeout;
  while (!status_) {
    int status = 0;
    pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      status_ = status;
      break;
    }
    if (absl::Now() >= until) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return status_;
}

bool ChildProcess::Running() {
  return pid_ > 0 && !Wait(absl::ZeroDuration()).has_value();
}

std::string ChildProcess::Log() const { return ReadFile(log_path_); }

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

absl::StatusOr<int> WaitForPortFile(const std::string& path, absl::Duration timeout) {
  const absl::Time until = absl::Now() + timeout;
  while (absl::Now() < until) {
    std::string text(absl::StripAsciiWhitespace(ReadFile(path)));
    int port = 0;
    if (!text.empty() && absl::SimpleAtoi(text, &port) && port > 0) return port;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return absl::DeadlineExceededError("no port in " + path);
}

std::vector<pid_t> FindProcesses(const std::vector<std::string>& needles) {
  std::vector<pid_t> found;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    int pid = 0;
    if (!absl::SimpleAtoi(entry.path().filename().string(), &pid)) continue;
    std::string cmdline = ReadFile(entry.path().string() + "/cmdline");
    std::string stat = ReadFile(entry.path().string() + "/stat");
    // Zombies have exited; only their parent's wait is missing.
    size_t paren = stat.rfind(')');
    if (paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] == 'Z') {
      continue;
    }
    std::vector<std::string> args = absl::StrSplit(cmdline, '\0', absl::SkipEmpty());
    bool all = !args.empty();
    for (const auto& n : needles) {
      all = all && std::find(args.begin(), args.end(), n) != args.end();
    }
    if (all) found.push_back(pid);
  }
  return found;
}

bool WaitFor(const std::function<bool()>& done, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (!done()) {
    if (absl::Now() >= deadline) return done();
    absl::SleepFor(absl::Milliseconds(10));
  }
  return true;
}

int PickUnusedPort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

}  // namespace tessera::testing
