#include "worker/trainer/dist/collective_timeout.h"

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace tessera::trainer {
namespace {

std::string Seconds(absl::Duration d) {
  return absl::StrFormat("%.1f s", absl::ToDoubleSeconds(d));
}

}  // namespace

namespace {

[[noreturn]] void ExitWithReason(const std::string& reason, int code) {
  std::fflush(stdout);
  std::fprintf(stderr, "tessera-train: %s; communicator aborted, exiting with code %d\n",
               reason.c_str(), code);
  std::fprintf(stderr, "%.*s%s\n", static_cast<int>(kTrainerExitReasonPrefix.size()),
               kTrainerExitReasonPrefix.data(), reason.c_str());
  std::fflush(stderr);
  std::_Exit(code);
}

}  // namespace

void ExitOnCollectiveFailure(const std::string& reason) {
  ExitWithReason(reason, kTrainerExitCollectiveFailure);
}

void ExitOnCudaError(const std::string& reason) {
  ExitWithReason(reason, kTrainerExitCudaError);
}

bool IsCudaErrorMessage(std::string_view message) {
  for (std::string_view mark : {"CUDA error", "CUDA out of memory", "cudaError"}) {
    if (message.find(mark) != std::string_view::npos) return true;
  }
  return false;
}

CollectiveTimeout::CollectiveTimeout(const PendingCollectiveTracker& tracker,
                                     const Clock& clock, Poll poll, OnFire on_fire,
                                     CollectiveTimeoutOptions options)
    : tracker_(tracker),
      clock_(clock),
      poll_(std::move(poll)),
      on_fire_(std::move(on_fire)),
      options_(options) {}

CollectiveTimeout::~CollectiveTimeout() {
  stop_.Notify();
  if (thread_.joinable()) thread_.join();
}

void CollectiveTimeout::Start() {
  thread_ = std::thread([this] { Loop(); });
}

void CollectiveTimeout::Loop() {
  while (!stop_.WaitForNotificationWithTimeout(options_.poll_interval)) {
    std::optional<std::string> reason = Check();
    if (!reason.has_value()) continue;
    {
      absl::MutexLock lock(&mu_);
      reason_ = *reason;
    }
    if (on_fire_) on_fire_(*reason);
    return;
  }
}

std::optional<std::string> CollectiveTimeout::Check() {
  const absl::Status polled = poll_ ? poll_() : absl::OkStatus();
  // After the poll, which may have retired finished collectives.
  const std::optional<PendingCollectiveInfo> oldest = tracker_.Oldest();
  const absl::Time now = clock_.Now();
  if (!polled.ok()) {
    const std::string pending =
        oldest.has_value()
            ? absl::StrCat(" while ", DescribeCollective(*oldest), " was pending for ",
                           Seconds(now - oldest->started_at))
            : " with no collective pending";
    return absl::StrCat("collective failed", pending, ": ", polled.ToString());
  }
  if (!oldest.has_value()) return std::nullopt;
  const absl::Duration age = now - oldest->started_at;
  if (age < options_.timeout) return std::nullopt;
  return absl::StrCat("collective timeout: ", DescribeCollective(*oldest),
                      " pending for ", Seconds(age), " (limit ",
                      Seconds(options_.timeout), ")");
}

std::optional<std::string> CollectiveTimeout::reason() const {
  absl::MutexLock lock(&mu_);
  return reason_;
}

}  // namespace tessera::trainer
