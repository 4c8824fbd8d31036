// Fuzzes the coordinator's HTTP API (coordinator/http_api.h) through its own
// router and handlers: HttpApi::Handle over a JobManager and a SweepManager on
// an in-memory SQLite store, with a fake clock. The store holds a fixed history
// (two workers; a running job with metrics and logs; succeeded, cancelled,
// failed and queued jobs; a sweep). It is built afresh before an input whenever
// the previous one may have changed it (a request other than GET or HEAD that
// succeeded, or a stream that had to be stopped), so every input starts from
// the same state and a crash reproduces from its input alone.
//
// Every request goes to two HttpApi instances over the same managers: one
// with authentication (an Authenticator holding a user and a join token), one
// without (as with --insecure-no-auth).
//
// Input: up to four requests separated by NUL bytes, each written like HTTP/1.1
// (see DecodeRequest). In header values, $USER and $JOIN stand for the user and
// join tokens of the fixture (their secrets are random):
//
//   POST /api/v1/jobs/1/cancel?reason=a%20b HTTP/1.1
//   Authorization: Bearer $USER
//
//   body
//
// Besides crashes and sanitizer reports, these invariants abort the run:
//   - no request gets a 500: bad input is a 4xx, and the store is healthy;
//   - a JSON response parses as strict (UTF-8) JSON; an error body is
//     {"error": string, "code": string};
//   - a 405 names the allowed methods in an Allow header;
//   - an event stream, run for its first events, writes well-formed events:
//     "event: NAME\ndata: JSON\n\n" or ": comment\n\n".
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/sweep_spec.h"
#include "coordinator/api/http_api.h"
#include "coordinator/core/auth.h"
#include "coordinator/core/job_manager.h"
#include "coordinator/core/sweep_manager.h"
#include "coordinator/store/sqlite_store.h"
#include "coordinator/store/store_writer.h"
#include "nlohmann/json.hpp"
#include "spdlog/spdlog.h"
#include "tessera/v1/tessera.pb.h"
#include "tests/fuzz/fuzz_check.h"

namespace tessera::fuzz {
namespace {

namespace v1 = ::tessera::v1;

constexpr size_t kMaxRequests = 4;

// ---- Decoding an input into HttpRequests ----

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// %XX decoding as libmicrohttpd does it for paths and, with `plus_is_space`, for
// query parameters; a malformed escape stays as written.
std::string PercentDecode(absl::string_view text, bool plus_is_space) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '%' && i + 2 < text.size()) {
      const int hi = HexValue(text[i + 1]);
      const int lo = HexValue(text[i + 2]);
      if (hi >= 0 && lo >= 0) {
        out.push_back(static_cast<char>(hi * 16 + lo));
        i += 2;
        continue;
      }
    }
    out.push_back(plus_is_space && text[i] == '+' ? ' ' : text[i]);
  }
  return out;
}

// Removes and returns the first line of `text` (without "\n" or "\r\n").
absl::string_view TakeLine(absl::string_view& text) {
  const size_t nl = text.find('\n');
  absl::string_view line = text.substr(0, nl);
  text = nl == absl::string_view::npos ? absl::string_view() : text.substr(nl + 1);
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  return line;
}

// One request: "METHOD TARGET [VERSION]", then "Name: value" header lines up to
// an empty line, then the body. TARGET is PATH[?QUERY]. The fields are filled
// the way HttpServer fills them from libmicrohttpd's request: path and query
// decoded, the first of repeated query parameters and headers kept, header
// names in lower case. A field added to HttpRequest gets filled here.
// "$USER" and "$JOIN" in header values become the given tokens.
HttpRequest DecodeRequest(absl::string_view text, const std::string& user_token,
                          const std::string& join_token) {
  HttpRequest request;
  const std::vector<absl::string_view> start =
      absl::StrSplit(TakeLine(text), absl::MaxSplits(' ', 2));
  request.method = std::string(start[0]);
  const absl::string_view target = start.size() > 1 ? start[1] : absl::string_view();
  const size_t question = target.find('?');
  request.path = PercentDecode(target.substr(0, question), /*plus_is_space=*/false);
  if (question != absl::string_view::npos) {
    for (absl::string_view param :
         absl::StrSplit(target.substr(question + 1), '&', absl::SkipEmpty())) {
      const size_t eq = param.find('=');
      const absl::string_view value =
          eq == absl::string_view::npos ? absl::string_view() : param.substr(eq + 1);
      request.query.emplace(PercentDecode(param.substr(0, eq), true),
                            PercentDecode(value, true));
    }
  }
  while (!text.empty()) {
    const absl::string_view line = TakeLine(text);
    if (line.empty()) break;
    const size_t colon = line.find(':');
    if (colon == absl::string_view::npos) continue;  // the server answers 400
    const std::string value =
        absl::StrReplaceAll(absl::StripLeadingAsciiWhitespace(line.substr(colon + 1)),
                            {{"$USER", user_token}, {"$JOIN", join_token}});
    request.headers.emplace(absl::AsciiStrToLower(line.substr(0, colon)), value);
  }
  request.body = std::string(text);
  return request;
}

