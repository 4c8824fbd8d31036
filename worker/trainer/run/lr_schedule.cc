#include "worker/trainer/run/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace tessera::trainer {

int64_t ResolveWarmupSteps(int64_t warmup_steps, int64_t total_steps,
                           double warmup_fraction) {
  if (warmup_steps >= 0) return warmup_steps;
  return static_cast<int64_t>(
      std::ceil(warmup_fraction * static_cast<double>(total_steps)));
}

double ScheduledLearningRate(double peak, int64_t step, int64_t total_steps,
                             int64_t warmup_steps, double final_lr_fraction) {
  if (step < warmup_steps) {
    return peak * static_cast<double>(step + 1) / static_cast<double>(warmup_steps);
  }
  const double decay_steps =
      static_cast<double>(std::max<int64_t>(1, total_steps - warmup_steps));
  const double progress =
      std::clamp(static_cast<double>(step - warmup_steps) / decay_steps, 0.0, 1.0);
  const double floor = peak * final_lr_fraction;
  return floor + (peak - floor) * 0.5 * (1.0 + std::cos(M_PI * progress));
}

std::vector<double> GroupLearningRates(double lr, int64_t step, int64_t head_warmup_steps,
                                       const std::vector<double>& scales,
                                       const std::vector<bool>& heads) {
  // A head-only warm-up holds every other group still (lr 0).
  const bool head_only = step < head_warmup_steps;
  std::vector<double> rates;
  rates.reserve(scales.size());
  for (size_t g = 0; g < scales.size(); ++g) {
    rates.push_back(head_only && !heads[g] ? 0.0 : lr * scales[g]);
  }
  return rates;
}

}  // namespace tessera::trainer
