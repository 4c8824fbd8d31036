#include "worker/trainer/trainer.h"

#include <ATen/autocast_mode.h>
#include <dlfcn.h>
#include <malloc.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/rank_phase.h"
#include "common/status_macros.h"
#include "worker/trainer/batch_feed.h"
#include "worker/trainer/batch_loader.h"
#include "worker/trainer/batch_prefetcher.h"
#include "worker/trainer/checkpoint.h"
#include "worker/trainer/distributed_sampler.h"
#include "worker/trainer/fault_injector.h"
#include "worker/trainer/fused_adamw.h"
#include "worker/trainer/fused_layers.h"
#include "worker/trainer/loss_scaler.h"
#include "worker/trainer/param_hash.h"
#include "worker/trainer/progress.h"
#include "worker/trainer/reducer.h"
#include "worker/trainer/step_timer.h"
#include "worker/trainer/stop_agreement.h"
#include "worker/trainer/vit.h"
#include "worker/trainer/vit_config.h"

#if TESSERA_TORCH_CUDA
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>
#if TESSERA_HAVE_CUDA_RUNTIME
#include "worker/trainer/cuda_step_timer.h"
#endif
#endif

namespace tessera::trainer {
namespace {

using Clock = std::chrono::steady_clock;

#if TESSERA_TORCH_CUDA
constexpr bool kTorchHasCuda = true;
#else
constexpr bool kTorchHasCuda = false;
#endif

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

// AdamW or SGD (with momentum) in two groups: weight decay on weight matrices
// only, not on biases, norms and the class/position tokens.
std::unique_ptr<torch::optim::Optimizer> MakeOptimizer(const TrainerOptions& options,
                                                       VisionTransformer& model) {
  std::vector<torch::Tensor> decayed;
  std::vector<torch::Tensor> not_decayed;
  for (const auto& item : model->named_parameters()) {
    const bool is_token =
        item.key() == "class_token" || item.key() == "position_embedding";
    (item.value().dim() <= 1 || is_token ? not_decayed : decayed).push_back(item.value());
  }
  std::vector<torch::optim::OptimizerParamGroup> groups;
  if (options.optimizer == "sgd") {
    auto sgd = [&](double decay) {
      return std::make_unique<torch::optim::SGDOptions>(
          torch::optim::SGDOptions(options.lr)
              .momentum(options.momentum)
              .weight_decay(decay));
    };
    groups.emplace_back(decayed, sgd(options.weight_decay));
    groups.emplace_back(not_decayed, sgd(0.0));
    return std::make_unique<torch::optim::SGD>(
        std::move(groups),
        torch::optim::SGDOptions(options.lr).momentum(options.momentum));
  }
  auto adamw = [&](double decay) {
    return std::make_unique<torch::optim::AdamWOptions>(
        torch::optim::AdamWOptions(options.lr).weight_decay(decay));
  };
  groups.emplace_back(decayed, adamw(options.weight_decay));
  groups.emplace_back(not_decayed, adamw(0.0));
  return std::make_unique<FusedAdamW>(
      std::move(groups),
      torch::optim::AdamWOptions(options.lr).weight_decay(options.weight_decay));
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
#if TESSERA_TORCH_CUDA && TESSERA_HAVE_CUDA_RUNTIME
  if (device.cuda) {
    return MakeCudaStepTimer(
        device.index,
        c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device.index))
            .stream());
  }
#else
  (void)device;
#endif
  return MakeHostStepTimer();
}

// Multiplies the gradients (bucket buffers) by min(1, max_norm / global norm),
// without a host sync.
void ClipGradientNorm(const std::vector<torch::Tensor>& buffers, double max_norm) {
  torch::NoGradGuard no_grad;
  torch::Tensor squares = torch::zeros({}, buffers.front().options());
  for (const torch::Tensor& buffer : buffers) squares.add_(buffer.square().sum());
  const torch::Tensor factor = (max_norm / (squares.sqrt() + 1e-6)).clamp_max(1.0);
  for (const torch::Tensor& buffer : buffers) buffer.mul_(factor);
}