// ---- The coordinator under test ----

void Ok(const absl::Status& status, absl::string_view what) {
  Check(status.ok(), "fixture: " + std::string(what), status.ToString());
}

v1::JobSpec MakeSpec(const std::string& name, int world_size) {
  v1::JobSpec spec;
  spec.set_name(name);
  spec.set_world_size(world_size);
  spec.mutable_trainer()->set_model("vit-micro");
  spec.mutable_trainer()->set_dataset("synthetic");
  spec.mutable_trainer()->set_batch_size(8);
  spec.mutable_trainer()->set_epochs(1);
  return spec;
}

// A store, its writer, the managers and an authenticator, with a fixed
// history. Job ids: 1 placed with its 2 ranks started (metrics, logs), 2
// succeeded, 3 cancelled, 4 failed, 5 queued (too large), then the sweep's
// points from 6. Sweep id 1.
class Coordinator {
 public:
  Coordinator() {
    auto store = SqliteStore::Open(":memory:");
    Ok(store.status(), "open store");
    store_ = std::move(*store);
    writer_ = std::make_unique<StoreWriter>(store_.get());
    JobManagerOptions options;
    options.spec_limits.max_world_size = 64;
    jobs_ = std::make_unique<JobManager>(store_.get(), writer_.get(), &clock_, options);
    Ok(jobs_->Recover(), "recover jobs");
    sweeps_ = std::make_unique<SweepManager>(store_.get(), &jobs_->jobs(), &clock_,
                                             options.spec_limits);
    Ok(sweeps_->Recover(), "recover sweeps");
    auto auth = Authenticator::Create(store_.get(), &clock_, Authenticator::Options());
    Ok(auth.status(), "authenticator");
    auth_ = std::move(*auth);
    auto user = CreateToken(*store_, clock_, kUserToken, "fuzz-user");
    Ok(user.status(), "user token");
    user_token_ = *user;
    auto join = CreateToken(*store_, clock_, kJoinToken, "fuzz-join");
    Ok(join.status(), "join token");
    join_token_ = *join;

    HttpApi::Options http;
    http.keepalive = absl::Hours(1);  // no keepalive comments in a short stream
    http.refresh = absl::Milliseconds(1);
    http.static_files = [](std::string_view path) -> const StaticFile* {
      static const StaticFile kIndex{"text/html; charset=utf-8", "<!doctype html>"};
      static const StaticFile kScript{"text/javascript", "export {};"};
      if (path == "/") return &kIndex;
      if (path == "/app.js") return &kScript;
      return nullptr;
    };
    open_api_ = std::make_unique<HttpApi>(
        HttpApi::Core{&jobs_->jobs(), &jobs_->workers(), &jobs_->view()}, sweeps_.get(),
        http);
    http.auth = auth_.get();
    auth_api_ = std::make_unique<HttpApi>(
        HttpApi::Core{&jobs_->jobs(), &jobs_->workers(), &jobs_->view()}, sweeps_.get(),
        http);
    Populate();
  }

  ~Coordinator() {
    jobs_->changes().Close();
    jobs_->Shutdown();
  }

  // Without and with authentication.
  const HttpApi& open_api() const { return *open_api_; }
  const HttpApi& auth_api() const { return *auth_api_; }
  const std::string& user_token() const { return user_token_; }
  const std::string& join_token() const { return join_token_; }
  // Ends running streams for good; the coordinator must be rebuilt afterwards.
  void CloseStreams() { jobs_->changes().Close(); }

 private:
  int64_t Register(const std::string& name, int slots) {
    v1::RegisterWorkerRequest req;
    req.set_name(name);
    req.set_hostname(name + ".local");
    req.set_slots(slots);
    req.set_device_kind("cpu");
    auto resp = jobs_->workers().RegisterWorker(req);
    Ok(resp.status(), "register");
    return resp->epoch();
  }

  int64_t Submit(const std::string& name, int world_size) {
    auto id =
        jobs_->jobs().Submit(MakeSpec(name, world_size), "name: " + name + "\n", "");
    Ok(id.status(), "submit");
    return *id;
  }

  v1::HeartbeatResponse Beat(const std::string& worker, int64_t epoch,
                             const std::vector<v1::LocalRank>& ranks) {
    v1::HeartbeatRequest req;
    req.set_name(worker);
    req.set_epoch(epoch);
    for (const v1::LocalRank& r : ranks) *req.add_ranks() = r;
    auto resp = jobs_->workers().Heartbeat(req);
    Ok(resp.status(), "heartbeat");
    return *resp;
  }

