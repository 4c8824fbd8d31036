#include "worker/trainer/run/progress.h"

#include <algorithm>
#include <optional>
#include <string>
#include <utility>

namespace tessera::trainer {
namespace {

ProgressTrackerOptions AtLeastOneStep(ProgressTrackerOptions options) {
  options.window_steps = std::max(1, options.window_steps);
  return options;
}

}  // namespace

ProgressTracker::ProgressTracker(const Clock& clock, ProgressTrackerOptions options)
    : clock_(clock), options_(AtLeastOneStep(options)) {
  const absl::Time now = clock_.Now();
  phase_since_ = now;
  accrued_until_ = now;
  window_phases_.reserve(static_cast<size_t>(options_.window_steps));
  window_steps_.reserve(static_cast<size_t>(options_.window_steps));
}

void ProgressTracker::SetCollectives(const PendingCollectiveTracker* collectives) {
  absl::MutexLock lock(&mu_);
  collectives_ = collectives;
}

void ProgressTracker::SetDeviceStepTimes(
    std::vector<std::pair<std::string, double>> ms_per_step, int32_t steps) {
  absl::MutexLock lock(&mu_);
  device_ms_ = std::move(ms_per_step);
  device_steps_ = steps;
}

void ProgressTracker::SetStep(int64_t completed_steps) {
  absl::MutexLock lock(&mu_);
  step_ = completed_steps;
}

void ProgressTracker::AccrueLocked(absl::Time now) {
  if (in_step_) current_[static_cast<size_t>(phase_)] += now - accrued_until_;
  accrued_until_ = now;
}

void ProgressTracker::Enter(RankPhase phase) {
  const absl::Time now = clock_.Now();
  absl::MutexLock lock(&mu_);
  if (phase == phase_) return;
  AccrueLocked(now);
  phase_ = phase;
  phase_since_ = now;
  phase_items_ = 0;
}

void ProgressTracker::AddPhaseItem() {
  absl::MutexLock lock(&mu_);
  ++phase_items_;
}

void ProgressTracker::BeginStep() {
  const absl::Time now = clock_.Now();
  absl::MutexLock lock(&mu_);
  in_step_ = true;
  step_start_ = now;
  accrued_until_ = now;
  current_.fill(absl::ZeroDuration());
}

void ProgressTracker::EndStep(int64_t completed_steps) {
  const absl::Time now = clock_.Now();
  absl::MutexLock lock(&mu_);
  step_ = completed_steps;
  if (!in_step_) return;
  AccrueLocked(now);
  in_step_ = false;
  const absl::Duration wall = now - step_start_;
  const auto window = static_cast<size_t>(options_.window_steps);
  if (window_steps_.size() < window) {
    window_steps_.push_back(wall);
    window_phases_.push_back(current_);
  } else {
    sum_steps_ -= window_steps_[next_slot_];
    for (size_t p = 0; p < sum_phases_.size(); ++p) {
      sum_phases_[p] -= window_phases_[next_slot_][p];
    }
    window_steps_[next_slot_] = wall;
    window_phases_[next_slot_] = current_;
  }
  next_slot_ = (next_slot_ + 1) % window;
  sum_steps_ += wall;
  for (size_t p = 0; p < sum_phases_.size(); ++p) sum_phases_[p] += current_[p];
}

ProgressReport ProgressTracker::Snapshot() const {
  const absl::Time now = clock_.Now();
  ProgressReport report;
  absl::MutexLock lock(&mu_);
  report.step = step_;
  report.phase = RankPhaseName(phase_);
  report.phase_items = phase_items_;
  report.phase_elapsed_ms =
      std::max<int64_t>(0, absl::ToInt64Milliseconds(now - phase_since_));
  // Blocked on peers, or on the device, which may itself wait in a collective.
  if ((phase_ == RankPhase::kCollective || phase_ == RankPhase::kDevice) &&
      collectives_ != nullptr) {
    const std::optional<PendingCollectiveInfo> oldest = collectives_->Oldest();
    if (oldest.has_value()) {
      report.collective = DescribeCollective(*oldest);
      report.collective_ready = oldest->ready;
    }
  }
  report.device_phase_ms = device_ms_;
  report.device_window_steps = device_steps_;
  const auto steps = static_cast<int32_t>(window_steps_.size());
  report.window_steps = steps;
  if (steps > 0) {
    report.step_time_ms = absl::ToDoubleMilliseconds(sum_steps_) / steps;
    for (size_t p = 0; p < sum_phases_.size(); ++p) {
      if (sum_phases_[p] <= absl::ZeroDuration()) continue;
      report.phase_ms.emplace_back(kRankPhaseNames[p],
                                   absl::ToDoubleMilliseconds(sum_phases_[p]) / steps);
    }
  }
  return report;
}

RankPhase ProgressTracker::phase() const {
  absl::MutexLock lock(&mu_);
  return phase_;
}

int64_t ProgressTracker::step() const {
  absl::MutexLock lock(&mu_);
  return step_;
}

}  // namespace tessera::trainer
