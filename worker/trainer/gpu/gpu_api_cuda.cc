// CudaNcclApi(): gpu_api.h forwarded to the CUDA runtime and NCCL
// (dist/nccl_entry_points.cc gives them to the communicator).
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstring>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/trainer/gpu/gpu_api.h"

#if NCCL_VERSION_CODE < NCCL_VERSION(2, 14, 0)
#error "the NCCL backend needs NCCL 2.14 or newer (non-blocking init and abort)"
#endif

namespace tessera::trainer {
namespace {

static_assert(kCudaSuccess == cudaSuccess);
static_assert(kCudaErrorNotReady == cudaErrorNotReady);
static_assert(kNcclSuccess == ncclSuccess);
static_assert(kNcclSystemError == ncclSystemError);
static_assert(kNcclInvalidArgument == ncclInvalidArgument);
static_assert(kNcclInvalidUsage == ncclInvalidUsage);
static_assert(kNcclRemoteError == ncclRemoteError);
static_assert(kNcclInProgress == ncclInProgress);
static_assert(sizeof(ncclUniqueId) == kNcclUniqueIdBytes);

size_t BytesPerElement(NcclDataType type) {
  switch (type) {
    case NcclDataType::kFloat64:
    case NcclDataType::kInt64:
      return 8;
    case NcclDataType::kFloat16:
    case NcclDataType::kBFloat16:
      return 2;
    case NcclDataType::kFloat32:
      break;
  }
  return 4;
}

// The address of element `index` of a buffer of `type`.
void* ElementAt(void* buffer, size_t index, NcclDataType type) {
  return static_cast<char*>(buffer) + index * BytesPerElement(type);
}

ncclDataType_t ToNccl(NcclDataType type) {
  switch (type) {
    case NcclDataType::kFloat32:
      return ncclFloat32;
    case NcclDataType::kFloat64:
      return ncclFloat64;
    case NcclDataType::kFloat16:
      return ncclFloat16;
    case NcclDataType::kBFloat16:
      return ncclBfloat16;
    case NcclDataType::kInt64:
      return ncclInt64;
  }
  return ncclFloat32;
}

// cuDevicePrimaryCtxGetState, looked up through the runtime so that no libcuda
// is linked; null when the driver does not offer it.
using PrimaryCtxGetState = CUresult (*)(CUdevice, unsigned int*, int*);
PrimaryCtxGetState LookUpPrimaryCtxGetState() {
  void* function = nullptr;
#if CUDART_VERSION >= 12000
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
#if CUDART_VERSION >= 12050
  const cudaError_t error = cudaGetDriverEntryPointByVersion(
      "cuDevicePrimaryCtxGetState", &function, 12000, cudaEnableDefault, &found);
#else
  const cudaError_t error = cudaGetDriverEntryPoint("cuDevicePrimaryCtxGetState",
                                                    &function, cudaEnableDefault, &found);
#endif
  const bool ok = error == cudaSuccess && found == cudaDriverEntryPointSuccess;
#else
  const bool ok = cudaGetDriverEntryPoint("cuDevicePrimaryCtxGetState", &function,
                                          cudaEnableDefault) == cudaSuccess;
#endif
  if (!ok || function == nullptr) {
    cudaGetLastError();
    return nullptr;
  }
  return reinterpret_cast<PrimaryCtxGetState>(function);
}

class RealGpuApi final : public GpuApi {
 public:
  int DeviceCount(int* count) override { return cudaGetDeviceCount(count); }
  int GetDevice(int* device) override { return cudaGetDevice(device); }
  int SetDevice(int device) override { return cudaSetDevice(device); }
  bool HasActiveContext(int device) override {
    static const PrimaryCtxGetState get_state = LookUpPrimaryCtxGetState();
    if (get_state == nullptr) return false;
    unsigned int flags = 0;
    int active = 0;
    // The runtime's and the driver's device ordinals agree (both honour
    // CUDA_VISIBLE_DEVICES).
    return get_state(static_cast<CUdevice>(device), &flags, &active) == CUDA_SUCCESS &&
           active != 0;
  }
  int ClearLastError() override { return cudaGetLastError(); }
  int StreamCreate(GpuStream* stream) override {
    cudaStream_t s = nullptr;
    const cudaError_t error = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    *stream = s;
    return error;
  }
  int StreamDestroy(GpuStream stream) override {
    return cudaStreamDestroy(static_cast<cudaStream_t>(stream));
  }
  int EventCreate(GpuEvent* event) override {
    cudaEvent_t e = nullptr;
    const cudaError_t error = cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
    *event = e;
    return error;
  }
  int EventDestroy(GpuEvent event) override {
    return cudaEventDestroy(static_cast<cudaEvent_t>(event));
  }
  int EventRecord(GpuEvent event, GpuStream stream) override {
    return cudaEventRecord(static_cast<cudaEvent_t>(event),
                           static_cast<cudaStream_t>(stream));
  }
  int EventQuery(GpuEvent event) override {
    return cudaEventQuery(static_cast<cudaEvent_t>(event));
  }
  int StreamWaitEvent(GpuStream stream, GpuEvent event) override {
    return cudaStreamWaitEvent(static_cast<cudaStream_t>(stream),
                               static_cast<cudaEvent_t>(event), 0);
  }
  int Malloc(void** pointer, size_t bytes) override { return cudaMalloc(pointer, bytes); }
  int Free(void* pointer) override { return cudaFree(pointer); }
  int MemsetAsync(void* pointer, int value, size_t bytes, GpuStream stream) override {
    return cudaMemsetAsync(pointer, value, bytes, static_cast<cudaStream_t>(stream));
  }
  std::string CudaErrorText(int code) override {
    const auto error = static_cast<cudaError_t>(code);
    return absl::StrCat(cudaGetErrorName(error), " (", cudaGetErrorString(error), ")");
  }

