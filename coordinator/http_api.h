// HttpApi: the coordinator's JSON API under /api/v1/, as a router that is
// independent of the HTTP library, so it can be tested and fuzzed directly.
// HttpServer (http_server.h) feeds it requests from cpp-httplib.
//
// Routes (all GET, JSON bodies; field names as in proto/tessera/v1):
//   /healthz                          -> "ok"
//   /api/v1/jobs                      -> {"jobs": [Job...]}
//   /api/v1/jobs/{id}                 -> Job
//   /api/v1/jobs/{id}/metrics         -> {"points": [MetricPoint...]}
//        query: name=NAME, after_step=N, limit=N
//   /api/v1/workers                   -> {"workers": [Worker...]}
// Errors: {"error": "...", "code": "NOT_FOUND"} with 400/404/405/500.
//
// Thread-safety: safe from any thread (JobManager is thread-safe).
#ifndef TESSERA_COORDINATOR_HTTP_API_H_
#define TESSERA_COORDINATOR_HTTP_API_H_

#include <map>
#include <string>

#include "coordinator/job_manager.h"

namespace tessera {

struct HttpRequest {
  std::string method;
  std::string path;
  std::map<std::string, std::string> query;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
};

class HttpApi {
 public:
  explicit HttpApi(JobManager* manager) : manager_(manager) {}
  HttpResponse Handle(const HttpRequest& request) const;

 private:
  JobManager* const manager_;  // Not owned.
};

}  // namespace tessera

#endif  // TESSERA_COORDINATOR_HTTP_API_H_
