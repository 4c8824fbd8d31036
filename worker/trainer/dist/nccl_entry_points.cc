// The entry points of nccl_communicator.h that use the real CUDA runtime and
// NCCL (gpu/gpu_api.h's CudaNcclApi); built only where those are
// (tessera_trainer_nccl).
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/status_macros.h"
#include "worker/trainer/dist/nccl_communicator.h"
#include "worker/trainer/gpu/gpu_api.h"

namespace tessera::trainer {

absl::StatusOr<std::string> NewNcclUniqueId() { return NewNcclUniqueId(CudaNcclApi()); }

int VisibleCudaDevices() { return VisibleCudaDevices(CudaNcclApi()); }

absl::StatusOr<NcclVersions> GetNcclVersions() {
  ASSIGN_OR_RETURN(NcclVersions versions, GetNcclVersions(CudaNcclApi()));
  versions.compiled = CompiledNcclVersion();
  return versions;
}

absl::StatusOr<std::unique_ptr<NcclComm>> NcclComm::Create(const std::string& unique_id,
                                                           int rank, int world_size,
                                                           int device,
                                                           const NcclOptions& options) {
  return Create(CudaNcclApi(), unique_id, rank, world_size, device, options);
}

}  // namespace tessera::trainer
