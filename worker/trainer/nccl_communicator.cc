#include "worker/trainer/nccl_communicator.h"

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "worker/trainer/collective_watchdog.h"
#include "worker/trainer/pending_collective_tracker.h"

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

// Whether `device` has an active primary context. False when unknown.
bool HasActiveContext(int device) {
  static const PrimaryCtxGetState get_state = LookUpPrimaryCtxGetState();
  if (get_state == nullptr) return false;
  unsigned int flags = 0;
  int active = 0;
  // The runtime's and the driver's device ordinals agree (both honour
  // CUDA_VISIBLE_DEVICES).
  return get_state(static_cast<CUdevice>(device), &flags, &active) == CUDA_SUCCESS &&
         active != 0;
}

// Makes `device` current for its lifetime, then the previous device again, but
// only if that one has a context: before anything is made current
// cudaGetDevice reports device 0, and making it current would create a
// context (hundreds of MiB) on a GPU this rank never uses.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    int previous = -1;
    if (cudaGetDevice(&previous) != cudaSuccess) {
      cudaGetLastError();
      return;
    }
    if (previous == device) return;
    if (HasActiveContext(previous)) previous_ = previous;
    cudaSetDevice(device);
  }
  ~DeviceGuard() {
    if (previous_ >= 0) cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

// A CUDA event shared by a pending operation and the watchdog, which queries
// it from its own thread; destroyed when the last of them lets go.
using SharedEvent = std::shared_ptr<CUevent_st>;

absl::StatusOr<SharedEvent> NewEvent(int device) {
  cudaEvent_t event = nullptr;
  const absl::Status status = CudaStatus(
      cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "creating an event");
  if (!status.ok()) return status;
  return SharedEvent(event, [device](cudaEvent_t e) {
    DeviceGuard guard(device);
    cudaEventDestroy(e);
  });
}

}  // namespace

// Shared by the communicator, its pending operations and its watchdog.
//
// `comm_mu` keeps NCCL calls on `comm` apart from ncclCommAbort: calls hold it
// shared, Abort exclusively, so that no call runs on a communicator being torn
// down. On a non-blocking communicator no call holds it for long (a call that
// would block returns ncclInProgress, and the wait for it releases the lock
// between polls).
struct NcclCommState {
  // One collective whose `done` event had not completed when last looked at.
  struct InFlight {
    uint64_t sequence = 0;
    SharedEvent done;
  };

  cudaStream_t stream = nullptr;  // the communicator's own stream
  float* scratch = nullptr;       // one device float for Barrier
  int device = 0;
  NcclOptions options;
  RealClock clock;
  PendingCollectiveTracker tracker{clock};

  absl::Mutex comm_mu;
  ncclComm_t comm ABSL_GUARDED_BY(comm_mu) = nullptr;
  std::atomic<bool> aborted{false};  // written under comm_mu, exclusively

  absl::Mutex mu;
  std::optional<std::string> abort_reason ABSL_GUARDED_BY(mu);
  std::vector<InFlight> in_flight ABSL_GUARDED_BY(mu);

  ~NcclCommState() {
    DeviceGuard guard(device);
    absl::MutexLock lock(&comm_mu);
    if (comm != nullptr && !aborted.load()) TearDownLocked();
    if (scratch != nullptr) cudaFree(scratch);
    if (stream != nullptr) cudaStreamDestroy(stream);
  }

