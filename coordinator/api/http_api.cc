#include "coordinator/api/http_api.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/job_state.h"
#include "common/json_writer.h"
#include "common/tls.h"
#include "google/protobuf/util/json_util.h"
#include "nlohmann/json.hpp"

namespace tessera {
namespace {

namespace v1 = ::tessera::v1;

// Most points the first `metrics` event of a job stream carries.
constexpr int kStreamMetricLimit = 200000;
// Log bytes the first `log` event of a rank carries, and the most per event.
constexpr int kStreamLogTail = 64 * 1024;
// Jobs a job-list stream shows without a `limit`.
constexpr int kStreamJobLimit = 500;
// A change often comes in a burst (a report, then its heartbeat); views wait
// this long after a change before recomputing.
constexpr absl::Duration kCoalesce = absl::Milliseconds(200);

HttpResponse Error(const absl::Status& s) {
  HttpResponse r;
  switch (s.code()) {
    case absl::StatusCode::kNotFound:
      r.status = 404;
      break;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
      r.status = 400;
      break;
    case absl::StatusCode::kUnauthenticated:
      r.status = 401;
      break;
    case absl::StatusCode::kPermissionDenied:
      r.status = 403;
      break;
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kAborted:
    case absl::StatusCode::kAlreadyExists:
      r.status = 409;
      break;
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kResourceExhausted:
      r.status = 503;
      break;
    default:
      r.status = 500;
  }
  // Members in the sorted order the body has always had.
  JsonWriter body;
  body.BeginObject()
      .Key("code")
      .String(absl::StatusCodeToString(s.code()))
      .Key("error")
      .String(s.message())
      .EndObject();
  r.body = body.text();
  return r;
}

HttpResponse MethodNotAllowed(absl::string_view allowed) {
  HttpResponse r = Error(
      absl::InvalidArgumentError(absl::StrCat("method not allowed; use ", allowed)));
  r.status = 405;
  r.headers["Allow"] = std::string(allowed);
  return r;
}

HttpResponse NoRoute(const std::string& path) {
  return Error(absl::NotFoundError(absl::StrCat("no route for ", path)));
}

std::string ToJson(const google::protobuf::Message& m) {
  google::protobuf::util::JsonPrintOptions opts;
  opts.preserve_proto_field_names = true;
  opts.always_print_primitive_fields = true;
  std::string out;
  // Messages built here always convert; an error would leave `out` empty.
  (void)google::protobuf::util::MessageToJsonString(m, &out, opts);
  return out;
}

HttpResponse Json(const google::protobuf::Message& m) {
  HttpResponse r;
  r.body = ToJson(m);
  return r;
}

bool ParseId(absl::string_view text, int64_t* id) {
  return absl::SimpleAtoi(text, id) && *id > 0;
}

const std::string* QueryParam(const HttpRequest& request, const std::string& key) {
  auto it = request.query.find(key);
  return it == request.query.end() ? nullptr : &it->second;
}

// Parses an integer query parameter in [lo, hi]; absent leaves `out` alone.
absl::Status IntParam(const HttpRequest& request, const std::string& key, int64_t lo,
                      int64_t hi, int64_t* out) {
  const std::string* text = QueryParam(request, key);
  if (text == nullptr) return absl::OkStatus();
  int64_t v = 0;
  if (!absl::SimpleAtoi(*text, &v) || v < lo || v > hi) {
    return absl::InvalidArgumentError(absl::StrCat(key, ": must be an integer in [", lo,
                                                   ", ", hi, "], got '",
                                                   text->substr(0, 32), "'"));
  }
  *out = v;
  return absl::OkStatus();
}

absl::StatusOr<JobFilter> ParseJobFilter(const HttpRequest& request, int default_limit) {
  JobFilter filter;
  if (const std::string* state = QueryParam(request, "state")) {
    if (!state->empty()) {
      absl::StatusOr<v1::JobState> parsed = ParseJobState(*state);
      if (!parsed.ok()) return parsed.status();
      filter.state = *parsed;
    }
  }
  int64_t limit = default_limit;
  int64_t sweep = 0;
  absl::Status s = IntParam(request, "limit", 0, 100000, &limit);
  if (!s.ok()) return s;
  s = IntParam(request, "sweep", 0, INT64_MAX, &sweep);
  if (!s.ok()) return s;
  int64_t before = 0;
  s = IntParam(request, "before_id", 0, INT64_MAX, &before);
  if (!s.ok()) return s;
  filter.limit = static_cast<int32_t>(limit);
  filter.sweep_id = sweep;
  filter.before_id = before;
  if (const std::string* owner = QueryParam(request, "owner")) filter.owner = *owner;
  return filter;
}

constexpr char kSessionCookie[] = "tessera_token";

std::string HeaderValue(const HttpRequest& request, const std::string& name) {
  auto it = request.headers.find(name);
  return it == request.headers.end() ? std::string() : it->second;
}

// The value of cookie `name` in the Cookie header; empty when absent.
std::string CookieValue(const HttpRequest& request, absl::string_view name) {
  for (absl::string_view part : absl::StrSplit(HeaderValue(request, "cookie"), ';')) {
    part = absl::StripAsciiWhitespace(part);
    if (absl::StartsWith(part, name) && part.size() > name.size() &&
        part[name.size()] == '=') {
      return std::string(part.substr(name.size() + 1));
    }
  }
  return {};
}

std::string Event(absl::string_view name, absl::string_view json) {
  return absl::StrCat("event: ", name, "\ndata: ", json, "\n\n");
}

// Sends `json` as event `name` when it differs from what `last` holds; a
// keepalive comment when nothing was sent for `keepalive`. False once the
// client has gone.
class StreamWriter {
 public:
  StreamWriter(EventSink& sink, absl::Duration keepalive)
      : sink_(sink), keepalive_(keepalive), last_write_(absl::Now()) {}

