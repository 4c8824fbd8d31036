// Abuse of the coordinator's listeners, against a real tessera-coordinator
// process on loopback (ctest label `abuse`). Each test prints the figures the
// docs/performance.md's robustness table quotes, as "FIGURE name=value" lines:
//
//  - slowloris: 30 sockets from 127.0.0.2 each sending one header line every
//    2 s; /healthz probed from 127.0.0.1 meanwhile (healthz_p99_ms_under_slowloris);
//  - a header flood: 100,000 headers of 1 KB on one connection
//    (rss_growth_mb_header_flood);
//  - 64 concurrent unauthenticated gRPC calls of 16 MiB each
//    (rss_growth_mb_grpc_unauth_16mib);
//  - an open event stream whose token is revoked (stream_end_after_revoke_s).
//
// Memory is the coordinator's peak resident size (VmHWM, reset through
// /proc/PID/clear_refs before each attack when allowed) less its resident size
// (VmRSS) just before.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <fstream>
#include <future>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "tessera/v1/tessera.grpc.pb.h"
#include "tests/testing/test_util.h"

namespace tessera {
namespace {

namespace v1 = ::tessera::v1;
using ::tessera::testing::ChildProcess;
using ::tessera::testing::TempDir;

// A TCP connection to 127.0.0.1:`port` from `source` (an address on loopback).
class Socket {
 public:
  Socket(int port, const char* source) {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in from{};
    from.sin_family = AF_INET;
    inet_pton(AF_INET, source, &from.sin_addr);
    bind(fd_, reinterpret_cast<sockaddr*>(&from), sizeof(from));
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(static_cast<uint16_t>(port));
    inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
    ok_ = connect(fd_, reinterpret_cast<sockaddr*>(&to), sizeof(to)) == 0;
  }
  ~Socket() { close(fd_); }
  bool ok() const { return ok_; }
  bool Send(std::string_view data) {
    while (ok_ && !data.empty()) {
      const ssize_t n = send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
      if (n <= 0) ok_ = false;
      if (n > 0) data.remove_prefix(static_cast<size_t>(n));
    }
    return ok_;
  }
  // Appends what arrives within `timeout` to `out`; false once the peer closed.
  bool Read(absl::Duration timeout, std::string& out) {
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(timeout))) <= 0) {
      return true;
    }
    char buf[16384];
    const ssize_t n = recv(fd_, buf, sizeof(buf), 0);
    if (n <= 0) return false;
    out.append(buf, static_cast<size_t>(n));
    return true;
  }

 private:
  int fd_ = -1;
  bool ok_ = false;
};

// Resident and peak resident size of `pid`, in MiB (/proc/PID/status).
double StatusMiB(pid_t pid, const std::string& field) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) != 0) continue;
    std::vector<std::string> parts =
        absl::StrSplit(line.substr(field.size() + 1), ' ', absl::SkipWhitespace());
    int64_t kb = 0;
    if (!parts.empty() && absl::SimpleAtoi(parts[0], &kb)) return kb / 1024.0;
  }
  return -1;
}

// The peak resident size starts again from the current one (Linux >= 4.0,
// needs to own the process or root). False when not allowed: VmHWM then
// includes the peak since start, which only overstates a growth.
bool ResetPeak(pid_t pid) {
  std::ofstream out(absl::StrCat("/proc/", pid, "/clear_refs"));
  out << "5";
  out.flush();
  return out.good();
}

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t rank = static_cast<size_t>(std::ceil(q * static_cast<double>(v.size())));
  return v[std::min(v.size() - 1, rank == 0 ? 0 : rank - 1)];
}

class ListenerAbuseTest : public ::testing::Test {
 protected:
  std::string Coordinator() { return testing::BinDir() + "/tessera-coordinator"; }

