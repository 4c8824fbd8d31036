#include "worker/trainer/run/trainer.h"

#include <ATen/autocast_mode.h>
#include <dlfcn.h>
#include <malloc.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <exception>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/metric_names.h"
#include "common/rank_phase.h"
#include "common/status_macros.h"
#include "worker/trainer/data/batch_feed.h"
#include "worker/trainer/data/batch_loader.h"
#include "worker/trainer/data/batch_prefetcher.h"
#include "worker/trainer/data/data_position.h"
#include "worker/trainer/data/distributed_sampler.h"
#include "worker/trainer/data/training_data.h"
#include "worker/trainer/dist/reducer.h"
#include "worker/trainer/dist/stop_agreement.h"
#include "worker/trainer/dist/zero_optimizer.h"
#include "worker/trainer/gpu/capture_schedule.h"
#include "worker/trainer/gpu/captured_step.h"
#include "worker/trainer/gpu/cuda_graph.h"
#include "worker/trainer/gpu/device.h"
#include "worker/trainer/gpu/device_memory.h"
#include "worker/trainer/gpu/step_timer.h"
#include "worker/trainer/model/fused_adamw.h"
#include "worker/trainer/model/fused_layers.h"
#include "worker/trainer/model/loss_scaler.h"
#include "worker/trainer/model/optimizer_state.h"
#include "worker/trainer/model/optimizers.h"
#include "worker/trainer/model/param_hash.h"
#include "worker/trainer/model/safetensors.h"
#include "worker/trainer/model/vit.h"
#include "worker/trainer/model/vit_config.h"
#include "worker/trainer/model/vit_weights.h"
#include "worker/trainer/run/checkpoint.h"
#include "worker/trainer/run/checkpoint_writer.h"
#include "worker/trainer/run/fault_injector.h"
#include "worker/trainer/run/progress.h"
#include "worker/trainer/run/step_profiler.h"
#include "worker/trainer/run/zero_checkpoint.h"

namespace tessera::trainer {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::string FormatCount(int64_t n) {
  return n >= 1000000 ? absl::StrCat(n / 100000 / 10.0, "M") : absl::StrCat(n);
}

struct Evaluation {
  double accuracy = 0;
  double loss = 0;
};

// The tensor an optimizer updates for a model parameter: the parameter
// itself, or (ZeRO) this rank's piece of it; undefined: none on this rank.
using OptimizedTensor = std::function<torch::Tensor(const torch::Tensor&)>;

torch::Tensor Itself(const torch::Tensor& p) { return p; }

OptimizerSettings SettingsOf(const TrainerOptions& options) {
  OptimizerSettings settings;
  settings.name = options.optimizer;
  settings.lr = options.lr;
  settings.weight_decay = options.weight_decay;
  settings.momentum = options.momentum;
  return settings;
}

// The optimizer (optimizers.h) in two groups: weight decay on weight matrices
// only, not on biases, norms and the class/position tokens, which LAMB also
// leaves out of its trust ratio (so they move as with Adam).
std::unique_ptr<torch::optim::Optimizer> MakeOptimizer(const TrainerOptions& options,
                                                       VisionTransformer& model,
                                                       const OptimizedTensor& optimized) {
  TensorGroup decayed;
  TensorGroup not_decayed{.decay = false};
  for (const auto& item : model->named_parameters()) {
    const bool is_token =
        item.key() == "class_token" || item.key() == "position_embedding";
    torch::Tensor tensor = optimized(item.value());
    if (!tensor.defined()) continue;
    // Dimensions of the parameter, not of a (flat) piece.
    (item.value().dim() <= 1 || is_token ? not_decayed : decayed)
        .tensors.push_back(tensor);
  }
  std::vector<TensorGroup> groups;
  groups.push_back(std::move(decayed));
  groups.push_back(std::move(not_decayed));
  return MakeOptimizer(std::move(groups), SettingsOf(options));
}

// The fine-tuning recipes' optimizer (vit_weights.h): one group per (layer,
// weight decay, head), each at lr x its layer's scale; `scales` and `heads`
// get each group's scale and whether it holds head parameters, in group order.
std::unique_ptr<torch::optim::Optimizer> MakeLayerDecayOptimizer(
    const TrainerOptions& options, VisionTransformer& model,
    const OptimizedTensor& optimized, std::vector<double>* scales,
    std::vector<bool>* heads) {
  std::map<std::string, torch::Tensor> by_name;
  for (const auto& item : model->named_parameters()) by_name[item.key()] = item.value();
  std::vector<TensorGroup> groups;
  for (const ParameterGroup& g : LayerDecayParameterGroups(*model, options.layer_decay)) {
    TensorGroup group{.lr_scale = g.lr_scale, .decay = g.weight_decay};
    for (const std::string& name : g.names) {
      torch::Tensor tensor = optimized(by_name.at(name));
      if (tensor.defined()) group.tensors.push_back(tensor);
    }
    groups.push_back(std::move(group));
    scales->push_back(g.lr_scale);
    heads->push_back(g.head);
  }
  return MakeOptimizer(std::move(groups), SettingsOf(options));
}

// Mixed precision for the forward pass: CUDA autocast to `dtype` for the
// scope's lifetime (a no-op when disabled).
class AutocastScope {
 public:
  AutocastScope(bool enabled, at::ScalarType dtype) : enabled_(enabled) {
    if (!enabled_) return;
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
    previous_ = at::autocast::is_autocast_enabled(at::kCUDA);
    at::autocast::set_autocast_enabled(at::kCUDA, true);
    at::autocast::set_autocast_dtype(at::kCUDA, dtype);
#else
    previous_ = at::autocast::is_enabled();
    at::autocast::set_enabled(true);
    at::autocast::set_autocast_gpu_dtype(dtype);
#endif
    at::autocast::increment_nesting();
  }
  ~AutocastScope() {
    if (!enabled_) return;
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
    at::autocast::set_autocast_enabled(at::kCUDA, previous_);
#else
    at::autocast::set_enabled(previous_);
#endif
  }
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  const bool enabled_;
  bool previous_ = false;
};

// The step timer for the placement: CUDA events on the current stream of a CUDA
// device, the host clock otherwise.
absl::StatusOr<std::unique_ptr<StepTimer>> MakeStepTimer(const DevicePlacement& device) {
  return MakeDeviceStepTimer(device.cuda, device.index);
}

// Multiplies the gradients (bucket buffers) by min(1, max_norm / global norm),
// without a host sync. The squares are summed in double and the factor is
// rounded once to the buffers' type, as ZeroOptimizer::ClipGradients does over
// its shards: a float sum's rounding depends on LibTorch's reduction order, and
// 30 AdamW steps grow that difference past 1e-5 of the parameters.
void ClipGradientNorm(const std::vector<torch::Tensor>& buffers, double max_norm) {
  if (buffers.empty()) return;
  torch::NoGradGuard no_grad;
  torch::Tensor squares =
      torch::zeros({}, buffers.front().options().dtype(torch::kDouble));
  for (const torch::Tensor& buffer : buffers) {
    squares.add_(buffer.square().sum(torch::kDouble));
  }
  const torch::Tensor factor = (max_norm / (squares.sqrt() + 1e-6))
                                   .clamp_max(1.0)
                                   .to(buffers.front().scalar_type());
  for (const torch::Tensor& buffer : buffers) buffer.mul_(factor);
}

bool AnyNonFinite(const std::vector<torch::Tensor>& buffers) {
  if (buffers.empty()) return false;
  torch::NoGradGuard no_grad;
  torch::Tensor total = torch::zeros({}, buffers.front().options());
  for (const torch::Tensor& buffer : buffers) total.add_(buffer.sum());
  return !std::isfinite(total.item<double>());
}

// Names the communicator's collectives in the progress reports for as long as
// it lives (the communicator outlives the trainer's run, not the lease thread).
class CollectivesInProgress {
 public:
  CollectivesInProgress(ProgressTracker* progress, const Communicator& communicator)
      : progress_(progress) {
    if (progress_ != nullptr) progress_->SetCollectives(communicator.collectives());
  }
  ~CollectivesInProgress() {
    if (progress_ != nullptr) progress_->SetCollectives(nullptr);
  }
  CollectivesInProgress(const CollectivesInProgress&) = delete;
  CollectivesInProgress& operator=(const CollectivesInProgress&) = delete;

 private:
  ProgressTracker* const progress_;  // Not owned.
};

}  // namespace

std::string DevicePlacement::name() const {
  return cuda ? absl::StrCat("cuda:", index) : "cpu";
}