  // The orderly teardown when nothing is pending and NCCL reports no error;
  // otherwise an abort, since finalizing could wait on a peer that is gone.
  void TearDownLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(comm_mu) {
    const bool idle = RetireFinished().ok() && tracker.Oldest() == std::nullopt;
    ncclResult_t state = ncclSuccess;
    const bool healthy = ncclCommGetAsyncError(comm, &state) == ncclSuccess &&
                         (state == ncclSuccess || state == ncclInProgress);
    if (!idle || !healthy) {
      ncclCommAbort(comm);
      return;
    }
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 14, 0)
    // Non-blocking: finalizing may return ncclInProgress; wait with a deadline.
    ncclResult_t finalized = ncclCommFinalize(comm);
    const absl::Time deadline = clock.Now() + options.timeout;
    absl::Duration pause = absl::Microseconds(20);
    while (finalized == ncclSuccess || finalized == ncclInProgress) {
      if (ncclCommGetAsyncError(comm, &state) != ncclSuccess) break;
      if (state == ncclSuccess) {
        ncclCommDestroy(comm);
        return;
      }
      if (state != ncclInProgress || clock.Now() >= deadline) break;
      absl::SleepFor(pause);
      pause = std::min(pause * 2, absl::Milliseconds(1));
    }
    ncclCommAbort(comm);
#else
    ncclCommDestroy(comm);
#endif
  }

  // Joins the communicator, non-blocking where NCCL offers it, within
  // options.timeout.
  absl::Status Init(const ncclUniqueId& id, int world_size, int rank) {
    const absl::Time deadline = clock.Now() + options.timeout;
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 14, 0)
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclResult_t result = ncclSuccess;
    {
      absl::WriterMutexLock lock(&comm_mu);
      result = ncclCommInitRankConfig(&comm, world_size, id, rank, &config);
    }
    absl::Status status = result == ncclInProgress
                              ? absl::OkStatus()
                              : NcclStatus(result, "ncclCommInitRankConfig");
    if (status.ok()) {
      status = AwaitCalls(deadline, absl::StrCat("joining the NCCL communicator as rank ",
                                                 rank, " of ", world_size));
    }
    if (!status.ok()) Abort(std::string(status.message()));
    return status;
#else
    (void)deadline;
    absl::WriterMutexLock lock(&comm_mu);
    return NcclStatus(ncclCommInitRank(&comm, world_size, id, rank), "ncclCommInitRank");
