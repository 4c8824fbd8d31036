#include "worker/trainer/model/loss_scaler.h"

#include <algorithm>

namespace tessera::trainer {

LossScaler::LossScaler(const LossScalerOptions& options) : options_(options) {
  state_.scale = options_.initial_scale;
}

bool LossScaler::Update(bool found_non_finite) {
  if (found_non_finite) {
    state_.scale = std::max(options_.min_scale, state_.scale * options_.backoff_factor);
    state_.good_steps = 0;
    return false;
  }
  if (++state_.good_steps >= options_.growth_interval) {
    state_.scale *= options_.growth_factor;
    state_.good_steps = 0;
  }
  return true;
}

}  // namespace tessera::trainer
