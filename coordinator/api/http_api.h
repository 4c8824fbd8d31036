// HttpApi: the coordinator's JSON API under /api/v1/ and the dashboard's static
// files, as a router that is independent of the HTTP library, so it can be
// tested and fuzzed directly. HttpServer (http_server.h) feeds it requests from
// libmicrohttpd. docs/api.md documents every route, the JSON shapes and the
// Server-Sent Events streams.
//
// Streams: a route under /api/v1/stream/ answers with a `stream` function that
// the server runs on one of its threads; it writes events to an EventSink
// until the client goes away, the view ends, the caller's token is revoked
// (checked every Options::stream_auth_recheck), or the coordinator stops
// (ChangeNotifier::Close). At most Options::max_streams run at once; more get
// 503, so open pages cannot take every HTTP thread.
//
// /metrics: the cluster in Prometheus' text format (metrics_page.h), for a
// metrics token or an admin's token in the Authorization header.
//
// It depends on the core parts it uses (Core below), not the whole JobManager.
//
// Thread-safety: Handle() is safe from any thread (the parts and managers are).
#ifndef TESSERA_COORDINATOR_API_HTTP_API_H_
#define TESSERA_COORDINATOR_API_HTTP_API_H_

#include <atomic>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "absl/time/time.h"
#include "coordinator/api/metrics_page.h"
#include "coordinator/core/auth.h"
#include "coordinator/core/cluster_view.h"
#include "coordinator/core/job_requests.h"
#include "coordinator/core/search_manager.h"
#include "coordinator/core/sweep_manager.h"
#include "coordinator/core/worker_sessions.h"

namespace tessera {

struct HttpRequest {
  std::string method;
  std::string path;
  std::map<std::string, std::string> query;
  std::map<std::string, std::string> headers;  // names in lower case
  std::string body;
};

// Where a stream writes. Write() returns false once the client has gone.
class EventSink {
 public:
  virtual ~EventSink() = default;
  virtual bool Write(std::string_view data) = 0;
  // False once the stream must end for another reason than its client: its
  // caller's token was revoked. Streams ask while they wait for changes.
  virtual bool Open() { return true; }
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::map<std::string, std::string> headers;  // added to the defaults
  // Set for event streams: run after the headers are sent; `body` is unused.
  std::function<void(EventSink&)> stream;
};

// A file of the dashboard bundle.
struct StaticFile {
  std::string_view content_type;
  std::string_view body;
};

class HttpApi {
 public:
  struct Options {
    // Event streams served at once.
    int max_streams = 16;
    // A stream sends a keepalive comment after this long without an event.
    // It is also how a stream notices that its client has gone (the write
    // fails) and gives its slot back.
    absl::Duration keepalive = absl::Seconds(5);
    // Views are recomputed at least this often even without a change, so that
    // time-derived fields (a worker's liveness) stay current.
    absl::Duration refresh = absl::Seconds(5);
    // Checks user tokens on /api/ requests; nullptr (or a disabled one): open.
    Authenticator* auth = nullptr;
    // Dashboard files by path ("/" is the index); nullptr when none are served.
    std::function<const StaticFile*(std::string_view path)> static_files;
    // An open stream checks its caller's token against the store this often
    // (not the Authenticator's cache), so a revoked token's streams end within
    // about this long.
    absl::Duration stream_auth_recheck = absl::Seconds(1);
    // The listener serves HTTPS: the session cookie is marked Secure.
    bool secure_cookies = false;
    // The database's size and limits for /metrics; unset: none shown.
    std::function<DatabaseFigures()> database_figures;
    // Label bounds of /metrics.
    MetricsPageOptions metrics_page;
  };

  // The core parts the routes read and act on (JobManager's accessors);
  // none is owned and none may be null.
  struct Core {
    JobRequests* jobs;        // jobs, their metrics and logs; change notices
    WorkerSessions* workers;  // the workers list
    ClusterView* view;        // /metrics and the store's health
  };

  // Nothing is owned; `sweeps` may be null (no sweep routes), and so may
  // `searches` (no search routes, no search figures on /metrics).
  HttpApi(Core core, SweepManager* sweeps, Options options,
          SearchManager* searches = nullptr);
  HttpApi(Core core, SweepManager* sweeps) : HttpApi(core, sweeps, Options()) {}

  HttpResponse Handle(const HttpRequest& request) const;

  // For a request that carries a body: the answer that refuses it on its head
  // alone (missing or bad credentials, a method that takes no body), so that
  // HttpServer never reads an unauthenticated upload; nullopt to go on.
  // `head` has no body yet.
  std::optional<HttpResponse> Admit(const HttpRequest& head) const;

  int active_streams() const { return active_streams_.load(); }

 private:
  HttpResponse HandleApi(const HttpRequest& request) const;
  HttpResponse HandleMetrics(const HttpRequest& request) const;
  // Reads need a user token in the Authorization header or the session cookie;
  // changes (`header_only`) need it in the header, which other sites' pages
  // cannot send.
  // The calling user, from the Authorization header (or, unless
  // `header_only`, the session cookie).
  absl::StatusOr<Caller> Authorize(const HttpRequest& request, bool header_only) const;
  HttpResponse HandleSession(const HttpRequest& request) const;
  HttpResponse HandleStream(const HttpRequest& request, const Caller& caller) const;
  HttpResponse HandleJob(const HttpRequest& request, const Caller& caller, int64_t id,
                         std::string_view action) const;
  HttpResponse HandleSweeps(const HttpRequest& request, const Caller& caller) const;
  HttpResponse HandleSearches(const HttpRequest& request, const Caller& caller) const;
  // Wraps `body` so that it counts against max_streams while it runs.
  HttpResponse StartStream(std::function<void(EventSink&)> body) const;
  // Makes `response`'s stream, if any, end once the credential `request` came
  // with no longer authenticates (EventSink::Open).
  HttpResponse EndStreamOnRevocation(const HttpRequest& request,
                                     HttpResponse response) const;

  void StreamJobs(EventSink& sink, const Caller& caller, JobFilter filter) const;
  void StreamJob(EventSink& sink, const Caller& caller, int64_t job_id) const;
  void StreamWorkers(EventSink& sink, const Caller& caller) const;
  void StreamSweep(EventSink& sink, const Caller& caller, int64_t sweep_id) const;

  const Core core_;                // Not owned.
  SweepManager* const sweeps_;     // Not owned; may be null.
  SearchManager* const searches_;  // Not owned; may be null.
  const Options options_;
  mutable std::atomic<int> active_streams_{0};
};

}  // namespace tessera

#endif  // TESSERA_COORDINATOR_API_HTTP_API_H_