#endif
  }

  // Waits while NCCL reports ncclInProgress (a non-blocking call still under
  // way), until `deadline`. Errors name `what`.
  absl::Status AwaitCalls(absl::Time deadline, const std::string& what) {
    absl::Duration pause = absl::Microseconds(20);
    while (true) {
      ncclResult_t state = ncclSuccess;
      {
        absl::ReaderMutexLock lock(&comm_mu);
        if (aborted.load()) return AbortedStatus();
        const absl::Status got =
            NcclStatus(ncclCommGetAsyncError(comm, &state), "ncclCommGetAsyncError");
        if (!got.ok()) return got;
      }
      if (state == ncclSuccess) return absl::OkStatus();
      if (state != ncclInProgress) return NcclStatus(state, what.c_str());
      if (clock.Now() >= deadline) {
        return absl::DeadlineExceededError(absl::StrCat(
            what, " did not complete within ", absl::FormatDuration(options.timeout)));
      }
      absl::SleepFor(pause);
      pause = std::min(pause * 2, absl::Milliseconds(1));
    }
  }

  absl::Status AbortedStatus() {
    absl::MutexLock lock(&mu);
    return absl::FailedPreconditionError(
        absl::StrCat("the NCCL communicator was aborted: ",
                     abort_reason.value_or("after an earlier error or timeout")));
  }

  absl::Status CheckUsable() {
    if (aborted.load()) return AbortedStatus();
    return absl::OkStatus();
  }

  // Aborts the communicator for `reason` (the first reason is kept).
  void Abort(const std::string& reason) {
    {
      absl::MutexLock lock(&mu);
      if (!abort_reason.has_value()) abort_reason = reason;
    }
    DeviceGuard guard(device);
    absl::WriterMutexLock lock(&comm_mu);
    if (aborted.exchange(true) || comm == nullptr) return;
    ncclCommAbort(comm);
  }

  // The watchdog fired.
  void Fail(const std::string& reason) {
    Abort(reason);
    if (options.on_collective_failure) options.on_collective_failure(reason);
  }

  // Issues one collective (`call`, which enqueues on `stream`) named `name` and
  // `bucket`, and records its done event on `stream`. It stays in the tracker
  // until the watchdog sees that event complete.
  absl::StatusOr<SharedEvent> Launch(
      absl::string_view name, int bucket, cudaStream_t on, const char* what,
      const std::function<ncclResult_t(ncclComm_t)>& call) {
    absl::StatusOr<SharedEvent> done = NewEvent(device);
    if (!done.ok()) return done.status();
    const uint64_t sequence = tracker.Begin(name, bucket);
    ncclResult_t result = ncclSuccess;
    {
      absl::ReaderMutexLock lock(&comm_mu);
      if (aborted.load()) {
        tracker.End(sequence);
        return AbortedStatus();
      }
      result = call(comm);
    }
    absl::Status status =
        result == ncclInProgress ? absl::OkStatus() : NcclStatus(result, what);
    if (status.ok() && result == ncclInProgress) {
      status = AwaitCalls(clock.Now() + options.timeout, what);
    }
    if (status.ok()) {
      status = CudaStatus(cudaEventRecord(done->get(), on), "recording the done event");
    }
    if (!status.ok()) {
      tracker.End(sequence);
      return status;
    }
    absl::MutexLock lock(&mu);
    in_flight.push_back(InFlight{.sequence = sequence, .done = *done});
    return *std::move(done);
  }

  // Ends, in the tracker, every collective whose done event has completed.
  absl::Status RetireFinished() {
    absl::MutexLock lock(&mu);
    absl::Status status;
    auto finished = [&](const InFlight& op) {
      const cudaError_t query = cudaEventQuery(op.done.get());
      if (query == cudaErrorNotReady) return false;
      if (query != cudaSuccess && status.ok()) {
        status = CudaStatus(query, "querying an NCCL collective's done event");
        return false;
      }
      tracker.End(op.sequence);
      return true;
    };
    in_flight.erase(std::remove_if(in_flight.begin(), in_flight.end(), finished),
                    in_flight.end());
    return status;
  }

  // The watchdog's poll: retires finished collectives, then asks NCCL for an
  // asynchronous error.
  absl::Status Poll() {
    DeviceGuard guard(device);
    absl::Status status = RetireFinished();
    if (!status.ok()) return status;
    ncclResult_t state = ncclSuccess;
    {
      absl::ReaderMutexLock lock(&comm_mu);
      if (aborted.load()) return absl::OkStatus();
      status = NcclStatus(ncclCommGetAsyncError(comm, &state), "ncclCommGetAsyncError");
    }
    if (!status.ok()) return status;
    if (state == ncclSuccess || state == ncclInProgress) return absl::OkStatus();
    return NcclStatus(state, "the NCCL communicator reported");
  }

  // Blocks until `event` completes or the communicator is aborted (by the
  // watchdog, on an error or past the timeout).
  absl::Status WaitForEvent(cudaEvent_t event) {
    absl::Duration pause = absl::Microseconds(20);
    while (true) {
      const cudaError_t query = cudaEventQuery(event);
      if (query == cudaSuccess) return absl::OkStatus();
      if (query != cudaErrorNotReady) return CudaStatus(query, "waiting for NCCL work");
      if (aborted.load()) return AbortedStatus();
      absl::SleepFor(pause);
      pause = std::min(pause * 2, absl::Milliseconds(1));
    }
  }
};

namespace {

class PendingOp final : public NcclPending {
 public:
  PendingOp(std::shared_ptr<NcclCommState> state, SharedEvent done)
      : state_(std::move(state)), done_(std::move(done)) {}

  absl::Status WaitOn(cudaStream_t stream) override {
    DeviceGuard guard(state_->device);
    return CudaStatus(cudaStreamWaitEvent(stream, done_.get(), 0),
                      "ordering a stream after an NCCL collective");
  }

  absl::Status Synchronize() override {
    DeviceGuard guard(state_->device);
    return state_->WaitForEvent(done_.get());
  }

