// The NCCL communicator's own logic over a fake CUDA runtime and NCCL
// (gpu_api.h), on CPU: which stream a collective runs on and what it waits
// for, an enqueue that never completes, a sticky CUDA error told apart from an
// NCCL error, a collective waiting on this rank's own kernels, and a teardown
// whose peer is gone. The tests of the real libraries on a GPU are in
// nccl_communicator_test.cc.
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "worker/trainer/dist/nccl_communicator.h"
#include "worker/trainer/gpu/gpu_api.h"

namespace tessera::trainer {
namespace {

constexpr int kCudaErrorIllegalAddress = 700;

// A device with two kinds of streams: the communicator's (the first stream
// created) and every other one (the callers'). Whether the work queued on
// each kind has run is a switch, so a test decides whether a collective's
// inputs are produced (caller streams) and whether it finished (the
// communicator's stream). Thread-safe: the collective timeout polls from its thread.
class FakeGpuApi final : public GpuApi {
 public:
  // Switches.
  void set_caller_streams_run(bool run) {
    Set([&] { caller_runs_ = run; });
  }
  void set_comm_stream_runs(bool run) {
    Set([&] { comm_runs_ = run; });
  }
  // Every event query from now on fails with `error` (a sticky CUDA error).
  void set_sticky_error(int error) {
    Set([&] { sticky_error_ = error; });
  }
  // What ncclCommGetAsyncError reports.
  void set_nccl_state(int state) {
    Set([&] { nccl_state_ = state; });
  }
  // Collectives return ncclInProgress and the communicator stays in progress.
  void set_enqueue_hangs(bool hangs) {
    Set([&] { enqueue_hangs_ = hangs; });
  }
  // ncclCommFinalize never completes (a peer is gone).
  void set_finalize_hangs(bool hangs) {
    Set([&] { finalize_hangs_ = hangs; });
  }

  // What happened, in order: "allreduce on comm", "record e2 on caller",
  // "wait comm for e2", "abort", "finalize", "destroy", ...
  std::vector<std::string> log() const {
    absl::MutexLock lock(&mu_);
    return log_;
  }
  int count(const std::string& entry) const {
    int n = 0;
    for (const std::string& e : log()) n += e == entry;
    return n;
  }
  GpuStream comm_stream() const {
    absl::MutexLock lock(&mu_);
    return comm_stream_;
  }

  int DeviceCount(int* count) override {
    *count = 1;
    return kCudaSuccess;
  }
  int GetDevice(int* device) override {
    *device = 0;
    return kCudaSuccess;
  }
  int SetDevice(int /*device*/) override { return kCudaSuccess; }
  bool HasActiveContext(int /*device*/) override { return true; }
  int ClearLastError() override { return kCudaSuccess; }
  int StreamCreate(GpuStream* stream) override {
    absl::MutexLock lock(&mu_);
    *stream = &streams_[next_stream_++];
    if (comm_stream_ == nullptr) comm_stream_ = *stream;
    return kCudaSuccess;
  }
  int StreamDestroy(GpuStream /*stream*/) override { return kCudaSuccess; }
  int EventCreate(GpuEvent* event) override {
    absl::MutexLock lock(&mu_);
    const int id = ++next_event_;
    *event = &events_[id];
    events_[id].id = id;
    return kCudaSuccess;
  }
  int EventDestroy(GpuEvent /*event*/) override { return kCudaSuccess; }
  int EventRecord(GpuEvent event, GpuStream stream) override {
    absl::MutexLock lock(&mu_);
    auto* e = static_cast<Event*>(event);
    e->on_comm = stream == comm_stream_;
    e->recorded = true;
    log_.push_back(absl::StrCat("record e", e->id, " on ", StreamName(stream)));
    return kCudaSuccess;
  }
  int EventQuery(GpuEvent event) override {
    absl::MutexLock lock(&mu_);
    if (sticky_error_ != kCudaSuccess) return sticky_error_;
    const auto* e = static_cast<Event*>(event);
    const bool ran = e->on_comm ? comm_runs_ : caller_runs_;
    return ran ? kCudaSuccess : kCudaErrorNotReady;
  }
  int StreamWaitEvent(GpuStream stream, GpuEvent event) override {
    absl::MutexLock lock(&mu_);
    log_.push_back(absl::StrCat("wait ", StreamName(stream), " for e",
                                static_cast<Event*>(event)->id));
    return kCudaSuccess;
  }
  int Malloc(void** pointer, size_t /*bytes*/) override {
    *pointer = &scratch_;
    return kCudaSuccess;
  }
  int Free(void* /*pointer*/) override { return kCudaSuccess; }
  int MemsetAsync(void* /*pointer*/, int /*value*/, size_t /*bytes*/,
                  GpuStream /*stream*/) override {
    return kCudaSuccess;
  }
  std::string CudaErrorText(int code) override {
    if (code == kCudaErrorIllegalAddress) {
      return "cudaErrorIllegalAddress (an illegal memory access was encountered)";
    }
    return absl::StrCat("cudaError", code);
  }

