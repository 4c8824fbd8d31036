// The HTTP listener's limits, in process: header count and size, the request
// read deadline, connections per client address, the busy queue, admission of
// a body on its head alone, and streams; the session cookie under TLS and
// pinned tokens; and the gRPC auth gate on a network listener.
#include "coordinator/api/http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/tls.h"
#include "coordinator/coordinator_server.h"
#include "gmock/gmock.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "tests/testing/grpc_auth.h"

namespace tessera {
namespace {

namespace v1 = ::tessera::v1;
using ::testing::HasSubstr;

// A plain TCP client for requests no HTTP library would send.
class RawConnection {
 public:
  // Connects to 127.0.0.1:`port`, from `source` (an address on loopback).
  RawConnection(int port, const char* source = "127.0.0.1") {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in from{};
    from.sin_family = AF_INET;
    inet_pton(AF_INET, source, &from.sin_addr);
    bind(fd_, reinterpret_cast<sockaddr*>(&from), sizeof(from));
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(static_cast<uint16_t>(port));
    inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
    connected_ = connect(fd_, reinterpret_cast<sockaddr*>(&to), sizeof(to)) == 0;
  }
  ~RawConnection() { close(fd_); }
  bool connected() const { return connected_; }
  // False once the peer has closed or reset the connection.
  bool Send(std::string_view data) {
    while (!data.empty()) {
      const ssize_t n = send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      data.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }
  // What arrives within `timeout`, up to the peer closing (`*closed`).
  std::string Read(absl::Duration timeout, bool* closed = nullptr) {
    std::string out;
    const absl::Time end = absl::Now() + timeout;
    bool eof = false;
    while (absl::Now() < end) {
      pollfd p{fd_, POLLIN, 0};
      const int ready = poll(&p, 1,
                             static_cast<int>(absl::ToInt64Milliseconds(
                                 std::max(absl::ZeroDuration(), end - absl::Now()))));
      if (ready <= 0) break;
      char buf[4096];
      const ssize_t n = recv(fd_, buf, sizeof(buf), 0);
      if (n <= 0) {
        eof = true;
        break;
      }
      out.append(buf, static_cast<size_t>(n));
    }
    if (closed != nullptr) *closed = eof;
    return out;
  }

 private:
  int fd_ = -1;
  bool connected_ = false;
};

HttpResponse Text(std::string body) {
  HttpResponse r;
  r.content_type = "text/plain";
  r.body = std::move(body);
  return r;
}

class HttpServerTest : public ::testing::Test {
 protected:
  void Start(HttpServer::Handlers handlers, HttpLimits limits = {}, int max_streams = 2) {
    auto server =
        HttpServer::Start("127.0.0.1:0", std::move(handlers), max_streams, limits);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
  }
  void StartEcho(HttpLimits limits = {}) {
    HttpServer::Handlers h;
    h.handle = [this](const HttpRequest& r) {
      ++handled_;
      return Text(absl::StrCat(r.method, " ", r.path, " ", r.body.size()));
    };
    Start(std::move(h), limits);
  }

