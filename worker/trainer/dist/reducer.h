// Gradient averaging across ranks in buckets that overlap backward, as PyTorch
// DDP's Reducer does it.
//
// Create packs the parameters into buckets (bucket_plan.h: reverse registration
// order, a small first bucket, then bucket_cap_mb each) and makes every
// parameter's .grad a view into its bucket's flat buffer, so backward accumulates
// straight into the buffers that are all-reduced: no copy in, no copy out. A
// post-hook on each parameter's gradient accumulator marks the gradient ready;
// once every gradient of a bucket is ready, and every lower-numbered bucket has
// gone out, the bucket's all-reduce is launched asynchronously while backward
// goes on. FinishBackward launches whatever is left (buckets of parameters that
// got no gradient, or all of them when overlap is off), waits for every bucket
// (the exposed communication) and divides by the world size.
//
// Per optimizer step:
//   reducer.ZeroGradients();
//   for each micro-batch: reducer.PrepareForBackward(last && allreduce);
//                         loss.backward();
//   reducer.FinishBackward();    // after the last micro-batch
//   optimizer.step();
// Gradient accumulation: PrepareForBackward(false) on all but the last
// micro-batch keeps the gradients local (DDP's no_sync); they keep accumulating in
// the buffers and the last backward all-reduces the sum.
//
// The control word: bucket 0's buffer holds one float32 more than its
// gradients. Every synchronized all-reduce sums it over the ranks with the
// gradients, at no extra collective and unscaled, so the ranks can agree on a
// decision each step (the trainer's preemption stop: any rank votes 1, all
// see a sum > 0 after the same step).
//
// ZeRO stage 2 (shard_gradients): FinishBackward keeps only this rank's shard
// of each bucket (bucket_plan.h's ShardOf), summed over the ranks, in a
// buffer of the shard's size; gradient_buffers() are then those shards. The
// bucket buffers exist only from PrepareForBackward to FinishBackward (the
// parameters' .grad views with them), so between backward passes a rank holds
// 1/N of the gradients. The reduction is an all-reduce of each bucket of
// which each rank keeps its part (the sums are exactly stage 0's), and the
// control word is a tensor of its own, all-reduced after the buckets.
//
// Thread-safety: one training loop drives a Reducer; the gradient hooks may run on
// LibTorch's autograd threads (CUDA), so the launch state is guarded by a mutex.
// The Reducer must outlive every backward pass over its parameters (its hooks are
// removed in the destructor). Parameters must be float32 tensors that require
// gradients, all on one device the communicator supports.
#ifndef TESSERA_WORKER_TRAINER_DIST_REDUCER_H_
#define TESSERA_WORKER_TRAINER_DIST_REDUCER_H_

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "worker/trainer/dist/bucket_plan.h"
#include "worker/trainer/dist/communicator.h"

namespace tessera::trainer {

struct ReducerOptions {
  double bucket_cap_mb = 25.0;   // cap of every bucket but the first (DDP: 25)
  double first_bucket_mb = 1.0;  // cap of the first bucket (DDP: 1)
  bool overlap = true;           // launch buckets from backward's gradient hooks
  int min_buckets = 1;           // BucketOptions::min_buckets (DDP: 1)
  // false: this run never all-reduces (a world of one). No bucket buffers are
  // allocated and no hooks set: each gradient stays LibTorch's own tensor
  // (backward writes it fresh instead of adding into a zeroed view) and
  // ZeroGradients drops them, as zero_grad(set_to_none=True) does. The plan is
  // still made (for the logs); BroadcastParameters needs a world of one.
  bool gradient_views = true;
  // ZeRO stage 2: after backward keep only this rank's shard of the summed
  // gradients (see above). Needs gradient views.
  bool shard_gradients = false;
};

class Reducer {
 public:
  // `parameters` in registration order; `communicator` must outlive the reducer.
  // InvalidArgument for a parameter that is not float32 or needs no gradient, or
  // for parameters on more than one device.
  static absl::StatusOr<std::unique_ptr<Reducer>> Create(
      const std::vector<at::Tensor>& parameters, Communicator& communicator,
      const ReducerOptions& options = {});

