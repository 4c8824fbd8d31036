// HttpServer: serves HttpApi over HTTP with cpp-httplib on its own threads.
// Responses carry a Content-Security-Policy and nosniff headers. The server
// binds 127.0.0.1 by default (see CoordinatorOptions::http).
//
// Thread-safety: Start and Stop from one thread.
#ifndef TESSERA_COORDINATOR_API_HTTP_SERVER_H_
#define TESSERA_COORDINATOR_API_HTTP_SERVER_H_

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "common/tls.h"
#include "coordinator/api/http_api.h"

namespace httplib {
class Server;
}

namespace tessera {

class HttpServer {
 public:
  // `api` is not owned. `address` is HOST:PORT; port 0 picks a free port. The
  // thread pool has room for `max_streams` event streams plus a reserve for
  // plain requests. With `tls` enabled it serves HTTPS only.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(const std::string& address,
                                                           const HttpApi* api,
                                                           int max_streams,
                                                           const TlsIdentity& tls = {});
  ~HttpServer();
  int port() const { return port_; }
  void Stop();

 private:
  HttpServer() = default;
  std::unique_ptr<httplib::Server> server_;
  std::atomic<bool> listen_done_{false};  // set by thread_ once listening ended
  std::thread thread_;
  int port_ = 0;
};

}  // namespace tessera

#endif  // TESSERA_COORDINATOR_API_HTTP_SERVER_H_
