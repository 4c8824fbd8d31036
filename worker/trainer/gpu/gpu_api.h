// The CUDA runtime and NCCL calls that the NCCL communicator
// (nccl_communicator.h) makes, behind a thin interface. The real one,
// CudaNcclApi() (gpu_api_cuda.cc), forwards each call to the libraries and is
// built where they are found (TESSERA_HAVE_NCCL); tests pass a fake, so that
// the communicator's failure paths (an enqueue that never completes, an
// asynchronous NCCL error, a sticky CUDA error, a finalize that waits on a
// dead peer) run in CI on a machine without a GPU.
//
// Handles are opaque pointers (cudaStream_t, cudaEvent_t, ncclComm_t) and
// results are the libraries' own codes, so the real implementation is a
// one-line forward per call. No CUDA or NCCL header is needed to use this one.
//
//   GpuApi& api = CudaNcclApi();
//   GpuStream stream = nullptr;
//   if (api.StreamCreate(&stream) != kCudaSuccess) ...
//
// Thread-safety: as the libraries' (the communicator's collective-timeout thread queries
// events while its owner issues collectives).
#ifndef TESSERA_WORKER_TRAINER_GPU_GPU_API_H_
#define TESSERA_WORKER_TRAINER_GPU_GPU_API_H_

#include <cstddef>
#include <string>

namespace tessera::trainer {

using GpuStream = void*;   // cudaStream_t
using GpuEvent = void*;    // cudaEvent_t
using NcclHandle = void*;  // ncclComm_t

// Element types the NCCL backend reduces.
enum class NcclDataType { kFloat32, kFloat64, kFloat16, kBFloat16, kInt64 };

// The codes the communicator tells apart (gpu_api_cuda.cc checks that they
// are the libraries' values).
inline constexpr int kCudaSuccess = 0;
inline constexpr int kCudaErrorNotReady = 600;  // cudaErrorNotReady
inline constexpr int kNcclSuccess = 0;
inline constexpr int kNcclSystemError = 2;      // ncclSystemError
inline constexpr int kNcclInvalidArgument = 4;  // ncclInvalidArgument
inline constexpr int kNcclInvalidUsage = 5;     // ncclInvalidUsage
inline constexpr int kNcclRemoteError = 6;      // ncclRemoteError
inline constexpr int kNcclInProgress = 7;       // ncclInProgress

// Size of an NCCL unique id (NCCL_UNIQUE_ID_BYTES).
inline constexpr size_t kNcclUniqueIdBytes = 128;

class GpuApi {
 public:
  virtual ~GpuApi() = default;

  // CUDA runtime; each returns a cudaError_t.
  virtual int DeviceCount(int* count) = 0;
  virtual int GetDevice(int* device) = 0;
  virtual int SetDevice(int device) = 0;
  // Whether `device` has an active primary context (false when unknown).
  virtual bool HasActiveContext(int device) = 0;
  // Clears and returns the last error (cudaGetLastError).
  virtual int ClearLastError() = 0;
  // A stream that does not synchronise with the legacy default stream.
  virtual int StreamCreate(GpuStream* stream) = 0;
  virtual int StreamDestroy(GpuStream stream) = 0;
  // An event without timing.
  virtual int EventCreate(GpuEvent* event) = 0;
  virtual int EventDestroy(GpuEvent event) = 0;
  virtual int EventRecord(GpuEvent event, GpuStream stream) = 0;
  // kCudaSuccess once the recorded work completed, kCudaErrorNotReady before.
  virtual int EventQuery(GpuEvent event) = 0;
  virtual int StreamWaitEvent(GpuStream stream, GpuEvent event) = 0;
  virtual int Malloc(void** pointer, size_t bytes) = 0;
  virtual int Free(void* pointer) = 0;
  virtual int MemsetAsync(void* pointer, int value, size_t bytes, GpuStream stream) = 0;
  // "cudaErrorIllegalAddress (an illegal memory access was encountered)".
  virtual std::string CudaErrorText(int code) = 0;

  // NCCL; each returns an ncclResult_t.
  virtual int NcclVersion(int* version) = 0;
  // kNcclUniqueIdBytes raw bytes.
  virtual int NcclUniqueId(std::string* id) = 0;
  // ncclCommInitRankConfig with blocking = 0: returns kNcclInProgress while
  // joining goes on; NcclAsyncError says when it is done.
  virtual int NcclInit(NcclHandle* comm, int world_size, const std::string& id,
                       int rank) = 0;
  virtual int NcclAsyncError(NcclHandle comm, int* state) = 0;
  virtual int NcclAbort(NcclHandle comm) = 0;
  virtual int NcclFinalize(NcclHandle comm) = 0;
  virtual int NcclDestroy(NcclHandle comm) = 0;
  // In place, enqueued on `stream`.
  virtual int NcclAllReduceSum(void* buffer, size_t count, NcclDataType type,
                               NcclHandle comm, GpuStream stream) = 0;
  virtual int NcclBroadcast(void* buffer, size_t count, NcclDataType type, int root,
                            NcclHandle comm, GpuStream stream) = 0;
  // In place over a buffer of world size x `count` elements: rank r's part
  // (elements r*count ...) ends up holding that part's sum over the ranks
  // (ncclReduceScatter), or every rank's part is gathered from its owner
  // (ncclAllGather). Enqueued on `stream`.
  virtual int NcclReduceScatterSum(void* buffer, size_t count, NcclDataType type,
                                   int rank, NcclHandle comm, GpuStream stream) = 0;
  virtual int NcclAllGather(void* buffer, size_t count, NcclDataType type, int rank,
                            NcclHandle comm, GpuStream stream) = 0;
  // "remote process exited or there was a network error".
  virtual std::string NcclErrorText(int code) = 0;
};

// The CUDA runtime and NCCL themselves. Defined only where both are built
// (TESSERA_HAVE_NCCL); the same object for the whole process.
GpuApi& CudaNcclApi();

// NCCL_VERSION_CODE of the nccl.h CudaNcclApi was compiled against.
int CompiledNcclVersion();

}  // namespace tessera::trainer

#endif  // TESSERA_WORKER_TRAINER_GPU_GPU_API_H_