  int NcclVersion(int* version) override {
    *version = 22809;
    return kNcclSuccess;
  }
  int NcclUniqueId(std::string* id) override {
    id->assign(kNcclUniqueIdBytes, 'u');
    return kNcclSuccess;
  }
  int NcclInit(NcclHandle* comm, int /*world_size*/, const std::string& /*id*/,
               int /*rank*/) override {
    *comm = &scratch_;
    return kNcclSuccess;
  }
  int NcclAsyncError(NcclHandle /*comm*/, int* state) override {
    absl::MutexLock lock(&mu_);
    *state = nccl_state_;
    return kNcclSuccess;
  }
  int NcclAbort(NcclHandle /*comm*/) override { return Log("abort"); }
  int NcclFinalize(NcclHandle /*comm*/) override {
    absl::MutexLock lock(&mu_);
    log_.push_back("finalize");
    nccl_state_ = kNcclInProgress;
    if (!finalize_hangs_) nccl_state_ = kNcclSuccess;
    return kNcclInProgress;
  }
  int NcclDestroy(NcclHandle /*comm*/) override { return Log("destroy"); }
  int NcclAllReduceSum(void* /*buffer*/, size_t /*count*/, NcclDataType /*type*/,
                       NcclHandle /*comm*/, GpuStream stream) override {
    return Enqueue("allreduce", stream);
  }
  int NcclBroadcast(void* /*buffer*/, size_t /*count*/, NcclDataType /*type*/, int root,
                    NcclHandle /*comm*/, GpuStream stream) override {
    return Enqueue(absl::StrCat("broadcast from ", root), stream);
  }
  int NcclReduceScatterSum(void* /*buffer*/, size_t /*count*/, NcclDataType /*type*/,
                           int /*rank*/, NcclHandle /*comm*/, GpuStream stream) override {
    return Enqueue("reducescatter", stream);
  }
  int NcclAllGather(void* /*buffer*/, size_t /*count*/, NcclDataType /*type*/,
                    int /*rank*/, NcclHandle /*comm*/, GpuStream stream) override {
    return Enqueue("allgather", stream);
  }
  std::string NcclErrorText(int code) override {
    return code == kNcclRemoteError ? "remote process exited or there was a network error"
                                    : absl::StrCat("ncclResult ", code);
  }

 private:
  struct Event {
    int id = 0;
    bool recorded = false;
    bool on_comm = false;
  };

  void Set(const std::function<void()>& change) {
    absl::MutexLock lock(&mu_);
    change();
  }
  int Log(const std::string& entry) {
    absl::MutexLock lock(&mu_);
    log_.push_back(entry);
    return kNcclSuccess;
  }
  int Enqueue(const std::string& what, GpuStream stream) {
    absl::MutexLock lock(&mu_);
    log_.push_back(absl::StrCat(what, " on ", StreamName(stream)));
    if (!enqueue_hangs_) return kNcclSuccess;
    nccl_state_ = kNcclInProgress;
    return kNcclInProgress;
  }
  std::string StreamName(GpuStream stream) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stream == comm_stream_ ? "comm" : "caller";
  }

