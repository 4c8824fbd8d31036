#include "coordinator/api/http_server.h"

#include <microhttpd.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <set>
#include <string_view>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "coordinator/api/task_pool.h"
#include "spdlog/spdlog.h"

namespace tessera {

namespace {

constexpr std::pair<const char*, const char*> kDefaultHeaders[] = {
    {"Content-Security-Policy",
     "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
     "connect-src 'self'; object-src 'none'; frame-ancestors 'none'; base-uri 'none'; "
     "form-action 'none'"},
    {"X-Content-Type-Options", "nosniff"},
    {"Referrer-Policy", "no-referrer"},
};

// TLS 1.2 and 1.3 only, as the OpenSSL-based server allowed before.
constexpr char kTlsPriorities[] = "NORMAL:-VERS-ALL:+VERS-TLS1.3:+VERS-TLS1.2";
// Bytes a stream may have queued for a slow client before its writer waits.
constexpr size_t kMaxStreamBacklog = 1 << 20;
// Largest piece of a stream handed to libmicrohttpd at once.
constexpr size_t kStreamBlock = 16 * 1024;
// How often connections are checked against request_read_timeout.
constexpr absl::Duration kReadDeadlinePeriod = absl::Milliseconds(100);

HttpResponse ErrorResponse(int status, absl::string_view code,
                           absl::string_view message) {
  HttpResponse r;
  r.status = status;
  // `code` and `message` are constants of this file: nothing to escape.
  r.body = absl::StrCat("{\"error\":\"", message, "\",\"code\":\"", code, "\"}");
  return r;
}

void AddHeaders(MHD_Response* response, const HttpResponse& out) {
  for (const auto& [name, value] : kDefaultHeaders) {
    MHD_add_response_header(response, name, value);
  }
  MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE,
                          out.content_type.c_str());
  for (const auto& [name, value] : out.headers) {
    MHD_add_response_header(response, name.c_str(), value.c_str());
  }
}

MHD_Response* BufferResponse(const HttpResponse& out) {
  MHD_Response* response = MHD_create_response_from_buffer(
      out.body.size(), const_cast<char*>(out.body.data()), MHD_RESPMEM_MUST_COPY);
  if (response != nullptr) AddHeaders(response, out);
  return response;
}

MHD_Result CollectHeader(void* cls, MHD_ValueKind, const char* key, const char* value) {
  auto* headers = static_cast<std::map<std::string, std::string>*>(cls);
  headers->emplace(absl::AsciiStrToLower(key), value != nullptr ? value : "");
  return MHD_YES;
}

MHD_Result CollectArgument(void* cls, MHD_ValueKind, const char* key, const char* value) {
  auto* query = static_cast<std::map<std::string, std::string>*>(cls);
  query->emplace(key, value != nullptr ? value : "");
  return MHD_YES;
}

void LogFromLibrary(void*, const char* format, va_list args) {
  char line[512];
  vsnprintf(line, sizeof(line), format, args);
  std::string_view text(line);
  while (!text.empty() && text.back() == '\n') text.remove_suffix(1);
  spdlog::debug("http: {}", text);
}

// A listening TCP socket on `host`:`port` (0: any free port); returns the fd.
absl::StatusOr<int> Listen(const std::string& host, int port, int backlog) {
  std::string name = host;
  if (name.size() >= 2 && name.front() == '[' && name.back() == ']') {
    name = name.substr(1, name.size() - 2);
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  if (getaddrinfo(name.empty() ? nullptr : name.c_str(), service.c_str(), &hints,
                  &found) != 0 ||
      found == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("--http: cannot resolve host '", host, "'"));
  }
  int fd = -1;
  for (addrinfo* a = found; a != nullptr && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    const int on = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
    if (bind(fd, a->ai_addr, a->ai_addrlen) != 0 || listen(fd, backlog) != 0) {
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(found);
  if (fd < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot listen on ", host, ":", port,
                     " (HTTP): the address is in use or not available"));
  }
  return fd;
}

int BoundPort(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return 0;
  if (addr.ss_family == AF_INET) {
    return ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  }
  if (addr.ss_family == AF_INET6) {
    return ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
  }
  return 0;
}

}  // namespace