bool AnyNonFinite(const std::vector<torch::Tensor>& buffers) {
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
    const bool available = torch::cuda::is_available();
    const int count = available ? static_cast<int>(torch::cuda::device_count()) : 0;
    if (count > 0) {
      placement.cuda = true;
      ASSIGN_OR_RETURN(placement.index, CudaDeviceForLocalRank(local_rank, count));
    } else if (options.device == "cuda") {
      return absl::FailedPreconditionError(
          available || kTorchHasCuda
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
#if TESSERA_TORCH_CUDA
  try {
    c10::cuda::set_device(static_cast<c10::DeviceIndex>(placement.index));
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("making ", placement.name(),
                                            " current: ", e.what_without_backtrace()));
  }
  return absl::OkStatus();
#else
  return absl::FailedPreconditionError(
      "this tessera-train's LibTorch was built without CUDA");
#endif
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

Trainer::Trainer(const TrainerOptions& options, const ImageDataset& train,
                 const ImageDataset& test, Communicator& communicator,
                 MetricsReporter& reporter, TrainerLoopOptions loop)
    : options_(options),
      loop_(loop),
      train_(train),
      test_(test),
      communicator_(communicator),
      reporter_(reporter) {}

absl::StatusOr<TrainingOutcome> Trainer::Run() {
  const int rank = communicator_.rank();
  const int world = communicator_.world_size();
  ConfigureComputeThreads(EffectiveThreads(options_));
  ASSIGN_OR_RETURN(const DevicePlacement placement,
                   ResolveDevice(options_, loop_.local_rank));
  ASSIGN_OR_RETURN(ViTConfig config,
                   ResolveViTConfig(options_.model, train_.channels, train_.num_classes,
                                    options_.image_size));
  config.dropout = options_.dropout;
  config.cpu_kernels = options_.cpu_kernels;
  if (test_.channels != train_.channels || test_.num_classes != train_.num_classes) {
    return absl::InvalidArgumentError("train and test splits differ in shape");
  }

  DistributedSamplerOptions train_sampling;
  train_sampling.dataset_size = train_.size();
  train_sampling.rank = rank;
  train_sampling.world_size = world;
  train_sampling.seed = options_.seed;
  if (options_.scaling == "weak") {
    train_sampling.subset_size =
        WeakScalingSubsetSize(train_.size(), options_.weak_fraction, world);
  }
  ASSIGN_OR_RETURN(const DistributedSampler train_sampler,
                   DistributedSampler::Create(train_sampling));
  DistributedSamplerOptions test_sampling = train_sampling;
  test_sampling.dataset_size = test_.size();
  test_sampling.subset_size.reset();
  test_sampling.shuffle = false;
  test_sampling.keep_tail = true;
  ASSIGN_OR_RETURN(const DistributedSampler test_sampler,
                   DistributedSampler::Create(test_sampling));

  // An optimizer step takes grad_accum micro-batches; a step never straddles
  // two epochs (the epoch's leftover micro-batches are dropped).
  const int64_t accum = options_.grad_accum;
  const int64_t batch_size = options_.batch_size;
  const int64_t steps_per_epoch = train_sampler.num_samples() / batch_size / accum;
  if (steps_per_epoch == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("each of ", world, " ranks gets ", train_sampler.num_samples(),
                     " training samples, fewer than one step's ", accum,
                     " micro-batches of ", batch_size));
  }
  const int64_t batches_per_epoch = steps_per_epoch * accum;
  int64_t total_steps = steps_per_epoch * options_.epochs;
  if (options_.max_steps > 0) total_steps = std::min(total_steps, options_.max_steps);
  const int64_t warmup_steps =
      ResolveWarmupSteps(options_.warmup_steps, total_steps, loop_.warmup_fraction);
  const bool synchronize = options_.allreduce && world > 1;
  const bool fp16 = options_.precision == "fp16";
  const bool autocast = placement.cuda && options_.precision != "fp32";
  const at::ScalarType autocast_dtype = fp16 ? at::kHalf : at::kBFloat16;

  try {
#if TESSERA_TORCH_CUDA
    if (placement.cuda) {
      c10::cuda::set_device(static_cast<c10::DeviceIndex>(placement.index));
    }
#endif
    const torch::Device device =
        placement.cuda
            ? torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(placement.index))
            : torch::Device(torch::kCPU);
    // Initialisation draws from LibTorch's process-wide generator; the lock keeps
    // trainers sharing a process (the ranks of in-process tests) from
    // interleaving their draws, so the seed alone decides the initial model.
    static absl::Mutex init_mu(absl::kConstInit);
    std::optional<VisionTransformer> initialised;
    {
      absl::MutexLock lock(&init_mu);
      torch::manual_seed(static_cast<uint64_t>(options_.seed));
      initialised.emplace(config);
    }
    VisionTransformer model = *std::move(initialised);
    model->to(device);
    std::vector<torch::Tensor> parameters = model->parameters();
    int64_t parameter_count = 0;
    for (const torch::Tensor& p : parameters) parameter_count += p.numel();

    ReducerOptions reducing;
    reducing.bucket_cap_mb = options_.bucket_cap_mb;
    reducing.first_bucket_mb = options_.first_bucket_mb;
    reducing.overlap = options_.overlap;
    reducing.min_buckets = options_.min_buckets;
    ASSIGN_OR_RETURN(std::unique_ptr<Reducer> reducer,
                     Reducer::Create(parameters, communicator_, reducing));
    CollectivesInProgress named_collectives(loop_.progress, communicator_);
    // Reports a phase (progress.h).
    auto report_phase = [progress = loop_.progress](RankPhase phase) {
      if (progress != nullptr) progress->Enter(phase);
    };
    // Rank 0's initial values become everyone's.
    report_phase(RankPhase::kCollective);
    RETURN_IF_ERROR(reducer->BroadcastParameters(0));
    report_phase(RankPhase::kStartup);
    // Dropout masks must differ across ranks.
    torch::manual_seed(static_cast<uint64_t>(options_.seed) + 7919u * (rank + 1u));

    std::unique_ptr<torch::optim::Optimizer> optimizer = MakeOptimizer(options_, model);
    LossScaler scaler;

    std::optional<CheckpointDirectory> checkpoints;
    if (!options_.checkpoint_dir.empty()) checkpoints.emplace(options_.checkpoint_dir);
    int64_t step = 0;
    TrainingOutcome outcome;
    if (checkpoints.has_value() && options_.resume) {
      ASSIGN_OR_RETURN(const std::optional<int64_t> latest, checkpoints->LatestStep());
      if (latest.has_value()) {
        ASSIGN_OR_RETURN(
            const RankCheckpoint state,
            LoadCheckpointFiles(*checkpoints, *latest, rank, world, *model, *optimizer));
        const LoopPosition& at = state.position;
        if (at.step > total_steps || at.epoch != at.step / steps_per_epoch ||
            at.batch_in_epoch != (at.step % steps_per_epoch) * accum) {
          return absl::FailedPreconditionError(absl::StrCat(
              "checkpoint at step ", at.step, " (epoch ", at.epoch, ", batch ",
              at.batch_in_epoch, ") does not fit this run's ", steps_per_epoch,
              " steps per epoch of ", accum, " micro-batches, ", total_steps,
              " steps in all: resume with the settings it was written with"));
        }
        RETURN_IF_ERROR(RestoreRngState(placement.index, state));
        scaler.Restore(state.loss_scaler);
        step = at.step;
        outcome.resumed_from = step;
      }
    }
    reducer->ZeroGradients();
    if (loop_.progress != nullptr) loop_.progress->SetStep(step);
    FaultInjector* const fault =
        loop_.fault != nullptr && loop_.fault->active() ? loop_.fault : nullptr;
    // A phase of the loop itself (not the collectives nested in evaluation and
    // checkpoints): reported, and where the --fault hook acts.
    auto enter = [&](RankPhase phase) {
      report_phase(phase);
      if (fault != nullptr) fault->OnPhase(phase, step);
    };
    StopAgreement stop_agreement(loop_.stop_requested, *reducer, communicator_,
                                 synchronize, device);

    // Both splits are normalised with the training split's statistics. On a
    // GPU the loaders only gather uint8 images at their native size (into
    // pinned memory); the feed copies them over and finishes them there.
    const ChannelStats stats = ComputeChannelStats(train_);
    const BatchStage stage = loop_.finish_batches_on_device.value_or(placement.cuda)
                                 ? BatchStage::kDevice
                                 : BatchStage::kHost;
    BatchLoaderOptions test_loading;
    test_loading.image_size = config.image_size;
    test_loading.stage = stage;
    test_loading.pin_memory = placement.cuda && stage == BatchStage::kDevice;
    BatchLoaderOptions train_loading = test_loading;
    train_loading.augment =
        options_.augment.value_or(AugmentsByDefault(options_.dataset));
    train_loading.seed = static_cast<uint64_t>(options_.seed);
    const BatchLoader train_loader(train_, stats, train_loading);
    const BatchLoader test_loader(test_, stats, test_loading);
    // Micro-batch p of the run is batch p % batches_per_epoch of epoch
    // p / batches_per_epoch, prepared ahead by data_workers threads.
    BatchPrefetcherOptions prefetching;
    prefetching.workers = options_.data_workers;
    prefetching.on_worker_start = [placement] {
      MakePlacementCurrent(placement).IgnoreError();
    };
    BatchPrefetcher train_batches(
        EpochBatchProducer(train_loader, train_sampler, batch_size, batches_per_epoch),
        step * accum, (total_steps - step) * accum, prefetching);
    BatchFeedOptions feeding;
    feeding.device = device;
    feeding.stage = stage;
    feeding.stats = stats;
    feeding.image_size = config.image_size;
    BatchFeed train_feed(&train_batches, feeding);
    BatchFeed test_feed(nullptr, feeding);

    if (loop_.log != nullptr) {
      *loop_.log << "[rank " << rank << "] " << options_.model << " ("
                 << FormatCount(parameter_count) << " parameters, " << config.image_size
                 << " px, patch " << config.patch_size << ") on " << options_.dataset
                 << ": " << train_.size() << " train / " << test_.size()
                 << " test images; world " << world << " (" << communicator_.backend()
                 << "), device " << placement.name() << ", " << options_.precision << ", "
                 << train_sampler.num_samples() << " samples per rank, "
                 << steps_per_epoch << " steps per epoch of " << accum << " x "
                 << batch_size << ", " << total_steps << " steps, " << options_.optimizer
                 << ", gradient all-reduce "
                 << (synchronize
                         ? absl::StrCat(reducer->plan().buckets.size(), " buckets",
                                        options_.overlap ? ", overlapped" : "")
                         : "off")
                 << (outcome.resumed_from > 0
                         ? absl::StrCat(", resumed at step ", outcome.resumed_from)
                         : "")
                 << ", CPU kernels "
                 << (!config.cpu_kernels || placement.cuda
                         ? "LibTorch's"
                         : (CpuLinearAvailable()
                                ? "tessera (LayerNorm, GELU; Linear on oneDNN)"
                                : "tessera (LayerNorm, GELU)"))
                 << std::endl;
    }

    auto evaluate = [&]() -> absl::StatusOr<Evaluation> {
      enter(RankPhase::kEval);
      torch::NoGradGuard no_grad;
      model->eval();
      const std::vector<int64_t> indices = test_sampler.EpochIndices(0);
      torch::Tensor correct =
          torch::zeros({}, torch::TensorOptions(device).dtype(torch::kDouble));
      torch::Tensor loss_sum = torch::zeros_like(correct);
      const auto n = static_cast<int64_t>(indices.size());
      for (int64_t begin = 0; begin < n; begin += loop_.eval_batch_size) {
        const int64_t end = std::min(n, begin + loop_.eval_batch_size);
        const Batch batch = test_feed.ToDevice(test_loader.Load(indices, begin, end));
        const torch::Tensor& labels = batch.labels;
        torch::Tensor logits;
        {
          AutocastScope mixed(autocast, autocast_dtype);
          logits = model->forward(batch.images).to(torch::kFloat);
        }
        loss_sum.add_(torch::nn::functional::cross_entropy(
            logits, labels,
            torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum)));
        correct.add_(logits.argmax(1).eq(labels).sum());
        if (loop_.progress != nullptr) loop_.progress->AddPhaseItem();
      }
      model->train();
      // Summed over ranks whether or not gradients are: every rank reports the
      // accuracy over the whole test set.
      torch::Tensor totals =
          torch::stack({correct, loss_sum,
                        torch::full({}, static_cast<double>(n), correct.options())});
      report_phase(RankPhase::kCollective);
      RETURN_IF_ERROR(communicator_.AllReduceSum(totals));
      report_phase(RankPhase::kEval);
      const torch::Tensor host = totals.cpu();
      const double count = host[2].item<double>();
      if (count <= 0) return absl::FailedPreconditionError("the test set is empty");
      return Evaluation{host[0].item<double>() / count, host[1].item<double>() / count};
    };

    auto save_checkpoint = [&]() -> absl::Status {
      enter(RankPhase::kCheckpoint);
      RankCheckpoint state;
      state.rank = rank;
      state.world_size = world;
      state.position.step = step;
      state.position.epoch = step / steps_per_epoch;
      state.position.batch_in_epoch = (step % steps_per_epoch) * accum;
      state.loss_scaler = scaler.state();
      CaptureRngState(placement.index, state);
      RETURN_IF_ERROR(SaveCheckpointFiles(*checkpoints, state, *model, *optimizer));
      // `latest` moves only once every rank's files are in place.
      report_phase(RankPhase::kCollective);
      RETURN_IF_ERROR(communicator_.Barrier());
      report_phase(RankPhase::kCheckpoint);
      if (rank == 0) {
        RETURN_IF_ERROR(checkpoints->PublishLatest(step));
        RETURN_IF_ERROR(checkpoints->Prune(step, loop_.checkpoint_keep));
      }
      return absl::OkStatus();
    };

    const auto crossentropy =
        torch::nn::functional::CrossEntropyFuncOptions().label_smoothing(
            options_.label_smoothing);
    ASSIGN_OR_RETURN(std::unique_ptr<StepTimer> timer, MakeStepTimer(placement));
    torch::Tensor loss_sum = torch::zeros({}, torch::TensorOptions(device));
    int64_t interval_micro_batches = 0;
    int64_t interval_images = 0;
    double train_seconds = 0;
    // Training seconds since the current epoch began (evaluation excluded).
    double epoch_seconds = 0;
    std::optional<int64_t> evaluated_at;
    Evaluation last_eval;
    // The run's shape, for progress and ETA in tessctl and the dashboard.
    reporter_.Report(step, {{"total_steps", static_cast<double>(total_steps)},
                            {"steps_per_epoch", static_cast<double>(steps_per_epoch)}});
    model->train();
    while (step < total_steps) {
      const Clock::time_point step_start = Clock::now();
      timer->BeginStep();
      if (loop_.progress != nullptr) loop_.progress->BeginStep();
      for (int64_t m = 0; m < accum; ++m) {
        enter(RankPhase::kData);
        ASSIGN_OR_RETURN(const Batch batch, train_feed.Next());
        const torch::Tensor& images = batch.images;
        const torch::Tensor& labels = batch.labels;
        timer->Mark(StepPhase::kData);
        enter(RankPhase::kForward);
        torch::Tensor loss;
        {
          AutocastScope mixed(autocast, autocast_dtype);
          loss = torch::nn::functional::cross_entropy(model->forward(images), labels,
                                                      crossentropy);
        }
        timer->Mark(StepPhase::kForward);
        const bool last = m == accum - 1;
        if (last) stop_agreement.Vote();
        reducer->PrepareForBackward(synchronize && last);
        enter(RankPhase::kBackward);
        // Micro-batch means are averaged over the step; fp16 scales the loss up.
        const double factor = (fp16 ? scaler.scale() : 1.0) / static_cast<double>(accum);
        (factor == 1.0 ? loss : loss * factor).backward();
        timer->Mark(StepPhase::kBackward);
        loss_sum.add_(loss.detach());
        interval_images += batch.labels.size(0);
        outcome.train_images += batch.labels.size(0);
      }
      interval_micro_batches += accum;
      if (world > 1) enter(RankPhase::kCollective);
      RETURN_IF_ERROR(reducer->FinishBackward(fp16 ? 1.0 / scaler.scale() : 1.0));
      ASSIGN_OR_RETURN(const bool stop, stop_agreement.Decide());
      timer->Mark(StepPhase::kComm);
      enter(RankPhase::kOptimizer);

      bool take_step = true;
      if (fp16) take_step = scaler.Update(AnyNonFinite(reducer->gradient_buffers()));
      const double lr = ScheduledLearningRate(options_.lr, step, total_steps,
                                              warmup_steps, loop_.final_lr_fraction);
      if (take_step) {
        if (options_.clip_grad_norm > 0) {
          ClipGradientNorm(reducer->gradient_buffers(), options_.clip_grad_norm);
        }
        for (auto& group : optimizer->param_groups()) group.options().set_lr(lr);
        optimizer->step();
      } else {
        ++outcome.skipped_steps;
      }
      reducer->ZeroGradients();
      timer->Mark(StepPhase::kOptimizer);
      timer->EndStep();
      ++step;
      if (loop_.progress != nullptr) loop_.progress->EndStep(step);
      const double step_seconds = SecondsSince(step_start);
      train_seconds += step_seconds;
      epoch_seconds += step_seconds;

      if (step % options_.metrics_every == 0 || step == total_steps) {
        const StepTimes times = timer->TakeTotals();
        const double steps = std::max<double>(1, static_cast<double>(times.steps));
        auto mean_ms = [&](StepPhase phase) {
          return 1000.0 * times.seconds(phase) / steps;
        };
        std::vector<std::pair<std::string, double>> values = {
            {"loss",
             loss_sum.item<double>() / static_cast<double>(interval_micro_batches)},
            {"images_per_sec",
             times.step_seconds > 0
                 ? static_cast<double>(interval_images) / times.step_seconds
                 : 0.0},
            {"time_data_ms", mean_ms(StepPhase::kData)},
            {"time_forward_ms", mean_ms(StepPhase::kForward)},
            {"time_backward_ms", mean_ms(StepPhase::kBackward)},
            {"time_comm_ms", mean_ms(StepPhase::kComm)},
            {"time_optimizer_ms", mean_ms(StepPhase::kOptimizer)},
            {"time_step_ms", 1000.0 * times.step_seconds / steps},
            {"lr", lr},
            {"epoch", static_cast<double>(step) / static_cast<double>(steps_per_epoch)}};
        if (fp16) values.emplace_back("loss_scale", scaler.scale());
        reporter_.Report(step, values);
        loss_sum.zero_();
        interval_micro_batches = 0;
        interval_images = 0;
      }
      if (stop && step < total_steps) {
        // Every rank decided the same after this step: checkpoint here and
        // leave, without evaluating.
        outcome.preempted = true;
        if (checkpoints.has_value()) {
          RETURN_IF_ERROR(save_checkpoint());
          outcome.checkpointed = true;
        }
        if (loop_.log != nullptr) {
          *loop_.log << "[rank " << rank
                     << "] asked to stop: the ranks agreed to stop after step " << step
                     << std::endl;
        }
        break;
      }
      if (step % steps_per_epoch == 0 || step == total_steps) {
        // Epochs timed whole by this run report their training time; the run's
        // end also reports its total, so partial epochs (max_steps, a resume)
        // still give a per-step time.
        std::vector<std::pair<std::string, double>> values;
        if (step % steps_per_epoch == 0 &&
            step - steps_per_epoch >= outcome.resumed_from) {
          values.emplace_back("epoch_seconds", epoch_seconds);
        }
        epoch_seconds = 0;
        if (step == total_steps) {
          values.emplace_back("train_seconds", train_seconds);
          // Steps timed by this run (a resumed run times only its own).
          values.emplace_back("train_steps",
                              static_cast<double>(step - outcome.resumed_from));
        }
        if (!values.empty()) reporter_.Report(step, values);
        ASSIGN_OR_RETURN(last_eval, evaluate());
        evaluated_at = step;
        reporter_.Report(
            step, {{"test_accuracy", last_eval.accuracy}, {"test_loss", last_eval.loss}});
      }
      if (checkpoints.has_value() &&
          ((options_.checkpoint_every > 0 && step % options_.checkpoint_every == 0) ||
           step == total_steps)) {
        RETURN_IF_ERROR(save_checkpoint());
      }
    }
    // A run resumed from its final checkpoint still reports the test metrics.
    if (!outcome.preempted && evaluated_at != step) {
      ASSIGN_OR_RETURN(last_eval, evaluate());
      reporter_.Report(
          step, {{"test_accuracy", last_eval.accuracy}, {"test_loss", last_eval.loss}});
    }

    Fnv1a64 hash;
    for (const torch::Tensor& p : parameters) {
      const torch::Tensor values = p.detach().to(torch::kCPU).contiguous();
      hash.Update(values.data_ptr(), values.numel() * values.element_size());
    }
    outcome.steps = step;
    outcome.train_seconds = train_seconds;
    outcome.test_accuracy = last_eval.accuracy;
    outcome.test_loss = last_eval.loss;
    outcome.parameter_count = parameter_count;
    outcome.device = placement.name();
    outcome.param_hash = hash.Hex();
    report_phase(RankPhase::kDone);
    return outcome;
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("training failed: ", e.what()));
  }
}

}  // namespace tessera::trainer
