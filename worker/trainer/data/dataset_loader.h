// LoadImageDataset: the in-memory datasets by name (Fashion-MNIST's IDX files,
// CIFAR's binary batches, generated images), each read by its own reader. Kept
// apart from image_dataset.h, the interface the readers implement, so that the
// interface does not include its implementations.
//
// Thread-safety: free functions without shared state.
#ifndef TESSERA_WORKER_TRAINER_DATA_DATASET_LOADER_H_
#define TESSERA_WORKER_TRAINER_DATA_DATASET_LOADER_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "worker/trainer/data/image_dataset.h"

namespace tessera::trainer {

struct DatasetRequest {
  std::string name;      // "fashion-mnist" | "cifar10" | "cifar100" | "synthetic"
  std::string data_dir;  // where file-backed datasets live
  Split split = Split::kTrain;
  int64_t limit = 0;  // keep only the first N images; 0: all
  int64_t seed = 0;   // for generated datasets
};

// Loads a split. InvalidArgument for an unknown name, NotFound for missing files,
// DataLoss for malformed files (see idx_reader.h, cifar_reader.h).
absl::StatusOr<ImageDataset> LoadImageDataset(const DatasetRequest& request);

}  // namespace tessera::trainer

#endif  // TESSERA_WORKER_TRAINER_DATA_DATASET_LOADER_H_