// The daemon and its callbacks. Every callback but the handlers' work runs on
// libmicrohttpd's one polling thread; the work runs on `pool_`. `mu_` guards
// what both touch: the per-connection and per-request state, the stream
// buffers, and which connections are suspended.
//
// A request goes through these phases (Request::phase); while a task runs for
// it, its connection is suspended (libmicrohttpd neither reads nor times it
// out) and the task resumes it when done:
//   head -> [admitting -> admitted] -> body -> handling -> answered
class HttpServer::Core {
 public:
  Core(Handlers handlers, int threads, const HttpLimits& limits)
      : handlers_(std::move(handlers)),
        limits_(limits),
        pool_(threads, limits.max_queued_requests) {}

  ~Core() { Stop(); }

  absl::Status Start(int listen_fd, const TlsIdentity& tls);
  void Stop();

  std::atomic<int64_t> read_timeouts{0};
  std::atomic<int64_t> busy_refusals{0};

 private:
  // A TCP connection: what the read deadline needs.
  struct Conn {
    int fd = -1;
    absl::Time read_started;
    bool reading = true;  // its next request is not yet completely read
  };
  enum class Phase { kHead, kAdmitting, kAdmitted, kBody, kHandling, kAnswered };
  // One request (libmicrohttpd's per-request context).
  struct Request {
    ~Request() {
      if (response != nullptr) MHD_destroy_response(response);
    }
    MHD_Connection* connection = nullptr;
    Conn* conn = nullptr;
    HttpRequest head;  // the body is appended as it arrives
    Phase phase = Phase::kHead;
    bool too_large = false;  // the body is being dropped
    // Set by the tasks (under mu_): a refusal of the head, or the answer.
    std::optional<HttpResponse> refusal;
    MHD_Response* response = nullptr;
    unsigned int status = 0;
  };
  // An event stream's bytes on their way from the handler's thread to the
  // client. Shared by the writer (StreamSink) and libmicrohttpd's response.
  struct Stream {
    Core* core = nullptr;
    MHD_Connection* connection = nullptr;
    // Guarded by core->mu_:
    std::string backlog;
    bool writer_done = false;  // the handler's stream function returned
    bool closed = false;       // the response is gone: client left or server stops
  };
  class StreamSink;

  static MHD_Result OnAccess(void* cls, MHD_Connection* connection, const char* url,
                             const char* method, const char* version,
                             const char* upload_data, size_t* upload_data_size,
                             void** con_cls);
  static void OnCompleted(void* cls, MHD_Connection* connection, void** con_cls,
                          MHD_RequestTerminationCode toe);
  static void OnConnection(void* cls, MHD_Connection* connection, void** socket_context,
                           MHD_ConnectionNotificationCode toe);
  static ssize_t OnStreamRead(void* cls, uint64_t pos, char* buf, size_t max);
  static void OnStreamFree(void* cls);

