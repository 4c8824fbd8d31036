// HttpServer: serves HttpApi (or any handler) over HTTP or HTTPS with GNU
// libmicrohttpd, built to keep answering under abuse:
//
//  - One event-driven thread (epoll) does all socket I/O and parses requests,
//    so a slow or idle client costs a socket and a bounded buffer, never a
//    thread (slowloris).
//  - Complete requests run on a TaskPool: one thread per event stream
//    (`max_streams`) plus a reserve for plain requests, and a bounded queue;
//    a request that finds the queue full is answered 503 at once.
//  - HttpLimits caps connections in total and per client address, the time
//    to read a request (head and body, from the connection's start or its
//    previous response), the head's size and header count (431) and the body
//    (413).
//  - A request with a body is first admitted on its head alone
//    (Handlers::admit, HttpApi::Admit checks the credentials), so an
//    unauthenticated upload is refused before its body is read.
//
// Responses carry a Content-Security-Policy and nosniff headers. The server
// binds 127.0.0.1 by default (see CoordinatorOptions::http). docs/security.md
// ("Listeners under abuse") gives the reasons for the library and the limits.
//
// Thread-safety: Start and Stop from one thread; the handlers run on the pool's
// threads, several at once.
#ifndef TESSERA_COORDINATOR_API_HTTP_SERVER_H_
#define TESSERA_COORDINATOR_API_HTTP_SERVER_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/tls.h"
#include "coordinator/api/http_api.h"

namespace tessera {

// What keeps the HTTP listener serving when clients misbehave.
struct HttpLimits {
  // Connections open at once; more are closed as soon as they are accepted.
  int max_connections = 512;
  // Connections open at once from one client address. A reverse proxy in
  // front of the coordinator counts as one address.
  int max_connections_per_ip = 64;
  // From a connection's start (or the end of its previous response) until its
  // request, head and body, has been read; a client still sending then is
  // disconnected. This also bounds an idle keep-alive connection.
  absl::Duration request_read_timeout = absl::Seconds(10);
  // A connection that makes no progress for this long is closed, for example a
  // client that stopped reading its response. An event stream waiting for its
  // next event is not idle.
  absl::Duration idle_timeout = absl::Seconds(60);
  // Memory for one connection's request head and I/O buffers. A request line
  // and headers that do not fit (roughly half of it) get 431.
  size_t connection_memory_bytes = 64 * 1024;
  // Header fields in one request; more get 431.
  int max_header_count = 100;
  // Request body bytes; a larger body is read and dropped, and gets 413.
  size_t max_body_bytes = 1 << 20;
  // Threads for plain requests, besides one per event stream.
  int reserve_threads = 8;
  // Requests waiting for a thread; when that many wait, more get 503 at once.
  int max_queued_requests = 64;
};

class HttpServer {
 public:
  struct Handlers {
    // Answers a complete request. Runs on a pool thread; may return a stream,
    // which then runs on the same thread until it returns.
    std::function<HttpResponse(const HttpRequest&)> handle;
    // Called with the head (no body yet) of a request that has a body; a
    // response refuses the request without reading its body. May be empty.
    std::function<std::optional<HttpResponse>(const HttpRequest&)> admit;
  };

  // `address` is HOST:PORT; port 0 picks a free port. `max_streams` is the
  // number of event streams the handler serves at once (HttpApi::Options); the
  // pool has a thread for each. With `tls` enabled it serves HTTPS only.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(const std::string& address,
                                                           Handlers handlers,
                                                           int max_streams,
                                                           const HttpLimits& limits = {},
                                                           const TlsIdentity& tls = {});
  // Serves `api` (not owned): its Handle and Admit.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(const std::string& address,
                                                           const HttpApi* api,
                                                           int max_streams,
                                                           const HttpLimits& limits = {},
                                                           const TlsIdentity& tls = {});
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  int port() const { return port_; }

  // Stops accepting, lets running requests finish (event streams end at their
  // next write; close the ChangeNotifier first to end them at once), closes
  // every connection. Idempotent.
  void Stop();

  // Connections closed because their request was not read in time.
  int64_t read_timeouts() const;
  // Requests answered 503 because every thread was busy and the queue full.
  int64_t busy_refusals() const;

 private:
  class Core;  // the libmicrohttpd daemon, its callbacks and the pool
  HttpServer() = default;
  std::unique_ptr<Core> core_;
  int port_ = 0;
};

}  // namespace tessera

#endif  // TESSERA_COORDINATOR_API_HTTP_SERVER_H_
