#include "worker/trainer/dist/nccl_communicator.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
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
#include "common/retry.h"
#include "worker/trainer/dist/collective_timeout.h"
#include "worker/trainer/dist/pending_collective_tracker.h"
#include "worker/trainer/gpu/gpu_api.h"

namespace tessera::trainer {
namespace {

std::string CudaText(GpuApi& api, int error, absl::string_view what) {
  return absl::StrCat(what, ": CUDA error ", error, " ", api.CudaErrorText(error));
}

absl::Status CudaStatus(GpuApi& api, int error, absl::string_view what) {
  if (error == kCudaSuccess) return absl::OkStatus();
  return absl::InternalError(CudaText(api, error, what));
}

absl::Status NcclStatus(GpuApi& api, int result, absl::string_view what) {
  if (result == kNcclSuccess) return absl::OkStatus();
  const std::string text =
      absl::StrCat(what, ": NCCL error ", result, " (", api.NcclErrorText(result), ")");
  switch (result) {
    case kNcclInvalidArgument:
    case kNcclInvalidUsage:
      return absl::InvalidArgumentError(text);
    case kNcclRemoteError:
    case kNcclSystemError:
      return absl::UnavailableError(text);
    default:
      return absl::InternalError(text);
  }
}

// Backs off from 20 us to 1 ms between polls of an operation in progress
// (no jitter: the wait is for this rank's own device and communicator).
class PollPause {
 public:
  explicit PollPause(Clock& clock)
      : clock_(clock),
        backoff_({.initial_delay = absl::Microseconds(20),
                  .max_delay = absl::Milliseconds(1),
                  .jitter = 0},
                 clock) {}
  void Pause() { clock_.SleepFor(*backoff_.Next()); }  // never empty: no deadline

 private:
  Clock& clock_;
  Backoff backoff_;
};

// Makes `device` current for its lifetime, then the previous device again, but
// only if that one has a context: before anything is made current
// cudaGetDevice reports device 0, and making it current would create a
// context (hundreds of MiB) on a GPU this rank never uses.
class DeviceGuard {
 public:
  DeviceGuard(GpuApi& api, int device) : api_(api) {
    int previous = -1;
    if (api_.GetDevice(&previous) != kCudaSuccess) {
      api_.ClearLastError();
      return;
    }
    if (previous == device) return;
    if (api_.HasActiveContext(previous)) previous_ = previous;
    api_.SetDevice(device);
  }
  ~DeviceGuard() {
    if (previous_ >= 0) api_.SetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  GpuApi& api_;
  int previous_ = -1;
};

// A CUDA event shared by a pending operation and the collective timeout, which queries
// it from its own thread; destroyed when the last of them lets go.
using SharedEvent = std::shared_ptr<void>;

absl::StatusOr<SharedEvent> NewEvent(GpuApi& api, int device) {
  GpuEvent event = nullptr;
  const absl::Status status =
      CudaStatus(api, api.EventCreate(&event), "creating an event");
  if (!status.ok()) return status;
  return SharedEvent(event, [&api, device](GpuEvent e) {
    DeviceGuard guard(api, device);
    api.EventDestroy(e);
  });
}

}  // namespace

// Shared by the communicator, its pending operations and its collective timeout.
//
// `comm_mu` keeps NCCL calls on `comm` apart from ncclCommAbort: calls hold it
// shared, Abort exclusively, so that no call runs on a communicator being torn
// down. On a non-blocking communicator no call holds it for long (a call that
// would block returns ncclInProgress, and the wait for it releases the lock
// between polls).
struct NcclCommState {
  // One collective whose `done` event had not completed when last looked at;
  // `ready` until its inputs were seen complete.
  struct InFlight {
    uint64_t sequence = 0;
    SharedEvent ready;
    SharedEvent done;
  };

  explicit NcclCommState(GpuApi& gpu) : api(gpu) {}

  GpuApi& api;
  GpuStream stream = nullptr;  // the communicator's own stream
  float* scratch = nullptr;    // one device float for Barrier
  int device = 0;
  NcclOptions options;
  RealClock clock;
  PendingCollectiveTracker tracker{clock};

  absl::Mutex comm_mu;
  NcclHandle comm ABSL_GUARDED_BY(comm_mu) = nullptr;
  std::atomic<bool> aborted{false};  // written under comm_mu, exclusively