  ~Reducer();
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  const BucketPlan& plan() const { return plan_; }

  // Makes rank `root`'s parameter values every rank's (one broadcast per bucket).
  // Leaves the gradients zero.
  absl::Status BroadcastParameters(int root);

  // Zeroes every gradient (one fill per bucket); without gradient views, drops
  // them (the next backward writes them afresh).
  void ZeroGradients();

  // Call before each backward pass. `synchronize`: this pass's gradients are
  // all-reduced; false keeps them local (accumulation micro-batches, or no
  // gradient averaging at all).
  void PrepareForBackward(bool synchronize);

  // Call after the backward pass. When synchronizing: launches the buckets not
  // launched yet in order, waits for all of them and multiplies the gradients by
  // grad_scale / world size; otherwise multiplies them by grad_scale (if not 1).
  // Returns the first collective error.
  absl::Status FinishBackward(double grad_scale = 1.0);

  // Buckets whose all-reduce the last backward launched from its gradient hooks,
  // that is, overlapped with computing the rest of the gradients.
  int launched_during_backward() const;

  // The gradients as a whole, to read or scale: the flat gradient buffer of
  // each bucket (the gradients are views into them), without the control
  // word; without gradient views, each parameter's gradient that the last
  // FinishBackward found set (none after ZeroGradients); with sharded
  // gradients, this rank's shard of each bucket (ShardOf, unpadded).
  const std::vector<at::Tensor>& gradient_buffers() const { return gradients_; }

  // Sets this rank's control word for the next synchronized all-reduce. Call
  // after ZeroGradients (which zeroes it) and before the synchronizing
  // backward pass.
  void SetControlWord(float value);
  // The control word: one float32 element; after a synchronized FinishBackward
  // it holds the sum of the ranks' values (on the parameters' device).
  const at::Tensor& control_word() const { return control_word_; }

 private:
  struct Hooks;  // the gradient accumulators and their hook keys; in the .cc

  Reducer(std::vector<at::Tensor> parameters, Communicator& communicator,
          const ReducerOptions& options, BucketPlan plan);

  // Points every parameter's .grad at its slot of the bucket buffers, carrying
  // over the value of a gradient that something replaced.
  void BindGradientViews();
  // Sharded gradients: allocates the zeroed bucket buffers and the
  // parameters' views into them, unless they are there; and releases them.
  void EnsureBucketBuffers();
  void ReleaseBucketBuffers();
  // Sharded gradients: this rank's part of each summed bucket into
  // gradients_, times `factor`.
  void KeepShards(double factor);
  // Called by the hook of parameter `param` once its gradient is accumulated.
  void OnGradientReady(int param);
  void LaunchLocked(const std::vector<int>& buckets) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Constant after construction.
  const ReducerOptions options_;
  Communicator& communicator_;  // Not owned.
  const std::vector<at::Tensor> parameters_;
  const BucketPlan plan_;
  std::vector<at::Tensor> buffers_;  // one flat float32 buffer per bucket
  // Per bucket: its gradients' part of buffers_; without gradient views, the
  // parameters' own gradients as of the last FinishBackward.
  std::vector<at::Tensor> gradients_;
  at::Tensor control_word_;        // the element after bucket 0's gradients (or its own)
  std::vector<at::Tensor> views_;  // per parameter: its slot, shaped
  std::unique_ptr<Hooks> hooks_;

  mutable absl::Mutex mu_;
  BucketLaunchSequencer sequencer_ ABSL_GUARDED_BY(mu_);
  bool synchronize_ ABSL_GUARDED_BY(mu_) = false;
  int launched_in_backward_ ABSL_GUARDED_BY(mu_) = 0;
  // Per bucket: its launched all-reduce, until waited for.
  std::vector<std::unique_ptr<PendingCollective>> pending_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tessera::trainer

#endif  // TESSERA_WORKER_TRAINER_DIST_REDUCER_H_
