#include "cli/follow.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cli/output.h"

namespace tessera::cli {

namespace v1 = tessera::v1;

std::string ElapsedPrefix(absl::Duration elapsed) {
  return absl::StrCat("[", FormatElapsed(elapsed), "] ");
}

absl::Duration RunDuration(int64_t created_unix_ms, int64_t updated_unix_ms,
                           absl::Duration fallback) {
  if (created_unix_ms > 0 && updated_unix_ms >= created_unix_ms) {
    return absl::Milliseconds(updated_unix_ms - created_unix_ms);
  }
  return fallback;
}

void FollowScreen::PrintEvent(absl::Duration elapsed, std::string_view text) {
  ClearStatus();
  out_ << ElapsedPrefix(elapsed) << text << "\n";
}

void FollowScreen::ShowStatus(const std::string& line) {
  if (live_) {
    out_ << RedrawLine(line, columns_) << std::flush;
    drawn_ = true;
  } else {
    out_ << line << std::endl;
  }
}

void FollowScreen::ClearStatus() {
  if (drawn_) out_ << "\r\x1b[K";
  drawn_ = false;
}

absl::StatusOr<std::string> JobProgress::Line(CoordinatorClient& client, int64_t job_id,
                                              absl::Duration elapsed, std::string label) {
  absl::StatusOr<v1::Job> job = client.GetJob(job_id);
  if (!job.ok()) return job.status();
  if (!tracked_ || tracked_->first != job->id()) {
    tracked_.emplace(job->id(), ProgressTracker());
  }
  ProgressTracker& tracker = tracked_->second;
  absl::StatusOr<std::vector<v1::MetricPoint>> points =
      FetchMetrics(client, job->id(), tracker.FetchAfter(), "");
  if (points.ok()) {
    tracker.Update(job->attempt(), job->spec().world_size(), *points, absl::Now());
  }
  ProgressInfo info = tracker.Info(*job, elapsed);
  info.label = std::move(label);
  return FormatProgress(info);
}

}  // namespace tessera::cli
