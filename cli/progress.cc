#include "cli/progress.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "cli/output.h"

namespace tessera::cli {

namespace v1 = tessera::v1;

std::string FormatProgress(const ProgressInfo& info) {
  std::string line = absl::StrCat("[", FormatElapsed(info.elapsed), "] ");
  if (!info.label.empty()) absl::StrAppend(&line, Sanitize(info.label), " ");
  absl::StrAppend(&line, JobStateName(info.state));
  if (info.step.has_value()) {
    std::vector<std::string> parts;
    if (info.epoch.has_value()) {
      std::string epoch = absl::StrFormat("epoch %.2f", *info.epoch);
      if (info.total_epochs.has_value()) absl::StrAppend(&epoch, "/", *info.total_epochs);
      parts.push_back(std::move(epoch));
    }
    const bool has_total = info.total_steps.has_value() && *info.total_steps > 0;
    if (has_total) {
      const int64_t percent =
          std::clamp<int64_t>(*info.step * 100 / *info.total_steps, 0, 100);
      parts.push_back(
          absl::StrFormat("step %d/%d (%d%%)", *info.step, *info.total_steps, percent));
    } else {
      parts.push_back(absl::StrCat("step ", *info.step));
    }
    if (info.loss.has_value()) parts.push_back(absl::StrFormat("loss %.4f", *info.loss));
    if (info.images_per_sec.has_value()) {
      parts.push_back(absl::StrFormat("%.1f img/s", *info.images_per_sec));
    }
    if (has_total) {
      if (!info.eta.has_value()) {
        parts.push_back("ETA -");
      } else if (*info.eta <= absl::ZeroDuration()) {
        parts.push_back("ETA finishing");
      } else {
        parts.push_back(
            absl::StrCat("ETA ", HumanDuration(absl::Ceil(*info.eta, absl::Seconds(1)))));
      }
    }
    absl::StrAppend(&line, " ", absl::StrJoin(parts, "  "));
  } else if (info.state == v1::JOB_STATE_QUEUED && !info.pending_reason.empty()) {
    absl::StrAppend(&line, ": ", Sanitize(info.pending_reason));
  }
  if (info.attempt > 1) absl::StrAppend(&line, "  (attempt ", info.attempt, ")");
  return line;
}

std::optional<absl::Duration> EstimateEta(const std::deque<StepSample>& samples,
                                          int64_t step, int64_t total_steps) {
  if (step >= total_steps) return absl::ZeroDuration();
  if (samples.size() < 2) return std::nullopt;
  const int64_t steps = samples.back().step - samples.front().step;
  const double seconds =
      absl::ToDoubleSeconds(samples.back().time - samples.front().time);
  if (steps <= 0 || seconds <= 0) return std::nullopt;
  const double left_s = static_cast<double>(total_steps - step) * seconds / steps;
  // Beyond a year the rate is meaningless (a stalled run).
  if (!std::isfinite(left_s) || left_s > 365.0 * 86400) return std::nullopt;
  return absl::Seconds(left_s);
}

std::string RedrawLine(const std::string& line, int columns) {
  std::string shown = Sanitize(line);
  if (columns > 1) shown = TruncateToWidth(shown, static_cast<size_t>(columns - 1));
  // Carriage return, the text, then erase whatever a longer previous line left.
  return absl::StrCat("\r", shown, "\x1b[K");
}

void ProgressTracker::Reset(int32_t attempt) {
  attempt_ = attempt;
  losses_.clear();
  step_unix_ms_.clear();
  images_per_sec_.clear();
  epoch_.reset();
  complete_step_ = -1;
  samples_.clear();
}

void ProgressTracker::Update(int32_t attempt, int32_t world_size,
                             const std::vector<v1::MetricPoint>& points, absl::Time now) {
  if (attempt != attempt_) Reset(attempt);
  world_size_ = world_size;
  for (const v1::MetricPoint& p : points) {
    if (p.attempt() != attempt) continue;
    const std::string& name = p.name();
    if (name == kLossMetric) {
      if (p.step() <= complete_step_) continue;
      losses_[p.step()][p.rank()] = p.value();
      int64_t& newest = step_unix_ms_[p.step()];
      newest = std::max(newest, p.unix_ms());
    } else if (name == kImagesPerSecMetric) {
      auto it = images_per_sec_.find(p.rank());
      if (it == images_per_sec_.end() || p.step() >= it->second.first) {
        images_per_sec_[p.rank()] = {p.step(), p.value()};
      }
    } else if (name == kEpochMetric) {
      if (!epoch_ || p.step() > epoch_->first ||
          (p.step() == epoch_->first && p.value() > epoch_->second)) {
        epoch_ = {p.step(), p.value()};
      }
    } else if (name == kTotalStepsMetric && p.value() > 0) {
      total_steps_ = static_cast<int64_t>(std::llround(p.value()));
    }
  }

  // A step is complete once every rank reported its loss; each newly complete
  // step is one observation of the step rate.
  const size_t ranks = static_cast<size_t>(std::max(world_size_, 1));
  for (const auto& [step, by_rank] : losses_) {
    if (step <= complete_step_ || by_rank.size() < ranks) continue;
    complete_step_ = step;
    const int64_t unix_ms = step_unix_ms_[step];
    samples_.push_back({step, unix_ms > 0 ? absl::FromUnixMillis(unix_ms) : now});
  }
  losses_.erase(losses_.begin(), losses_.lower_bound(complete_step_));
  step_unix_ms_.erase(step_unix_ms_.begin(), step_unix_ms_.lower_bound(complete_step_));
  while (samples_.size() > 2 && samples_.back().time - samples_[1].time >= kEtaWindow) {
    samples_.pop_front();
  }
}

ProgressInfo ProgressTracker::Info(const v1::Job& job, absl::Duration elapsed) const {
  ProgressInfo info;
  info.elapsed = elapsed;
  info.state = job.state();
  info.pending_reason = job.pending_reason();
  info.attempt = job.attempt();
  // Epochs bound the run only when no step limit cuts it short.
  const v1::TrainerConfig& trainer = job.spec().trainer();
  if (trainer.epochs() > 0 && trainer.max_steps() == 0) {
    info.total_epochs = trainer.epochs();
  }
  info.total_steps = total_steps_;
  if (job.attempt() != attempt_) return info;  // nothing seen of this attempt yet
  if (epoch_) info.epoch = epoch_->second;
  if (!images_per_sec_.empty()) {
    double sum = 0;
    for (const auto& [rank, value] : images_per_sec_) sum += value.second;
    info.images_per_sec = sum;
  }
  // The newest step every rank reported; before that, the newest any did.
  auto shown = losses_.find(complete_step_);
  if (shown == losses_.end() && !losses_.empty()) shown = std::prev(losses_.end());
  if (shown == losses_.end()) return info;
  info.step = shown->first;
  double sum = 0;
  for (const auto& [rank, loss] : shown->second) sum += loss;
  info.loss = sum / static_cast<double>(shown->second.size());
  if (total_steps_) info.eta = EstimateEta(samples_, shown->first, *total_steps_);
  return info;
}

}  // namespace tessera::cli
