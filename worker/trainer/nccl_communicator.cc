#include "worker/trainer/nccl_communicator.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace tessera::trainer {
namespace {

static_assert(sizeof(ncclUniqueId) == kNcclUniqueIdBytes);

absl::Status CudaStatus(cudaError_t error, const char* what) {
  if (error == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": CUDA error ", static_cast<int>(error),
                                          " (", cudaGetErrorString(error), ")"));
}

absl::Status NcclStatus(ncclResult_t result, const char* what) {
  if (result == ncclSuccess) return absl::OkStatus();
  const std::string text = absl::StrCat(what, ": NCCL error ", static_cast<int>(result),
                                        " (", ncclGetErrorString(result), ")");
  switch (result) {
    case ncclInvalidArgument:
    case ncclInvalidUsage:
      return absl::InvalidArgumentError(text);
    case ncclRemoteError:
    case ncclSystemError:
      return absl::UnavailableError(text);
    default:
      return absl::InternalError(text);
  }
}

absl::StatusOr<ncclDataType_t> ToNccl(NcclDataType type) {
  switch (type) {
    case NcclDataType::kFloat32:
      return ncclFloat32;
    case NcclDataType::kFloat64:
      return ncclFloat64;
    case NcclDataType::kFloat16:
      return ncclFloat16;
    case NcclDataType::kInt64:
      return ncclInt64;
    case NcclDataType::kBFloat16:
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 10, 0)
      return ncclBfloat16;
#else
      return absl::UnimplementedError("bfloat16 needs NCCL 2.10 or newer");
#endif
  }
  return absl::InvalidArgumentError("unknown NCCL data type");
}

// Makes `device` current for its lifetime and restores the previous device.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
    if (previous_ != device) cudaSetDevice(device);
  }
  ~DeviceGuard() {
    if (previous_ >= 0) cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

}  // namespace

// Shared by the communicator and its pending operations, which may poll it for
// asynchronous errors and abort it.
struct NcclCommState {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;  // the communicator's own stream
  float* scratch = nullptr;       // one device float for Barrier
  int device = 0;
  NcclOptions options;
  std::atomic<bool> aborted{false};

  ~NcclCommState() {
    DeviceGuard guard(device);
    if (comm != nullptr) {
      // After Abort the communicator is already torn down.
      if (!aborted.load()) ncclCommDestroy(comm);
    }
    if (scratch != nullptr) cudaFree(scratch);
    if (stream != nullptr) cudaStreamDestroy(stream);
  }

  absl::Status CheckUsable() const {
    if (aborted.load()) {
      return absl::FailedPreconditionError(
          "the NCCL communicator was aborted after an earlier error or timeout");
    }
    return absl::OkStatus();
  }

  void Abort() {
    if (!aborted.exchange(true) && comm != nullptr) ncclCommAbort(comm);
  }

  // Polls `event` until it completes, NCCL reports an asynchronous error, or the
  // timeout passes; aborts the communicator in the last two cases.
  absl::Status WaitForEvent(cudaEvent_t event) {
    const absl::Time deadline = absl::Now() + options.timeout;
    absl::Duration pause = absl::Microseconds(20);
    while (true) {
      const cudaError_t query = cudaEventQuery(event);
      if (query == cudaSuccess) return absl::OkStatus();
      if (query != cudaErrorNotReady) return CudaStatus(query, "waiting for NCCL work");
      ncclResult_t async_error = ncclSuccess;
      const ncclResult_t got = ncclCommGetAsyncError(comm, &async_error);
      if (got != ncclSuccess) return NcclStatus(got, "ncclCommGetAsyncError");
      if (async_error != ncclSuccess && async_error != ncclInProgress) {
        Abort();
        return NcclStatus(async_error, "NCCL collective");
      }
      if (absl::Now() >= deadline) {
        Abort();
        return absl::DeadlineExceededError(absl::StrCat(
            "NCCL collective did not finish within ",
            absl::FormatDuration(options.timeout), "; communicator aborted"));
      }
      absl::SleepFor(pause);
      pause = std::min(pause * 2, absl::Milliseconds(1));
    }
  }
};

namespace {

class PendingOp final : public NcclPending {
 public:
  PendingOp(std::shared_ptr<NcclCommState> state, cudaEvent_t done)
      : state_(std::move(state)), done_(done) {}
  ~PendingOp() override {
    DeviceGuard guard(state_->device);
    cudaEventDestroy(done_);
  }

  absl::Status WaitOn(cudaStream_t stream) override {
    DeviceGuard guard(state_->device);
    return CudaStatus(cudaStreamWaitEvent(stream, done_, 0),
                      "ordering a stream after an NCCL collective");
  }

  absl::Status Synchronize() override {
    DeviceGuard guard(state_->device);
    return state_->WaitForEvent(done_);
  }

 private:
  std::shared_ptr<NcclCommState> state_;
  cudaEvent_t done_;
};

}  // namespace

absl::StatusOr<std::string> NewNcclUniqueId() {
  ncclUniqueId id;
  const absl::Status status = NcclStatus(ncclGetUniqueId(&id), "ncclGetUniqueId");
  if (!status.ok()) return status;
  return std::string(id.internal, sizeof(id.internal));
}

int VisibleCudaDevices() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver/device" error
    return 0;
  }
  return count;
}