  std::unique_ptr<HttpServer> server_;
  std::atomic<int> handled_{0};
};

TEST_F(HttpServerTest, RequestWithTooManyHeaderFieldsGets431) {
  StartEcho();
  RawConnection c(server_->port());
  ASSERT_TRUE(c.connected());
  std::string head = "GET /x HTTP/1.1\r\nHost: t\r\n";
  for (int i = 0; i < 150; ++i) absl::StrAppend(&head, "X-N", i, ": v\r\n");
  ASSERT_TRUE(c.Send(head + "\r\n"));
  EXPECT_THAT(c.Read(absl::Seconds(5)), HasSubstr("HTTP/1.1 431"));
  EXPECT_EQ(handled_, 0);
}

TEST_F(HttpServerTest, HeadLargerThanTheConnectionMemoryGets431AndIsNotBuffered) {
  StartEcho();
  RawConnection c(server_->port());
  ASSERT_TRUE(c.connected());
  ASSERT_TRUE(c.Send("GET /x HTTP/1.1\r\nHost: t\r\n"));
  // 200 KiB of headers, far past the 64 KiB the connection may hold; the
  // server answers and closes before taking them all.
  const std::string line = "X-Long: " + std::string(1000, 'a') + "\r\n";
  int sent = 0;
  while (sent < 200 && c.Send(line)) ++sent;
  bool closed = false;
  const std::string answer = c.Read(absl::Seconds(5), &closed);
  EXPECT_THAT(answer, HasSubstr("431"));
  EXPECT_TRUE(closed);
  EXPECT_EQ(handled_, 0);
}

TEST_F(HttpServerTest, ClientStillSendingItsHeadAtTheDeadlineIsDisconnected) {
  HttpLimits limits;
  limits.request_read_timeout = absl::Milliseconds(600);
  StartEcho(limits);
  RawConnection c(server_->port());
  ASSERT_TRUE(c.connected());
  const absl::Time start = absl::Now();
  ASSERT_TRUE(c.Send("GET /x HTTP/1.1\r\n"));
  // One header line every 100 ms: never idle, never done.
  bool closed = false;
  while (!closed && absl::Now() - start < absl::Seconds(5)) {
    c.Send("X-Slow: 1\r\n");
    c.Read(absl::Milliseconds(100), &closed);
  }
  const absl::Duration took = absl::Now() - start;
  EXPECT_TRUE(closed);
  EXPECT_GE(took, absl::Milliseconds(500));
  EXPECT_LT(took, absl::Seconds(2));
  EXPECT_EQ(server_->read_timeouts(), 1);
  EXPECT_EQ(handled_, 0);
}

TEST_F(HttpServerTest, ConnectionsOverThePerAddressLimitAreClosedAndOthersServed) {
  HttpLimits limits;
  limits.max_connections_per_ip = 3;
  StartEcho(limits);
  std::vector<std::unique_ptr<RawConnection>> held;
  for (int i = 0; i < 3; ++i) {
    held.push_back(std::make_unique<RawConnection>(server_->port(), "127.0.0.2"));
    ASSERT_TRUE(held.back()->connected());
  }
  // The server accepts the fourth, then closes it at once.
  RawConnection extra(server_->port(), "127.0.0.2");
  bool closed = false;
  extra.Send("GET /x HTTP/1.1\r\nHost: t\r\n\r\n");
  EXPECT_EQ(extra.Read(absl::Seconds(5), &closed), "");
  EXPECT_TRUE(closed);
  // Another address is served.
  RawConnection other(server_->port(), "127.0.0.3");
  ASSERT_TRUE(other.Send("GET /x HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"));
  EXPECT_THAT(other.Read(absl::Seconds(5)), HasSubstr("200 OK"));
}

TEST_F(HttpServerTest, RequestsPastTheQueueGet503AtOnceAndTheRestAreServed) {
  absl::Notification release;
  std::atomic<int> running{0};
  HttpServer::Handlers h;
  h.handle = [&](const HttpRequest&) {
    ++running;
    release.WaitForNotification();
    return Text("done");
  };
  HttpLimits limits;
  limits.reserve_threads = 1;
  limits.max_queued_requests = 1;
  // Two threads (one stream slot + one reserve), one queued request.
  Start(std::move(h), limits, /*max_streams=*/1);
  std::vector<std::thread> clients;
  std::atomic<int> ok{0};
  for (int i = 0; i < 3; ++i) {
    clients.emplace_back([&] {
      httplib::Client c("127.0.0.1", server_->port());
      c.set_read_timeout(std::chrono::seconds(20));
      auto r = c.Get("/slow");
      if (r && r->status == 200) ++ok;
    });
    // Two run, the third waits in the queue.
    for (int w = 0; w < 200 && running < std::min(i + 1, 2); ++w) {
      absl::SleepFor(absl::Milliseconds(10));
    }
  }
  absl::SleepFor(absl::Milliseconds(200));  // the third reaches the queue
  httplib::Client busy("127.0.0.1", server_->port());
  const absl::Time asked = absl::Now();
  auto refused = busy.Get("/slow");
  ASSERT_TRUE(refused) << httplib::to_string(refused.error());
  EXPECT_EQ(refused->status, 503);
  EXPECT_EQ(refused->get_header_value("Retry-After"), "1");
  EXPECT_LT(absl::Now() - asked, absl::Seconds(1));
  EXPECT_EQ(server_->busy_refusals(), 1);
  release.Notify();
  for (auto& t : clients) t.join();
  EXPECT_EQ(ok, 3);
}

TEST_F(HttpServerTest, UploadRefusedOnItsHeadIsAnsweredWithoutReadingTheBody) {
  HttpServer::Handlers h;
  h.handle = [this](const HttpRequest&) {
    ++handled_;
    return Text("handled");
  };
  h.admit = [](const HttpRequest& head) -> std::optional<HttpResponse> {
    if (head.headers.count("authorization") > 0) return std::nullopt;
    HttpResponse r = Text("sign in");
    r.status = 401;
    return r;
  };
  Start(std::move(h));
  RawConnection c(server_->port());
  ASSERT_TRUE(c.connected());
  // A 16 MiB upload announced, none of it sent: the answer comes anyway.
  ASSERT_TRUE(
      c.Send("POST /api/v1/x HTTP/1.1\r\nHost: t\r\nContent-Length: 16777216\r\n\r\n"));
  EXPECT_THAT(c.Read(absl::Seconds(5)), HasSubstr("HTTP/1.1 401"));
  EXPECT_EQ(handled_, 0);

  httplib::Client with_token("127.0.0.1", server_->port());
  auto accepted = with_token.Post("/api/v1/x", {{"Authorization", "Bearer t"}},
                                  std::string(1000, 'x'), "text/plain");
  ASSERT_TRUE(accepted);
  EXPECT_EQ(accepted->status, 200);
  EXPECT_EQ(handled_, 1);
}

TEST_F(HttpServerTest, BodyOverTheLimitGets413AndNeverReachesTheHandler) {
  HttpLimits limits;
  limits.max_body_bytes = 1000;
  StartEcho(limits);
  httplib::Client c("127.0.0.1", server_->port());
  auto big = c.Post("/x", std::string(5000, 'x'), "text/plain");
  ASSERT_TRUE(big) << httplib::to_string(big.error());
  EXPECT_EQ(big->status, 413);
  auto small = c.Post("/x", std::string(1000, 'x'), "text/plain");
  ASSERT_TRUE(small);
  EXPECT_EQ(small->body, "POST /x 1000");
  EXPECT_EQ(handled_, 1);
}

TEST_F(HttpServerTest, StreamDeliversEveryWriteAndEndsWhenItsFunctionReturns) {
  HttpServer::Handlers h;
  h.handle = [](const HttpRequest&) {
    HttpResponse r;
    r.content_type = "text/event-stream";
    r.stream = [](EventSink& sink) {
      for (int i = 0; i < 3; ++i) {
        if (!sink.Write(absl::StrCat("data: ", i, "\n\n"))) return;
        absl::SleepFor(absl::Milliseconds(50));
      }
    };
    return r;
  };
  Start(std::move(h));
  httplib::Client c("127.0.0.1", server_->port());
  auto r = c.Get("/events");
  ASSERT_TRUE(r) << httplib::to_string(r.error());
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "data: 0\n\ndata: 1\n\ndata: 2\n\n");
  EXPECT_THAT(r->get_header_value("Content-Security-Policy"), HasSubstr("default-src"));
}

TEST_F(HttpServerTest, StopEndsAStreamWhoseClientStaysConnected) {
  std::atomic<bool> writing{false};
  HttpServer::Handlers h;
  h.handle = [&](const HttpRequest&) {
    HttpResponse r;
    r.stream = [&](EventSink& sink) {
      writing = true;
      while (sink.Write(": keepalive\n\n")) absl::SleepFor(absl::Milliseconds(20));
    };
    return r;
  };
  Start(std::move(h));
  std::thread reader([&] {
    httplib::Client c("127.0.0.1", server_->port());
    c.Get("/events", [](const char*, size_t) { return true; });
  });
  for (int i = 0; i < 500 && !writing; ++i) absl::SleepFor(absl::Milliseconds(10));
  ASSERT_TRUE(writing);
  const absl::Time start = absl::Now();
  server_->Stop();
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
  reader.join();
}

// ---- through the coordinator: session cookies, the gRPC gate ----

class ListenerAuthTest : public ::testing::Test {
 protected:
  void Start(bool tls) {
    CoordinatorOptions options;
    options.listen = "127.0.0.1:0";
    options.http = "127.0.0.1:0";
    options.db_path = ":memory:";
    options.tls_self_signed = tls;
    auto server = CoordinatorServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    RealClock clock;
    auto user = CreateToken(server_->store(), clock, kUserToken, "alice");
    auto join = CreateToken(server_->store(), clock, kJoinToken, "rack");
    ASSERT_TRUE(user.ok() && join.ok());
    user_ = *user;
    join_ = *join;
  }
  std::unique_ptr<v1::JobService::Stub> Jobs(const std::string& token) {
    auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", server_->port()),
                                       grpc::InsecureChannelCredentials());
    if (token.empty()) return v1::JobService::NewStub(channel);
    grpc::ChannelArguments args;
    return v1::JobService::NewStub(
        grpc::experimental::CreateCustomChannelWithInterceptors(
            absl::StrCat("127.0.0.1:", server_->port()),
            grpc::InsecureChannelCredentials(), args,
            testing::BearerInterceptors(token)));
  }