  static v1::LocalRank Rank(const v1::LaunchOrder& o, bool exited, int exit_code) {
    v1::LocalRank r;
    r.set_job_id(o.job_id());
    r.set_attempt(o.attempt());
    r.set_rank(o.rank());
    r.set_pid(1000 + o.rank());
    r.set_exited(exited);
    r.set_exit_code(exit_code);
    return r;
  }

  struct Point {
    int64_t step;
    std::string name;
    double value;
  };

  void Report(int64_t job, int rank, const std::vector<Point>& points) {
    v1::ReportMetricsRequest req;
    req.set_job_id(job);
    req.set_attempt(1);
    req.set_rank(rank);
    for (const Point& point : points) {
      v1::MetricPoint* p = req.add_points();
      p->set_step(point.step);
      p->set_name(point.name);
      p->set_value(point.value);
    }
    std::promise<absl::Status> done;
    jobs_->ranks().ReportMetrics(
        req, [&done](absl::Status s) { done.set_value(std::move(s)); });
    Ok(done.get_future().get(), "report metrics");
  }

  void Ship(const std::string& worker, int64_t epoch, int64_t job, int rank,
            int64_t offset, const std::string& data, bool eof) {
    v1::ShipLogsRequest req;
    req.set_name(worker);
    req.set_epoch(epoch);
    req.set_job_id(job);
    req.set_attempt(1);
    req.set_rank(rank);
    req.set_offset(offset);
    req.set_data(data);
    req.set_eof(eof);
    Ok(jobs_->workers().ShipLogs(req).status(), "ship logs");
  }

  void Populate() {
    const int64_t a = Register("node-a", 4);
    const int64_t b = Register("node-b", 2);
    const int64_t running = Submit("running <b>&\"", 2);
    const int64_t succeeded = Submit("succeeded", 1);
    const int64_t cancelled = Submit("cancelled", 1);
    const int64_t failed = Submit("failed", 1);
    Submit("too large to place", 16);

    // Ranks start; the succeeded and failed jobs' ranks exit at the next beat.
    std::vector<v1::LocalRank> a_ranks;
    std::vector<v1::LocalRank> b_ranks;
    // Which worker (name, epoch) runs each (job, rank): only it may ship its log.
    std::map<std::pair<int64_t, int32_t>, std::pair<std::string, int64_t>> placed;
    for (const auto& [epoch, ranks] : {std::pair{a, &a_ranks}, std::pair{b, &b_ranks}}) {
      const std::string name = epoch == a ? "node-a" : "node-b";
      const v1::HeartbeatResponse resp = Beat(name, epoch, {});
      for (const v1::LaunchOrder& o : resp.launch()) {
        const bool ends = o.job_id() == succeeded || o.job_id() == failed;
        ranks->push_back(Rank(o, ends, o.job_id() == failed ? 1 : 0));
        placed[{o.job_id(), o.rank()}] = {name, epoch};
      }
    }
    auto ship = [&](int64_t job, int32_t rank, int64_t offset, const std::string& data,
                    bool eof) {
      auto it = placed.find({job, rank});
      if (it == placed.end()) return;  // not launched on this pass: no log yet
      Ship(it->second.first, it->second.second, job, rank, offset, data, eof);
    };
    Report(running, 0,
           {{0, "loss", 2.0},
            {0, "images_per_sec", 120.5},
            {10, "loss", 1.9},
            {10, "images_per_sec", 121},
            {20, "loss", 1.8},
            {20, "steps_per_epoch", 50}});
    Report(running, 1, {{0, "loss", 2.1}, {10, "time_comm_ms", 3.25}, {20, "loss", 1.7}});
    Report(succeeded, 0, {{5, "test_accuracy", 0.875}, {5, "epoch_seconds", 12.5}});
    // Logs: text with invalid UTF-8 and control characters, and a finished one.
    const std::string log =
        std::string("step 0 loss 2.0\n\xff\xfe bad utf-8 \x01\x1b[0m\n");
    ship(running, 0, 0, log, false);
    ship(succeeded, 0, 0, "done\n", false);
    Beat("node-a", a, a_ranks);
    Beat("node-b", b, b_ranks);
    ship(succeeded, 0, 5, "", true);
    Ok(jobs_->jobs().CancelJob(Caller::Admin(), cancelled).status(), "cancel");

    auto sweep = ParseSweepSpec(
        "name: study\nmax_parallel: 1\ngrid:\n  world_size: [1, 2]\n"
        "base:\n  trainer: {model: vit-micro, dataset: synthetic, epochs: 1, batch_size: "
        "8}\n");
    Ok(sweep.status(), "parse sweep");
    Ok(sweeps_->Submit(*sweep, "name: study\n", "").status(), "submit sweep");
    sweeps_->Tick();
  }