NcclComm::NcclComm(int rank, int world_size, int device,
                   std::shared_ptr<NcclCommState> state)
    : rank_(rank), world_size_(world_size), device_(device), state_(std::move(state)) {}

NcclComm::~NcclComm() = default;

absl::StatusOr<std::unique_ptr<NcclComm>> NcclComm::Create(const std::string& unique_id,
                                                           int rank, int world_size,
                                                           int device,
                                                           const NcclOptions& options) {
  if (unique_id.size() != kNcclUniqueIdBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "an NCCL unique id has ", kNcclUniqueIdBytes, " bytes, got ", unique_id.size()));
  }
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", rank, " is not in [0, world size ", world_size, ")"));
  }
  const int devices = VisibleCudaDevices();
  if (device < 0 || device >= devices) {
    return absl::FailedPreconditionError(absl::StrCat(
        "CUDA device ", device, " is not visible (", devices, " visible devices)"));
  }
  DeviceGuard guard(device);
  auto state = std::make_shared<NcclCommState>();
  state->device = device;
  state->options = options;
  absl::Status status =
      CudaStatus(cudaStreamCreateWithFlags(&state->stream, cudaStreamNonBlocking),
                 "creating the NCCL stream");
  if (!status.ok()) return status;
  status =
      CudaStatus(cudaMalloc(reinterpret_cast<void**>(&state->scratch), sizeof(float)),
                 "allocating the barrier buffer");
  if (!status.ok()) return status;
  ncclUniqueId id;
  std::memcpy(id.internal, unique_id.data(), sizeof(id.internal));
  status = NcclStatus(ncclCommInitRank(&state->comm, world_size, id, rank),
                      "ncclCommInitRank");
  if (!status.ok()) return status;
  return std::unique_ptr<NcclComm>(
      new NcclComm(rank, world_size, device, std::move(state)));
}

absl::StatusOr<std::unique_ptr<NcclPending>> NcclComm::AllReduceSumAsync(
    void* buffer, size_t count, NcclDataType type, cudaStream_t stream) {
  absl::Status status = state_->CheckUsable();
  if (!status.ok()) return status;
  absl::StatusOr<ncclDataType_t> nccl_type = ToNccl(type);
  if (!nccl_type.ok()) return nccl_type.status();
  DeviceGuard guard(device_);
  cudaEvent_t ready = nullptr;
  cudaEvent_t done = nullptr;
  status = CudaStatus(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming),
                      "creating an event");
  if (!status.ok()) return status;
  status = CudaStatus(cudaEventCreateWithFlags(&done, cudaEventDisableTiming),
                      "creating an event");
  if (!status.ok()) {
    cudaEventDestroy(ready);
    return status;
  }
  // The reduction waits for the producer's queued work, then runs beside it.
  status = CudaStatus(cudaEventRecord(ready, stream), "recording the ready event");
  if (status.ok()) {
    status = CudaStatus(cudaStreamWaitEvent(state_->stream, ready, 0),
                        "ordering the NCCL stream after the producer");
  }
  if (status.ok()) {
    status = NcclStatus(ncclAllReduce(buffer, buffer, count, *nccl_type, ncclSum,
                                      state_->comm, state_->stream),
                        "ncclAllReduce");
  }
  if (status.ok()) {
    status =
        CudaStatus(cudaEventRecord(done, state_->stream), "recording the done event");
  }
  cudaEventDestroy(ready);  // released once the recorded work completes
  if (!status.ok()) {
    cudaEventDestroy(done);
    return status;
  }
  return std::unique_ptr<NcclPending>(new PendingOp(state_, done));
}

absl::Status NcclComm::AllReduceSum(void* buffer, size_t count, NcclDataType type,
                                    cudaStream_t stream) {
  absl::StatusOr<std::unique_ptr<NcclPending>> pending =
      AllReduceSumAsync(buffer, count, type, stream);
  if (!pending.ok()) return pending.status();
  return (*pending)->WaitOn(stream);
}

absl::Status NcclComm::Broadcast(void* buffer, size_t count, NcclDataType type, int root,
                                 cudaStream_t stream) {
  absl::Status status = state_->CheckUsable();
  if (!status.ok()) return status;
  if (root < 0 || root >= world_size_) {
    return absl::InvalidArgumentError(
        absl::StrCat("broadcast root ", root, " is not in [0, ", world_size_, ")"));
  }
  absl::StatusOr<ncclDataType_t> nccl_type = ToNccl(type);
  if (!nccl_type.ok()) return nccl_type.status();
  DeviceGuard guard(device_);
  // Broadcasts are rare (start-up); run them on the caller's stream.
  return NcclStatus(
      ncclBroadcast(buffer, buffer, count, *nccl_type, root, state_->comm, stream),
      "ncclBroadcast");
}

absl::Status NcclComm::Barrier() {
  absl::Status status = state_->CheckUsable();
  if (!status.ok()) return status;
  DeviceGuard guard(device_);
  status = CudaStatus(cudaMemsetAsync(state_->scratch, 0, sizeof(float), state_->stream),
                      "clearing the barrier buffer");
  if (!status.ok()) return status;
  absl::StatusOr<std::unique_ptr<NcclPending>> pending =
      AllReduceSumAsync(state_->scratch, 1, NcclDataType::kFloat32, state_->stream);
  if (!pending.ok()) return pending.status();
  return (*pending)->Synchronize();
}

}  // namespace tessera::trainer