absl::StatusOr<DevicePlacement> ResolveDevice(const TrainerOptions& options,
                                              int local_rank) {
  DevicePlacement placement;
  if (options.device != "cpu") {
    const int count = VisibleTorchCudaDevices();
    if (count > 0) {
      placement.cuda = true;
      ASSIGN_OR_RETURN(placement.index, CudaDeviceForLocalRank(local_rank, count));
    } else if (options.device == "cuda") {
      return absl::FailedPreconditionError(
          TorchHasCuda()
              ? "--device=cuda: no CUDA device is visible"
              : "--device=cuda: this tessera-train's LibTorch was built without CUDA");
    }
  }
  if (!placement.cuda && options.precision != "fp32") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--precision=", options.precision,
        " needs a CUDA device (mixed precision runs under CUDA autocast); this rank "
        "trains on the CPU: use --precision=fp32"));
  }
  return placement;
}

absl::StatusOr<int> CudaDeviceForLocalRank(int local_rank, int visible) {
  if (visible < 1) return absl::FailedPreconditionError("no CUDA device is visible");
  if (visible == 1) return 0;
  if (local_rank < 0 || local_rank >= visible) {
    return absl::FailedPreconditionError(absl::StrCat(
        "local rank ", local_rank, " has no CUDA device of its own: ", visible,
        " devices are visible (devices 0 to ", visible - 1,
        "); start at most that many ranks per host, or give each rank one device "
        "through CUDA_VISIBLE_DEVICES"));
  }
  return local_rank;
}

absl::Status MakePlacementCurrent(const DevicePlacement& placement) {
  if (!placement.cuda) return absl::OkStatus();
  return MakeCudaDeviceCurrent(placement.index);
}

bool ConfigureHostAllocator() {
#ifdef __GLIBC__
  const bool mmap_set = mallopt(M_MMAP_THRESHOLD, 64 << 20) == 1;
  const bool trim_set = mallopt(M_TRIM_THRESHOLD, 256 << 20) == 1;
  return mmap_set && trim_set;
#else
  return false;
#endif
}

void ConfigureComputeThreads(int threads) {
  torch::set_num_threads(threads);
  using SetThreads = void (*)(int);
  if (auto* set_blas_threads =
          reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) {
    set_blas_threads(threads);
  }
}

int64_t ResolveWarmupSteps(int64_t warmup_steps, int64_t total_steps,
                           double warmup_fraction) {
  if (warmup_steps >= 0) return warmup_steps;
  return static_cast<int64_t>(
      std::ceil(warmup_fraction * static_cast<double>(total_steps)));
}

double ScheduledLearningRate(double peak, int64_t step, int64_t total_steps,
                             int64_t warmup_steps, double final_lr_fraction) {
  if (step < warmup_steps) {
    return peak * static_cast<double>(step + 1) / static_cast<double>(warmup_steps);
  }
  const double decay_steps =
      static_cast<double>(std::max<int64_t>(1, total_steps - warmup_steps));
  const double progress =
      std::clamp(static_cast<double>(step - warmup_steps) / decay_steps, 0.0, 1.0);
  const double floor = peak * final_lr_fraction;
  return floor + (peak - floor) * 0.5 * (1.0 + std::cos(M_PI * progress));
}

namespace {

// Sums of the current metrics interval (reset at every report).
struct Interval {
  torch::Tensor loss_sum;  // on the device: read once per report
  int64_t micro_batches = 0;
  int64_t images = 0;
};

// One rank's run, as a sequence of named steps (Run). Built and run once.
class TrainingRun {
 public:
  TrainingRun(const TrainerOptions& options, const TrainerLoopOptions& loop,
              const TrainingData& data, Communicator& communicator,
              MetricsReporter& reporter)
      : options_(options),
        loop_(loop),
        data_(data),
        communicator_(communicator),
        reporter_(reporter),
        rank_(communicator.rank()),
        world_(communicator.world_size()) {}

  absl::StatusOr<TrainingOutcome> Run() {
    ConfigureComputeThreads(EffectiveThreads(options_));
    RETURN_IF_ERROR(PlanRun());
    RETURN_IF_ERROR(BuildModel());
    RETURN_IF_ERROR(Resume());
    // Before the feeds: a captured run's stream is current from here on, and
    // the feeds and the step timer work on the current stream.
    RETURN_IF_ERROR(PlanCapture());
    RETURN_IF_ERROR(BuildFeeds());
    LogSetUp();
    RETURN_IF_ERROR(TrainLoop());
    return Finish();
  }

 private:
  absl::Status PlanRun();
  absl::Status BuildModel();
  // trainer.init_from: the layout's LayerNorm epsilon into config_ (before the
  // model is built), then the weights into the model (after).
  absl::Status PrepareInit();
  absl::Status LoadInit();
  absl::Status Resume();
  // The optimizer, over the parameters or (ZeRO) this rank's pieces of them;
  // each group's learning-rate scale and whether it holds the head.
  std::unique_ptr<torch::optim::Optimizer> MakeOptimizerFor(
      const OptimizedTensor& optimized, std::vector<double>& scales,
      std::vector<bool>& heads);
  // After the checkpoint files of `step` are read: the optimizer state from
  // ZeRO shard files, or into ZeRO pieces from `whole` (the optimizer the
  // checkpoint loaded into, over the whole parameters).
  absl::Status RestoreOptimizerState(const RankCheckpoint& state, int64_t step,
                                     torch::optim::Optimizer& whole);
  // Optimizer state and gradient bytes this rank holds (printed at the start,
  // reported with the first metrics).
  int64_t OptimizerStateBytes() const;
  // The parameters' element counts, in registration order (at stage 3 too,
  // where their storage is freed between uses).
  std::vector<int64_t> ParameterNumels() const;
  int64_t GradientBytes() const;
  absl::Status BuildFeeds();
  void LogSetUp() const;
  absl::Status TrainLoop();
  // Whether the last step ended an epoch (the next starts at its sample 0).
  bool PlanEpochEnded() const { return epoch_ended_; }
  // One optimizer step; sets *stop when the ranks agreed to stop after it.
  absl::Status TrainStep(bool* stop);
  // The step between the timer's BeginStep and EndStep: eager (micro-batches,
  // all-reduce, optimizer), or the captured graph's replay (cuda_graph.h).
  absl::Status EagerStepBody(bool* stop);
  // A captured run's step, as capture_schedule_ orders it.
  absl::Status CapturedRunStep(bool* stop);
  void StepOnStaticInputs(const torch::Tensor& images, const torch::Tensor& labels);
  // The schedule's learning rate for this step into each optimizer group.
  void SetLearningRates();
  // Whether this run captures its step (trainer.cuda_graph); logs why not.
  absl::Status PlanCapture();
  absl::Status ForwardBackward(int64_t micro_batch);
  void ReportInterval(double lr);
  // After a step that ended an epoch (or the run): epoch times, evaluation.
  absl::Status EndEpoch();
  absl::StatusOr<Evaluation> Evaluate();
  // Snapshots the state at this step and writes it on the checkpoint writer.
  // `wait`: returns only once every rank's part is durable and `latest` points
  // at it (the run's end, a preemption, or synchronous writes).
  absl::Status SaveCheckpoint(bool wait);
  // Publishes the checkpoint in flight once every rank's part is durable: the
  // ranks sum their "written" flags (one small all-reduce, at the same steps
  // on every rank), and rank 0 moves `latest` when the sum is the world size.
  // `block`: poll until then, reporting bytes written as progress; else ask
  // once (after each step while a checkpoint is in flight).
  absl::Status PublishWhenDurable(bool block);
  absl::StatusOr<int> RanksWithDurableCheckpoint();
  absl::StatusOr<TrainingOutcome> Finish();

  // Reports a phase (progress.h).
  void ReportPhase(RankPhase phase) {
    reported_phase_ = phase;
    if (loop_.progress != nullptr) loop_.progress->Enter(phase);
  }
  // Returns read(), which blocks the host until this rank's queued device work
  // is done (a .item(), a copy to the host, an event wait). On a CUDA device
  // the wait is reported as "device", then the interrupted phase again: the
  // host runs ahead of the GPU, so this is where the device's forward,
  // backward and optimizer work shows up, and where the collective it has
  // queued tells waiting on peers from waiting on itself. Reading CPU tensors
  // waits for nothing, so CPU ranks report no such phase.
  template <typename Read>
  auto ReadFromDevice(Read&& read) -> decltype(read()) {
    if (!placement_.cuda) return read();
    const RankPhase interrupted = reported_phase_;
    ReportPhase(RankPhase::kDevice);
    auto value = read();
    ReportPhase(interrupted);
    return value;
  }
  // A phase of the loop itself: reported, and where the --fault hook acts.
  void Enter(RankPhase phase) {
    ReportPhase(phase);
    if (fault_ != nullptr) fault_->OnPhase(phase, step_);
  }
  int64_t accum() const { return options_.grad_accum; }