  bool SendIfChanged(absl::string_view name, const std::string& json, std::string& last) {
    if (json == last) return true;
    last = json;
    return Send(name, json);
  }
  bool Send(absl::string_view name, absl::string_view json) {
    last_write_ = absl::Now();
    return sink_.Write(Event(name, json));
  }
  bool KeepAliveIfIdle() {
    if (absl::Now() - last_write_ < keepalive_) return true;
    last_write_ = absl::Now();
    return sink_.Write(": keepalive\n\n");
  }
  // Waits until `changes` moves past `seen` (updated) or `refresh` passes,
  // asking the sink every `recheck` whether the stream may go on (its token
  // may have been revoked). False when it may not.
  bool Wait(const ChangeNotifier& changes, uint64_t& seen, absl::Duration refresh,
            absl::Duration recheck) {
    const absl::Time until = absl::Now() + refresh;
    while (true) {
      const uint64_t now_seen =
          changes.WaitForChange(seen, std::min(recheck, until - absl::Now()));
      if (!sink_.Open()) return false;
      if (now_seen != seen || changes.closed() || absl::Now() >= until) {
        seen = now_seen;
        return true;
      }
    }
  }

 private:
  EventSink& sink_;
  const absl::Duration keepalive_;
  absl::Time last_write_;
};

// Passes writes through; Open() turns false for good once `authorization` no
// longer authenticates a user. The Authenticator reads the store for it when
// its cached record is older than `max_age`.
class RevocableSink : public EventSink {
 public:
  RevocableSink(EventSink& sink, Authenticator* auth, std::string authorization,
                absl::Duration max_age)
      : sink_(sink),
        auth_(auth),
        authorization_(std::move(authorization)),
        max_age_(max_age) {}
  bool Write(std::string_view data) override { return open_ && sink_.Write(data); }
  bool Open() override {
    // A store that fails to answer does not end the stream; a revoked or
    // deleted token does.
    if (open_ &&
        absl::IsUnauthenticated(auth_->Recheck(authorization_, kUserToken, max_age_))) {
      open_ = false;
    }
    return open_ && sink_.Open();
  }