  FakeClock clock_;
  std::unique_ptr<SqliteStore> store_;
  std::unique_ptr<StoreWriter> writer_;
  std::unique_ptr<JobManager> jobs_;
  std::unique_ptr<SweepManager> sweeps_;
  std::unique_ptr<Authenticator> auth_;
  std::string user_token_;
  std::string join_token_;
  std::unique_ptr<HttpApi> open_api_;
  std::unique_ptr<HttpApi> auth_api_;
};

// ---- Checking responses ----

bool IsJson(absl::string_view text) {
  return nlohmann::json::accept(text.begin(), text.end());
}

void CheckEvent(absl::string_view event) {
  Check(absl::EndsWith(event, "\n\n"), "stream event does not end with a blank line",
        event);
  if (absl::StartsWith(event, ":")) return;  // a comment (keepalive)
  Check(absl::StartsWith(event, "event: "), "stream event has no event line", event);
  const size_t data = event.find("\ndata: ");
  Check(data != absl::string_view::npos, "stream event has no data line", event);
  const absl::string_view json = event.substr(data + 7, event.size() - 2 - (data + 7));
  Check(json.find('\n') == absl::string_view::npos, "stream event data spans lines",
        event);
  Check(IsJson(json), "stream event data is not JSON", event);
}

// Accepts `budget` events, then reports the client gone.
class CountingSink : public EventSink {
 public:
  explicit CountingSink(int budget) : budget_(budget) {}
  bool Write(std::string_view data) override {
    CheckEvent(absl::string_view(data.data(), data.size()));
    return budget_-- > 0;
  }

 private:
  int budget_;
};

// Runs a stream until it has written its first events. A job stream may write
// two (the job, then its metrics); the others one. Streams that go on without
// writing (nothing changes in the fixture) are stopped after a moment, which
// ends the fixture's usefulness: returns whether that happened.
bool RunStream(Coordinator& coordinator, const std::string& path,
               const std::function<void(EventSink&)>& stream) {
  const int budget = absl::StartsWith(path, "/api/v1/stream/jobs/") ? 1 : 0;
  std::promise<void> done;
  std::future<void> finished = done.get_future();
  std::thread runner([&] {
    CountingSink sink(budget);
    stream(sink);
    done.set_value();
  });
  bool stopped = false;
  if (finished.wait_for(std::chrono::milliseconds(50)) != std::future_status::ready) {
    coordinator.CloseStreams();
    stopped = true;
  }
  runner.join();
  return stopped;
}

void CheckResponse(const HttpRequest& request, const HttpResponse& response) {
  const std::string where =
      absl::StrCat(request.method, " ", request.path, " -> ", response.status, " ",
                   response.body.substr(0, 300));
  Check(response.status != 500, "request got a 500", where);
  Check(response.status >= 200 && response.status < 600, "status out of range", where);
  if (response.status == 405) {
    Check(response.headers.contains("Allow"), "405 without an Allow header", where);
  }
  if (response.stream) {
    Check(response.status == 200 && response.content_type == "text/event-stream",
          "stream response is not a 200 event stream", where);
    return;
  }
  if (response.content_type == "application/json") {
    Check(IsJson(response.body), "JSON response does not parse", where);
  }
  if (response.status >= 400) {
    Check(response.content_type == "application/json", "error is not JSON", where);
    const nlohmann::json body = nlohmann::json::parse(response.body);
    Check(body.is_object() && body.contains("error") && body["error"].is_string() &&
              body.contains("code") && body["code"].is_string(),
          "error body is not {error, code}", where);
  }
}

Coordinator* fixture = nullptr;
bool fixture_dirty = false;

}  // namespace
}  // namespace tessera::fuzz

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  spdlog::set_level(spdlog::level::off);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera::fuzz;  // NOLINT(build/namespaces): fuzzer entry point
  if (fixture == nullptr || fixture_dirty) {
    delete fixture;
    fixture = new Coordinator();
    fixture_dirty = false;
  }
  for (const std::string& text : SplitAtNul(data, size, kMaxRequests)) {
    const tessera::HttpRequest request =
        DecodeRequest(text, fixture->user_token(), fixture->join_token());
    for (const tessera::HttpApi* api : {&fixture->open_api(), &fixture->auth_api()}) {
      tessera::HttpResponse response = api->Handle(request);
      CheckResponse(request, response);
      // Only a request that changes state and succeeded can have changed it.
      if (request.method != "GET" && request.method != "HEAD" && response.status < 300) {
        fixture_dirty = true;
      }
      if (response.stream && RunStream(*fixture, request.path, response.stream)) {
        fixture_dirty = true;
        return 0;  // the streams of this fixture are closed
      }
    }
  }
  return 0;
}