  mutable absl::Mutex mu_;
  std::vector<std::string> log_ ABSL_GUARDED_BY(mu_);
  std::map<int, int> streams_ ABSL_GUARDED_BY(mu_);  // addresses as handles
  int next_stream_ ABSL_GUARDED_BY(mu_) = 0;
  GpuStream comm_stream_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::map<int, Event> events_ ABSL_GUARDED_BY(mu_);
  int next_event_ ABSL_GUARDED_BY(mu_) = 0;
  bool caller_runs_ ABSL_GUARDED_BY(mu_) = true;
  bool comm_runs_ ABSL_GUARDED_BY(mu_) = true;
  int sticky_error_ ABSL_GUARDED_BY(mu_) = kCudaSuccess;
  int nccl_state_ ABSL_GUARDED_BY(mu_) = kNcclSuccess;
  bool enqueue_hangs_ ABSL_GUARDED_BY(mu_) = false;
  bool finalize_hangs_ ABSL_GUARDED_BY(mu_) = false;
  float scratch_ = 0;
};

GpuStream CallerStream() {
  static int stream = 0;
  return &stream;
}

// Waits up to 10 s for `done`.
bool Eventually(const std::function<bool()>& done) {
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (!done()) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(5));
  }
  return true;
}

std::unique_ptr<NcclComm> Join(FakeGpuApi& api, const NcclOptions& options) {
  absl::StatusOr<std::unique_ptr<NcclComm>> comm =
      NcclComm::Create(api, std::string(kNcclUniqueIdBytes, 'u'), 0, 2, 0, options);
  EXPECT_TRUE(comm.ok()) << comm.status();
  return comm.ok() ? *std::move(comm) : nullptr;
}

// What the failure callbacks were told.
struct Failures {
  absl::Mutex mu;
  std::vector<std::string> collective ABSL_GUARDED_BY(mu);
  std::vector<std::string> device ABSL_GUARDED_BY(mu);

  void Attach(NcclOptions& options) {
    options.on_collective_failure = [this](const std::string& reason) {
      absl::MutexLock lock(&mu);
      collective.push_back(reason);
    };
    options.on_device_failure = [this](const std::string& reason) {
      absl::MutexLock lock(&mu);
      device.push_back(reason);
    };
  }
  size_t total() {
    absl::MutexLock lock(&mu);
    return collective.size() + device.size();
  }
};

TEST(NcclCommunicatorFakeTest, BroadcastRunsOnTheCommunicatorsStreamAfterTheCallersWork) {
  FakeGpuApi api;
  std::unique_ptr<NcclComm> comm = Join(api, {});
  ASSERT_NE(comm, nullptr);
  float buffer[4] = {};
  ASSERT_TRUE(comm->Broadcast(buffer, 4, NcclDataType::kFloat32, 1, CallerStream()).ok());

  // Ready event on the caller's stream, the communicator's stream waits for
  // it, the broadcast runs there, and the caller's stream waits for its end.
  std::vector<std::string> log = api.log();
  std::vector<std::string> broadcast;
  for (const std::string& e : log) {
    if (e.rfind("record", 0) == 0 || e.rfind("wait", 0) == 0 ||
        e.rfind("broadcast", 0) == 0) {
      broadcast.push_back(e);
    }
  }
  ASSERT_EQ(broadcast.size(), 5u) << testing::PrintToString(log);
  EXPECT_EQ(broadcast[0].substr(0, 7), "record ");
  EXPECT_NE(broadcast[0].find("on caller"), std::string::npos) << broadcast[0];
  const std::string ready = broadcast[0].substr(7, broadcast[0].find(' ', 7) - 7);
  EXPECT_EQ(broadcast[1], absl::StrCat("wait comm for ", ready));
  EXPECT_EQ(broadcast[2], "broadcast from 1 on comm");
  EXPECT_NE(broadcast[3].find("on comm"), std::string::npos) << broadcast[3];
  const std::string done = broadcast[3].substr(7, broadcast[3].find(' ', 7) - 7);
  EXPECT_EQ(broadcast[4], absl::StrCat("wait caller for ", done));
}