  const TrainerOptions& options_;
  const TrainerLoopOptions& loop_;
  const TrainingData& data_;    // Not owned.
  Communicator& communicator_;  // Not owned.
  MetricsReporter& reporter_;   // Not owned.
  const int rank_;
  const int world_;
  FaultInjector* fault_ = nullptr;                  // Not owned; null when inactive.
  RankPhase reported_phase_ = RankPhase::kStartup;  // the last ReportPhase

  // PlanRun.
  DevicePlacement placement_;
  ViTConfig config_;
  torch::Device device_ = torch::Device(torch::kCPU);
  std::optional<DistributedSampler> train_sampler_;
  std::optional<DistributedSampler> test_sampler_;
  std::optional<EpochPlan> plan_;
  bool synchronize_ = false;
  bool fp16_ = false;
  bool autocast_ = false;
  at::ScalarType autocast_dtype_ = at::kBFloat16;
  // BuildModel.
  std::unique_ptr<SafetensorsFile> init_file_;  // trainer.init_from, while loading
  std::optional<WeightLayout> init_layout_;
  std::optional<VisionTransformer> model_;
  std::vector<torch::Tensor> parameters_;
  int64_t parameter_count_ = 0;
  std::unique_ptr<Reducer> reducer_;
  std::optional<CollectivesInProgress> named_collectives_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  int zero_stage_ = 0;                   // in effect (0 at a world of one)
  int64_t bytes_sent_reported_ = 0;      // communicator_.bytes_sent() at the last report
  std::unique_ptr<ZeroOptimizer> zero_;  // null at stage 0
  // Per optimizer group: its learning-rate scale (layer-wise decay) and
  // whether it holds the head (trained alone during a head-only warm-up).
  std::vector<double> group_scales_;
  std::vector<bool> group_heads_;
  LossScaler scaler_;
  // Resume, then the loop.
  std::optional<CheckpointDirectory> checkpoints_;
  CheckpointWriter checkpoint_writer_;
  std::optional<int64_t> checkpoint_in_flight_;  // its step, until published
  bool own_part_durable_ = false;                // this rank's files are written
  int64_t checkpoint_bytes_ = 0;                 // rank 0's files of the one in flight
  absl::Duration checkpoint_snapshot_;           // its serialisation on this thread
  absl::Time checkpoint_started_;                // when its write began
  int64_t step_ = 0;
  DataPosition position_;  // where the next step's data starts
  int64_t total_steps_ = 0;
  int64_t warmup_steps_ = 0;
  TrainingOutcome outcome_;
  // BuildFeeds.
  std::optional<StopAgreement> stop_agreement_;
  std::unique_ptr<SampleLoader> train_loader_;
  std::unique_ptr<SampleLoader> test_loader_;
  std::unique_ptr<BatchPrefetcher> train_batches_;
  std::unique_ptr<BatchFeed> train_feed_;
  std::unique_ptr<BatchFeed> test_feed_;
  std::unique_ptr<StepTimer> timer_;
  std::unique_ptr<StepProfiler> profiler_;  // null unless profile_steps is set
  // PlanCapture: whether this run replays a graph once this process has run
  // its eager steps (capture_schedule.h), the graph, and the optimizer it
  // steps.
  bool capture_ = false;
  std::unique_ptr<CapturedStep::StreamScope> capture_stream_;
  CaptureSchedule capture_schedule_;
  std::unique_ptr<CapturedStep> captured_;
  FusedAdamW* fused_adamw_ = nullptr;  // Not owned: optimizer_ when capturing
  // The loop's tallies.
  Interval interval_;
  double train_seconds_ = 0;
  double epoch_seconds_ = 0;        // training time since the current epoch began
  bool epoch_timed_whole_ = false;  // this run saw the current epoch's start
  bool epoch_ended_ = false;        // by the last step
  std::optional<int64_t> evaluated_at_;
  bool sizes_reported_ = false;  // the state and gradient bytes, once
  Evaluation last_eval_;
  double lr_ = 0;
};

absl::Status TrainingRun::PlanRun() {
  const DataShape& shape = data_.shape();
  ASSIGN_OR_RETURN(placement_, ResolveDevice(options_, loop_.local_rank));
  // cuDNN picks the patch embedding's convolution algorithm by timing them
  // once per shape (the shapes never change), as PyTorch users turn on.
  if (placement_.cuda) at::globalContext().setBenchmarkCuDNN(true);
  ASSIGN_OR_RETURN(config_, ResolveViTConfig(options_.model, shape.channels,
                                             shape.num_classes, options_.image_size));
  config_.dropout = options_.dropout;
  config_.cpu_kernels = options_.cpu_kernels;
  DistributedSamplerOptions train_sampling;
  train_sampling.dataset_size = shape.train_size;
  train_sampling.rank = rank_;
  train_sampling.world_size = world_;
  train_sampling.seed = options_.seed;
  if (options_.scaling == "weak") {
    train_sampling.subset_size =
        WeakScalingSubsetSize(shape.train_size, options_.weak_fraction, world_);
  }
  ASSIGN_OR_RETURN(train_sampler_, DistributedSampler::Create(train_sampling));
  DistributedSamplerOptions test_sampling = train_sampling;
  test_sampling.dataset_size = shape.test_size;
  test_sampling.subset_size.reset();
  test_sampling.shuffle = false;
  test_sampling.keep_tail = true;
  ASSIGN_OR_RETURN(test_sampler_, DistributedSampler::Create(test_sampling));
  absl::StatusOr<EpochPlan> plan =
      EpochPlan::Create(EpochPlanOptions{.epoch_size = train_sampler_->epoch_size(),
                                         .world_size = world_,
                                         .batch_size = options_.batch_size,
                                         .accum = options_.grad_accum});
  if (!plan.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "each of ", world_, " ranks gets ", train_sampler_->num_samples(),
        " training samples, fewer than one step's ", accum(), " micro-batches of ",
        options_.batch_size, " (", plan.status().message(), ")"));
  }
  plan_.emplace(*plan);
  synchronize_ = options_.allreduce && world_ > 1;
  fp16_ = options_.precision == "fp16";
  autocast_ = placement_.cuda && options_.precision != "fp32";
  autocast_dtype_ = fp16_ ? at::kHalf : at::kBFloat16;
  device_ =
      placement_.cuda
          ? torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(placement_.index))
          : torch::Device(torch::kCPU);
  if (loop_.fault != nullptr && loop_.fault->active()) fault_ = loop_.fault;
  return absl::OkStatus();
}

absl::Status TrainingRun::PrepareInit() {
  if (options_.init_from.empty()) return absl::OkStatus();
  ASSIGN_OR_RETURN(init_file_, SafetensorsFile::Open(options_.init_from));
  std::vector<std::string> names;
  for (const TensorView& t : init_file_->tensors()) names.push_back(t.name);
  if (options_.init_names == "auto") {
    ASSIGN_OR_RETURN(init_layout_, DetectWeightLayout(names));
  } else {
    ASSIGN_OR_RETURN(init_layout_, ParseWeightLayout(options_.init_names));
  }
  config_.layer_norm_eps = ConventionsOf(*init_layout_).layer_norm_eps;
  return absl::OkStatus();
}

absl::Status TrainingRun::LoadInit() {
  if (init_file_ == nullptr) return absl::OkStatus();
  PretrainedOptions loading;
  loading.layout = init_layout_;
  absl::StatusOr<PretrainedSummary> summary =
      LoadPretrained(**model_, *init_file_, loading);
  init_file_.reset();
  if (!summary.ok()) {
    return absl::Status(summary.status().code(),
                        absl::StrCat("trainer.init_from ", options_.init_from, ": ",
                                     summary.status().message()));
  }
  if (loop_.log != nullptr && rank_ == 0) {
    *loop_.log << "[rank 0] init_from " << options_.init_from << " ("
               << WeightLayoutName(summary->layout) << " names): " << summary->ToString()
               << std::endl;
  }
  return absl::OkStatus();
}