  int NcclVersion(int* version) override { return ncclGetVersion(version); }
  int NcclUniqueId(std::string* id) override {
    ncclUniqueId unique;
    const ncclResult_t result = ncclGetUniqueId(&unique);
    if (result == ncclSuccess) id->assign(unique.internal, sizeof(unique.internal));
    return result;
  }
  int NcclInit(NcclHandle* comm, int world_size, const std::string& id,
               int rank) override {
    ncclUniqueId unique;
    std::memcpy(unique.internal, id.data(), sizeof(unique.internal));
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclComm_t c = nullptr;
    const ncclResult_t result =
        ncclCommInitRankConfig(&c, world_size, unique, rank, &config);
    *comm = c;
    return result;
  }
  int NcclAsyncError(NcclHandle comm, int* state) override {
    ncclResult_t s = ncclSuccess;
    const ncclResult_t result = ncclCommGetAsyncError(static_cast<ncclComm_t>(comm), &s);
    *state = s;
    return result;
  }
  int NcclAbort(NcclHandle comm) override {
    return ncclCommAbort(static_cast<ncclComm_t>(comm));
  }
  int NcclFinalize(NcclHandle comm) override {
    return ncclCommFinalize(static_cast<ncclComm_t>(comm));
  }
  int NcclDestroy(NcclHandle comm) override {
    return ncclCommDestroy(static_cast<ncclComm_t>(comm));
  }
  int NcclAllReduceSum(void* buffer, size_t count, NcclDataType type, NcclHandle comm,
                       GpuStream stream) override {
    return ncclAllReduce(buffer, buffer, count, ToNccl(type), ncclSum,
                         static_cast<ncclComm_t>(comm),
                         static_cast<cudaStream_t>(stream));
  }
  int NcclBroadcast(void* buffer, size_t count, NcclDataType type, int root,
                    NcclHandle comm, GpuStream stream) override {
    return ncclBroadcast(buffer, buffer, count, ToNccl(type), root,
                         static_cast<ncclComm_t>(comm),
                         static_cast<cudaStream_t>(stream));
  }
  int NcclReduceScatterSum(void* buffer, size_t count, NcclDataType type, int rank,
                           NcclHandle comm, GpuStream stream) override {
    return ncclReduceScatter(buffer, ElementAt(buffer, count * rank, type), count,
                             ToNccl(type), ncclSum, static_cast<ncclComm_t>(comm),
                             static_cast<cudaStream_t>(stream));
  }
  int NcclAllGather(void* buffer, size_t count, NcclDataType type, int rank,
                    NcclHandle comm, GpuStream stream) override {
    return ncclAllGather(ElementAt(buffer, count * rank, type), buffer, count,
                         ToNccl(type), static_cast<ncclComm_t>(comm),
                         static_cast<cudaStream_t>(stream));
  }
  std::string NcclErrorText(int code) override {
    return ncclGetErrorString(static_cast<ncclResult_t>(code));
  }
};

}  // namespace

GpuApi& CudaNcclApi() {
  static RealGpuApi* const api = new RealGpuApi();  // never destroyed
  return *api;
}

int CompiledNcclVersion() { return NCCL_VERSION_CODE; }

}  // namespace tessera::trainer