TEST(NcclCommunicatorFakeTest, AnEnqueueThatNeverCompletesAbortsTheCommunicator) {
  FakeGpuApi api;
  NcclOptions options;
  options.timeout = absl::Milliseconds(200);
  options.timeout_poll_interval = absl::Hours(1);  // only the launch itself acts
  std::unique_ptr<NcclComm> comm = Join(api, options);
  ASSERT_NE(comm, nullptr);
  api.set_enqueue_hangs(true);
  float buffer[4] = {};
  absl::StatusOr<std::unique_ptr<NcclPending>> pending =
      comm->AllReduceSumAsync(buffer, 4, NcclDataType::kFloat32, CallerStream(), 3);
  EXPECT_EQ(pending.status().code(), absl::StatusCode::kDeadlineExceeded)
      << pending.status();
  EXPECT_EQ(api.count("abort"), 1) << testing::PrintToString(api.log());
  ASSERT_TRUE(comm->abort_reason().has_value());
  EXPECT_NE(comm->abort_reason()->find("allreduce #1"), std::string::npos)
      << *comm->abort_reason();
  // Nothing more goes through it, and it is not finalized on destruction.
  EXPECT_EQ(comm->AllReduceSumAsync(buffer, 4, NcclDataType::kFloat32, CallerStream())
                .status()
                .code(),
            absl::StatusCode::kFailedPrecondition);
  comm.reset();
  EXPECT_EQ(api.count("finalize"), 0);
}

// A communicator whose collective timeout polls every 5 ms, with an all-reduce of
// `bucket` pending on it (the communicator's stream does not run).
std::unique_ptr<NcclComm> JoinWithAPendingAllReduce(FakeGpuApi& api, Failures& failures,
                                                    int bucket) {
  NcclOptions options;
  options.timeout_poll_interval = absl::Milliseconds(5);
  failures.Attach(options);
  std::unique_ptr<NcclComm> comm = Join(api, options);
  if (comm == nullptr) return nullptr;
  api.set_comm_stream_runs(false);
  static float buffer[4] = {};
  const absl::Status launched =
      comm->AllReduceSumAsync(buffer, 4, NcclDataType::kFloat32, CallerStream(), bucket)
          .status();
  EXPECT_TRUE(launched.ok()) << launched;
  return comm;
}

TEST(NcclCommunicatorFakeTest, AStickyCudaErrorIsADeviceFailureNamingIt) {
  FakeGpuApi api;
  Failures failures;
  std::unique_ptr<NcclComm> comm = JoinWithAPendingAllReduce(api, failures, 2);
  ASSERT_NE(comm, nullptr);
  // A model kernel faults: every later query of the device fails.
  api.set_sticky_error(kCudaErrorIllegalAddress);
  ASSERT_TRUE(Eventually([&] { return failures.total() > 0; }));
  absl::MutexLock lock(&failures.mu);
  EXPECT_TRUE(failures.collective.empty()) << testing::PrintToString(failures.collective);
  ASSERT_EQ(failures.device.size(), 1u);
  const std::string& reason = failures.device[0];
  EXPECT_NE(reason.find("cudaErrorIllegalAddress (an illegal memory access"),
            std::string::npos)
      << reason;
  EXPECT_NE(reason.find("CUDA device 0"), std::string::npos) << reason;
  EXPECT_NE(reason.find("not an NCCL failure"), std::string::npos) << reason;
  EXPECT_EQ(api.count("abort"), 1);
}