absl::Status TrainingRun::BuildModel() {
  RETURN_IF_ERROR(MakePlacementCurrent(placement_));
  // Initialisation draws from LibTorch's process-wide generator; the lock keeps
  // trainers sharing a process (the ranks of in-process tests) from
  // interleaving their draws, so the seed alone decides the initial model.
  static absl::Mutex init_mu(absl::kConstInit);
  RETURN_IF_ERROR(PrepareInit());
  {
    absl::MutexLock lock(&init_mu);
    torch::manual_seed(static_cast<uint64_t>(options_.seed));
    model_.emplace(config_);
  }
  VisionTransformer& model = *model_;
  RETURN_IF_ERROR(LoadInit());
  model->to(device_);
  parameters_ = model->parameters();
  for (const torch::Tensor& p : parameters_) parameter_count_ += p.numel();
  ReducerOptions reducing;
  reducing.bucket_cap_mb = options_.bucket_cap_mb;
  reducing.first_bucket_mb = options_.first_bucket_mb;
  reducing.overlap = options_.overlap;
  reducing.min_buckets = options_.min_buckets;
  // A world of one never all-reduces: its gradients need no buckets, and
  // ZeRO has nothing to shard.
  reducing.gradient_views = world_ > 1;
  zero_stage_ = world_ > 1 ? options_.zero_stage : 0;
  reducing.zero_stage = zero_stage_;
  if (zero_stage_ == 3) {
    // The units stage 3 gathers and frees together: each encoder block's
    // parameters (1 + its index), and the rest of the model (0).
    for (const auto& item : model->named_parameters()) {
      int unit = 0;
      if (absl::StartsWith(item.key(), "blocks.")) {
        const std::string_view rest = std::string_view(item.key()).substr(7);
        unit = 1 + std::stoi(std::string(rest.substr(0, rest.find('.'))));
      }
      reducing.units.push_back(unit);
    }
    reducing.unit_buffer = [this](int bucket) { return zero_->UnitBuffer(bucket); };
    reducing.on_bucket_reduced = [this](int bucket) { zero_->OnBucketReduced(bucket); };
  }
  if (options_.zero_stage > 0 && world_ == 1 && loop_.log != nullptr) {
    *loop_.log << "[rank 0] ZeRO stage " << options_.zero_stage
               << " has nothing to shard in a world of one: the rank keeps the whole "
                  "optimizer state (stage 0)"
               << std::endl;
  }
  ASSIGN_OR_RETURN(reducer_, Reducer::Create(parameters_, communicator_, reducing));
  named_collectives_.emplace(loop_.progress, communicator_);
  // Rank 0's initial values become everyone's.
  ReportPhase(RankPhase::kCollective);
  RETURN_IF_ERROR(reducer_->BroadcastParameters(0));
  ReportPhase(RankPhase::kStartup);
  // Dropout masks must differ across ranks.
  torch::manual_seed(static_cast<uint64_t>(options_.seed) + 7919u * (rank_ + 1u));
  OptimizedTensor optimized = Itself;
  if (zero_stage_ > 0) {
    ASSIGN_OR_RETURN(
        zero_, ZeroOptimizer::Create(zero_stage_, parameters_, *reducer_, communicator_));
    std::map<const void*, int> index;
    for (size_t i = 0; i < parameters_.size(); ++i) {
      index[parameters_[i].unsafeGetTensorImpl()] = static_cast<int>(i);
    }
    optimized = [this, index](const torch::Tensor& p) {
      return zero_->PieceOf(index.at(p.unsafeGetTensorImpl()));
    };
  }
  optimizer_ = MakeOptimizerFor(optimized, group_scales_, group_heads_);
  if (zero_ != nullptr) zero_->Attach(*optimizer_);
  if (zero_stage_ == 3) model->set_block_hooks(zero_.get());
  if (!options_.checkpoint_dir.empty()) checkpoints_.emplace(options_.checkpoint_dir);
  return absl::OkStatus();
}

std::unique_ptr<torch::optim::Optimizer> TrainingRun::MakeOptimizerFor(
    const OptimizedTensor& optimized, std::vector<double>& scales,
    std::vector<bool>& heads) {
  VisionTransformer& model = *model_;
  scales.clear();
  heads.clear();
  if (options_.layer_decay < 1.0 || options_.head_warmup_steps > 0) {
    return MakeLayerDecayOptimizer(options_, model, optimized, &scales, &heads);
  }
  std::unique_ptr<torch::optim::Optimizer> optimizer =
      MakeOptimizer(options_, model, optimized);
  scales.assign(optimizer->param_groups().size(), 1.0);
  heads.assign(optimizer->param_groups().size(), true);
  return optimizer;
}

absl::Status TrainingRun::RestoreOptimizerState(const RankCheckpoint& state, int64_t step,
                                                torch::optim::Optimizer& whole) {
  if (state.zero_stage == 0 && zero_ == nullptr) return absl::OkStatus();
  std::vector<std::optional<FlatParamState>> flat(parameters_.size());
  // The elements of each parameter whose state this rank keeps.
  std::vector<ElementRange> wanted;
  if (zero_ != nullptr) {
    wanted = zero_->StateRanges();
  } else {
    for (const int64_t numel : ParameterNumels()) wanted.push_back({0, numel});
  }
  if (state.zero_stage > 0) {
    ASSIGN_OR_RETURN(flat, LoadZeroShards(*checkpoints_, step, state.world_size,
                                          ParameterNumels(), wanted));
  }
  try {
    if (state.zero_stage == 0) {
      // A stage-0 checkpoint's state, whole, cut to this rank's ranges.
      for (size_t i = 0; i < parameters_.size(); ++i) {
        flat[i] = ReadFlatState(whole, parameters_[i]);
        if (!flat[i].has_value() || wanted[i].size() <= 0) {
          flat[i].reset();
          continue;
        }
        for (auto& [name, tensor] : flat[i]->tensors) {
          tensor = tensor.narrow(0, wanted[i].begin, wanted[i].size());
        }
      }
    }
    if (zero_ != nullptr) {
      zero_->ImportState(flat);
    } else {
      for (size_t i = 0; i < parameters_.size(); ++i) {
        if (flat[i].has_value()) WriteFlatState(*optimizer_, parameters_[i], *flat[i]);
      }
    }
  } catch (const std::exception& e) {
    return absl::DataLossError(
        absl::StrCat("checkpoint at step ", step, ": the optimizer state: ", e.what()));
  }
  return absl::OkStatus();
}

std::vector<int64_t> TrainingRun::ParameterNumels() const {
  std::vector<int64_t> numels;
  numels.reserve(parameters_.size());
  for (const torch::Tensor& p : parameters_) numels.push_back(p.numel());
  return numels;
}

int64_t TrainingRun::OptimizerStateBytes() const {
  const int64_t elements = zero_ != nullptr ? zero_->state_elements() : parameter_count_;
  return StateTensorsPerElement(*optimizer_) * elements *
         static_cast<int64_t>(sizeof(float));
}

int64_t TrainingRun::GradientBytes() const {
  return zero_ != nullptr ? zero_->gradient_bytes()
                          : parameter_count_ * static_cast<int64_t>(sizeof(float));
}

// The class names a checkpoint was written with must be the data's: a mapping
// that shifted would train every class under another's label.
absl::Status CheckClassNames(const std::vector<std::string>& stored,
                             const std::vector<std::string>& data) {
  if (stored.empty() || stored == data) return absl::OkStatus();
  for (size_t i = 0; i < std::max(stored.size(), data.size()); ++i) {
    const std::string a = i < stored.size() ? stored[i] : "(none)";
    const std::string b = i < data.size() ? data[i] : "(none)";
    if (a != b) {
      return absl::FailedPreconditionError(
          absl::StrCat("the checkpoint's classes differ from the data's: class ", i,
                       " is '", a, "' in the checkpoint and '", b, "' in the data (",
                       stored.size(), " vs ", data.size(), " classes)"));
    }
  }
  return absl::OkStatus();
}