  std::unique_ptr<CoordinatorServer> server_;
  std::string user_;
  std::string join_;
};

TEST_F(ListenerAuthTest, SessionCookieIsSecureUnderTlsAndPinnedTokensSignIn) {
  Start(/*tls=*/true);
  httplib::SSLClient https("127.0.0.1", server_->http_port());
  https.enable_server_certificate_verification(false);
  const std::string pinned = AddPinToToken(user_, server_->tls_fingerprint());
  ASSERT_NE(pinned, user_);
  auto session =
      https.Post("/api/v1/session", {{"Authorization", "Bearer " + pinned}}, "", "");
  ASSERT_TRUE(session) << httplib::to_string(session.error());
  EXPECT_EQ(session->status, 200) << session->body;
  const std::string cookie = session->get_header_value("Set-Cookie");
  EXPECT_THAT(cookie, HasSubstr("; Secure"));
  // The cookie holds the token without its (public) pin, and reads work.
  EXPECT_THAT(cookie, HasSubstr("tessera_token=" + user_ + ";"));
  auto jobs = https.Get("/api/v1/jobs", {{"Cookie", "tessera_token=" + user_}});
  ASSERT_TRUE(jobs);
  EXPECT_EQ(jobs->status, 200);
}

TEST_F(ListenerAuthTest, SessionCookieIsNotSecureOverPlainHttp) {
  Start(/*tls=*/false);
  httplib::Client http("127.0.0.1", server_->http_port());
  auto session =
      http.Post("/api/v1/session", {{"Authorization", "Bearer " + user_}}, "", "");
  ASSERT_TRUE(session);
  EXPECT_EQ(session->status, 200);
  EXPECT_THAT(session->get_header_value("Set-Cookie"),
              ::testing::Not(HasSubstr("Secure")));
}

TEST_F(ListenerAuthTest, GrpcGateRefusesUnauthenticatedCallsBeforeTheirHandlers) {
  Start(/*tls=*/false);
  v1::SubmitJobRequest big;
  big.set_spec_yaml(std::string(8 << 20, 'x'));
  v1::SubmitJobResponse submitted;
  const int64_t rejected_before = server_->auth().rejected();
  for (const std::string& token : {std::string(), std::string("tsr_user_1_00"), join_}) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    grpc::Status s = Jobs(token)->SubmitJob(&ctx, big, &submitted);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << s.error_message();
  }
  // Refused once each, by the gate: no handler saw them.
  EXPECT_EQ(server_->auth().rejected() - rejected_before, 3);
  v1::ListJobsResponse list;
  grpc::ClientContext ok;
  grpc::Status listed = Jobs(user_)->ListJobs(&ok, v1::ListJobsRequest(), &list);
  EXPECT_TRUE(listed.ok()) << listed.error_message();
}

}  // namespace
}  // namespace tessera