  // Runs `tessera-coordinator --db DB args...` to its end; returns its output.
  std::string RunTool(std::vector<std::string> args) {
    std::vector<std::string> argv = {Coordinator(), "--db", dir_.File("db")};
    argv.insert(argv.end(), args.begin(), args.end());
    const std::string log = dir_.File(absl::StrCat("tool-", ++tool_runs_, ".log"));
    auto child = ChildProcess::Start(argv, log);
    EXPECT_TRUE(child.ok()) << child.status();
    if (!child.ok()) return "";
    std::optional<int> status = (*child)->Wait(absl::Seconds(30));
    EXPECT_TRUE(status.has_value() && WIFEXITED(*status) && WEXITSTATUS(*status) == 0)
        << (*child)->Log();
    return (*child)->Log();
  }

  // A user token, created before the coordinator starts.
  std::string CreateUserToken(const std::string& name) {
    for (absl::string_view line :
         absl::StrSplit(RunTool({"token", "create", "--name", name}), '\n')) {
      line = absl::StripAsciiWhitespace(line);
      if (absl::StartsWith(line, "tsr_user_")) return std::string(line);
    }
    ADD_FAILURE() << "no token printed";
    return "";
  }

  void StartCoordinator(std::vector<std::string> extra = {}) {
    std::vector<std::string> argv = {Coordinator(),         "--listen",
                                     "127.0.0.1:0",         "--http",
                                     "127.0.0.1:0",         "--db",
                                     dir_.File("db"),       "--port-file",
                                     dir_.File("port"),     "--http-port-file",
                                     dir_.File("http-port")};
    argv.insert(argv.end(), extra.begin(), extra.end());
    auto child = ChildProcess::Start(argv, dir_.File("coordinator.log"));
    ASSERT_TRUE(child.ok()) << child.status();
    coordinator_ = std::move(*child);
    auto port = testing::WaitForPortFile(dir_.File("port"), absl::Seconds(30));
    ASSERT_TRUE(port.ok()) << port.status() << "\n" << coordinator_->Log();
    auto http = testing::WaitForPortFile(dir_.File("http-port"), absl::Seconds(30));
    ASSERT_TRUE(http.ok()) << http.status() << "\n" << coordinator_->Log();
    grpc_port_ = *port;
    http_port_ = *http;
  }

  // GET /healthz from 127.0.0.1 on a fresh connection; its latency in ms, or
  // -1 when it did not answer 200 within 5 s.
  double ProbeHealthz() {
    const absl::Time start = absl::Now();
    Socket s(http_port_, "127.0.0.1");
    if (!s.Send("GET /healthz HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")) {
      return -1;
    }
    std::string answer;
    while (absl::Now() - start < absl::Seconds(5) &&
           answer.find("\r\n\r\nok") == std::string::npos) {
      if (!s.Read(absl::Milliseconds(100), answer)) break;
    }
    if (answer.rfind("HTTP/1.1 200", 0) != 0 || answer.find("ok") == std::string::npos) {
      return -1;
    }
    return absl::ToDoubleMilliseconds(absl::Now() - start);
  }

  TempDir dir_;
  std::unique_ptr<ChildProcess> coordinator_;
  int grpc_port_ = 0;
  int http_port_ = 0;
  int tool_runs_ = 0;
};