absl::Status TrainingRun::Resume() {
  DataPosition start;
  int writer_world = world_;
  if (checkpoints_.has_value() && options_.resume) {
    ASSIGN_OR_RETURN(const std::optional<int64_t> latest, checkpoints_->LatestStep());
    if (latest.has_value()) {
      // ZeRO: a stage-0 checkpoint's optimizer loads into one over the whole
      // parameters, which RestoreOptimizerState then cuts into the pieces.
      std::unique_ptr<torch::optim::Optimizer> whole;
      if (zero_ != nullptr) {
        std::vector<double> scales;
        std::vector<bool> heads;
        whole = MakeOptimizerFor(Itself, scales, heads);
      }
      torch::optim::Optimizer& loaded = whole != nullptr ? *whole : *optimizer_;
      ASSIGN_OR_RETURN(
          const RankCheckpoint state,
          LoadCheckpointFiles(*checkpoints_, *latest, rank_, world_, **model_, loaded));
      RETURN_IF_ERROR(RestoreOptimizerState(state, *latest, loaded));
      RETURN_IF_ERROR(CheckClassNames(state.class_names, data_.shape().class_names));
      writer_world = state.world_size;
      if (writer_world != world_ && options_.scaling == "weak") {
        return absl::FailedPreconditionError(absl::StrCat(
            "checkpoint at step ", state.position.step, " was written by ", writer_world,
            " ranks; weak scaling trains a subset that grows with the world size, so it "
            "resumes only at that size (this run has ",
            world_, ")"));
      }
      const LoopPosition& at = state.position;
      start = DataPosition{at.epoch,
                           at.sample_in_epoch >= 0
                               ? at.sample_in_epoch
                               : at.batch_in_epoch * options_.batch_size * writer_world};
      start = plan_->AtStepBoundary(start);
      if (writer_world == world_) {
        RETURN_IF_ERROR(RestoreRngState(placement_.index, state));
      } else {
        // Rebuilt, not restored: distinct per rank, fixed by the seed and step.
        torch::manual_seed(static_cast<uint64_t>(options_.seed) + 7919u * (rank_ + 1u) +
                           104729u * static_cast<uint64_t>(at.step));
      }
      scaler_.Restore(state.loss_scaler);
      step_ = at.step;
      outcome_.resumed_from = step_;
      outcome_.resumed_world_size = writer_world;
    }
  }
  position_ = start;
  total_steps_ = step_ + plan_->StepsUntilEpoch(start, options_.epochs);
  if (options_.max_steps > 0) total_steps_ = std::min(total_steps_, options_.max_steps);
  if (step_ > total_steps_) {
    return absl::FailedPreconditionError(
        absl::StrCat("checkpoint at step ", step_, " is past this run's last step ",
                     total_steps_, ": resume with the settings it was written with"));
  }
  // Warm-up is a share of a whole run at this world size, resumed or not.
  int64_t whole_run = plan_->StepsUntilEpoch(DataPosition{}, options_.epochs);
  if (options_.max_steps > 0) whole_run = std::min(whole_run, options_.max_steps);
  warmup_steps_ =
      ResolveWarmupSteps(options_.warmup_steps, whole_run, loop_.warmup_fraction);
  epoch_timed_whole_ = position_.sample == 0;
  reducer_->ZeroGradients();
  if (loop_.progress != nullptr) loop_.progress->SetStep(step_);
  return absl::OkStatus();
}

// Micro-batch p of this run is the micro-batch p after `start` in the plan:
// this rank's share of that global block of its epoch's order. Each epoch's
// order is computed once and shared by the prefetcher's threads.
BatchPrefetcher::Producer PlannedBatches(const SampleLoader& loader,
                                         const DistributedSampler& sampler,
                                         const EpochPlan& plan, DataPosition start,
                                         int rank) {
  struct Orders {
    absl::Mutex mu;
    std::map<int64_t, std::shared_ptr<const std::vector<int64_t>>> by_epoch
        ABSL_GUARDED_BY(mu);
  };
  auto orders = std::make_shared<Orders>();
  return [&loader, &sampler, plan, start, rank, orders](int64_t p) {
    const DataPosition at = plan.Advance(start, p);
    std::shared_ptr<const std::vector<int64_t>> order;
    {
      absl::MutexLock lock(&orders->mu);
      auto& slot = orders->by_epoch[at.epoch];
      if (slot == nullptr) {
        slot = std::make_shared<const std::vector<int64_t>>(sampler.EpochOrder(at.epoch));
      }
      order = slot;
      // Epochs behind the one asked for are done with.
      orders->by_epoch.erase(orders->by_epoch.begin(), orders->by_epoch.find(at.epoch));
    }
    const std::vector<int64_t> ids = plan.RankBatch(*order, at, rank);
    return loader.Load(ids, 0, static_cast<int64_t>(ids.size()), at.epoch);
  };
}

absl::Status TrainingRun::BuildFeeds() {
  stop_agreement_.emplace(loop_.stop_requested, *reducer_, communicator_, synchronize_,
                          device_);
  // Both splits are normalised alike. On a GPU the loaders only gather uint8
  // images (into pinned memory); the feed copies them over and finishes them
  // there.
  const ChannelStats stats = data_.stats();
  const BatchStage stage = loop_.finish_batches_on_device.value_or(placement_.cuda)
                               ? BatchStage::kDevice
                               : BatchStage::kHost;
  BatchLoaderOptions test_loading;
  test_loading.image_size = config_.image_size;
  test_loading.stage = stage;
  test_loading.pin_memory = placement_.cuda && stage == BatchStage::kDevice;
  BatchLoaderOptions train_loading = test_loading;
  train_loading.augment = options_.augment.value_or(data_.augments_by_default());
  train_loading.seed = static_cast<uint64_t>(options_.seed);
  train_loader_ = data_.MakeLoader(Split::kTrain, train_loading);
  test_loader_ = data_.MakeLoader(Split::kTest, test_loading);
  BatchPrefetcherOptions prefetching;
  prefetching.workers = options_.data_workers;
  prefetching.on_worker_start = [placement = placement_] {
    MakePlacementCurrent(placement).IgnoreError();
  };
  train_batches_ = std::make_unique<BatchPrefetcher>(
      PlannedBatches(*train_loader_, *train_sampler_, *plan_, position_, rank_), 0,
      (total_steps_ - step_) * accum(), prefetching);
  BatchFeedOptions feeding;
  feeding.device = device_;
  feeding.stage = stage;
  feeding.stats = stats;
  feeding.image_size = config_.image_size;
  train_feed_ = std::make_unique<BatchFeed>(train_batches_.get(), feeding);
  test_feed_ = std::make_unique<BatchFeed>(nullptr, feeding);
  ASSIGN_OR_RETURN(timer_, MakeStepTimer(placement_));
  interval_.loss_sum = torch::zeros({}, torch::TensorOptions(device_));
  if (!options_.profile_steps.empty()) {
    StepProfilerOptions profiling;
    ASSIGN_OR_RETURN(profiling.steps, ParseProfileSteps(options_.profile_steps));
    profiling.dir = loop_.profile_dir;
    profiling.cuda = placement_.cuda;
    profiling.rank = rank_;
    profiling.log = loop_.log;
    profiler_ = std::make_unique<StepProfiler>(profiling);
  }
  return absl::OkStatus();
}

void TrainingRun::LogSetUp() const {
  if (loop_.log == nullptr) return;
  const DataShape& shape = data_.shape();
  *loop_.log << "[rank " << rank_ << "] " << options_.model << " ("
             << FormatCount(parameter_count_) << " parameters, " << config_.image_size
             << " px, patch " << config_.patch_size << ") on " << options_.dataset << ": "
             << shape.train_size << " train / " << shape.test_size
             << " test images; world " << world_ << " (" << communicator_.backend()
             << "), device " << placement_.name() << ", " << options_.precision << ", "
             << train_sampler_->num_samples() << " samples per rank, "
             << plan_->steps_per_epoch() << " steps per epoch of " << accum() << " x "
             << options_.batch_size << ", " << total_steps_ << " steps, "
             << options_.optimizer << ", gradient all-reduce "
             << (synchronize_ ? absl::StrCat(reducer_->plan().buckets.size(), " buckets",
                                             options_.overlap ? ", overlapped" : "")
                              : "off")
             << (outcome_.resumed_from > 0
                     ? absl::StrCat(", resumed at step ", outcome_.resumed_from,
                                    outcome_.resumed_world_size != world_
                                        ? absl::StrCat(" (written by ",
                                                       outcome_.resumed_world_size,
                                                       " ranks; epoch ", position_.epoch,
                                                       ", sample ", position_.sample, ")")
                                        : "")
                     : "")
             << ", CPU kernels "
             << (!config_.cpu_kernels || placement_.cuda
                     ? "LibTorch's"
                     : (CpuLinearAvailable()
                            ? "tessera (LayerNorm, GELU; Linear on oneDNN)"
                            : "tessera (LayerNorm, GELU)"))
             << std::endl;
  *loop_.log << "[rank " << rank_ << "] ZeRO stage " << zero_stage_
             << ": this rank holds " << OptimizerStateBytes()
             << " bytes of optimizer state and " << GradientBytes()
             << " bytes of gradients"
             << (zero_stage_ >= 2
                     ? absl::StrCat(" (plus at most ", reducer_->buckets_in_flight() + 1,
                                    " whole gradient buckets during backward)")
                     : "")
             << std::endl;
}

