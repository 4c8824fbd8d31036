#include "coordinator/http_api.h"

#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "google/protobuf/util/json_util.h"
#include "nlohmann/json.hpp"

namespace tessera {
namespace {

namespace v1 = ::tessera::v1;

HttpResponse Error(const absl::Status& s) {
  HttpResponse r;
  switch (s.code()) {
    case absl::StatusCode::kNotFound:
      r.status = 404;
      break;
    case absl::StatusCode::kInvalidArgument:
      r.status = 400;
      break;
    default:
      r.status = 500;
  }
  r.body = nlohmann::json{{"error", std::string(s.message())},
                          {"code", absl::StatusCodeToString(s.code())}}
               .dump();
  return r;
}

HttpResponse Json(const google::protobuf::Message& m) {
  google::protobuf::util::JsonPrintOptions opts;
  opts.preserve_proto_field_names = true;
  opts.always_print_primitive_fields = true;
  HttpResponse r;
  auto s = google::protobuf::util::MessageToJsonString(m, &r.body, opts);
  if (!s.ok()) return Error(absl::InternalError(std::string(s.message())));
  return r;
}

bool ParseId(absl::string_view text, int64_t* id) {
  return absl::SimpleAtoi(text, id) && *id > 0;
}

}  // namespace

HttpResponse HttpApi::Handle(const HttpRequest& request) const {
  if (request.path == "/healthz") {
    return HttpResponse{200, "text/plain", "ok\n"};
  }
  std::vector<absl::string_view> parts =
      absl::StrSplit(request.path, '/', absl::SkipEmpty());
  if (parts.size() < 3 || parts[0] != "api" || parts[1] != "v1") {
    return Error(absl::NotFoundError(absl::StrCat("no route for ", request.path)));
  }
  if (request.method != "GET") {
    HttpResponse r = Error(absl::InvalidArgumentError("method not allowed"));
    r.status = 405;
    return r;
  }
  if (parts[2] == "workers" && parts.size() == 3) {
    v1::ListWorkersResponse resp;
    for (auto& w : manager_->ListWorkers()) *resp.add_workers() = std::move(w);
    return Json(resp);
  }
  if (parts[2] != "jobs") {
    return Error(absl::NotFoundError(absl::StrCat("no route for ", request.path)));
  }
  if (parts.size() == 3) {
    absl::StatusOr<std::vector<v1::Job>> jobs = manager_->ListJobs();
    if (!jobs.ok()) return Error(jobs.status());
    v1::ListJobsResponse resp;
    for (auto& j : *jobs) *resp.add_jobs() = std::move(j);
    return Json(resp);
  }
  int64_t id = 0;
  if (!ParseId(parts[3], &id)) {
    return Error(absl::InvalidArgumentError(absl::StrCat("bad job id '", parts[3], "'")));
  }
  if (parts.size() == 4) {
    absl::StatusOr<v1::Job> job = manager_->GetJob(id);
    if (!job.ok()) return Error(job.status());
    return Json(*job);
  }
  if (parts.size() == 5 && parts[4] == "metrics") {
    v1::GetMetricsRequest q;
    q.set_job_id(id);
    auto get = [&](const std::string& key) -> const std::string* {
      auto it = request.query.find(key);
      return it == request.query.end() ? nullptr : &it->second;
    };
    if (const std::string* name = get("name")) q.set_name(*name);
    int64_t n = 0;
    if (const std::string* after = get("after_step")) {
      if (!absl::SimpleAtoi(*after, &n)) {
        return Error(absl::InvalidArgumentError("after_step: not an integer"));
      }
      q.set_after_step(n);
    }
    if (const std::string* limit = get("limit")) {
      if (!absl::SimpleAtoi(*limit, &n) || n < 0 || n > 100000) {
        return Error(absl::InvalidArgumentError("limit: must be 0..100000"));
      }
      q.set_limit(static_cast<int32_t>(n));
    }
    absl::StatusOr<std::vector<v1::MetricPoint>> points = manager_->GetMetrics(q);
    if (!points.ok()) return Error(points.status());
    v1::GetMetricsResponse resp;
    for (auto& p : *points) *resp.add_points() = std::move(p);
    return Json(resp);
  }
  return Error(absl::NotFoundError(absl::StrCat("no route for ", request.path)));
}

}  // namespace tessera