TEST(NcclCommunicatorFakeTest, AnNcclErrorIsACollectiveFailure) {
  FakeGpuApi api;
  Failures failures;
  std::unique_ptr<NcclComm> comm = JoinWithAPendingAllReduce(api, failures, 0);
  ASSERT_NE(comm, nullptr);
  api.set_nccl_state(kNcclRemoteError);
  ASSERT_TRUE(Eventually([&] { return failures.total() > 0; }));
  absl::MutexLock lock(&failures.mu);
  EXPECT_TRUE(failures.device.empty()) << testing::PrintToString(failures.device);
  ASSERT_EQ(failures.collective.size(), 1u);
  EXPECT_NE(failures.collective[0].find("NCCL error 6 (remote process exited"),
            std::string::npos)
      << failures.collective[0];
  EXPECT_NE(failures.collective[0].find("allreduce #1 (bucket 0)"), std::string::npos)
      << failures.collective[0];
}

TEST(NcclCommunicatorFakeTest,
     ACollectiveIsReadyOnlyOnceThisRanksKernelsProducedItsInput) {
  FakeGpuApi api;
  NcclOptions options;
  options.timeout_poll_interval = absl::Milliseconds(5);
  std::unique_ptr<NcclComm> comm = Join(api, options);
  ASSERT_NE(comm, nullptr);
  // This rank's backward still runs, and the collective cannot finish yet.
  api.set_caller_streams_run(false);
  api.set_comm_stream_runs(false);
  float buffer[4] = {};
  ASSERT_TRUE(
      comm->AllReduceSumAsync(buffer, 4, NcclDataType::kFloat32, CallerStream(), 1).ok());
  absl::SleepFor(absl::Milliseconds(50));  // ten collective-timeout polls
  std::optional<PendingCollectiveInfo> oldest = comm->collectives().Oldest();
  ASSERT_TRUE(oldest.has_value());
  EXPECT_FALSE(oldest->ready) << "its input is still being computed on this rank";

  // Backward done: the collective now waits on the peers.
  api.set_caller_streams_run(true);
  EXPECT_TRUE(Eventually([&] {
    std::optional<PendingCollectiveInfo> o = comm->collectives().Oldest();
    return o.has_value() && o->ready;
  }));
  api.set_comm_stream_runs(true);
  EXPECT_TRUE(Eventually([&] { return !comm->collectives().Oldest().has_value(); }));
}

TEST(NcclCommunicatorFakeTest,
     ACleanTeardownWhosePeerIsGoneGivesUpAfterTheFinalizeTimeout) {
  FakeGpuApi api;
  NcclOptions options;
  options.timeout = absl::Minutes(5);
  options.finalize_timeout = absl::Milliseconds(100);
  std::unique_ptr<NcclComm> comm = Join(api, options);
  ASSERT_NE(comm, nullptr);
  api.set_finalize_hangs(true);
  const absl::Time start = absl::Now();
  comm.reset();
  const absl::Duration took = absl::Now() - start;
  EXPECT_LT(took, absl::Seconds(5)) << "the teardown waited on the dead peer";
  EXPECT_EQ(api.count("finalize"), 1);
  EXPECT_EQ(api.count("abort"), 1);
  EXPECT_EQ(api.count("destroy"), 0);
  std::cout << "FIGURE nccl_finalize_with_dead_peer_ms="
            << absl::ToInt64Milliseconds(took) << std::endl;
}

TEST(NcclCommunicatorFakeTest, ACleanTeardownFinalizesAndDestroys) {
  FakeGpuApi api;
  std::unique_ptr<NcclComm> comm = Join(api, {});
  ASSERT_NE(comm, nullptr);
  comm.reset();
  EXPECT_EQ(api.count("finalize"), 1);
  EXPECT_EQ(api.count("destroy"), 1);
  EXPECT_EQ(api.count("abort"), 0);
}

}  // namespace
}  // namespace tessera::trainer