  absl::Mutex mu;
  std::optional<std::string> abort_reason ABSL_GUARDED_BY(mu);
  // A CUDA error outside NCCL that an event query returned (sticky: the
  // device context is unusable).
  std::optional<std::string> device_error ABSL_GUARDED_BY(mu);
  std::vector<InFlight> in_flight ABSL_GUARDED_BY(mu);

  ~NcclCommState() {
    DeviceGuard guard(api, device);
    {
      absl::MutexLock lock(&comm_mu);
      if (comm != nullptr && !aborted.load()) TearDownLocked();
    }
    {
      absl::MutexLock lock(&mu);
      in_flight.clear();  // the events, before the stream they were used on
    }
    if (scratch != nullptr) api.Free(scratch);
    if (stream != nullptr) api.StreamDestroy(stream);
  }

  // The orderly teardown when nothing is pending and NCCL reports no error;
  // otherwise an abort, since finalizing could wait on a peer that is gone.
  void TearDownLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(comm_mu) {
    const bool idle = RetireFinished().ok() && tracker.Oldest() == std::nullopt;
    int state = kNcclSuccess;
    const bool healthy = api.NcclAsyncError(comm, &state) == kNcclSuccess &&
                         (state == kNcclSuccess || state == kNcclInProgress);
    if (!idle || !healthy) {
      api.NcclAbort(comm);
      return;
    }
    // Non-blocking: finalizing may return ncclInProgress; a peer that died
    // after the last collective keeps it there, so it gets a deadline of its
    // own, not the collective timeout.
    const int finalized = api.NcclFinalize(comm);
    const absl::Time deadline = clock.Now() + options.finalize_timeout;
    PollPause backoff(clock);
    while (finalized == kNcclSuccess || finalized == kNcclInProgress) {
      if (api.NcclAsyncError(comm, &state) != kNcclSuccess) break;
      if (state == kNcclSuccess) {
        api.NcclDestroy(comm);
        return;
      }
      if (state != kNcclInProgress || clock.Now() >= deadline) break;
      backoff.Pause();
    }
    api.NcclAbort(comm);
  }

  // Joins the communicator within options.timeout.
  absl::Status Init(const std::string& id, int world_size, int rank) {
    const absl::Time deadline = clock.Now() + options.timeout;
    int result = kNcclSuccess;
    {
      absl::WriterMutexLock lock(&comm_mu);
      result = api.NcclInit(&comm, world_size, id, rank);
    }
    absl::Status status = result == kNcclInProgress
                              ? absl::OkStatus()
                              : NcclStatus(api, result, "ncclCommInitRankConfig");
    if (status.ok()) {
      status = AwaitCalls(deadline, absl::StrCat("joining the NCCL communicator as rank ",
                                                 rank, " of ", world_size));
    }
    if (!status.ok()) Abort(std::string(status.message()));
    return status;
  }