 private:
  EventSink& sink_;
  Authenticator* const auth_;  // Not owned.
  const std::string authorization_;
  const absl::Duration max_age_;
  bool open_ = true;
};

// The metric points one job's stream has sent. Points of the current attempt
// arrive in step order per rank, so each query asks only for steps at or above
// the lowest step the ranks have reached, and `sent_` drops what an earlier
// event already carried.
class JobMetricsCursor {
 public:
  // Sends the points of `job` (number `job_id`) not sent yet as one "metrics" event; the
  // first event is sent even when empty, with "reset": true. False once the client has
  // gone.
  bool SendNew(JobRequests& jobs, const Caller& caller, int64_t job_id,
               const v1::Job& job, StreamWriter& out) {
    if (job.attempt() != attempt_) {
      attempt_ = job.attempt();
      last_step_.clear();
    }
    const int64_t floor = Floor(job);
    v1::GetMetricsRequest q;
    q.set_job_id(job_id);
    q.set_after_step(floor > 0 ? floor - 1 : -1);
    q.set_limit(kStreamMetricLimit);
    absl::StatusOr<std::vector<v1::MetricPoint>> points = jobs.GetMetrics(caller, q);
    if (!points.ok()) return true;
    v1::GetMetricsResponse fresh;
    for (v1::MetricPoint& p : *points) {
      Key key{p.attempt(), p.rank(), p.step(), p.name()};
      if (!sent_.insert(key).second) continue;
      if (p.attempt() == attempt_) {
        int64_t& s = last_step_[p.rank()];
        s = std::max(s, p.step());
      }
      *fresh.add_points() = std::move(p);
    }
    // Keys below the floor can no longer come back from a query.
    if (floor > 0) {
      for (auto it = sent_.begin(); it != sent_.end();) {
        it = std::get<2>(*it) < floor ? sent_.erase(it) : std::next(it);
      }
    }
    if (fresh.points_size() == 0 && !first_) return true;
    nlohmann::json body = nlohmann::json::parse(ToJson(fresh));
    body["reset"] = first_;
    first_ = false;
    JsonWriter text;
    WriteJsonValue(body, text);
    return out.Send("metrics", text.text());
  }

 private:
  using Key = std::tuple<int32_t, int32_t, int64_t, std::string>;

  // The lowest step every rank of the current attempt has been sent; -1 until
  // each rank has sent one.
  int64_t Floor(const v1::Job& job) const {
    if (last_step_.empty()) return -1;
    int64_t floor = INT64_MAX;
    for (const auto& [rank, step] : last_step_) floor = std::min(floor, step);
    if (static_cast<int>(last_step_.size()) < job.spec().world_size()) floor = -1;
    return floor;
  }

  std::set<Key> sent_;
  std::map<int32_t, int64_t> last_step_;  // rank -> highest step sent, current attempt
  int32_t attempt_ = -1;
  bool first_ = true;
};

// The log text one job's stream has sent: the next offset per (attempt, rank),
// and the (attempt, rank)s whose logs are complete.
class JobLogsCursor {
 public:
  // Sends the new log text of each rank of the job's current attempt, one
  // "log" event per rank. `complete` turns false while some rank's log may
  // have more to come. False once the client has gone.
  bool SendNew(JobRequests& jobs, const Caller& caller, int64_t job_id,
               const v1::Job& job, StreamWriter& out, bool& complete) {
    for (const v1::RankStatus& rank : job.ranks()) {
      const std::pair<int32_t, int32_t> key{job.attempt(), rank.rank()};
      if (done_.contains(key)) continue;
      v1::GetLogsRequest lq;
      lq.set_job_id(job_id);
      lq.set_attempt(job.attempt());
      lq.set_rank(rank.rank());
      lq.set_max_bytes(kStreamLogTail);
      auto it = offset_.find(key);
      if (it == offset_.end()) {
        lq.set_tail_bytes(kStreamLogTail);
      } else {
        lq.set_offset(it->second);
      }
      absl::StatusOr<v1::GetLogsResponse> logs = jobs.GetLogs(caller, lq);
      if (!logs.ok()) {
        complete = false;
        continue;
      }
      offset_[key] = logs->next_offset();
      if (logs->complete()) {
        done_.insert(key);
      } else {
        complete = false;
      }
      if (logs->data().empty()) continue;
      // Members in the sorted order the event has always had; log bytes
      // are text, invalid UTF-8 replaced.
      JsonWriter event;
      event.BeginObject()
          .Key("attempt")
          .Int(job.attempt())
          .Key("data")
          .String(logs->data())
          .Key("offset")
          .String(std::to_string(logs->offset()))
          .Key("rank")
          .Int(rank.rank())
          .EndObject();
      if (!out.Send("log", event.text())) return false;
      // More may be waiting than one event carries: look again at once.
      if (logs->next_offset() - logs->offset() >= kStreamLogTail) complete = false;
    }
    return true;
  }