  MHD_Result OnHead(Request& r, const char* url, const char* method);
  MHD_Result OnCall(Request& r, const char* data, size_t* size);
  // Runs `work` on the pool with the connection suspended; 503 when the pool
  // is full.
  MHD_Result Dispatch(Request& r, std::function<void()> work);
  MHD_Result Answer(Request& r, const HttpResponse& out);
  void Admit(Request* r);
  void Handle(Request* r);
  void Suspend(MHD_Connection* c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Resume(MHD_Connection* c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EnforceReadDeadline();

  const Handlers handlers_;
  const HttpLimits limits_;
  TaskPool pool_;
  MHD_Daemon* daemon_ = nullptr;
  std::string tls_cert_;  // libmicrohttpd keeps pointers to these
  std::string tls_key_;
  absl::Notification stop_deadlines_;
  std::thread deadlines_;  // EnforceReadDeadline until stop_deadlines_

  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::set<Conn*> conns_ ABSL_GUARDED_BY(mu_);
  std::set<MHD_Connection*> suspended_ ABSL_GUARDED_BY(mu_);
};

// The EventSink a stream writes to: queues bytes for OnStreamRead and wakes
// the connection. Blocks while kMaxStreamBacklog bytes wait for the client.
class HttpServer::Core::StreamSink : public EventSink {
 public:
  explicit StreamSink(std::shared_ptr<Stream> stream) : stream_(std::move(stream)) {}
  bool Write(std::string_view data) override {
    Core& core = *stream_->core;
    absl::MutexLock lock(&core.mu_);
    Stream* s = stream_.get();
    auto writable = [s]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
      return s->closed || s->core->stopping_ || s->backlog.size() < kMaxStreamBacklog;
    };
    core.mu_.Await(absl::Condition(&writable));
    if (s->closed || core.stopping_) return false;
    s->backlog.append(data);
    core.Resume(s->connection);
    return true;
  }

 private:
  std::shared_ptr<Stream> stream_;
};

absl::Status HttpServer::Core::Start(int listen_fd, const TlsIdentity& tls) {
  unsigned int flags =
      MHD_USE_EPOLL_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
  if (tls.enabled()) {
    flags |= MHD_USE_TLS;
    tls_cert_ = tls.cert_pem;
    tls_key_ = tls.key_pem;
  }
  const unsigned int timeout_s = static_cast<unsigned int>(
      std::max<int64_t>(1, absl::ToInt64Seconds(limits_.idle_timeout)));
  std::vector<MHD_OptionItem> options = {
      {MHD_OPTION_EXTERNAL_LOGGER, reinterpret_cast<intptr_t>(&LogFromLibrary), nullptr},
      {MHD_OPTION_LISTEN_SOCKET, listen_fd, nullptr},
      {MHD_OPTION_CONNECTION_LIMIT, std::max(1, limits_.max_connections), nullptr},
      {MHD_OPTION_PER_IP_CONNECTION_LIMIT, std::max(0, limits_.max_connections_per_ip),
       nullptr},
      {MHD_OPTION_CONNECTION_MEMORY_LIMIT,
       static_cast<intptr_t>(std::max<size_t>(limits_.connection_memory_bytes, 4096)),
       nullptr},
      {MHD_OPTION_CONNECTION_TIMEOUT, timeout_s, nullptr},
      {MHD_OPTION_NOTIFY_COMPLETED, reinterpret_cast<intptr_t>(&OnCompleted), this},
      {MHD_OPTION_NOTIFY_CONNECTION, reinterpret_cast<intptr_t>(&OnConnection), this},
  };
  if (tls.enabled()) {
    options.push_back({MHD_OPTION_HTTPS_MEM_CERT, 0, tls_cert_.data()});
    options.push_back({MHD_OPTION_HTTPS_MEM_KEY, 0, tls_key_.data()});
    options.push_back(
        {MHD_OPTION_HTTPS_PRIORITIES, 0, const_cast<char*>(kTlsPriorities)});
  }
  options.push_back({MHD_OPTION_END, 0, nullptr});
  daemon_ = MHD_start_daemon(flags, 0, nullptr, nullptr, &OnAccess, this,
                             MHD_OPTION_ARRAY, options.data(), MHD_OPTION_END);
  if (daemon_ == nullptr) {
    // libmicrohttpd owns `listen_fd` from here and closes it on most of its
    // failure paths; closing it again could close a descriptor another thread
    // just opened, so a failed start may leak it instead.
    return tls.enabled() ? absl::InvalidArgumentError(
                               "HTTPS: GnuTLS refused the TLS certificate or key")
                         : absl::InternalError("HTTP: libmicrohttpd did not start");
  }
  deadlines_ = std::thread([this] {
    while (!stop_deadlines_.WaitForNotificationWithTimeout(kReadDeadlinePeriod)) {
      EnforceReadDeadline();
    }
  });
  return absl::OkStatus();
}

void HttpServer::Core::Stop() {
  if (daemon_ == nullptr) return;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;  // new requests are refused, stream writes fail
  }
  stop_deadlines_.Notify();
  deadlines_.join();
  // Every task resumes its connection when it ends; after this no task runs.
  pool_.Stop();
  {
    // Streams whose writer ended wait suspended for nothing: stopping, their
    // reader ends them once resumed. libmicrohttpd must not stop with a
    // suspended connection.
    absl::MutexLock lock(&mu_);
    while (!suspended_.empty()) Resume(*suspended_.begin());
  }
  MHD_stop_daemon(daemon_);
  daemon_ = nullptr;
}

