// AdamW with fewer passes over memory and fewer kernel launches than
// torch::optim::AdamW, which runs about eight tensor operations per parameter
// (two of them allocating): for a small ViT on the CPU most of the optimizer's
// time, and on a GPU about 1,200 kernel launches per ViT-B step.
//
// Each parameter with a gradient takes one of these paths (AdamWPath):
//  - kCpuLoop: contiguous float32 CPU parameters. One fused pass per
//    parameter: decoupled weight decay, both moment updates, bias correction and
//    the parameter update per element in a single loop, with no temporaries.
//  - kFused: contiguous parameters on another device (CUDA), where this
//    LibTorch has at::_fused_adamw_ (LibTorch >= 2.0; its CPU kernel came with
//    2.4). One multi-tensor kernel per parameter group, device and dtype.
//  - kForeach: the other parameters on such devices: the _foreach_* ops in
//    torch::optim::AdamW's order of operations (about nine multi-tensor kernels
//    per group, device and dtype).
//  - kStock: everything else (amsgrad, sparse gradients, gradients of another
//    shape, dtype or device, other CPU parameters): torch::optim::AdamW's step.
// All paths compute torch::optim::AdamW's update (kCpuLoop and kForeach in its
// order of float32 operations; kFused in ATen's, equal up to rounding), and the
// state is its AdamWParamState (step, exp_avg, exp_avg_sq), so checkpoints are
// interchangeable with the stock optimizer and across paths. kFused also keeps
// each parameter's step count as a float32 tensor on its device, as the kernel
// needs it; it is derived from the state's count, never saved. A captured
// step reads it from one device tensor written before each step instead
// (UseDeviceStepCounts), so that replays never freeze it.
//
// Thread-safety: as torch::optim::AdamW (one caller at a time).
#ifndef TESSERA_WORKER_TRAINER_MODEL_FUSED_ADAMW_H_
#define TESSERA_WORKER_TRAINER_MODEL_FUSED_ADAMW_H_

#include <c10/core/DeviceType.h>
#include <torch/optim/adamw.h>

#include <array>
#include <cstdint>
#include <optional>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"

namespace tessera::trainer {

enum class AdamWPath { kCpuLoop = 0, kFused = 1, kForeach = 2, kStock = 3 };

class FusedAdamW final : public torch::optim::AdamW {
 public:
  using torch::optim::AdamW::AdamW;

  torch::Tensor step(LossClosure closure = nullptr) override;

  // Whether this LibTorch has at::_fused_adamw_ for tensors on `device`.
  static bool HasFusedKernel(c10::DeviceType device);

  // Sends every parameter that `path` can take down it, whatever its device
  // (tests run the GPU paths on CPU tensors this way): kCpuLoop takes
  // contiguous float32 CPU parameters, kFused those of a device with a fused
  // kernel (the others go to kForeach), kForeach and kStock any. nullopt: the
  // choice above.
  void ForcePath(std::optional<AdamWPath> path) { forced_ = path; }

  // For a step captured in a CUDA graph (captured_step.h): from here on the
  // fused kernel reads each group's learning rate from a float32 tensor on the
  // parameters' device, which WriteLearningRates() fills outside the graph,
  // instead of a value fixed in the recorded launch; the step counts come
  // from UseDeviceStepCounts(); and a step that would take another path than
  // kFused throws (its host-computed factors would be fixed in the graph).
  // FailedPrecondition, saying why, unless this LibTorch's fused kernel takes
  // a tensor learning rate (2.4 and newer) and every parameter is a
  // contiguous CUDA tensor of a group without amsgrad.
  absl::Status EnableCapture();
  // Copies each group's learning rate (its options' lr) into its device tensor.
  void WriteLearningRates();

  // The step counts that the fused kernel reads become one float32 tensor on
  // the parameters' device, a view per parameter, which WriteStepCounts()
  // fills before each step and which no step writes: a replayed graph then
  // reads the true count of every step, whatever step the process began at
  // (a resumed run). EnableCapture calls it; tests call it on CPU tensors.
  void UseDeviceStepCounts();
  // Before each step, eager or replayed: every parameter's count as the
  // coming step uses it (its state's step + 1; 1 before its first step).
  void WriteStepCounts();
  // A replay of a captured step() runs none of its host side: this advances
  // the host counts (the state's step(), which checkpoints save) as the
  // step() would have, for each parameter with a gradient.
  void AdvanceHostSteps();
  // The device count `p`'s next fused step reads; undefined before
  // UseDeviceStepCounts or for a tensor this optimizer does not update.
  torch::Tensor device_step_count(const torch::Tensor& p) const;

  // Parameters updated by `path` in the last step: for tests and logs.
  int last_step_count(AdamWPath path) const {
    return last_step_counts_[static_cast<size_t>(path)];
  }

 private:
  struct StepTensor {
    torch::Tensor count;  // float32 scalar on the parameter's device
    int64_t value = 0;    // the step count it holds
  };

  AdamWPath PathFor(const torch::Tensor& p,
                    const torch::optim::AdamWOptions& options) const;
  // The parameter's AdamW state in the optimizer's map, created (step 0, zero
  // moments) on its first step, where the stock step would look for it.
  torch::optim::AdamWParamState& StateFor(const torch::Tensor& p);
  // The state's step count (already advanced to `step`) as the parameter's
  // device tensor; an existing tensor one step behind joins `to_advance`.
  torch::Tensor StepTensorFor(const torch::Tensor& p, int64_t step,
                              std::vector<torch::Tensor>& to_advance);

  std::optional<AdamWPath> forced_;
  std::array<int, 4> last_step_counts_{};
  std::unordered_map<const void*, StepTensor> step_tensors_;  // by TensorImpl
  // EnableCapture: one learning-rate tensor per group, on its device.
  std::vector<torch::Tensor> lr_tensors_;
  // UseDeviceStepCounts: every parameter's count, in group order; each
  // step_tensors_ entry's count is a view of it.
  torch::Tensor device_counts_;
};

}  // namespace tessera::trainer

#endif  // TESSERA_WORKER_TRAINER_MODEL_FUSED_ADAMW_H_
