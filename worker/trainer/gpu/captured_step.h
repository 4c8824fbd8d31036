// One training step captured in a CUDA graph and replayed (cuda_graph.h says
// when a run uses it): Capture records one call of a step body (forward,
// backward, optimizer) on static input tensors without running it; each Replay
// copies the step's batch into those inputs and launches the recorded work as
// one graph on the current stream, as torch.cuda.graphs' whole-network capture
// and torch.compile's reduce-overhead mode do.
//
// The body must keep to what a graph allows: the same shapes every step, no
// host reads of device values, no new parameters or optimizer state (run a few
// eager steps first, so that lazily made state exists), and gradients left as
// the capture made them (never set to none or rebound between replays: the
// recorded backward writes into them). Its allocations come from the graph's
// own memory pool and keep their addresses for every replay. Autocast's weight
// cache is off while capturing, as a graph requires.
//
// What changes from step to step, and how a replay follows it (nothing the
// graph reads may be a value fixed at capture):
//  - the batch: Replay copies it into the static inputs;
//  - the learning rate of each optimizer group (schedule, warm-up, layer
//    decay, head-only warm-up): a device tensor per group, written before
//    each step (FusedAdamW::WriteLearningRates);
//  - AdamW's step count per parameter (bias correction): one device tensor,
//    written before each step from the host counts, which a replay leaves to
//    FusedAdamW::AdvanceHostSteps (WriteStepCounts); never advanced inside
//    the graph, so a run resumed at any step replays with its true count;
//  - dropout's random numbers: LibTorch's CUDA generator hands a captured
//    kernel its seed and offset through device memory and moves the offset
//    on at each replay, so every replay draws fresh numbers;
//  - the loss tally: a device tensor the graph adds to, zeroed in place
//    after each report.
// Constant for a run, and so safe to record: weight decay, betas and eps,
// label smoothing, the clipping norm, the model's shapes and the batch size.
// capture_schedule.h orders the eager steps, the capture and the replays.
//
// Available only in builds with a CUDA LibTorch 2.4 or newer (TESSERA_TORCH_CUDA);
// elsewhere Capture fails with FailedPrecondition and Available() is false.
//
// Not thread-safe: the training thread owns it.
#ifndef TESSERA_WORKER_TRAINER_GPU_CAPTURED_STEP_H_
#define TESSERA_WORKER_TRAINER_GPU_CAPTURED_STEP_H_

#include <torch/types.h>

#include <functional>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace tessera::trainer {

class CapturedStep {
 public:
  using Body =
      std::function<void(const torch::Tensor& images, const torch::Tensor& labels)>;

  // A graph is captured on a stream other than the device's default one, and
  // the eager steps before the capture must run on that same stream (LibTorch
  // makes its cuBLAS workspaces per stream, and a capture must find them made).
  // While a StreamScope lives, a fresh stream of the pool is this thread's
  // current stream on `device`: a captured run enters one before its first
  // step and keeps it (training, evaluation and checkpoints all run on it).
  // Entering waits for the work queued on the previous stream; leaving makes
  // the previous stream wait for the scope's work and makes it current again.
  class StreamScope {
   public:
    static absl::StatusOr<std::unique_ptr<StreamScope>> Enter(int device);
    ~StreamScope();
    StreamScope(const StreamScope&) = delete;
    StreamScope& operator=(const StreamScope&) = delete;

   private:
    struct Impl;
    explicit StreamScope(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
  };

  // Whether this build can capture a step.
  static bool Available();

  // Records `body` on static copies of `images` and `labels` (CUDA tensors of
  // the shapes every later batch has) on the current stream, which must not be
  // the default stream (a StreamScope's). Nothing of the body runs on the
  // device until Replay; its host side runs once, here.
  static absl::StatusOr<std::unique_ptr<CapturedStep>> Capture(
      const torch::Tensor& images, const torch::Tensor& labels, const Body& body);
  ~CapturedStep();
  CapturedStep(const CapturedStep&) = delete;
  CapturedStep& operator=(const CapturedStep&) = delete;

  // Copies the batch into the static inputs and replays the step, on the
  // current stream.
  // InvalidArgument for a batch of other shapes than the captured one.
  absl::Status Replay(const torch::Tensor& images, const torch::Tensor& labels);

 private:
  struct Impl;  // the graph and its inputs; CUDA types stay in the .cc
  explicit CapturedStep(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tessera::trainer

#endif  // TESSERA_WORKER_TRAINER_GPU_CAPTURED_STEP_H_
