#include "cli/command_util.h"

#include <cstddef>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/file_io.h"
#include "common/job_spec.h"
#include "common/json_writer.h"

namespace tessera::cli {

using json = nlohmann::ordered_json;

namespace {

// Spec files are small; a huge file is a wrong path.
constexpr size_t kMaxSpecFileBytes = size_t{1} << 20;

}  // namespace

FormatContext NowContext() { return FormatContext{absl::Now(), absl::LocalTimeZone()}; }

void PrintJson(const json& value, std::ostream& out) {
  JsonWriter writer({.layout = JsonWriter::Layout::kIndented});
  WriteJsonValue(value, writer);
  out << writer.text() << "\n";
}

int ReportRpcError(const absl::Status& status, const CoordinatorClient& client,
                   const std::optional<std::string>& subject, std::ostream& err) {
  switch (status.code()) {
    case absl::StatusCode::kNotFound:
      if (subject) {
        err << "tessctl: " << *subject << " not found\n";
      } else {
        err << "tessctl: not found: " << status.message() << "\n";
      }
      return kExitNotFound;
    case absl::StatusCode::kUnavailable:
      err << "tessctl: cannot reach the coordinator at " << client.target() << ": "
          << status.message() << " (set --coordinator or TESSERA_COORDINATOR)\n";
      return kExitUnreachable;
    case absl::StatusCode::kDeadlineExceeded:
      err << "tessctl: the coordinator at " << client.target()
          << " did not answer in time: " << status.message() << "\n";
      return kExitUnreachable;
    case absl::StatusCode::kInvalidArgument:
      err << "tessctl: rejected by the coordinator: " << status.message() << "\n";
      return kExitUsage;
    case absl::StatusCode::kUnauthenticated:
    case absl::StatusCode::kPermissionDenied:
      err << "tessctl: the coordinator at " << client.target()
          << " refused the request: " << status.message()
          << " (set --token or TESSERA_TOKEN)\n";
      return kExitFailed;
    case absl::StatusCode::kUnimplemented:
      err << "tessctl: the coordinator at " << client.target()
          << " does not support this request (an older version?): " << status.message()
          << "\n";
      return kExitFailed;
    default:
      err << "tessctl: " << status << "\n";
      return kExitFailed;
  }
}

bool IsRetryable(const absl::Status& status) {
  return status.code() == absl::StatusCode::kUnavailable ||
         status.code() == absl::StatusCode::kDeadlineExceeded;
}

std::string NewRequestId() {
  std::random_device device;
  std::string id;
  for (int i = 0; i < 4; ++i) absl::StrAppendFormat(&id, "%08x", device());
  return id;
}

absl::StatusOr<std::string> ReadSpecFile(const std::string& path) {
  return ReadFile(path, {.max_bytes = kMaxSpecFileBytes, .what = "spec file"});
}

std::optional<std::string> ReadSpecWithOverrides(
    const std::string& path, const std::vector<std::string>& overrides,
    std::ostream& err) {
  absl::StatusOr<std::string> text = ReadSpecFile(path);
  if (!text.ok()) {
    err << "tessctl: " << text.status().message() << "\n";
    return std::nullopt;
  }
  absl::StatusOr<std::string> yaml = ApplySpecOverrides(*text, overrides);
  if (!yaml.ok()) {
    err << "tessctl: " << path << ": " << yaml.status().message() << "\n";
    return std::nullopt;
  }
  return *std::move(yaml);
}

}  // namespace tessera::cli