TEST_F(ListenerAbuseTest, SlowlorisFromOneAddressLeavesHealthzFastAndIsCutOff) {
  // A short read deadline, so that the test sees the server cut the sockets
  // off (they reconnect at once, as an attacker would, so 30 stay open).
  constexpr int kSockets = 30;
  constexpr int kDeadlineMs = 3000;
  StartCoordinator({"--http-request-timeout-ms", std::to_string(kDeadlineMs)});
  ASSERT_GT(ProbeHealthz(), 0);

  std::atomic<bool> stop{false};
  absl::Mutex mu;
  std::vector<double> lifetimes_ms;  // sockets the server closed, open to close
  std::thread attacker([&] {
    struct Slow {
      std::unique_ptr<Socket> socket;
      absl::Time opened;
      absl::Time next_line;
      int lines = 0;
    };
    auto open = [&] {
      Slow s{std::make_unique<Socket>(http_port_, "127.0.0.2"), absl::Now(), absl::Now()};
      s.socket->Send("GET /healthz HTTP/1.1\r\nHost: t\r\n");
      s.next_line = s.opened + absl::Seconds(2);
      return s;
    };
    std::vector<Slow> slow;
    for (int i = 0; i < kSockets; ++i) slow.push_back(open());
    while (!stop.load()) {
      for (Slow& s : slow) {
        std::string ignored;
        bool alive = s.socket->ok() && s.socket->Read(absl::ZeroDuration(), ignored);
        if (alive && absl::Now() >= s.next_line) {
          alive = s.socket->Send(absl::StrCat("X-Slow-", s.lines++, ": 1\r\n"));
          s.next_line += absl::Seconds(2);
        }
        if (!alive) {
          {
            absl::MutexLock lock(&mu);
            lifetimes_ms.push_back(absl::ToDoubleMilliseconds(absl::Now() - s.opened));
          }
          s = open();
        }
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
  });

  absl::SleepFor(absl::Milliseconds(500));  // every slow socket is open
  std::vector<double> latencies;
  int failed = 0;
  const absl::Time end = absl::Now() + absl::Seconds(7);
  while (absl::Now() < end) {
    const double ms = ProbeHealthz();
    if (ms < 0) {
      ++failed;
      latencies.push_back(5000);
    } else {
      latencies.push_back(ms);
    }
    absl::SleepFor(absl::Milliseconds(40));
  }
  stop = true;
  attacker.join();

  const double p99 = Percentile(latencies, 0.99);
  std::vector<double> lifetimes;
  {
    absl::MutexLock lock(&mu);
    lifetimes = lifetimes_ms;
  }
  const double median_life = Percentile(lifetimes, 0.5);
  std::cout << "FIGURE healthz_p99_ms_under_slowloris=" << p99 << std::endl;
  std::cout << "FIGURE healthz_probes_under_slowloris=" << latencies.size()
            << " failed=" << failed << std::endl;
  std::cout << "FIGURE slowloris_socket_lifetime_ms_median=" << median_life
            << " deadline_ms=" << kDeadlineMs << " closed=" << lifetimes.size()
            << std::endl;
  EXPECT_EQ(failed, 0);
  EXPECT_LT(p99, 1000);
  EXPECT_GT(latencies.size(), 50u);
  // Every socket that lived through a whole deadline was cut off at it.
  EXPECT_GE(lifetimes.size(), static_cast<size_t>(kSockets));
  EXPECT_GE(median_life, kDeadlineMs - 200);
  EXPECT_LT(median_life, kDeadlineMs + 1500);
}

TEST_F(ListenerAbuseTest, HeaderFloodOnOneConnectionIsRefusedWithoutGrowingMemory) {
  StartCoordinator();
  ASSERT_GT(ProbeHealthz(), 0);
  const pid_t pid = coordinator_->pid();
  const double rss_before = StatusMiB(pid, "VmRSS");
  const bool reset = ResetPeak(pid);

  Socket s(http_port_, "127.0.0.1");
  ASSERT_TRUE(s.Send("GET /api/v1/jobs HTTP/1.1\r\nHost: t\r\n"));
  // 1 KB per header line: name, value and CRLF.
  const std::string value(1024 - 20, 'v');
  int sent = 0;
  for (; sent < 100000; ++sent) {
    if (!s.Send(absl::StrCat("X-Flood-", sent, ": ", value, "\r\n"))) break;
  }
  std::string answer;
  const absl::Time end = absl::Now() + absl::Seconds(5);
  while (absl::Now() < end && s.Read(absl::Milliseconds(100), answer)) {
  }
  const double peak = StatusMiB(pid, "VmHWM");
  const double growth = std::max(0.0, peak - rss_before);
  std::cout << "FIGURE rss_growth_mb_header_flood=" << growth
            << " rss_before_mb=" << rss_before << " peak_mb=" << peak
            << " peak_reset=" << reset << std::endl;
  std::cout << "FIGURE header_flood_lines_sent_before_close=" << sent << std::endl;
  EXPECT_LT(sent, 100000) << "the server read 100 MB of headers";
  // The answer, when it arrived before the reset, is 431.
  if (!answer.empty()) EXPECT_NE(answer.find(" 431 "), std::string::npos) << answer;
  EXPECT_LT(growth, 20);
  EXPECT_GT(ProbeHealthz(), 0);
}

TEST_F(ListenerAbuseTest, UnauthenticatedLargeGrpcCallsAreRefusedWithoutGrowingMemory) {
  StartCoordinator();
  const std::string target = absl::StrCat("127.0.0.1:", grpc_port_);
  // One SubmitJob request just under the 16 MiB limit, serialized once; every
  // call sends the same (reference-counted) bytes.
  v1::SubmitJobRequest request;
  request.set_spec_yaml(std::string((16 << 20) - 1024, 'x'));
  std::string bytes;
  ASSERT_TRUE(request.SerializeToString(&bytes));
  grpc::Slice slice(bytes);
  const grpc::ByteBuffer payload(&slice, 1);
  bytes.clear();
  bytes.shrink_to_fit();

  constexpr int kCalls = 64;
  constexpr int kChannels = 8;
  std::vector<std::unique_ptr<grpc::GenericStub>> stubs;
  for (int i = 0; i < kChannels; ++i) {
    grpc::ChannelArguments args;
    args.SetInt("tessera.test.channel", i);  // one connection per channel
    stubs.push_back(std::make_unique<grpc::GenericStub>(
        grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args)));
  }
  // Warm the connections and the server with a small refused call each.
  for (auto& stub : stubs) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    grpc::Slice empty_slice(std::string{});
    grpc::ByteBuffer empty(&empty_slice, 1);
    grpc::ByteBuffer ignored;
    std::promise<grpc::Status> done;
    stub->UnaryCall(&ctx, "/tessera.v1.JobService/ListJobs", grpc::StubOptions(), &empty,
                    &ignored, [&done](grpc::Status s) { done.set_value(std::move(s)); });
    EXPECT_EQ(done.get_future().get().error_code(), grpc::StatusCode::UNAUTHENTICATED);
  }

  const pid_t pid = coordinator_->pid();
  const double rss_before = StatusMiB(pid, "VmRSS");
  const bool reset = ResetPeak(pid);
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<grpc::ByteBuffer> requests(kCalls, payload);
  std::vector<grpc::ByteBuffer> responses(kCalls);
  std::vector<std::promise<grpc::Status>> done(kCalls);
  const absl::Time start = absl::Now();
  for (int i = 0; i < kCalls; ++i) {
    contexts.push_back(std::make_unique<grpc::ClientContext>());
    contexts.back()->set_deadline(std::chrono::system_clock::now() +
                                  std::chrono::seconds(60));
    stubs[i % kChannels]->UnaryCall(
        contexts.back().get(), "/tessera.v1.JobService/SubmitJob", grpc::StubOptions(),
        &requests[i], &responses[i],
        [&done, i](grpc::Status s) { done[i].set_value(std::move(s)); });
  }
  int refused = 0;
  for (int i = 0; i < kCalls; ++i) {
    const grpc::Status s = done[i].get_future().get();
    if (s.error_code() == grpc::StatusCode::UNAUTHENTICATED) {
      ++refused;
    } else {
      ADD_FAILURE() << "call " << i << ": " << s.error_code() << " " << s.error_message();
    }
  }
  const double took_s = absl::ToDoubleSeconds(absl::Now() - start);
  const double peak = StatusMiB(pid, "VmHWM");
  const double growth = std::max(0.0, peak - rss_before);
  std::cout << "FIGURE rss_growth_mb_grpc_unauth_16mib=" << growth
            << " rss_before_mb=" << rss_before << " peak_mb=" << peak
            << " peak_reset=" << reset << std::endl;
  std::cout << "FIGURE grpc_unauth_16mib_refused=" << refused << "/" << kCalls
            << " seconds=" << took_s << std::endl;
  EXPECT_EQ(refused, kCalls);
  EXPECT_LT(growth, 100);
}