 private:
  std::map<std::pair<int32_t, int32_t>, int64_t> offset_;
  std::set<std::pair<int32_t, int32_t>> done_;
};

}  // namespace

HttpApi::HttpApi(Core core, SweepManager* sweeps, Options options,
                 SearchManager* searches)
    : core_(core), sweeps_(sweeps), searches_(searches), options_(std::move(options)) {}

HttpResponse HttpApi::Handle(const HttpRequest& request) const {
  if (request.path == "/healthz") {
    // The store's mode: ok; DEGRADED while metrics and logs are shed below
    // the database's reserve (job state still stored); NOT_SERVING while
    // state writes fail and are kept for retry.
    switch (core_.view->GetStoreMode()) {
      case ClusterView::StoreMode::kServing:
        return HttpResponse{200, "text/plain", "ok\n", {}, nullptr};
      case ClusterView::StoreMode::kDegraded:
        return HttpResponse{200,
                            "text/plain",
                            "DEGRADED: the database's disk is below its reserve; "
                            "metric rows and log lines are not stored\n",
                            {},
                            nullptr};
      case ClusterView::StoreMode::kNotServing:
        break;
    }
    return HttpResponse{503,
                        "text/plain",
                        "NOT_SERVING: the database is failing writes; job state is "
                        "kept for retry\n",
                        {},
                        nullptr};
  }
  if (absl::StartsWith(request.path, "/api/")) return HandleApi(request);
  if (request.method != "GET" && request.method != "HEAD") return MethodNotAllowed("GET");
  if (request.path == "/metrics") return HandleMetrics(request);
  if (options_.static_files) {
    if (const StaticFile* file = options_.static_files(request.path)) {
      HttpResponse r;
      r.content_type = std::string(file->content_type);
      r.body = std::string(file->body);
      // The index names the bundle, whose contents change with each build.
      r.headers["Cache-Control"] = "no-cache";
      return r;
    }
  }
  return NoRoute(request.path);
}

HttpResponse HttpApi::HandleMetrics(const HttpRequest& request) const {
  // A scraper sends its token in the header; the session cookie is not taken.
  if (options_.auth != nullptr && options_.auth->enabled()) {
    absl::StatusOr<std::string> reader =
        options_.auth->AuthenticateMetricsReader(HeaderValue(request, "authorization"));
    if (!reader.ok()) return Error(reader.status());
  }
  DatabaseFigures db;
  if (options_.database_figures) db = options_.database_figures();
  HttpResponse r;
  r.content_type = kMetricsContentType;
  ClusterMetrics metrics = core_.view->ReadClusterMetrics();
  if (searches_ != nullptr) metrics.search_trials = searches_->RunningTrialsByStatus();
  r.body = RenderMetricsPage(metrics, db, options_.metrics_page);
  return r;
}

absl::StatusOr<Caller> HttpApi::Authorize(const HttpRequest& request,
                                          bool header_only) const {
  std::string authorization = HeaderValue(request, "authorization");
  if (options_.auth == nullptr || !options_.auth->enabled()) {
    // Without authentication a change still needs the header: cross-site
    // forms cannot send it.
    if (header_only && authorization.empty()) {
      return absl::UnauthenticatedError(
          "this request changes state and needs an 'Authorization: Bearer TOKEN' header");
    }
    return Caller::Admin("anonymous");
  }
  if (authorization.empty() && !header_only) {
    const std::string cookie = CookieValue(request, kSessionCookie);
    if (!cookie.empty()) authorization = "Bearer " + cookie;
  }
  if (authorization.empty()) {
    return absl::UnauthenticatedError(
        header_only ? "this request changes state and needs an 'Authorization: Bearer "
                      "TOKEN' header with a user token"
                    : "sign in: send 'Authorization: Bearer TOKEN' with a user token "
                      "(tessera-coordinator token create --kind user)");
  }
  return options_.auth->AuthenticateUser(authorization);
}

HttpResponse HttpApi::HandleSession(const HttpRequest& request) const {
  if (request.method == "DELETE") {
    HttpResponse r;
    r.body = "{}";
    r.headers["Set-Cookie"] = absl::StrCat(
        kSessionCookie, "=; Path=/api/; HttpOnly; SameSite=Strict; Max-Age=0",
        options_.secure_cookies ? "; Secure" : "");
    return r;
  }
  if (request.method != "POST") return MethodNotAllowed("POST, DELETE");
  absl::StatusOr<Caller> allowed = Authorize(request, /*header_only=*/true);
  if (!allowed.ok()) return Error(allowed.status());
  const std::string authorization = HeaderValue(request, "authorization");
  absl::string_view token = authorization;
  if (!absl::ConsumePrefix(&token, "Bearer ") || token.empty()) {
    return Error(absl::InvalidArgumentError("authorization: expected 'Bearer TOKEN'"));
  }
  // A token may end in the coordinator's certificate pin (common/tls.h); the
  // pin is public and only the part before it authenticates.
  token = token.substr(0, token.find(kTokenPinSeparator));
  // Token text is [A-Za-z0-9_]; anything else could break the header.
  for (char c : token) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '_') {
      return Error(absl::InvalidArgumentError("token: unexpected character"));
    }
  }
  HttpResponse r;
  r.body = "{}";
  // The page's event streams cannot send headers, so reads may use this
  // cookie; changes still need the header.
  r.headers["Set-Cookie"] =
      absl::StrCat(kSessionCookie, "=", token, "; Path=/api/; HttpOnly; SameSite=Strict",
                   options_.secure_cookies ? "; Secure" : "");
  return r;
}