absl::StatusOr<Evaluation> TrainingRun::Evaluate() {
  Enter(RankPhase::kEval);
  torch::NoGradGuard no_grad;
  VisionTransformer& model = *model_;
  model->eval();
  const std::vector<int64_t> indices = test_sampler_->EpochIndices(0);
  torch::Tensor correct =
      torch::zeros({}, torch::TensorOptions(device_).dtype(torch::kDouble));
  torch::Tensor loss_sum = torch::zeros_like(correct);
  const auto n = static_cast<int64_t>(indices.size());
  for (int64_t begin = 0; begin < n; begin += loop_.eval_batch_size) {
    const int64_t end = std::min(n, begin + loop_.eval_batch_size);
    ASSIGN_OR_RETURN(const Batch loaded, test_loader_->Load(indices, begin, end, 0));
    const Batch batch = test_feed_->ToDevice(loaded);
    torch::Tensor logits;
    {
      AutocastScope mixed(autocast_, autocast_dtype_);
      logits = model->forward(batch.images).to(torch::kFloat);
    }
    loss_sum.add_(torch::nn::functional::cross_entropy(
        logits, batch.labels,
        torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum)));
    correct.add_(logits.argmax(1).eq(batch.labels).sum());
    if (loop_.progress != nullptr) loop_.progress->AddPhaseItem();
  }
  model->train();
  // Summed over ranks whether or not gradients are: every rank reports the
  // accuracy over the whole test set.
  torch::Tensor totals = torch::stack(
      {correct, loss_sum, torch::full({}, static_cast<double>(n), correct.options())});
  ReportPhase(RankPhase::kCollective);
  RETURN_IF_ERROR(communicator_.AllReduceSum(totals));
  ReportPhase(RankPhase::kEval);
  const torch::Tensor host = ReadFromDevice([&] { return totals.cpu(); });
  const double count = host[2].item<double>();
  if (count <= 0) return absl::FailedPreconditionError("the test set is empty");
  return Evaluation{host[0].item<double>() / count, host[1].item<double>() / count};
}

absl::Status TrainingRun::SaveCheckpoint(bool wait) {
  Enter(RankPhase::kCheckpoint);
  if (checkpoint_in_flight_.has_value()) {
    // One snapshot in flight at a time: the previous one has not reached every
    // rank's disk within checkpoint_every steps.
    if (rank_ == 0 && loop_.log != nullptr) {
      *loop_.log << "[rank 0] checkpoint " << *checkpoint_in_flight_
                 << " is still being written at step " << step_
                 << "; waiting for it (checkpoint_every may be shorter than a write)"
                 << std::endl;
    }
    RETURN_IF_ERROR(PublishWhenDurable(/*block=*/true));
  }
  RankCheckpoint state;
  state.rank = rank_;
  state.world_size = world_;
  state.position.step = step_;
  state.position.epoch = position_.epoch;
  state.position.sample_in_epoch = position_.sample;
  state.position.batch_in_epoch = position_.sample / plan_->samples_per_batch();
  state.loss_scaler = scaler_.state();
  state.class_names = data_.shape().class_names;
  state.zero_stage = zero_stage_;
  CaptureRngState(placement_.index, state);
  // The snapshot: the state as bytes in host memory, taken before the next
  // step changes it.
  const absl::Time snapshot_start = absl::Now();
  // Stage 3: the whole model for the snapshot, freed again after it.
  if (zero_ != nullptr) RETURN_IF_ERROR(zero_->GatherAll());
  absl::StatusOr<CheckpointFiles> serialized =
      SerializeCheckpoint(*checkpoints_, state, **model_, *optimizer_);
  if (zero_ != nullptr) zero_->ReleaseAll();
  ASSIGN_OR_RETURN(CheckpointFiles files, std::move(serialized));
  if (zero_ != nullptr) {
    ASSIGN_OR_RETURN(auto shard,
                     SerializeZeroShard(*checkpoints_, step_, rank_, world_,
                                        zero_->ExportState(), ParameterNumels()));
    files.files.push_back(std::move(shard));
  }
  checkpoint_bytes_ = files.total_bytes();
  checkpoint_snapshot_ = absl::Now() - snapshot_start;
  checkpoint_started_ = absl::Now();
  RETURN_IF_ERROR(checkpoint_writer_.Start(
      [files = std::move(files),
       hook = loop_.before_checkpoint_write](const CheckpointWriter::Progress& progress) {
        if (hook) hook(files.step);
        return WriteCheckpointFiles(files, progress);
      }));
  checkpoint_in_flight_ = step_;
  own_part_durable_ = false;
  if (wait || !options_.checkpoint_async) RETURN_IF_ERROR(PublishWhenDurable(true));
  return absl::OkStatus();
}

absl::StatusOr<int> TrainingRun::RanksWithDurableCheckpoint() {
  if (!own_part_durable_ && checkpoint_writer_.done()) {
    // A write that failed fails the run here, before the vote: the
    // checkpoint is never published.
    absl::Status written = checkpoint_writer_.Wait();
    if (!written.ok()) {
      return absl::Status(written.code(),
                          absl::StrCat("writing checkpoint ", *checkpoint_in_flight_,
                                       ": ", written.message()));
    }
    own_part_durable_ = true;
  }
  const int mine = own_part_durable_ ? 1 : 0;
  if (world_ == 1) return mine;
  torch::Tensor count = torch::full({1}, static_cast<float>(mine),
                                    torch::dtype(torch::kFloat).device(device_));
  RETURN_IF_ERROR(communicator_.AllReduceSum(count));
  return static_cast<int>(
      std::lround(ReadFromDevice([&] { return count.item<float>(); })));
}