 private:
  const std::shared_ptr<NcclCommState> state_;
  const SharedEvent done_;
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

absl::StatusOr<NcclVersions> GetNcclVersions() {
  NcclVersions versions;
  versions.compiled = NCCL_VERSION_CODE;
  const absl::Status status =
      NcclStatus(ncclGetVersion(&versions.loaded), "ncclGetVersion");
  if (!status.ok()) return status;
  return versions;
}

std::string FormatNcclVersion(int code) {
  // From NCCL 2.9 on a code is major*10000 + minor*100 + patch; before,
  // major*1000 + minor*100 + patch.
  const int major_unit = code >= 10000 ? 10000 : 1000;
  return absl::StrCat(code / major_unit, ".", code % major_unit / 100, ".", code % 100);
}

NcclComm::NcclComm(int rank, int world_size, int device,
                   std::shared_ptr<NcclCommState> state)
    : rank_(rank), world_size_(world_size), device_(device), state_(std::move(state)) {
  CollectiveWatchdogOptions watchdog;
  watchdog.timeout = state_->options.timeout;
  watchdog.poll_interval = state_->options.watchdog_interval;
  NcclCommState* const watched = state_.get();  // outlives the watchdog
  watchdog_ = std::make_unique<CollectiveWatchdog>(
      state_->tracker, state_->clock, [watched] { return watched->Poll(); },
      [watched](const std::string& reason) { watched->Fail(reason); }, watchdog);
  watchdog_->Start();
}

NcclComm::~NcclComm() = default;

void NcclComm::Abort() {
  state_->Abort("the communicator was aborted because the rank is failing");
}

const PendingCollectiveTracker& NcclComm::collectives() const { return state_->tracker; }

std::optional<std::string> NcclComm::abort_reason() const {
  absl::MutexLock lock(&state_->mu);
  return state_->abort_reason;
}

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
  status = state->Init(id, world_size, rank);
  if (!status.ok()) return status;
  return std::unique_ptr<NcclComm>(
      new NcclComm(rank, world_size, device, std::move(state)));
}

namespace {

// An all-reduce of `count` elements at `buffer`, after the work queued on
// `stream`, on the communicator's stream, tracked as `name` and `bucket`.
absl::StatusOr<std::unique_ptr<NcclPending>> LaunchAllReduce(
    const std::shared_ptr<NcclCommState>& state, void* buffer, size_t count,
    NcclDataType type, cudaStream_t stream, absl::string_view name, int bucket) {
  absl::Status status = state->CheckUsable();
  if (!status.ok()) return status;
  absl::StatusOr<ncclDataType_t> nccl_type = ToNccl(type);
  if (!nccl_type.ok()) return nccl_type.status();
  DeviceGuard guard(state->device);
  absl::StatusOr<SharedEvent> ready = NewEvent(state->device);
  if (!ready.ok()) return ready.status();
  // The reduction waits for the producer's queued work, then runs beside it.
  // The event is released once the recorded work completes.
  status = CudaStatus(cudaEventRecord(ready->get(), stream), "recording the ready event");
  if (status.ok()) {
    status = CudaStatus(cudaStreamWaitEvent(state->stream, ready->get(), 0),
                        "ordering the NCCL stream after the producer");
  }
  if (!status.ok()) return status;
  absl::StatusOr<SharedEvent> done =
      state->Launch(name, bucket, state->stream, "ncclAllReduce", [&](ncclComm_t comm) {
        return ncclAllReduce(buffer, buffer, count, *nccl_type, ncclSum, comm,
                             state->stream);
      });
  if (!done.ok()) return done.status();
  return std::unique_ptr<NcclPending>(new PendingOp(state, *std::move(done)));
}

}  // namespace

absl::StatusOr<std::unique_ptr<NcclPending>> NcclComm::AllReduceSumAsync(
    void* buffer, size_t count, NcclDataType type, cudaStream_t stream, int bucket) {
  return LaunchAllReduce(state_, buffer, count, type, stream, "allreduce", bucket);
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
  absl::StatusOr<SharedEvent> done = state_->Launch(
      "broadcast", kNoBucket, stream, "ncclBroadcast", [&](ncclComm_t comm) {
        return ncclBroadcast(buffer, buffer, count, *nccl_type, root, comm, stream);
      });
  return done.status();
}

absl::Status NcclComm::Barrier() {
  absl::Status status = state_->CheckUsable();
  if (!status.ok()) return status;
  DeviceGuard guard(device_);
  status = CudaStatus(cudaMemsetAsync(state_->scratch, 0, sizeof(float), state_->stream),
                      "clearing the barrier buffer");
  if (!status.ok()) return status;
  absl::StatusOr<std::unique_ptr<NcclPending>> pending =
      LaunchAllReduce(state_, state_->scratch, 1, NcclDataType::kFloat32, state_->stream,
                      "barrier", kNoBucket);
  if (!pending.ok()) return pending.status();
  return (*pending)->Synchronize();
}

}  // namespace tessera::trainer