HttpResponse HttpApi::HandleApi(const HttpRequest& request) const {
  std::vector<absl::string_view> parts =
      absl::StrSplit(request.path, '/', absl::SkipEmpty());
  if (parts.size() < 3 || parts[0] != "api" || parts[1] != "v1") {
    return NoRoute(request.path);
  }
  if (parts.size() == 3 && parts[2] == "session") return HandleSession(request);
  absl::StatusOr<Caller> caller =
      Authorize(request, /*header_only=*/request.method != "GET");
  if (!caller.ok()) return Error(caller.status());
  if (parts[2] == "stream") {
    return EndStreamOnRevocation(request, HandleStream(request, *caller));
  }
  if (parts[2] == "sweeps") return HandleSweeps(request, *caller);
  if (parts[2] == "searches") return HandleSearches(request, *caller);
  if (parts[2] == "workers" && parts.size() == 3) {
    if (request.method != "GET") return MethodNotAllowed("GET");
    v1::ListWorkersResponse resp;
    for (auto& w : core_.workers->ListWorkers(*caller))
      *resp.add_workers() = std::move(w);
    return Json(resp);
  }
  if (parts[2] != "jobs") return NoRoute(request.path);
  if (parts.size() == 3) {
    if (request.method != "GET") return MethodNotAllowed("GET");
    absl::StatusOr<JobFilter> filter = ParseJobFilter(request, 0);
    if (!filter.ok()) return Error(filter.status());
    absl::StatusOr<JobList> jobs = core_.jobs->ListJobs(*caller, *filter);
    if (!jobs.ok()) return Error(jobs.status());
    v1::ListJobsResponse resp;
    for (auto& j : jobs->jobs) *resp.add_jobs() = std::move(j);
    resp.set_next_before_id(jobs->next_before_id);
    return Json(resp);
  }
  int64_t id = 0;
  if (!ParseId(parts[3], &id)) {
    return Error(absl::InvalidArgumentError(
        absl::StrCat("bad job id '", parts[3].substr(0, 32), "'")));
  }
  if (parts.size() == 4) return HandleJob(request, *caller, id, "");
  if (parts.size() == 5) {
    return HandleJob(request, *caller, id,
                     std::string_view(parts[4].data(), parts[4].size()));
  }
  return NoRoute(request.path);
}