absl::Status TrainingRun::PublishWhenDurable(bool block) {
  constexpr int64_t kBytesPerItem = int64_t{8} << 20;
  int64_t reported = 0;
  while (true) {
    ASSIGN_OR_RETURN(const int durable, RanksWithDurableCheckpoint());
    if (durable == world_) break;
    if (!block) return absl::OkStatus();
    // Waiting for the disk, not for a peer: progress is the bytes written.
    ReportPhase(RankPhase::kCheckpoint);
    const int64_t bytes = checkpoint_writer_.bytes_written();
    for (; loop_.progress != nullptr && reported + kBytesPerItem <= bytes;
         reported += kBytesPerItem) {
      loop_.progress->AddPhaseItem();
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  const int64_t step = *checkpoint_in_flight_;
  checkpoint_in_flight_.reset();
  own_part_durable_ = false;
  if (rank_ == 0) {
    std::ostream& log = loop_.log != nullptr ? *loop_.log : std::cerr;
    RETURN_IF_ERROR(PublishCheckpoint(*checkpoints_, step, loop_.checkpoint_keep, log));
    if (loop_.log != nullptr) {
      *loop_.log << absl::StrFormat(
                        "[rank 0] checkpoint %d published at step %d: %.1f MB, snapshot "
                        "%.2f s, written and agreed %.2f s later",
                        step, step_, static_cast<double>(checkpoint_bytes_) / 1e6,
                        absl::ToDoubleSeconds(checkpoint_snapshot_),
                        absl::ToDoubleSeconds(absl::Now() - checkpoint_started_))
                 << std::endl;
    }
  }
  return absl::OkStatus();
}

absl::Status TrainingRun::ForwardBackward(int64_t micro_batch) {
  Enter(RankPhase::kData);
  ASSIGN_OR_RETURN(const Batch batch, train_feed_->Next());
  timer_->Mark(StepPhase::kData);
  Enter(RankPhase::kForward);
  torch::Tensor loss;
  {
    AutocastScope mixed(autocast_, autocast_dtype_);
    loss = torch::nn::functional::cross_entropy(
        (*model_)->forward(batch.images), batch.labels,
        torch::nn::functional::CrossEntropyFuncOptions().label_smoothing(
            options_.label_smoothing));
  }
  timer_->Mark(StepPhase::kForward);
  const bool last = micro_batch == accum() - 1;
  if (last) stop_agreement_->Vote();
  reducer_->PrepareForBackward(synchronize_ && last);
  Enter(RankPhase::kBackward);
  // Micro-batch means are averaged over the step; fp16 scales the loss up.
  const double factor = (fp16_ ? scaler_.scale() : 1.0) / static_cast<double>(accum());
  (factor == 1.0 ? loss : loss * factor).backward();
  timer_->Mark(StepPhase::kBackward);
  interval_.loss_sum.add_(loss.detach());
  interval_.images += batch.labels.size(0);
  outcome_.train_images += batch.labels.size(0);
  return absl::OkStatus();
}

absl::Status TrainingRun::PlanCapture() {
  CaptureConditions conditions;
  conditions.cuda_device = placement_.cuda;
  conditions.build_can_capture = CapturedStep::Available();
  conditions.world_size = world_;
  conditions.grad_accum = options_.grad_accum;
  conditions.precision = options_.precision;
  conditions.optimizer = options_.optimizer;
  const OptimizerKind* kind = FindOptimizer(options_.optimizer);
  conditions.optimizer_capturable = kind != nullptr && kind->capturable;
  conditions.fault_hook = fault_ != nullptr;
  ASSIGN_OR_RETURN(CaptureDecision decision,
                   DecideCapture(options_.cuda_graph, conditions));
  if (decision.capture) {
    fused_adamw_ = dynamic_cast<FusedAdamW*>(optimizer_.get());
    const absl::Status capturable =
        fused_adamw_ != nullptr
            ? fused_adamw_->EnableCapture()
            : absl::FailedPreconditionError("the optimizer is not tessera's fused AdamW");
    if (!capturable.ok()) {
      if (options_.cuda_graph == "on") return capturable;
      decision.capture = false;
      decision.reasons.emplace_back(capturable.message());
    }
  }
  capture_ = decision.capture;
  if (capture_) {
    ASSIGN_OR_RETURN(capture_stream_, CapturedStep::StreamScope::Enter(placement_.index));
  }
  if (loop_.log != nullptr && placement_.cuda && !capture_ &&
      options_.cuda_graph == "auto") {
    *loop_.log << "[rank " << rank_ << "] CUDA graph: the step runs eager: "
               << absl::StrJoin(decision.reasons, "; ") << std::endl;
  }
  return absl::OkStatus();
}

absl::Status TrainingRun::TrainStep(bool* stop) {
  const Clock::time_point step_start = Clock::now();
  timer_->BeginStep();
  if (loop_.progress != nullptr) loop_.progress->BeginStep();
  if (capture_) {
    RETURN_IF_ERROR(CapturedRunStep(stop));
  } else {
    RETURN_IF_ERROR(EagerStepBody(stop));
  }
  timer_->EndStep();
  ++step_;
  const int64_t epoch_before = position_.epoch;
  position_ = plan_->Advance(position_, accum());
  epoch_ended_ = position_.epoch != epoch_before;
  if (loop_.progress != nullptr) loop_.progress->EndStep(step_);
  const double step_seconds = SecondsSince(step_start);
  train_seconds_ += step_seconds;
  epoch_seconds_ += step_seconds;
  return absl::OkStatus();
}

absl::Status TrainingRun::EagerStepBody(bool* stop) {
  for (int64_t m = 0; m < accum(); ++m) RETURN_IF_ERROR(ForwardBackward(m));
  interval_.micro_batches += accum();
  if (world_ > 1) Enter(RankPhase::kCollective);
  RETURN_IF_ERROR(reducer_->FinishBackward(fp16_ ? 1.0 / scaler_.scale() : 1.0));
  // On a GPU the host usually catches up with its device here: the vote it
  // reads was copied after the previous step's all-reduce.
  ASSIGN_OR_RETURN(*stop, ReadFromDevice([&] { return stop_agreement_->Decide(); }));
  timer_->Mark(StepPhase::kComm);
  Enter(RankPhase::kOptimizer);
  bool take_step = true;
  if (fp16_ && zero_ != nullptr) {
    // Each rank sees only its shard: the ranks agree through an all-reduce.
    ASSIGN_OR_RETURN(const bool overflow,
                     ReadFromDevice([&] { return zero_->AnyNonFinite(); }));
    take_step = scaler_.Update(overflow);
  } else if (fp16_) {
    take_step = scaler_.Update(
        ReadFromDevice([&] { return AnyNonFinite(reducer_->gradient_buffers()); }));
  }
  SetLearningRates();
  if (take_step && zero_ != nullptr) {
    RETURN_IF_ERROR(zero_->Step(options_.clip_grad_norm));
  } else if (take_step) {
    if (options_.clip_grad_norm > 0) {
      ClipGradientNorm(reducer_->gradient_buffers(), options_.clip_grad_norm);
    }
    optimizer_->step();
  } else {
    ++outcome_.skipped_steps;
  }
  reducer_->ZeroGradients();
  // A CPU rank's heap keeps the pages of what the step freed (activations,
  // gathered units, gradient buckets) between what it still holds; they go
  // back to the system here, so that its resident memory, and a memory
  // limit on it, follow what the step holds.
  if (!placement_.cuda) malloc_trim(0);
  timer_->Mark(StepPhase::kOptimizer);
  return absl::OkStatus();
}

void TrainingRun::SetLearningRates() {
  lr_ = ScheduledLearningRate(options_.lr, step_, total_steps_, warmup_steps_,
                              loop_.final_lr_fraction);
  // A head-only warm-up holds every other group still (lr 0).
  const bool head_only = step_ < options_.head_warmup_steps;
  auto& groups = optimizer_->param_groups();
  for (size_t g = 0; g < groups.size(); ++g) {
    groups[g].options().set_lr(head_only && !group_heads_[g] ? 0.0
                                                             : lr_ * group_scales_[g]);
  }
  // A captured run's AdamW reads them, and its step counts, from device
  // tensors, in every step.
  if (fused_adamw_ != nullptr) {
    fused_adamw_->WriteLearningRates();
    fused_adamw_->WriteStepCounts();
  }
}

// The step's whole device work (forward, backward, clipping, AdamW, the loss
// tally), as the captured graph replays it. Runs eager only while capturing.
void TrainingRun::StepOnStaticInputs(const torch::Tensor& images,
                                     const torch::Tensor& labels) {
  torch::Tensor loss;
  {
    AutocastScope mixed(autocast_, autocast_dtype_);
    loss = torch::nn::functional::cross_entropy(
        (*model_)->forward(images), labels,
        torch::nn::functional::CrossEntropyFuncOptions().label_smoothing(
            options_.label_smoothing));
  }
  loss.backward();
  // A world of one: nothing to all-reduce; this gathers the gradients to clip.
  const absl::Status finished = reducer_->FinishBackward();
  if (!finished.ok()) throw std::runtime_error(std::string(finished.message()));
  if (options_.clip_grad_norm > 0) {
    ClipGradientNorm(reducer_->gradient_buffers(), options_.clip_grad_norm);
  }
  optimizer_->step();
  interval_.loss_sum.add_(loss.detach());
}

absl::Status TrainingRun::CapturedRunStep(bool* stop) {
  // The run's side of the schedule: a batch is fetched for the capture or
  // the replay that uses it.
  class RunSteps final : public CaptureSchedule::Steps {
   public:
    RunSteps(TrainingRun& run, bool* stop) : run_(run), stop_(stop) {}
    void WriteStepValues() override { run_.SetLearningRates(); }
    absl::Status RunEager() override { return run_.EagerStepBody(stop_); }
    absl::Status Capture() override {
      RETURN_IF_ERROR(Fetch());
      // Gradients made by the capture live in the graph's pool from here on.
      run_.reducer_->ZeroGradients();
      ASSIGN_OR_RETURN(run_.captured_,
                       CapturedStep::Capture(batch_.images, batch_.labels,
                                             [this](const torch::Tensor& images,
                                                    const torch::Tensor& labels) {
                                               run_.StepOnStaticInputs(images, labels);
                                             }));
      if (run_.loop_.log != nullptr) {
        *run_.loop_.log
            << "[rank " << run_.rank_ << "] step " << run_.step_ + 1
            << ": training step captured in a CUDA graph; replayed from here on"
            << std::endl;
      }
      return absl::OkStatus();
    }
    void AdvanceHostCopies() override { run_.fused_adamw_->AdvanceHostSteps(); }
    absl::Status Replay() override {
      if (!fetched_) RETURN_IF_ERROR(Fetch());
      run_.Enter(RankPhase::kForward);
      RETURN_IF_ERROR(run_.captured_->Replay(batch_.images, batch_.labels));
      // One graph: the device's time of the whole step is the forward's.
      for (const StepPhase phase :
           {StepPhase::kForward, StepPhase::kBackward, StepPhase::kComm}) {
        run_.timer_->Mark(phase);
      }
      ++run_.interval_.micro_batches;
      run_.interval_.images += batch_.labels.size(0);
      run_.outcome_.train_images += batch_.labels.size(0);
      ASSIGN_OR_RETURN(*stop_, run_.stop_agreement_->Decide());
      run_.timer_->Mark(StepPhase::kOptimizer);
      return absl::OkStatus();
    }

   private:
    absl::Status Fetch() {
      run_.Enter(RankPhase::kData);
      ASSIGN_OR_RETURN(batch_, run_.train_feed_->Next());
      run_.timer_->Mark(StepPhase::kData);
      run_.stop_agreement_->Vote();
      fetched_ = true;
      return absl::OkStatus();
    }

    TrainingRun& run_;
    bool* stop_;
    Batch batch_;
    bool fetched_ = false;
  };
  RunSteps steps(*this, stop);
  return capture_schedule_.Step(steps).status();
}

void TrainingRun::ReportInterval(double lr) {
  const StepTimes times = ReadFromDevice([&] { return timer_->TakeTotals(); });
  const double steps = std::max<double>(1, static_cast<double>(times.steps));
  auto mean_ms = [&](StepPhase phase) { return 1000.0 * times.seconds(phase) / steps; };
  if (timer_->on_device() && times.steps > 0 && loop_.progress != nullptr) {
    // The device's own timeline, which the coordinator compares across ranks:
    // the host's phases show only where it waited for the device.
    std::vector<std::pair<std::string, double>> device_ms;
    for (size_t p = 0; p < kStepPhaseNames.size(); ++p) {
      device_ms.emplace_back(kStepPhaseNames[p], mean_ms(static_cast<StepPhase>(p)));
    }
    loop_.progress->SetDeviceStepTimes(std::move(device_ms),
                                       static_cast<int32_t>(times.steps));
  }
  const double loss_sum =
      ReadFromDevice([&] { return interval_.loss_sum.item<double>(); });
  // Epochs done, fractional: the position within the current one.
  const double epoch = static_cast<double>(position_.epoch) +
                       static_cast<double>(position_.sample) /
                           static_cast<double>(plan_->steps_per_epoch() *
                                               plan_->samples_per_batch() * accum());
  std::vector<std::pair<std::string, double>> values = {
      {"loss", loss_sum / static_cast<double>(interval_.micro_batches)},
      {"images_per_sec", times.step_seconds > 0
                             ? static_cast<double>(interval_.images) / times.step_seconds
                             : 0.0},
      {"time_data_ms", mean_ms(StepPhase::kData)},
      {"time_forward_ms", mean_ms(StepPhase::kForward)},
      {"time_backward_ms", mean_ms(StepPhase::kBackward)},
      {"time_comm_ms", mean_ms(StepPhase::kComm)},
      {"time_optimizer_ms", mean_ms(StepPhase::kOptimizer)},
      {"time_step_ms", 1000.0 * times.step_seconds / steps},
      {"lr", lr},
      {"epoch", epoch}};
  if (fp16_) values.emplace_back("loss_scale", scaler_.scale());
  if (world_ > 1) {
    // What this rank's collectives handed to the transport, per step.
    const int64_t sent = communicator_.bytes_sent();
    values.emplace_back("comm_bytes_per_step",
                        static_cast<double>(sent - bytes_sent_reported_) / steps);
    bytes_sent_reported_ = sent;
  }
  if (const int64_t skipped = data_.skipped(); skipped > 0) {
    values.emplace_back("data_skipped", static_cast<double>(skipped));
  }
  AppendDeviceMemory(device_.is_cuda(), device_.index(), values);
  if (!sizes_reported_) {
    values.emplace_back(kOptimizerStateBytesMetricName,
                        static_cast<double>(OptimizerStateBytes()));
    values.emplace_back(kGradientBytesMetricName, static_cast<double>(GradientBytes()));
    values.emplace_back(
        kParameterBytesMetricName,
        static_cast<double>(zero_ != nullptr ? zero_->parameter_bytes()
                                             : parameter_count_ *
                                                   static_cast<int64_t>(sizeof(float))));
    sizes_reported_ = true;
  }
  reporter_.Report(step_, values);
  interval_.loss_sum.zero_();
  interval_.micro_batches = 0;
  interval_.images = 0;
}

absl::Status TrainingRun::EndEpoch() {
  // Epochs timed whole by this run report their training time; the run's end
  // also reports its total, so partial epochs (max_steps, a resume) still
  // give a per-step time.
  std::vector<std::pair<std::string, double>> values;
  const bool epoch_ended = PlanEpochEnded();
  if (epoch_ended && epoch_timed_whole_)
    values.emplace_back("epoch_seconds", epoch_seconds_);
  epoch_seconds_ = 0;
  epoch_timed_whole_ = epoch_ended;
  if (step_ == total_steps_) {
    values.emplace_back("train_seconds", train_seconds_);
    // Steps timed by this run (a resumed run times only its own).
    values.emplace_back("train_steps",
                        static_cast<double>(step_ - outcome_.resumed_from));
  }
  if (!values.empty()) reporter_.Report(step_, values);
  ASSIGN_OR_RETURN(last_eval_, Evaluate());
  evaluated_at_ = step_;
  reporter_.Report(
      step_, {{"test_accuracy", last_eval_.accuracy}, {"test_loss", last_eval_.loss}});
  return absl::OkStatus();
}

absl::Status TrainingRun::TrainLoop() {
  // The run's shape, for progress and ETA in tessctl and the dashboard.
  reporter_.Report(step_,
                   {{"total_steps", static_cast<double>(total_steps_)},
                    {"steps_per_epoch", static_cast<double>(plan_->steps_per_epoch())}});
  (*model_)->train();
  // What setting up freed (ZeRO: the parameters before they were flattened).
  if (!placement_.cuda) malloc_trim(0);
  while (step_ < total_steps_) {
    bool stop = false;
    if (profiler_ != nullptr) RETURN_IF_ERROR(profiler_->BeforeStep(step_ + 1));
    RETURN_IF_ERROR(TrainStep(&stop));
    if (profiler_ != nullptr) RETURN_IF_ERROR(profiler_->AfterStep(step_));
    if (checkpoint_in_flight_.has_value()) RETURN_IF_ERROR(PublishWhenDurable(false));
    if (step_ % options_.metrics_every == 0 || step_ == total_steps_) ReportInterval(lr_);
    if (stop && step_ < total_steps_) {
      // Every rank decided the same after this step: checkpoint here and
      // leave, without evaluating.
      outcome_.preempted = true;
      if (checkpoints_.has_value()) {
        RETURN_IF_ERROR(SaveCheckpoint(/*wait=*/true));
        outcome_.checkpointed = true;
      }
      if (loop_.log != nullptr) {
        *loop_.log << "[rank " << rank_
                   << "] asked to stop: the ranks agreed to stop after step " << step_
                   << std::endl;
      }
      return absl::OkStatus();
    }
    if (PlanEpochEnded() || step_ == total_steps_) RETURN_IF_ERROR(EndEpoch());
    if (checkpoints_.has_value() &&
        ((options_.checkpoint_every > 0 && step_ % options_.checkpoint_every == 0) ||
         step_ == total_steps_)) {
      // The last one is waited for: the run ends with `latest` in place.
      RETURN_IF_ERROR(SaveCheckpoint(/*wait=*/step_ == total_steps_));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<TrainingOutcome> TrainingRun::Finish() {
  // A window the run cut short (max_steps, a stop) still gets its files.
  if (profiler_ != nullptr) RETURN_IF_ERROR(profiler_->Finish(step_));
  // A run resumed from its final checkpoint still reports the test metrics.
  if (!outcome_.preempted && evaluated_at_ != step_) {
    ASSIGN_OR_RETURN(last_eval_, Evaluate());
    reporter_.Report(
        step_, {{"test_accuracy", last_eval_.accuracy}, {"test_loss", last_eval_.loss}});
  }
  Fnv1a64 hash;
  for (size_t i = 0; i < parameters_.size(); ++i) {
    // Stage 3: a unit's memory at a time.
    if (zero_ != nullptr) RETURN_IF_ERROR(zero_->GatherOnlyUnitOf(static_cast<int>(i)));
    const torch::Tensor values = parameters_[i].detach().to(torch::kCPU).contiguous();
    hash.Update(values.data_ptr(), values.numel() * values.element_size());
  }
  if (zero_ != nullptr) zero_->ReleaseAll();
  outcome_.steps = step_;
  outcome_.train_seconds = train_seconds_;
  outcome_.test_accuracy = last_eval_.accuracy;
  outcome_.test_loss = last_eval_.loss;
  outcome_.parameter_count = parameter_count_;
  outcome_.device = placement_.name();
  outcome_.param_hash = hash.Hex();
  ReportPhase(RankPhase::kDone);
  return outcome_;
}

}  // namespace

Trainer::Trainer(const TrainerOptions& options, const TrainingData& data,
                 Communicator& communicator, MetricsReporter& reporter,
                 TrainerLoopOptions loop)
    : options_(options),
      loop_(loop),
      data_(data),
      communicator_(communicator),
      reporter_(reporter) {}

Trainer::Trainer(const TrainerOptions& options, const ImageDataset& train,
                 const ImageDataset& test, Communicator& communicator,
                 MetricsReporter& reporter, TrainerLoopOptions loop)
    : options_(options),
      loop_(loop),
      owned_data_(std::make_unique<InMemoryData>(train, test, options.dataset)),
      data_(*owned_data_),
      communicator_(communicator),
      reporter_(reporter) {}

Trainer::~Trainer() = default;

absl::StatusOr<TrainingOutcome> Trainer::Run() {
  RETURN_IF_ERROR(data_.Check());
  try {
    TrainingRun run(options_, loop_, data_, communicator_, reporter_);
    return run.Run();
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("training failed: ", e.what()));
  }
}

}  // namespace tessera::trainer
