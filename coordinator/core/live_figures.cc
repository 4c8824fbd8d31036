#include "coordinator/core/live_figures.h"

#include <algorithm>

#include "common/device_figures.h"

namespace tessera {

bool LiveFigures::Kept(std::string_view name) {
  return name == kImagesPerSecFigure || name == kStepTimeMsFigure ||
         std::find(kDeviceFigures.begin(), kDeviceFigures.end(), name) !=
             kDeviceFigures.end();
}

void LiveFigures::Record(const std::vector<MetricRow>& rows) {
  absl::MutexLock lock(&mu_);
  for (const MetricRow& row : rows) {
    if (!Kept(row.name)) continue;
    Job& job = jobs_[row.job_id];
    if (row.attempt < job.attempt) continue;
    if (row.attempt > job.attempt) job = Job{row.attempt, {}};
    auto [it, inserted] =
        job.latest.try_emplace({row.rank, row.name}, row.step, row.value);
    if (!inserted && row.step >= it->second.first) it->second = {row.step, row.value};
  }
}

void LiveFigures::Forget(int64_t job_id) {
  absl::MutexLock lock(&mu_);
  jobs_.erase(job_id);
}

LiveFigures::RankFigures LiveFigures::Of(int64_t job_id) const {
  RankFigures out;
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return out;
  for (const auto& [key, value] : it->second.latest) {
    out[key.first][key.second] = value.second;
  }
  return out;
}

}  // namespace tessera
