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
// ZeRO (zero_stage 1 or 2): each bucket is reduce-scattered instead of
// all-reduced (communicator.h), so this rank gets the sum of only its shard
// of it (bucket_plan.h's ShardOf) at half an all-reduce's traffic, and
// gradient_buffers() are those shards after FinishBackward. The bucket
// buffers are padded to world size equal parts, and the control word is a
// tensor of its own, all-reduced after the buckets.
//   Stage 1: the bucket buffers stay, as at stage 0; each shard is a view of
//     its bucket.
//   Stage 2: a rank holds its shards, 1/N of the gradients, and at most a few
//     whole buckets. No bucket buffer exists outside the synchronizing
//     backward pass: there, each parameter's gradient (LibTorch's own tensor)
//     is copied into its bucket, whose buffer is taken when its first
//     gradient arrives, and dropped; a full bucket is reduce-scattered at
//     once, and once more than kBucketsInFlight are under way the oldest is
//     waited for, its shard copied out and its buffer reused by a later
//     bucket. Accumulation micro-batches keep LibTorch's gradients until
//     the last one, whose hooks add them into the buckets.
//   Stage 3: as stage 2, with a bucket per unit of the model (a block,
//     whose parameters are gathered and freed together; zero_optimizer.h)
//     whose buffer is the unit's gathered parameters (unit_buffer). As at
//     stage 2, accumulation micro-batches keep LibTorch's gradients until
//     the last one (FSDP's no_sync: the sums are stage 0's, at the memory
//     of whole gradients while accumulating); in those passes
//     on_bucket_reduced says when a unit's gradients are all in.

// Thread-safety: one training loop drives a Reducer; the gradient hooks may run on
// LibTorch's autograd threads (CUDA), so the launch state is guarded by a mutex.
// The Reducer must outlive every backward pass over its parameters (its hooks are
// removed in the destructor). Parameters must be float32 tensors that require
// gradients, all on one device the communicator supports.
#ifndef TESSERA_WORKER_TRAINER_DIST_REDUCER_H_
#define TESSERA_WORKER_TRAINER_DIST_REDUCER_H_

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
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
  // ZeRO stage 0, 1, 2 or 3 (see above). 1 to 3 need gradient views.
  int zero_stage = 0;
  // Stage 3: each parameter's unit (AssignUnitBuckets: a bucket per unit);
  // the memory bucket b's gradients are gathered in: the unit's gathered
  // parameters, whose slots the gradients replace one by one (a weight's
  // slot is no longer read once its gradient is computed); and a call once
  // the bucket's shard is taken (in an accumulation pass: once its
  // gradients are all in), after which that memory is the caller's again.
  // Both are called under the reducer's lock, from backward's hooks.
  std::vector<int> units;
  std::function<at::Tensor(int bucket)> unit_buffer;
  std::function<void(int bucket)> on_bucket_reduced;
};

// Whole buckets a rank holds at most while their reduce-scatters are under
// way, besides the one being filled: stage 2's (capped by bucket_cap_mb),
// and stage 3's, whose buckets are whole units (a transformer block's
// gradients) and go out one at a time.
inline constexpr int kBucketsInFlight = 2;
inline constexpr int kUnitsInFlight = 1;

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
  int zero_stage() const { return options_.zero_stage; }
  // Stages 2 and 3: kBucketsInFlight or kUnitsInFlight.
  int buckets_in_flight() const {
    return options_.zero_stage == 3 ? kUnitsInFlight : kBucketsInFlight;
  }

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
  // FinishBackward found set (none after ZeroGradients); at ZeRO stages,
  // this rank's shard of each bucket (ShardOf, unpadded).
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

  // Hooks each parameter's gradient accumulator, unless hooked already: a
  // parameter whose tensor was replaced in place (set_, as loading a
  // checkpoint does) gets a new accumulator, without the hook.
  void HookAccumulators();
  // Points every parameter's .grad at its slot of the bucket buffers, carrying
  // over the value of a gradient that something replaced.
  void BindGradientViews();
  // Allocates the zeroed bucket buffers and the parameters' views into them,
  // unless they are there (stages 0 and 1).
  void EnsureBucketBuffers();
  // Elements of bucket `b`'s buffer: its gradients, plus the control word
  // (stage 0, bucket 0) or the padding to equal shards (ZeRO).
  int64_t BufferElements(size_t b) const;
  // Called by the hook of parameter `param` once its gradient is accumulated.
  void OnGradientReady(int param);
  void LaunchLocked(const std::vector<int>& buckets) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Stage 2: bucket `b`'s buffer, taken (zeroed) if it has none yet; the
  // gradient of `param` copied into it and dropped.
  at::Tensor& StageTwoBufferLocked(size_t b) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void MoveGradientIntoBucketLocked(int param) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Stage 2: waits for the oldest bucket under way, keeps its shard and
  // frees its buffer for reuse; the first error is kept in collective_error_.
  void RetireOldestLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Stages 2 and 3: launches what this pass has not, and retires it all.
  void FlushPassLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // ZeRO: this rank's part of bucket `b`'s buffer.
  at::Tensor ShardView(size_t b) const;

  // Constant after construction.
  const ReducerOptions options_;
  Communicator& communicator_;  // Not owned.
  const std::vector<at::Tensor> parameters_;
  const BucketPlan plan_;
  // Per bucket: its gradients' part of buffers_ (stage 0); its shard (ZeRO);
  // without gradient views, the parameters' own gradients as of the last
  // FinishBackward.
  std::vector<at::Tensor> gradients_;
  at::Tensor control_word_;        // the element after bucket 0's gradients (or its own)
  std::vector<at::Tensor> views_;  // per parameter: its slot, shaped (stages 0, 1)
  std::unique_ptr<Hooks> hooks_;

  mutable absl::Mutex mu_;
  // One flat float32 buffer per bucket; at stage 2 undefined outside the
  // synchronizing backward pass (written by the hooks, hence guarded).
  std::vector<at::Tensor> buffers_;
  BucketLaunchSequencer sequencer_ ABSL_GUARDED_BY(mu_);
  bool synchronize_ ABSL_GUARDED_BY(mu_) = false;
  bool pass_open_ ABSL_GUARDED_BY(mu_) = false;  // stage 3: a pass not flushed yet
  int launched_in_backward_ ABSL_GUARDED_BY(mu_) = 0;
  // Per bucket: its launched collective, until waited for.
  std::vector<std::unique_ptr<PendingCollective>> pending_ ABSL_GUARDED_BY(mu_);
  // Stage 2: buckets launched and not yet retired, oldest first; freed
  // buffers for the next buckets; the first collective error of the pass.
  std::vector<int> in_flight_ ABSL_GUARDED_BY(mu_);
  std::vector<at::Tensor> spare_ ABSL_GUARDED_BY(mu_);
  std::vector<bool> moved_ ABSL_GUARDED_BY(mu_);  // stage 3, per parameter: in its bucket
  absl::Status collective_error_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tessera::trainer

#endif  // TESSERA_WORKER_TRAINER_DIST_REDUCER_H_