void HttpServer::Core::Suspend(MHD_Connection* c) {
  MHD_suspend_connection(c);
  suspended_.insert(c);
}

void HttpServer::Core::Resume(MHD_Connection* c) {
  if (suspended_.erase(c) > 0) MHD_resume_connection(c);
}

void HttpServer::Core::EnforceReadDeadline() {
  const absl::Time now = absl::Now();
  absl::MutexLock lock(&mu_);
  for (Conn* conn : conns_) {
    if (!conn->reading || now - conn->read_started <= limits_.request_read_timeout) {
      continue;
    }
    // Counted before the shutdown, so that anyone who sees the connection
    // end also sees it counted: the count and the close are one event.
    conn->reading = false;
    read_timeouts.fetch_add(1);
    // The polling thread sees end of input and closes the connection; it
    // closes the fd only after OnConnection(CLOSED) has taken `conn` out of
    // conns_ under mu_, so this fd is still this connection's.
    shutdown(conn->fd, SHUT_RDWR);
  }
}

void HttpServer::Core::OnConnection(void* cls, MHD_Connection* connection,
                                    void** socket_context,
                                    MHD_ConnectionNotificationCode toe) {
  Core* core = static_cast<Core*>(cls);
  absl::MutexLock lock(&core->mu_);
  if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
    auto* conn = new Conn();
    const MHD_ConnectionInfo* info =
        MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD);
    conn->fd = info != nullptr ? info->connect_fd : -1;
    conn->read_started = absl::Now();
    conn->reading = conn->fd >= 0;
    core->conns_.insert(conn);
    *socket_context = conn;
    return;
  }
  auto* conn = static_cast<Conn*>(*socket_context);
  if (conn == nullptr) return;
  core->conns_.erase(conn);
  delete conn;
  *socket_context = nullptr;
}