HttpResponse HttpApi::HandleJob(const HttpRequest& request, const Caller& caller,
                                int64_t id, std::string_view action) const {
  if (action == "cancel") {
    if (request.method != "POST") return MethodNotAllowed("POST");
    absl::StatusOr<v1::JobState> state = core_.jobs->CancelJob(caller, id);
    if (!state.ok()) return Error(state.status());
    v1::CancelJobResponse resp;
    resp.set_state(*state);
    return Json(resp);
  }
  if (request.method != "GET") return MethodNotAllowed("GET");
  if (action.empty()) {
    absl::StatusOr<v1::Job> job = core_.jobs->GetJob(caller, id);
    if (!job.ok()) return Error(job.status());
    return Json(*job);
  }
  if (action == "metrics") {
    v1::GetMetricsRequest q;
    q.set_job_id(id);
    if (const std::string* name = QueryParam(request, "name")) q.set_name(*name);
    int64_t after = 0;
    int64_t limit = 0;
    absl::Status s = IntParam(request, "after_step", -1, INT64_MAX, &after);
    if (s.ok()) s = IntParam(request, "limit", 0, 100000, &limit);
    if (!s.ok()) return Error(s);
    q.set_after_step(after);
    q.set_limit(static_cast<int32_t>(limit));
    absl::StatusOr<std::vector<v1::MetricPoint>> points =
        core_.jobs->GetMetrics(caller, q);
    if (!points.ok()) return Error(points.status());
    v1::GetMetricsResponse resp;
    for (auto& p : *points) *resp.add_points() = std::move(p);
    return Json(resp);
  }
  if (action == "logs") {
    v1::GetLogsRequest q;
    q.set_job_id(id);
    int64_t rank = 0, attempt = 0, offset = 0, max_bytes = 0, tail = 0;
    absl::Status s = IntParam(request, "rank", 0, 1 << 20, &rank);
    if (s.ok()) s = IntParam(request, "attempt", 0, 1 << 20, &attempt);
    if (s.ok()) s = IntParam(request, "offset", 0, INT64_MAX, &offset);
    if (s.ok()) s = IntParam(request, "max_bytes", 0, 4 << 20, &max_bytes);
    if (s.ok()) s = IntParam(request, "tail_bytes", 0, 4 << 20, &tail);
    if (!s.ok()) return Error(s);
    q.set_rank(static_cast<int32_t>(rank));
    q.set_attempt(static_cast<int32_t>(attempt));
    q.set_offset(offset);
    q.set_max_bytes(static_cast<int32_t>(max_bytes));
    q.set_tail_bytes(tail);
    absl::StatusOr<v1::GetLogsResponse> logs = core_.jobs->GetLogs(caller, q);
    if (!logs.ok()) return Error(logs.status());
    // Log bytes are shown as text: invalid UTF-8 is replaced, not rejected.
    // Members in the sorted order the body has always had.
    JsonWriter out;
    out.BeginObject()
        .Key("attempt")
        .Int(logs->attempt())
        .Key("complete")
        .Bool(logs->complete())
        .Key("data")
        .String(logs->data())
        .Key("next_offset")
        .String(std::to_string(logs->next_offset()))
        .Key("offset")
        .String(std::to_string(logs->offset()))
        .EndObject();
    HttpResponse r;
    r.body = out.text();
    return r;
  }
  return NoRoute(request.path);
}

HttpResponse HttpApi::HandleSweeps(const HttpRequest& request,
                                   const Caller& caller) const {
  if (sweeps_ == nullptr) return NoRoute(request.path);
  std::vector<absl::string_view> parts =
      absl::StrSplit(request.path, '/', absl::SkipEmpty());
  if (parts.size() == 3) {
    if (request.method != "GET") return MethodNotAllowed("GET");
    absl::StatusOr<std::vector<v1::Sweep>> sweeps = sweeps_->List(caller);
    if (!sweeps.ok()) return Error(sweeps.status());
    v1::ListSweepsResponse resp;
    for (auto& s : *sweeps) *resp.add_sweeps() = std::move(s);
    return Json(resp);
  }
  int64_t id = 0;
  if (!ParseId(parts[3], &id)) {
    return Error(absl::InvalidArgumentError(
        absl::StrCat("bad sweep id '", parts[3].substr(0, 32), "'")));
  }
  if (parts.size() == 5 && parts[4] == "cancel") {
    if (request.method != "POST") return MethodNotAllowed("POST");
    absl::StatusOr<v1::SweepState> state = sweeps_->Cancel(caller, id);
    if (!state.ok()) return Error(state.status());
    v1::CancelSweepResponse resp;
    resp.set_state(*state);
    return Json(resp);
  }
  if (request.method != "GET") return MethodNotAllowed("GET");
  if (parts.size() == 4) {
    absl::StatusOr<v1::Sweep> sweep = sweeps_->Get(caller, id);
    if (!sweep.ok()) return Error(sweep.status());
    return Json(*sweep);
  }
  if (parts.size() == 5 && parts[4] == "report") {
    absl::StatusOr<v1::SweepReport> report = sweeps_->Report(caller, id);
    if (!report.ok()) return Error(report.status());
    return Json(*report);
  }
  return NoRoute(request.path);
}

HttpResponse HttpApi::HandleSearches(const HttpRequest& request,
                                     const Caller& caller) const {
  if (searches_ == nullptr) return NoRoute(request.path);
  std::vector<absl::string_view> parts =
      absl::StrSplit(request.path, '/', absl::SkipEmpty());
  if (parts.size() == 3) {
    if (request.method != "GET") return MethodNotAllowed("GET");
    absl::StatusOr<std::vector<v1::Search>> searches = searches_->List(caller);
    if (!searches.ok()) return Error(searches.status());
    v1::ListSearchesResponse resp;
    for (auto& s : *searches) *resp.add_searches() = std::move(s);
    return Json(resp);
  }
  int64_t id = 0;
  if (!ParseId(parts[3], &id)) {
    return Error(absl::InvalidArgumentError(
        absl::StrCat("bad search id '", parts[3].substr(0, 32), "'")));
  }
  if (parts.size() == 5 && parts[4] == "cancel") {
    if (request.method != "POST") return MethodNotAllowed("POST");
    absl::StatusOr<v1::SearchState> state = searches_->Cancel(caller, id);
    if (!state.ok()) return Error(state.status());
    v1::CancelSearchResponse resp;
    resp.set_state(*state);
    return Json(resp);
  }
  if (parts.size() != 4) return NoRoute(request.path);
  if (request.method != "GET") return MethodNotAllowed("GET");
  absl::StatusOr<v1::Search> search = searches_->Get(caller, id);
  if (!search.ok()) return Error(search.status());
  return Json(*search);
}