  // Waits while NCCL reports ncclInProgress (a non-blocking call still under
  // way), until `deadline`. Errors name `what`.
  absl::Status AwaitCalls(absl::Time deadline, const std::string& what) {
    PollPause backoff(clock);
    while (true) {
      int state = kNcclSuccess;
      {
        absl::ReaderMutexLock lock(&comm_mu);
        if (aborted.load()) return AbortedStatus();
        const absl::Status got =
            NcclStatus(api, api.NcclAsyncError(comm, &state), "ncclCommGetAsyncError");
        if (!got.ok()) return got;
      }
      if (state == kNcclSuccess) return absl::OkStatus();
      if (state != kNcclInProgress) return NcclStatus(api, state, what);
      if (clock.Now() >= deadline) {
        return absl::DeadlineExceededError(absl::StrCat(
            what, " did not complete within ", absl::FormatDuration(options.timeout)));
      }
      backoff.Pause();
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
    DeviceGuard guard(api, device);
    absl::WriterMutexLock lock(&comm_mu);
    if (aborted.exchange(true) || comm == nullptr) return;
    api.NcclAbort(comm);
  }

  // The collective timeout fired: a CUDA error goes to on_device_failure, the rest to
  // on_collective_failure.
  void Fail(const std::string& reason) {
    std::optional<std::string> device_failure;
    {
      absl::MutexLock lock(&mu);
      device_failure = device_error;
    }
    const std::string text =
        device_failure.has_value()
            ? absl::StrCat(
                  *device_failure, " on CUDA device ", device,
                  " (not an NCCL failure; the NCCL collective timeout found it: ", reason,
                  ")")
            : reason;
    Abort(text);
    if (device_failure.has_value() && options.on_device_failure) {
      options.on_device_failure(text);
    } else if (options.on_collective_failure) {
      options.on_collective_failure(text);
    }
  }

  // Issues one collective (`call`, which enqueues on the communicator's
  // stream after `ready`) named `name` and `bucket`, and records its done
  // event. It stays in the tracker until the collective timeout sees that event
  // complete. An enqueue that NCCL leaves in progress past the timeout aborts
  // the communicator.
  absl::StatusOr<SharedEvent> Launch(absl::string_view name, int bucket,
                                     const SharedEvent& ready, const char* what,
                                     const std::function<int(NcclHandle)>& call) {
    absl::StatusOr<SharedEvent> done = NewEvent(api, device);
    if (!done.ok()) return done.status();
    const uint64_t sequence = tracker.Begin(name, bucket, /*ready=*/false);
    int result = kNcclSuccess;
    {
      absl::ReaderMutexLock lock(&comm_mu);
      if (aborted.load()) {
        tracker.End(sequence);
        return AbortedStatus();
      }
      result = call(comm);
    }
    absl::Status status =
        result == kNcclInProgress ? absl::OkStatus() : NcclStatus(api, result, what);
    if (status.ok() && result == kNcclInProgress) {
      status = AwaitCalls(clock.Now() + options.timeout,
                          absl::StrCat(what, " for ", name, " #", sequence));
      if (!status.ok() && !aborted.load()) {
        // The enqueue did not finish: NCCL may hold a half-issued collective
        // that peers wait on. Nothing more can go through this communicator.
        Abort(std::string(status.message()));
      }
    }
    if (status.ok()) {
      status = CudaStatus(api, api.EventRecord(done->get(), stream),
                          "recording the done event");
    }
    if (!status.ok()) {
      tracker.End(sequence);
      return status;
    }
    absl::MutexLock lock(&mu);
    in_flight.push_back(InFlight{.sequence = sequence, .ready = ready, .done = *done});
    return *std::move(done);
  }

  // A failed event query: a sticky CUDA error, remembered as the device's.
  absl::Status DeviceError(int query, absl::string_view what) {
    const std::string text = CudaText(api, query, what);
    if (!device_error.has_value()) device_error = text;
    return absl::InternalError(text);
  }

  // Marks collectives whose inputs are complete as ready, and ends, in the
  // tracker, every collective whose done event has completed.
  absl::Status RetireFinished() {
    absl::MutexLock lock(&mu);
    absl::Status status;
    auto finished = [&](InFlight& op) {
      if (op.ready != nullptr) {
        const int query = api.EventQuery(op.ready.get());
        if (query == kCudaErrorNotReady) return false;
        if (query != kCudaSuccess) {
          if (status.ok()) status = DeviceError(query, "querying a collective's input");
          return false;
        }
        tracker.MarkReady(op.sequence);
        op.ready.reset();
      }
      const int query = api.EventQuery(op.done.get());
      if (query == kCudaErrorNotReady) return false;
      if (query != kCudaSuccess) {
        if (status.ok()) status = DeviceError(query, "querying an NCCL collective's end");
        return false;
      }
      tracker.End(op.sequence);
      return true;
    };
    in_flight.erase(std::remove_if(in_flight.begin(), in_flight.end(), finished),
                    in_flight.end());
    return status;
  }

  // The collective timeout's poll: retires finished collectives, then asks NCCL for an
  // asynchronous error.
  absl::Status Poll() {
    DeviceGuard guard(api, device);
    absl::Status status = RetireFinished();
    if (!status.ok()) return status;
    int state = kNcclSuccess;
    {
      absl::ReaderMutexLock lock(&comm_mu);
      if (aborted.load()) return absl::OkStatus();
      status = NcclStatus(api, api.NcclAsyncError(comm, &state), "ncclCommGetAsyncError");
    }
    if (!status.ok()) return status;
    if (state == kNcclSuccess || state == kNcclInProgress) return absl::OkStatus();
    return NcclStatus(api, state, "the NCCL communicator reported");
  }

  // Blocks until `event` completes or the communicator is aborted (by the
  // collective timeout, on an error or past the timeout).
  absl::Status WaitForEvent(GpuEvent event) {
    PollPause backoff(clock);
    while (true) {
      const int query = api.EventQuery(event);
      if (query == kCudaSuccess) return absl::OkStatus();
      if (query != kCudaErrorNotReady) {
        absl::MutexLock lock(&mu);
        return DeviceError(query, "waiting for NCCL work");
      }
      if (aborted.load()) return AbortedStatus();
      backoff.Pause();
    }
  }
};

namespace {

class PendingOp final : public NcclPending {
 public:
  PendingOp(std::shared_ptr<NcclCommState> state, SharedEvent done)
      : state_(std::move(state)), done_(std::move(done)) {}