void HttpServer::Core::OnCompleted(void* cls, MHD_Connection* connection, void** con_cls,
                                   MHD_RequestTerminationCode) {
  Core* core = static_cast<Core*>(cls);
  auto* r = static_cast<Request*>(*con_cls);
  *con_cls = nullptr;
  {
    absl::MutexLock lock(&core->mu_);
    // The connection's next request has the full read time again.
    const MHD_ConnectionInfo* info =
        MHD_get_connection_info(connection, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    if (info != nullptr && info->socket_context != nullptr) {
      auto* conn = static_cast<Conn*>(info->socket_context);
      conn->reading = true;
      conn->read_started = absl::Now();
    }
  }
  delete r;  // outside mu_: it may free a stream's response
}

MHD_Result HttpServer::Core::OnAccess(void* cls, MHD_Connection* connection,
                                      const char* url, const char* method, const char*,
                                      const char* upload_data, size_t* upload_data_size,
                                      void** con_cls) {
  Core* core = static_cast<Core*>(cls);
  auto* r = static_cast<Request*>(*con_cls);
  if (r != nullptr) return core->OnCall(*r, upload_data, upload_data_size);
  r = new Request();
  *con_cls = r;
  r->connection = connection;
  const MHD_ConnectionInfo* info =
      MHD_get_connection_info(connection, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
  if (info != nullptr) r->conn = static_cast<Conn*>(info->socket_context);
  return core->OnHead(*r, url, method);
}

MHD_Result HttpServer::Core::OnHead(Request& r, const char* url, const char* method) {
  r.head.method = method;
  r.head.path = url;
  const int header_count = MHD_get_connection_values(r.connection, MHD_HEADER_KIND,
                                                     &CollectHeader, &r.head.headers);
  if (header_count > limits_.max_header_count) {
    return Answer(
        r, ErrorResponse(431, "RESOURCE_EXHAUSTED", "too many request header fields"));
  }
  MHD_get_connection_values(r.connection, MHD_GET_ARGUMENT_KIND, &CollectArgument,
                            &r.head.query);
  bool has_body = false;
  if (auto it = r.head.headers.find("content-length"); it != r.head.headers.end()) {
    uint64_t length = 0;
    has_body = !absl::SimpleAtoi(it->second, &length) || length > 0;
    r.too_large = length > limits_.max_body_bytes;
  }
  if (auto it = r.head.headers.find("transfer-encoding"); it != r.head.headers.end()) {
    has_body =
        has_body || absl::StrContains(absl::AsciiStrToLower(it->second), "chunked");
  }
  if (!has_body || !handlers_.admit) {
    r.phase = Phase::kBody;
    return MHD_YES;
  }
  r.phase = Phase::kAdmitting;
  Request* rp = &r;
  return Dispatch(r, [this, rp] { Admit(rp); });
}

MHD_Result HttpServer::Core::OnCall(Request& r, const char* data, size_t* size) {
  switch (r.phase) {
    case Phase::kAdmitted:
      // Called again after the admission task resumed the connection; a
      // refusal is sent without reading the body (the connection then closes).
      if (r.refusal.has_value()) return Answer(r, *r.refusal);
      r.phase = Phase::kBody;
      return MHD_YES;
    case Phase::kBody:
      if (*size > 0) {
        if (!r.too_large && r.head.body.size() + *size > limits_.max_body_bytes) {
          r.too_large = true;
          r.head.body.clear();
          r.head.body.shrink_to_fit();
        }
        if (!r.too_large) r.head.body.append(data, *size);
        *size = 0;
        return MHD_YES;
      }
      // The whole request is read: its connection's deadline no longer runs.
      if (r.conn != nullptr) {
        absl::MutexLock lock(&mu_);
        r.conn->reading = false;
      }
      if (r.too_large) {
        return Answer(
            r, ErrorResponse(413, "RESOURCE_EXHAUSTED", "request body over the limit"));
      }
      r.phase = Phase::kHandling;
      {
        Request* rp = &r;
        return Dispatch(r, [this, rp] { Handle(rp); });
      }
    case Phase::kAnswered: {
      MHD_Response* response = nullptr;
      bool stopping = false;
      {
        absl::MutexLock lock(&mu_);
        response = std::exchange(r.response, nullptr);
        stopping = stopping_;
      }
      if (response == nullptr) return MHD_NO;
      const MHD_Result queued =
          stopping ? MHD_NO : MHD_queue_response(r.connection, r.status, response);
      MHD_destroy_response(response);
      return queued;
    }
    case Phase::kHead:
    case Phase::kAdmitting:
    case Phase::kHandling:
      // Not called while suspended; nothing to do if it were.
      return MHD_YES;
  }
  return MHD_NO;
}

MHD_Result HttpServer::Core::Dispatch(Request& r, std::function<void()> work) {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return MHD_NO;
    if (pool_.TrySubmit(std::move(work))) {
      // The task cannot resume the connection before this: it needs mu_.
      Suspend(r.connection);
      return MHD_YES;
    }
  }
  busy_refusals.fetch_add(1);
  HttpResponse busy =
      ErrorResponse(503, "UNAVAILABLE", "the server is busy; retry in a moment");
  busy.headers["Retry-After"] = "1";
  return Answer(r, busy);
}

MHD_Result HttpServer::Core::Answer(Request& r, const HttpResponse& out) {
  MHD_Response* response = BufferResponse(out);
  if (response == nullptr) return MHD_NO;
  const MHD_Result queued =
      MHD_queue_response(r.connection, static_cast<unsigned int>(out.status), response);
  MHD_destroy_response(response);
  return queued;
}

void HttpServer::Core::Admit(Request* r) {
  std::optional<HttpResponse> refusal = handlers_.admit(r->head);
  absl::MutexLock lock(&mu_);
  r->refusal = std::move(refusal);
  r->phase = Phase::kAdmitted;
  Resume(r->connection);
}

void HttpServer::Core::Handle(Request* r) {
  bool stopping = false;
  {
    absl::MutexLock lock(&mu_);
    stopping = stopping_;
  }
  HttpResponse out = stopping
                         ? ErrorResponse(503, "UNAVAILABLE", "the server is stopping")
                         : handlers_.handle(r->head);
  std::function<void(EventSink&)> body = std::move(out.stream);
  std::shared_ptr<Stream> stream;
  MHD_Response* response = nullptr;
  if (body) {
    stream = std::make_shared<Stream>();
    stream->core = this;
    stream->connection = r->connection;
    auto* holder = new std::shared_ptr<Stream>(stream);
    response = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, kStreamBlock,
                                                 &OnStreamRead, holder, &OnStreamFree);
    if (response == nullptr) {
      delete holder;
      stream.reset();
      body = nullptr;
    } else {
      AddHeaders(response, out);
    }
  } else {
    response = BufferResponse(out);
  }
  {
    absl::MutexLock lock(&mu_);
    r->response = response;
    r->status = static_cast<unsigned int>(out.status);
    r->phase = Phase::kAnswered;
    Resume(r->connection);
  }
  if (!body) return;
  // `r` may be gone from here on (the client may leave); the stream is not.
  StreamSink sink(stream);
  body(sink);
  absl::MutexLock lock(&mu_);
  stream->writer_done = true;
  if (!stream->closed) Resume(stream->connection);
}

