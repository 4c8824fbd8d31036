#include "worker/trainer/data/data_position.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace tessera::trainer {

absl::StatusOr<EpochPlan> EpochPlan::Create(const EpochPlanOptions& options) {
  if (options.epoch_size < 0 || options.world_size < 1 || options.batch_size < 1 ||
      options.accum < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("epoch plan: epoch size ", options.epoch_size, ", world size ",
                     options.world_size, ", batch size ", options.batch_size, " and ",
                     options.accum, " micro-batches per step must be positive"));
  }
  EpochPlan plan(options);
  if (plan.steps_per_epoch_ == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "an epoch of ", options.epoch_size, " training samples is less than one step: ",
        options.world_size, " ranks x ", options.accum, " micro-batches x ",
        options.batch_size, " samples = ", plan.per_step_, " samples per step"));
  }
  return plan;
}

EpochPlan::EpochPlan(const EpochPlanOptions& options)
    : options_(options),
      per_batch_(options.world_size * options.batch_size),
      per_step_(per_batch_ * options.accum),
      steps_per_epoch_(options.epoch_size / per_step_) {}

int64_t EpochPlan::StepsLeftInEpoch(int64_t sample) const {
  return std::max<int64_t>(0, options_.epoch_size - sample) / per_step_;
}

int64_t EpochPlan::StepsUntilEpoch(const DataPosition& from, int64_t epochs) const {
  const DataPosition at = Normalise(from);
  if (at.epoch >= epochs) return 0;
  return StepsLeftInEpoch(at.sample) + (epochs - at.epoch - 1) * steps_per_epoch_;
}

DataPosition EpochPlan::Normalise(DataPosition at) const {
  if (StepsLeftInEpoch(at.sample) == 0) return DataPosition{at.epoch + 1, 0};
  return at;
}

DataPosition EpochPlan::Advance(const DataPosition& from, int64_t k) const {
  DataPosition at = Normalise(from);
  // Whole steps left in this epoch, then whole epochs.
  const int64_t left = StepsLeftInEpoch(at.sample) * options_.accum;
  if (k < left) return DataPosition{at.epoch, at.sample + k * per_batch_};
  k -= left;
  const int64_t per_epoch = steps_per_epoch_ * options_.accum;
  return DataPosition{at.epoch + 1 + k / per_epoch, (k % per_epoch) * per_batch_};
}

std::vector<int64_t> EpochPlan::RankBatch(const std::vector<int64_t>& order,
                                          const DataPosition& at, int rank) const {
  std::vector<int64_t> batch;
  batch.reserve(static_cast<size_t>(options_.batch_size));
  for (int64_t j = 0; j < options_.batch_size; ++j) {
    batch.push_back(
        order.at(static_cast<size_t>(at.sample + rank + j * options_.world_size)));
  }
  return batch;
}

}  // namespace tessera::trainer