  absl::Status WaitOn(GpuStream stream) override {
    DeviceGuard guard(state_->api, state_->device);
    return CudaStatus(state_->api, state_->api.StreamWaitEvent(stream, done_.get()),
                      "ordering a stream after an NCCL collective");
  }

  absl::Status Synchronize() override {
    DeviceGuard guard(state_->api, state_->device);
    return state_->WaitForEvent(done_.get());
  }

 private:
  const std::shared_ptr<NcclCommState> state_;
  const SharedEvent done_;
};

}  // namespace

absl::StatusOr<std::string> NewNcclUniqueId(GpuApi& api) {
  std::string id;
  const absl::Status status = NcclStatus(api, api.NcclUniqueId(&id), "ncclGetUniqueId");
  if (!status.ok()) return status;
  return id;
}

int VisibleCudaDevices(GpuApi& api) {
  int count = 0;
  if (api.DeviceCount(&count) != kCudaSuccess) {
    api.ClearLastError();  // clear the sticky "no driver/device" error
    return 0;
  }
  return count;
}

absl::StatusOr<NcclVersions> GetNcclVersions(GpuApi& api) {
  NcclVersions versions;
  const absl::Status status =
      NcclStatus(api, api.NcclVersion(&versions.loaded), "ncclGetVersion");
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
  CollectiveTimeoutOptions timeout_options;
  timeout_options.timeout = state_->options.timeout;
  timeout_options.poll_interval = state_->options.timeout_poll_interval;
  NcclCommState* const watched = state_.get();  // outlives the collective timeout
  collective_timeout_ = std::make_unique<CollectiveTimeout>(
      state_->tracker, state_->clock, [watched] { return watched->Poll(); },
      [watched](const std::string& reason) { watched->Fail(reason); }, timeout_options);
  collective_timeout_->Start();
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

absl::StatusOr<std::unique_ptr<NcclComm>> NcclComm::Create(GpuApi& api,
                                                           const std::string& unique_id,
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
  const int devices = VisibleCudaDevices(api);
  if (device < 0 || device >= devices) {
    return absl::FailedPreconditionError(absl::StrCat(
        "CUDA device ", device, " is not visible (", devices, " visible devices)"));
  }
  DeviceGuard guard(api, device);
  auto state = std::make_shared<NcclCommState>(api);
  state->device = device;
  state->options = options;
  absl::Status status =
      CudaStatus(api, api.StreamCreate(&state->stream), "creating the NCCL stream");
  if (!status.ok()) return status;
  void* scratch = nullptr;
  status = CudaStatus(api, api.Malloc(&scratch, sizeof(float)),
                      "allocating the barrier buffer");
  if (!status.ok()) return status;
  state->scratch = static_cast<float*>(scratch);
  status = state->Init(unique_id, world_size, rank);
  if (!status.ok()) return status;
  return std::unique_ptr<NcclComm>(
      new NcclComm(rank, world_size, device, std::move(state)));
}

namespace {

// A collective (`call`) after the work queued on `stream`, on the
// communicator's stream, tracked as `name` and `bucket`.
absl::StatusOr<std::unique_ptr<NcclPending>> LaunchAfter(
    const std::shared_ptr<NcclCommState>& state, GpuStream stream, absl::string_view name,
    int bucket, const char* what, const std::function<int(NcclHandle)>& call) {
  absl::Status status = state->CheckUsable();
  if (!status.ok()) return status;
  GpuApi& api = state->api;
  DeviceGuard guard(api, state->device);
  absl::StatusOr<SharedEvent> ready = NewEvent(api, state->device);
  if (!ready.ok()) return ready.status();
  // The collective waits for the producer's queued work, then runs beside it.
  // The event is released once the recorded work completes.
  status =
      CudaStatus(api, api.EventRecord(ready->get(), stream), "recording the ready event");
  if (status.ok()) {
    status = CudaStatus(api, api.StreamWaitEvent(state->stream, ready->get()),
                        "ordering the NCCL stream after the producer");
  }
  if (!status.ok()) return status;
  absl::StatusOr<SharedEvent> done = state->Launch(name, bucket, *ready, what, call);
  if (!done.ok()) return done.status();
  return std::unique_ptr<NcclPending>(new PendingOp(state, *std::move(done)));
}

}  // namespace

absl::StatusOr<std::unique_ptr<NcclPending>> NcclComm::AllReduceSumAsync(
    void* buffer, size_t count, NcclDataType type, GpuStream stream, int bucket) {
  NcclCommState* const state = state_.get();
  return LaunchAfter(
      state_, stream, "allreduce", bucket, "ncclAllReduce", [=](NcclHandle comm) {
        return state->api.NcclAllReduceSum(buffer, count, type, comm, state->stream);
      });
}

absl::StatusOr<std::unique_ptr<NcclPending>> NcclComm::ReduceScatterSumAsync(
    void* buffer, size_t count_per_rank, NcclDataType type, GpuStream stream,
    int bucket) {
  NcclCommState* const state = state_.get();
  const int rank = rank_;
  return LaunchAfter(state_, stream, "reducescatter", bucket, "ncclReduceScatter",
                     [=](NcclHandle comm) {
                       return state->api.NcclReduceScatterSum(
                           buffer, count_per_rank, type, rank, comm, state->stream);
                     });
}

absl::StatusOr<std::unique_ptr<NcclPending>> NcclComm::AllGatherAsync(
    void* buffer, size_t count_per_rank, NcclDataType type, GpuStream stream,
    int bucket) {
  NcclCommState* const state = state_.get();
  const int rank = rank_;
  return LaunchAfter(state_, stream, "allgather", bucket, "ncclAllGather",
                     [=](NcclHandle comm) {
                       return state->api.NcclAllGather(buffer, count_per_rank, type, rank,
                                                       comm, state->stream);
                     });
}

absl::Status NcclComm::AllReduceSum(void* buffer, size_t count, NcclDataType type,
                                    GpuStream stream) {
  absl::StatusOr<std::unique_ptr<NcclPending>> pending =
      AllReduceSumAsync(buffer, count, type, stream);
  if (!pending.ok()) return pending.status();
  return (*pending)->WaitOn(stream);
}

absl::Status NcclComm::Broadcast(void* buffer, size_t count, NcclDataType type, int root,
                                 GpuStream stream) {
  if (root < 0 || root >= world_size_) {
    return absl::InvalidArgumentError(
        absl::StrCat("broadcast root ", root, " is not in [0, ", world_size_, ")"));
  }
  NcclCommState* const state = state_.get();
  absl::StatusOr<std::unique_ptr<NcclPending>> pending = LaunchAfter(
      state_, stream, "broadcast", kNoBucket, "ncclBroadcast", [=](NcclHandle comm) {
        return state->api.NcclBroadcast(buffer, count, type, root, comm, state->stream);
      });
  if (!pending.ok()) return pending.status();
  return (*pending)->WaitOn(stream);
}

absl::Status NcclComm::Barrier() {
  absl::Status status = state_->CheckUsable();
  if (!status.ok()) return status;
  GpuApi& api = state_->api;
  DeviceGuard guard(api, device_);
  status =
      CudaStatus(api, api.MemsetAsync(state_->scratch, 0, sizeof(float), state_->stream),
                 "clearing the barrier buffer");
  if (!status.ok()) return status;
  NcclCommState* const state = state_.get();
  absl::StatusOr<std::unique_ptr<NcclPending>> pending =
      LaunchAfter(state_, state_->stream, "barrier", kNoBucket, "ncclAllReduce",
                  [=](NcclHandle comm) {
                    return state->api.NcclAllReduceSum(
                        state->scratch, 1, NcclDataType::kFloat32, comm, state->stream);
                  });
  if (!pending.ok()) return pending.status();
  return (*pending)->Synchronize();
}

}  // namespace tessera::trainer
