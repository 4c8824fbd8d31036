// Where a run stands in its data, independent of the world size, and how its
// micro-batches map onto the epochs' global sample orders.
//
// Each epoch has one global order of its samples (DistributedSampler::
// EpochOrder), the same on every rank. A micro-batch of a run with W ranks of
// B samples takes the next W * B positions of that order: rank r takes the
// positions p + r, p + r + W, ..., p + r + (B - 1) W, where p is the micro-
// batch's first position. (At the same world size this is exactly the strided
// shard of DistributedSampler::EpochIndices.) The position is therefore a
// count of samples consumed by all ranks together: a run stopped at position
// p of epoch e resumes there at any world size, and visits the samples the
// uninterrupted run would have visited next, in the same global order.
//
// An optimizer step takes `accum` micro-batches and never straddles two
// epochs: an epoch ends when fewer than W * B * accum of its samples are left,
// and those are dropped (every rank gets the same number of batches). Resumed
// at another world size, the epoch it resumes in has as many steps as its
// remaining samples allow; later epochs have the full count.
//
// Plain values; thread-safe.
#ifndef TESSERA_WORKER_TRAINER_DATA_DATA_POSITION_H_
#define TESSERA_WORKER_TRAINER_DATA_DATA_POSITION_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"

namespace tessera::trainer {

// `sample` samples of epoch `epoch` are consumed, all ranks together.
struct DataPosition {
  int64_t epoch = 0;
  int64_t sample = 0;
  friend bool operator==(const DataPosition&, const DataPosition&) = default;
};

struct EpochPlanOptions {
  int64_t epoch_size = 0;  // samples per epoch, all ranks together
  int world_size = 1;
  int64_t batch_size = 1;  // per rank, per micro-batch
  int64_t accum = 1;       // micro-batches per optimizer step
};

class EpochPlan {
 public:
  // FailedPrecondition when an epoch holds less than one optimizer step (the
  // message says how many samples a step needs); InvalidArgument for
  // non-positive sizes.
  static absl::StatusOr<EpochPlan> Create(const EpochPlanOptions& options);

  // Samples one micro-batch takes, all ranks together: W * B.
  int64_t samples_per_batch() const { return per_batch_; }
  // Optimizer steps in a whole epoch.
  int64_t steps_per_epoch() const { return steps_per_epoch_; }
  // Steps left in the epoch from `sample` (the rest is dropped).
  int64_t StepsLeftInEpoch(int64_t sample) const;
  // Steps from `from` to the end of epoch `epochs - 1` (0 when past it).
  int64_t StepsUntilEpoch(const DataPosition& from, int64_t epochs) const;

  // The position of the micro-batch `k` micro-batches after `from` (a step
  // boundary). When k is a whole number of steps the result is a step boundary
  // too, and one with too few samples left for a step is the next epoch's
  // start.
  DataPosition Advance(const DataPosition& from, int64_t k) const;
  // A step boundary with too few samples left for a step, moved to the next
  // epoch's start; others unchanged.
  DataPosition AtStepBoundary(const DataPosition& at) const { return Normalise(at); }
  // Whether the step that ends at `position` closed an epoch (a new one starts
  // there: its sample is 0 and it is not the run's start).
  static bool StartsEpoch(const DataPosition& position) { return position.sample == 0; }

  // Rank `rank`'s samples of the micro-batch at `at`, from its epoch's global
  // order `order`: order[at.sample + rank + j * W] for j in [0, B).
  std::vector<int64_t> RankBatch(const std::vector<int64_t>& order,
                                 const DataPosition& at, int rank) const;

 private:
  explicit EpochPlan(const EpochPlanOptions& options);
  // Moves a position with less than a step left to the next epoch.
  DataPosition Normalise(DataPosition at) const;

  EpochPlanOptions options_;
  int64_t per_batch_;
  int64_t per_step_;
  int64_t steps_per_epoch_;
};

}  // namespace tessera::trainer

#endif  // TESSERA_WORKER_TRAINER_DATA_DATA_POSITION_H_