// The HTTP status of GET /api/v1/jobs with `token`, or 0 when no answer came.
int JobsStatus(int port, const std::string& token) {
  Socket s(port, "127.0.0.1");
  if (!s.Send(
          absl::StrCat("GET /api/v1/jobs HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer ",
                       token, "\r\nConnection: close\r\n\r\n"))) {
    return 0;
  }
  std::string answer;
  const absl::Time end = absl::Now() + absl::Seconds(10);
  while (answer.find("\r\n") == std::string::npos && absl::Now() < end &&
         s.Read(absl::Milliseconds(100), answer)) {
  }
  int status = 0;
  if (answer.rfind("HTTP/1.1 ", 0) == 0)
    (void)absl::SimpleAtoi(answer.substr(9, 3), &status);
  return status;
}

TEST_F(ListenerAbuseTest,
       TokenRevokedByTheToolIsRefusedByTheRunningCoordinatorWithinSeconds) {
  const std::string token = CreateUserToken("mallory");
  ASSERT_FALSE(token.empty());
  StartCoordinator();
  // Verified once: the coordinator caches it (for up to 30 s).
  ASSERT_EQ(JobsStatus(http_port_, token), 200);
  std::vector<std::string> parts = absl::StrSplit(token, '_');
  ASSERT_EQ(parts.size(), 4u);
  const absl::Time revoked = absl::Now();
  RunTool({"token", "revoke", parts[2]});
  int status = 200;
  while (status == 200 && absl::Now() - revoked < absl::Seconds(15)) {
    status = JobsStatus(http_port_, token);
    if (status == 200) absl::SleepFor(absl::Milliseconds(50));
  }
  const double after_s = absl::ToDoubleSeconds(absl::Now() - revoked);
  std::cout << "FIGURE call_refused_after_revoke_s=" << after_s << std::endl;
  EXPECT_EQ(status, 401);
  EXPECT_LT(after_s, 5) << "the token cache kept it";
}

