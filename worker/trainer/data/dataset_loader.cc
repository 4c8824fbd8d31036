#include "worker/trainer/data/dataset_loader.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "worker/trainer/data/cifar_reader.h"
#include "worker/trainer/data/idx_reader.h"
#include "worker/trainer/data/synthetic_dataset.h"

namespace tessera::trainer {

absl::StatusOr<ImageDataset> LoadImageDataset(const DatasetRequest& request) {
  if (IsEncodedImageDataset(request.name)) {
    return absl::InvalidArgumentError(absl::StrCat(
        request.name, " data is decoded as it is read, not loaded whole (image_data.h)"));
  }
  if (request.name == "fashion-mnist") {
    return LoadFashionMnist(request.data_dir, request.split, request.limit);
  }
  if (request.name == "cifar10") {
    return LoadCifar(CifarVariant::kCifar10, request.data_dir, request.split,
                     request.limit);
  }
  if (request.name == "cifar100") {
    return LoadCifar(CifarVariant::kCifar100, request.data_dir, request.split,
                     request.limit);
  }
  if (request.name == "synthetic") {
    SyntheticDatasetOptions options;
    options.size = request.limit;
    options.seed = request.seed;
    options.split = request.split;
    return MakeSyntheticDataset(options);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown dataset \"", request.name,
                   "\"; known datasets: ", absl::StrJoin(KnownDatasets(), ", ")));
}

}  // namespace tessera::trainer
