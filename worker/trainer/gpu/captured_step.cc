#include "worker/trainer/gpu/captured_step.h"

#include <ATen/autocast_mode.h>
#include <torch/torch.h>

#include <exception>
#include <memory>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "worker/trainer/gpu/torch_version.h"

// CUDA graphs of a training step need a CUDA LibTorch whose fused AdamW takes
// its learning rate as a tensor (2.4 and newer); see cuda_graph.h.
#if TESSERA_TORCH_CUDA && TESSERA_TORCH_AT_LEAST(2, 4)
#define TESSERA_CAPTURED_STEP 1
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#else
#define TESSERA_CAPTURED_STEP 0
#endif

namespace tessera::trainer {

#if TESSERA_CAPTURED_STEP

struct CapturedStep::Impl {
  at::cuda::CUDAGraph graph;
  torch::Tensor images;  // the static inputs the graph reads
  torch::Tensor labels;
};

namespace {

// Autocast's weight cache off for the capture (cached casts made while
// capturing would be freed when the scope ends), restored after.
class AutocastCacheOff {
 public:
  AutocastCacheOff() : previous_(at::autocast::is_autocast_cache_enabled()) {
    at::autocast::set_autocast_cache_enabled(false);
  }
  ~AutocastCacheOff() { at::autocast::set_autocast_cache_enabled(previous_); }

 private:
  const bool previous_;
};

}  // namespace

bool CapturedStep::Available() { return true; }

struct CapturedStep::StreamScope::Impl {
  c10::cuda::CUDAStream previous;
  c10::cuda::CUDAStream scope;
};

absl::StatusOr<std::unique_ptr<CapturedStep::StreamScope>>
CapturedStep::StreamScope::Enter(int device) {
  try {
    const auto index = static_cast<c10::DeviceIndex>(device);
    auto impl = std::make_unique<Impl>(Impl{c10::cuda::getCurrentCUDAStream(index),
                                            c10::cuda::getStreamFromPool(false, index)});
    at::cuda::CUDAEvent queued;
    queued.record(impl->previous);
    queued.block(impl->scope);
    c10::cuda::setCurrentCUDAStream(impl->scope);
    return std::unique_ptr<StreamScope>(new StreamScope(std::move(impl)));
  } catch (const std::exception& e) {
    return absl::InternalError(
        absl::StrCat("making a capture stream current: ", e.what()));
  }
}

CapturedStep::StreamScope::StreamScope(std::unique_ptr<Impl> impl)
    : impl_(std::move(impl)) {}

CapturedStep::StreamScope::~StreamScope() {
  try {
    at::cuda::CUDAEvent done;
    done.record(impl_->scope);
    done.block(impl_->previous);
    c10::cuda::setCurrentCUDAStream(impl_->previous);
  } catch (const std::exception&) {
    // A device error already failed the run; nothing else to hand back.
  }
}

absl::StatusOr<std::unique_ptr<CapturedStep>> CapturedStep::Capture(
    const torch::Tensor& images, const torch::Tensor& labels, const Body& body) {
  if (!images.is_cuda() || !labels.is_cuda()) {
    return absl::InvalidArgumentError("a captured step takes CUDA input tensors");
  }
  const c10::DeviceIndex device = images.device().index();
  if (c10::cuda::getCurrentCUDAStream(device) ==
      c10::cuda::getDefaultCUDAStream(device)) {
    return absl::FailedPreconditionError(
        "a step is captured on a stream of its own (CapturedStep::StreamScope), not the "
        "default stream");
  }
  auto impl = std::make_unique<Impl>();
  try {
    impl->images = images.clone();
    impl->labels = labels.clone();
    const AutocastCacheOff no_cache;
    // Thread-local: the data loader's threads go on pinning host memory while
    // this thread captures.
    impl->graph.capture_begin({0, 0}, cudaStreamCaptureModeThreadLocal);
    try {
      body(impl->images, impl->labels);
    } catch (...) {
      try {
        impl->graph.capture_end();
      } catch (const std::exception&) {
        // The capture is invalid either way; the body's error says why.
      }
      throw;
    }
    impl->graph.capture_end();
  } catch (const std::exception& e) {
    return absl::FailedPreconditionError(
        absl::StrCat("capturing the training step in a CUDA graph failed (run with "
                     "--cuda-graph off to train eager): ",
                     e.what()));
  }
  return std::unique_ptr<CapturedStep>(new CapturedStep(std::move(impl)));
}

absl::Status CapturedStep::Replay(const torch::Tensor& images,
                                  const torch::Tensor& labels) {
  if (images.sizes() != impl_->images.sizes() ||
      labels.sizes() != impl_->labels.sizes()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a captured step replays batches of one shape: captured ",
        c10::str(impl_->images.sizes()), ", got ", c10::str(images.sizes())));
  }
  try {
    impl_->images.copy_(images, /*non_blocking=*/true);
    impl_->labels.copy_(labels, /*non_blocking=*/true);
    impl_->graph.replay();
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("replaying the captured step: ", e.what()));
  }
  return absl::OkStatus();
}

#else  // !TESSERA_CAPTURED_STEP

struct CapturedStep::Impl {};
struct CapturedStep::StreamScope::Impl {};

absl::StatusOr<std::unique_ptr<CapturedStep::StreamScope>>
CapturedStep::StreamScope::Enter(int) {
  return absl::FailedPreconditionError("no CUDA graphs in this build");
}

CapturedStep::StreamScope::StreamScope(std::unique_ptr<Impl> impl)
    : impl_(std::move(impl)) {}
CapturedStep::StreamScope::~StreamScope() = default;

bool CapturedStep::Available() { return false; }

absl::StatusOr<std::unique_ptr<CapturedStep>> CapturedStep::Capture(const torch::Tensor&,
                                                                    const torch::Tensor&,
                                                                    const Body&) {
  return absl::FailedPreconditionError(
      "this tessera-train's LibTorch cannot capture a training step (a CUDA LibTorch 2.4 "
      "or newer can)");
}

absl::Status CapturedStep::Replay(const torch::Tensor&, const torch::Tensor&) {
  return absl::FailedPreconditionError("no captured step in this build");
}

#endif  // TESSERA_CAPTURED_STEP

CapturedStep::CapturedStep(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CapturedStep::~CapturedStep() = default;

}  // namespace tessera::trainer

#undef TESSERA_CAPTURED_STEP  // the unity build's next file starts clean