std::optional<HttpResponse> HttpApi::Admit(const HttpRequest& head) const {
  if (!absl::StartsWith(head.path, "/api/")) {
    // /healthz and the dashboard's files take no body.
    if (head.method != "GET" && head.method != "HEAD") return MethodNotAllowed("GET");
    return std::nullopt;
  }
  absl::StatusOr<Caller> caller = Authorize(head, /*header_only=*/head.method != "GET");
  if (!caller.ok()) return Error(caller.status());
  return std::nullopt;
}

HttpResponse HttpApi::EndStreamOnRevocation(const HttpRequest& request,
                                            HttpResponse response) const {
  if (!response.stream || options_.auth == nullptr || !options_.auth->enabled()) {
    return response;
  }
  // The credential the request was authorized with: the header, else the
  // session cookie (as Authorize takes it for reads).
  std::string authorization = HeaderValue(request, "authorization");
  if (authorization.empty()) {
    const std::string cookie = CookieValue(request, kSessionCookie);
    if (!cookie.empty()) authorization = "Bearer " + cookie;
  }
  response.stream = [inner = std::move(response.stream), auth = options_.auth,
                     authorization = std::move(authorization),
                     max_age = options_.stream_auth_recheck](EventSink& sink) {
    RevocableSink guarded(sink, auth, authorization, max_age);
    inner(guarded);
  };
  return response;
}

HttpResponse HttpApi::StartStream(std::function<void(EventSink&)> body) const {
  if (active_streams_.fetch_add(1) >= options_.max_streams) {
    active_streams_.fetch_sub(1);
    return Error(absl::UnavailableError(
        absl::StrCat("too many event streams open (", options_.max_streams,
                     "); close some dashboard tabs or reload this one later")));
  }
  // The slot is taken now, so that a burst of requests cannot overshoot the
  // limit before their streams start; the stream gives it back when it ends.
  std::atomic<int>* count = &active_streams_;
  std::shared_ptr<void> slot(nullptr, [count](void*) { count->fetch_sub(1); });
  HttpResponse r;
  r.content_type = "text/event-stream";
  r.headers["Cache-Control"] = "no-cache";
  r.headers["X-Accel-Buffering"] = "no";
  r.stream = [slot, body = std::move(body)](EventSink& sink) { body(sink); };
  return r;
}

HttpResponse HttpApi::HandleStream(const HttpRequest& request,
                                   const Caller& caller) const {
  if (request.method != "GET") return MethodNotAllowed("GET");
  std::vector<absl::string_view> parts =
      absl::StrSplit(request.path, '/', absl::SkipEmpty());
  // parts: api v1 stream <what> [id]
  if (parts.size() == 4 && parts[3] == "jobs") {
    absl::StatusOr<JobFilter> filter = ParseJobFilter(request, kStreamJobLimit);
    if (!filter.ok()) return Error(filter.status());
    JobFilter f = *filter;
    return StartStream(
        [this, caller, f](EventSink& sink) { StreamJobs(sink, caller, f); });
  }
  if (parts.size() == 4 && parts[3] == "workers") {
    return StartStream([this, caller](EventSink& sink) { StreamWorkers(sink, caller); });
  }
  if (parts.size() == 5 && (parts[3] == "jobs" || parts[3] == "sweeps")) {
    int64_t id = 0;
    if (!ParseId(parts[4], &id)) {
      return Error(absl::InvalidArgumentError(
          absl::StrCat("bad id '", parts[4].substr(0, 32), "'")));
    }
    if (parts[3] == "jobs") {
      // Unknown ids are 404 before the stream starts.
      absl::Status exists = core_.jobs->CheckVisible(caller, id);
      if (!exists.ok()) return Error(exists);
      return StartStream(
          [this, caller, id](EventSink& sink) { StreamJob(sink, caller, id); });
    }
    if (sweeps_ == nullptr) return NoRoute(request.path);
    absl::Status exists = sweeps_->Get(caller, id).status();
    if (!exists.ok()) return Error(exists);
    return StartStream(
        [this, caller, id](EventSink& sink) { StreamSweep(sink, caller, id); });
  }
  return NoRoute(request.path);
}

