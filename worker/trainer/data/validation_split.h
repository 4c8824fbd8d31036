// The validation split of a dataset that has none of its own: a fraction of
// the training set held out, stratified by class and disjoint from what
// trains (trainer.val_fraction, docs/search.md).
//
// Which images are held out depends only on the training set as loaded, the
// fraction and the split's own seed (trainer.val_seed), never on the run's
// seed, the rank, the world size or a resume: every trial of a search is
// scored on the same images. Within each class, the held-out images are the
// first round(fraction x class count) of a seeded permutation of that class's
// images; both parts keep the loaded order.
//
//   ASSIGN_OR_RETURN(HeldOut parts, HoldOutValidation(full, 0.1, 0));
//   // parts.train trains, parts.val scores.
//
// Thread-safety: free functions without shared state.
#ifndef TESSERA_WORKER_TRAINER_DATA_VALIDATION_SPLIT_H_
#define TESSERA_WORKER_TRAINER_DATA_VALIDATION_SPLIT_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/trainer/data/image_dataset.h"

namespace tessera::trainer {

struct HeldOut {
  ImageDataset train;
  ImageDataset val;
};

// The indices of `labels` held out as validation, ascending. InvalidArgument
// unless 0 < fraction < 1, or when a label is outside [0, num_classes), or when
// the fraction leaves no image to train on or none to validate on.
absl::StatusOr<std::vector<int64_t>> ValidationIndices(const std::vector<int64_t>& labels,
                                                       int num_classes, double fraction,
                                                       uint64_t seed);

// Splits `full` into the images that train and those held out.
absl::StatusOr<HeldOut> HoldOutValidation(const ImageDataset& full, double fraction,
                                          uint64_t seed);

}  // namespace tessera::trainer

#endif  // TESSERA_WORKER_TRAINER_DATA_VALIDATION_SPLIT_H_
