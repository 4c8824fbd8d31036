#include "worker/trainer/gpu/cuda_step_timer.h"

#include <cuda_runtime_api.h>

#include <iostream>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace tessera::trainer {
namespace {

// Mark kinds besides the phases.
constexpr int kBegin = -1;
constexpr int kEnd = -2;

class CudaStepTimer final : public StepTimer {
 public:
  CudaStepTimer(int device, cudaStream_t stream) : device_(device), stream_(stream) {}

  ~CudaStepTimer() override {
    for (cudaEvent_t event : pool_) cudaEventDestroy(event);
  }

  void BeginStep() override { Record(kBegin); }
  void Mark(StepPhase phase) override { Record(static_cast<int>(phase)); }
  void EndStep() override { Record(kEnd); }
  bool on_device() const override { return true; }

  StepTimes TakeTotals() override {
    StepTimes totals;
    if (used_ > 0 &&
        Check(cudaEventSynchronize(pool_[used_ - 1]), "waiting for events")) {
      cudaEvent_t begin = nullptr;
      cudaEvent_t last = nullptr;
      for (const auto& [kind, event] : marks_) {
        if (kind == kBegin) {
          begin = last = event;
          continue;
        }
        if (begin == nullptr) continue;
        if (kind == kEnd) {
          totals.step_seconds += Seconds(begin, event);
          ++totals.steps;
          begin = nullptr;
        } else {
          totals.phase_seconds[static_cast<size_t>(kind)] += Seconds(last, event);
          last = event;
        }
      }
    }
    marks_.clear();
    used_ = 0;
    return totals;
  }

 private:
  void Record(int kind) {
    if (failed_) return;
    if (used_ == pool_.size()) {
      cudaEvent_t event = nullptr;
      if (!Check(cudaEventCreate(&event), "creating an event")) return;
      pool_.push_back(event);
    }
    cudaEvent_t event = pool_[used_];
    if (!Check(cudaEventRecord(event, stream_), "recording an event")) return;
    ++used_;
    marks_.emplace_back(kind, event);
  }

  double Seconds(cudaEvent_t from, cudaEvent_t to) {
    float ms = 0;
    if (!Check(cudaEventElapsedTime(&ms, from, to), "reading event times")) return 0;
    return ms / 1000.0;
  }

  // Timing must never stop training: on a CUDA error the timer reports zeros
  // from then on, and says so once.
  bool Check(cudaError_t error, const char* what) {
    if (error == cudaSuccess) return true;
    if (!failed_) {
      std::cerr << "tessera-train: step timing disabled after a CUDA error while " << what
                << " on device " << device_ << ": " << cudaGetErrorString(error)
                << std::endl;
    }
    failed_ = true;
    return false;
  }

  const int device_;
  const cudaStream_t stream_;
  std::vector<cudaEvent_t> pool_;  // reused every interval
  size_t used_ = 0;
  std::vector<std::pair<int, cudaEvent_t>> marks_;  // (kind, event) in order
  bool failed_ = false;
};

}  // namespace

absl::StatusOr<std::unique_ptr<StepTimer>> MakeCudaStepTimer(int device,
                                                             cudaStream_t stream) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    count = 0;
  }
  if (device < 0 || device >= count) {
    return absl::FailedPreconditionError(absl::StrCat(
        "CUDA device ", device, " is not visible (", count, " visible devices)"));
  }
  return std::unique_ptr<StepTimer>(new CudaStepTimer(device, stream));
}

}  // namespace tessera::trainer