void HttpApi::StreamJobs(EventSink& sink, const Caller& caller, JobFilter filter) const {
  ChangeNotifier& changes = core_.jobs->changes();
  StreamWriter out(sink, options_.keepalive);
  std::string last;
  uint64_t seen = changes.version();
  while (!changes.closed()) {
    absl::StatusOr<JobList> jobs = core_.jobs->ListJobs(caller, filter);
    if (jobs.ok()) {
      v1::ListJobsResponse resp;
      for (auto& j : jobs->jobs) *resp.add_jobs() = std::move(j);
      if (!out.SendIfChanged("jobs", ToJson(resp), last)) return;
    }
    if (!out.KeepAliveIfIdle()) return;
    if (!out.Wait(changes, seen, options_.refresh, options_.stream_auth_recheck)) return;
    absl::SleepFor(kCoalesce);
  }
}

void HttpApi::StreamWorkers(EventSink& sink, const Caller& caller) const {
  ChangeNotifier& changes = core_.jobs->changes();
  StreamWriter out(sink, options_.keepalive);
  std::string last;
  uint64_t seen = changes.version();
  while (!changes.closed()) {
    v1::ListWorkersResponse resp;
    for (auto& w : core_.workers->ListWorkers(caller)) *resp.add_workers() = std::move(w);
    if (!out.SendIfChanged("workers", ToJson(resp), last)) return;
    if (!out.KeepAliveIfIdle()) return;
    if (!out.Wait(changes, seen, options_.refresh, options_.stream_auth_recheck)) return;
    absl::SleepFor(kCoalesce);
  }
}

void HttpApi::StreamSweep(EventSink& sink, const Caller& caller, int64_t sweep_id) const {
  ChangeNotifier& changes = core_.jobs->changes();
  StreamWriter out(sink, options_.keepalive);
  std::string last_sweep;
  std::string last_report;
  uint64_t seen = changes.version();
  while (!changes.closed()) {
    absl::StatusOr<v1::Sweep> sweep = sweeps_->Get(caller, sweep_id);
    if (sweep.ok()) {
      const std::string json = ToJson(*sweep);
      // The report changes only when a point does, and costs metric queries.
      if (json != last_sweep) {
        if (!out.SendIfChanged("sweep", json, last_sweep)) return;
        absl::StatusOr<v1::SweepReport> report = sweeps_->Report(caller, sweep_id);
        if (report.ok() && !out.SendIfChanged("report", ToJson(*report), last_report)) {
          return;
        }
      }
    }
    if (!out.KeepAliveIfIdle()) return;
    if (!out.Wait(changes, seen, options_.refresh, options_.stream_auth_recheck)) return;
    absl::SleepFor(kCoalesce);
  }
}

void HttpApi::StreamJob(EventSink& sink, const Caller& caller, int64_t job_id) const {
  ChangeNotifier& changes = core_.jobs->changes();
  StreamWriter out(sink, options_.keepalive);
  std::string last_job;
  uint64_t seen = changes.version();
  JobMetricsCursor metrics;
  JobLogsCursor logs;
  std::optional<absl::Time> ended_at;

  while (!changes.closed()) {
    absl::StatusOr<v1::Job> job = core_.jobs->GetJob(caller, job_id);
    if (!job.ok()) return;
    if (!out.SendIfChanged("job", ToJson(*job), last_job)) return;
    if (!metrics.SendNew(*core_.jobs, caller, job_id, *job, out)) return;
    bool logs_complete = true;
    if (!logs.SendNew(*core_.jobs, caller, job_id, *job, out, logs_complete)) return;

    if (IsTerminal(job->state())) {
      if (!ended_at.has_value()) ended_at = absl::Now();
      // Everything is sent once the logs are; a worker that vanished never
      // sends the end of its logs, so give up waiting after a while.
      if (logs_complete || absl::Now() - *ended_at > absl::Seconds(10)) {
        out.Send("end", "{}");
        return;
      }
    }
    if (!out.KeepAliveIfIdle()) return;
    if (!out.Wait(changes, seen, options_.refresh, options_.stream_auth_recheck)) return;
    absl::SleepFor(kCoalesce);
  }
}

}  // namespace tessera