ssize_t HttpServer::Core::OnStreamRead(void* cls, uint64_t, char* buf, size_t max) {
  Stream& s = **static_cast<std::shared_ptr<Stream>*>(cls);
  Core& core = *s.core;
  absl::MutexLock lock(&core.mu_);
  if (core.stopping_) return MHD_CONTENT_READER_END_WITH_ERROR;
  if (!s.backlog.empty()) {
    const size_t n = std::min(max, s.backlog.size());
    std::memcpy(buf, s.backlog.data(), n);
    s.backlog.erase(0, n);
    return static_cast<ssize_t>(n);
  }
  if (s.writer_done) return MHD_CONTENT_READER_END_OF_STREAM;
  // Nothing to send: wait, without polling, until the writer resumes us.
  core.Suspend(s.connection);
  return 0;
}

void HttpServer::Core::OnStreamFree(void* cls) {
  auto* holder = static_cast<std::shared_ptr<Stream>*>(cls);
  {
    Stream& s = **holder;
    absl::MutexLock lock(&s.core->mu_);
    s.closed = true;
    s.backlog.clear();
  }
  delete holder;
}

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const std::string& address,
                                                              Handlers handlers,
                                                              int max_streams,
                                                              const HttpLimits& limits,
                                                              const TlsIdentity& tls) {
  size_t colon = address.rfind(':');
  int port = -1;
  if (colon == std::string::npos || !absl::SimpleAtoi(address.substr(colon + 1), &port) ||
      port < 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("--http: expected HOST:PORT, got '", address, "'"));
  }
  absl::StatusOr<int> fd = Listen(address.substr(0, colon), port, /*backlog=*/512);
  if (!fd.ok()) return fd.status();
  std::unique_ptr<HttpServer> s(new HttpServer());
  s->port_ = BoundPort(*fd);
  // Every open event stream holds a thread; the reserve serves plain requests.
  const int threads = std::max(1, max_streams) + std::max(1, limits.reserve_threads);
  s->core_ = std::make_unique<Core>(std::move(handlers), threads, limits);
  absl::Status started = s->core_->Start(*fd, tls);
  if (!started.ok()) return started;
  return s;
}

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const std::string& address,
                                                              const HttpApi* api,
                                                              int max_streams,
                                                              const HttpLimits& limits,
                                                              const TlsIdentity& tls) {
  Handlers handlers;
  handlers.handle = [api](const HttpRequest& r) { return api->Handle(r); };
  handlers.admit = [api](const HttpRequest& head) { return api->Admit(head); };
  return Start(address, std::move(handlers), max_streams, limits, tls);
}

void HttpServer::Stop() {
  if (core_ != nullptr) core_->Stop();
}

HttpServer::~HttpServer() { Stop(); }

int64_t HttpServer::read_timeouts() const {
  return core_ != nullptr ? core_->read_timeouts.load() : 0;
}

int64_t HttpServer::busy_refusals() const {
  return core_ != nullptr ? core_->busy_refusals.load() : 0;
}

}  // namespace tessera