TEST_F(ListenerAbuseTest, RevokedTokenEndsItsOpenEventStreamWithinSeconds) {
  const std::string token = CreateUserToken("mallory");
  ASSERT_FALSE(token.empty());
  StartCoordinator();
  Socket s(http_port_, "127.0.0.1");
  ASSERT_TRUE(s.Send(absl::StrCat("GET /api/v1/stream/workers HTTP/1.1\r\nHost: t\r\n",
                                  "Authorization: Bearer ", token,
                                  "\r\nConnection: close\r\n\r\n")));
  std::string text;
  const absl::Time opened = absl::Now();
  while (text.find("event: workers") == std::string::npos &&
         absl::Now() - opened < absl::Seconds(10)) {
    ASSERT_TRUE(s.Read(absl::Milliseconds(100), text)) << text;
  }
  ASSERT_NE(text.find("event: workers"), std::string::npos) << text;
  ASSERT_EQ(text.rfind("HTTP/1.1 200", 0), 0u) << text;
  // The stream stays open while the token is valid.
  const absl::Time quiet_until = absl::Now() + absl::Milliseconds(1500);
  while (absl::Now() < quiet_until) {
    ASSERT_TRUE(s.Read(absl::Milliseconds(100), text)) << "stream ended early";
  }

  // tsr_user_<id>_<secret>
  std::vector<std::string> parts = absl::StrSplit(token, '_');
  ASSERT_EQ(parts.size(), 4u);
  // From the start of the revoking command: its own start-up is included.
  const absl::Time revoked = absl::Now();
  RunTool({"token", "revoke", parts[2]});
  bool open = true;
  while (open && absl::Now() - revoked < absl::Seconds(15)) {
    open = s.Read(absl::Milliseconds(100), text) &&
           text.find("\r\n0\r\n\r\n") == std::string::npos;
  }
  const double after_s = absl::ToDoubleSeconds(absl::Now() - revoked);
  std::cout << "FIGURE stream_end_after_revoke_s=" << after_s << std::endl;
  EXPECT_FALSE(open);
  EXPECT_LT(after_s, 5);
}

}  // namespace
}  // namespace tessera
