#include "worker/trainer/trainer.h"

#include <dlfcn.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <exception>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "coordinator/common/status_macros.h"
#include "worker/trainer/batch_loader.h"
#include "worker/trainer/distributed_sampler.h"
#include "worker/trainer/param_hash.h"
#include "worker/trainer/vit.h"
#include "worker/trainer/vit_config.h"

namespace tessera::trainer {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// All parameters (registration order) copied into or out of one flat buffer.
class FlatParameters {
 public:
  explicit FlatParameters(std::vector<torch::Tensor> parameters)
      : parameters_(std::move(parameters)) {
    int64_t total = 0;
    for (const torch::Tensor& p : parameters_) total += p.numel();
    buffer_ = torch::zeros({total}, torch::kFloat);
  }

  torch::Tensor& buffer() { return buffer_; }

  void GatherValues() {
    torch::NoGradGuard no_grad;
    int64_t offset = 0;
    for (const torch::Tensor& p : parameters_) {
      buffer_.narrow(0, offset, p.numel()).copy_(p.detach().reshape({-1}));
      offset += p.numel();
    }
  }

  void ScatterValues() {
    torch::NoGradGuard no_grad;
    int64_t offset = 0;
    for (torch::Tensor& p : parameters_) {
      p.detach().copy_(buffer_.narrow(0, offset, p.numel()).view_as(p));
      offset += p.numel();
    }
  }

  void GatherGradients() {
    int64_t offset = 0;
    for (const torch::Tensor& p : parameters_) {
      torch::Tensor slot = buffer_.narrow(0, offset, p.numel());
      if (p.grad().defined()) {
        slot.copy_(p.grad().reshape({-1}));
      } else {
        slot.zero_();
      }
      offset += p.numel();
    }
  }

  void ScatterGradients() {
    int64_t offset = 0;
    for (torch::Tensor& p : parameters_) {
      torch::Tensor slot = buffer_.narrow(0, offset, p.numel()).view_as(p);
      if (p.grad().defined()) {
        p.mutable_grad().copy_(slot);
      } else {
        p.mutable_grad() = slot.clone();
      }
      offset += p.numel();
    }
  }

 private:
  std::vector<torch::Tensor> parameters_;
  torch::Tensor buffer_;
};

struct Evaluation {
  double accuracy = 0;
  double loss = 0;
};

// Accumulates one report interval.
struct Interval {
  Clock::time_point start = Clock::now();
  int64_t steps = 0;
  int64_t images = 0;
  double loss_sum = 0;
  double allreduce_seconds = 0;
};

std::string FormatCount(int64_t n) {
  return n >= 1000000 ? absl::StrCat(n / 100000 / 10.0, "M") : absl::StrCat(n);
}

}  // namespace

void ConfigureComputeThreads(int threads) {
  torch::set_num_threads(threads);
  using SetThreads = void (*)(int);
  if (auto* set_blas_threads =
          reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) {
    set_blas_threads(threads);
  }
}

double ScheduledLearningRate(double peak, int64_t step, int64_t total_steps,
                             const TrainerLoopOptions& loop) {
  const auto warmup = static_cast<int64_t>(
      std::ceil(loop.warmup_fraction * static_cast<double>(total_steps)));
  if (step < warmup) {
    return peak * static_cast<double>(step + 1) / static_cast<double>(warmup);
  }
  const double decay_steps =
      static_cast<double>(std::max<int64_t>(1, total_steps - warmup));
  const double progress =
      std::clamp(static_cast<double>(step - warmup) / decay_steps, 0.0, 1.0);
  const double floor = peak * loop.final_lr_fraction;
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
  ASSIGN_OR_RETURN(const ViTConfig config,
                   ResolveViTConfig(options_.model, train_.channels, train_.num_classes));
  if (test_.channels != train_.channels || test_.num_classes != train_.num_classes) {
    return absl::InvalidArgumentError("train and test splits differ in shape");
  }

  DistributedSamplerOptions train_sampling;
  train_sampling.dataset_size = train_.size();
  train_sampling.rank = rank;
  train_sampling.world_size = world;
  train_sampling.seed = options_.seed;
  ASSIGN_OR_RETURN(const DistributedSampler train_sampler,
                   DistributedSampler::Create(train_sampling));
  DistributedSamplerOptions test_sampling = train_sampling;
  test_sampling.dataset_size = test_.size();
  test_sampling.shuffle = false;
  test_sampling.keep_tail = true;
  ASSIGN_OR_RETURN(const DistributedSampler test_sampler,
                   DistributedSampler::Create(test_sampling));

  const int64_t steps_per_epoch = train_sampler.num_samples() / options_.batch_size;
  if (steps_per_epoch == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("each of ", world, " ranks gets ", train_sampler.num_samples(),
                     " training samples, fewer than one batch of ", options_.batch_size));
  }
  int64_t total_steps = steps_per_epoch * options_.epochs;
  if (options_.max_steps > 0) total_steps = std::min(total_steps, options_.max_steps);

  try {
    torch::manual_seed(static_cast<uint64_t>(options_.seed));
    VisionTransformer model(config);
    std::vector<torch::Tensor> parameters = model->parameters();
    FlatParameters flat(parameters);
    const int64_t parameter_count = flat.buffer().numel();

    // Rank 0's initial values become everyone's.
    flat.GatherValues();
    RETURN_IF_ERROR(communicator_.Broadcast(flat.buffer(), 0));
    flat.ScatterValues();
    // Dropout masks must differ across ranks.
    torch::manual_seed(static_cast<uint64_t>(options_.seed) + 7919u * (rank + 1u));

    // No weight decay on biases, norms and the embeddings' class/position tokens.
    std::vector<torch::Tensor> decayed;
    std::vector<torch::Tensor> not_decayed;
    for (const auto& item : model->named_parameters()) {
      const bool is_token =
          item.key() == "class_token" || item.key() == "position_embedding";
      (item.value().dim() <= 1 || is_token ? not_decayed : decayed)
          .push_back(item.value());
    }
    std::vector<torch::optim::OptimizerParamGroup> groups;
    groups.emplace_back(
        decayed,
        std::make_unique<torch::optim::AdamWOptions>(
            torch::optim::AdamWOptions(options_.lr).weight_decay(options_.weight_decay)));
    groups.emplace_back(not_decayed,
                        std::make_unique<torch::optim::AdamWOptions>(
                            torch::optim::AdamWOptions(options_.lr).weight_decay(0.0)));
    torch::optim::AdamW optimizer(
        std::move(groups),
        torch::optim::AdamWOptions(options_.lr).weight_decay(options_.weight_decay));

    // Both splits are normalised with the training split's statistics.
    const ChannelStats stats = ComputeChannelStats(train_);
    const BatchLoader train_loader(train_, stats, config.image_size);
    const BatchLoader test_loader(test_, stats, config.image_size);

    if (loop_.log != nullptr) {
      *loop_.log << "[rank " << rank << "] " << options_.model << " ("
                 << FormatCount(parameter_count) << " parameters, " << config.image_size
                 << " px, patch " << config.patch_size << ") on " << options_.dataset
                 << ": " << train_.size() << " train / " << test_.size()
                 << " test images; world " << world << " (" << communicator_.backend()
                 << "), " << train_sampler.num_samples() << " samples per rank, "
                 << steps_per_epoch << " steps per epoch, " << total_steps
                 << " steps, gradient all-reduce " << (options_.allreduce ? "on" : "off")
                 << std::endl;
    }

    auto evaluate = [&]() -> absl::StatusOr<Evaluation> {
      torch::NoGradGuard no_grad;
      model->eval();
      const std::vector<int64_t> indices = test_sampler.EpochIndices(0);
      double correct = 0;
      double loss_sum = 0;
      const auto n = static_cast<int64_t>(indices.size());
      for (int64_t begin = 0; begin < n; begin += loop_.eval_batch_size) {
        const int64_t end = std::min(n, begin + loop_.eval_batch_size);
        const Batch batch = test_loader.Load(indices, begin, end);
        const torch::Tensor logits = model->forward(batch.images);
        loss_sum +=
            torch::nn::functional::cross_entropy(
                logits, batch.labels,
                torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum))
                .item<double>();
        correct += logits.argmax(1).eq(batch.labels).sum().item<double>();
      }
      model->train();
      // Summed over ranks whether or not gradients are: every rank reports the
      // accuracy over the whole test set.
      torch::Tensor totals =
          torch::tensor({correct, loss_sum, static_cast<double>(n)}, torch::kDouble);
      RETURN_IF_ERROR(communicator_.AllReduceSum(totals));
      const double count = totals[2].item<double>();
      if (count <= 0) return absl::FailedPreconditionError("the test set is empty");
      return Evaluation{totals[0].item<double>() / count,
                        totals[1].item<double>() / count};
    };

    TrainingOutcome outcome;
    outcome.parameter_count = parameter_count;
    Evaluation last_eval;
    Interval interval;
    double train_seconds = 0;
    int64_t step = 0;
    model->train();
    for (int64_t epoch = 0; step < total_steps; ++epoch) {
      const std::vector<int64_t> indices = train_sampler.EpochIndices(epoch);
      for (int64_t b = 0; b < steps_per_epoch && step < total_steps; ++b) {
        const Clock::time_point step_start = Clock::now();
        const Batch batch = train_loader.Load(indices, b * options_.batch_size,
                                              (b + 1) * options_.batch_size);
        optimizer.zero_grad();
        const torch::Tensor logits = model->forward(batch.images);
        const torch::Tensor loss =
            torch::nn::functional::cross_entropy(logits, batch.labels);
        loss.backward();

        if (options_.allreduce && world > 1) {
          const Clock::time_point reduce_start = Clock::now();
          flat.GatherGradients();
          RETURN_IF_ERROR(communicator_.AllReduceSum(flat.buffer()));
          flat.buffer().div_(static_cast<double>(world));
          flat.ScatterGradients();
          interval.allreduce_seconds += SecondsSince(reduce_start);
        }

        const double lr = ScheduledLearningRate(options_.lr, step, total_steps, loop_);
        for (auto& group : optimizer.param_groups()) {
          static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr);
        }
        optimizer.step();
        ++step;

        interval.loss_sum += loss.item<double>();
        interval.images += batch.labels.size(0);
        ++interval.steps;
        outcome.train_images += batch.labels.size(0);
        train_seconds += SecondsSince(step_start);

        if (step % options_.metrics_every == 0 || step == total_steps) {
          const double seconds = SecondsSince(interval.start);
          reporter_.Report(
              step,
              {{"loss", interval.loss_sum / static_cast<double>(interval.steps)},
               {"images_per_sec", static_cast<double>(interval.images) / seconds},
               {"step_time_ms", 1000.0 * seconds / static_cast<double>(interval.steps)},
               {"allreduce_ms", 1000.0 * interval.allreduce_seconds /
                                    static_cast<double>(interval.steps)},
               {"lr", lr},
               {"epoch",
                static_cast<double>(step) / static_cast<double>(steps_per_epoch)}});
          interval = Interval();
        }
      }
      if (step % steps_per_epoch == 0 || step == total_steps) {
        const Clock::time_point eval_start = Clock::now();
        ASSIGN_OR_RETURN(last_eval, evaluate());
        reporter_.Report(
            step, {{"test_accuracy", last_eval.accuracy}, {"test_loss", last_eval.loss}});
        // Evaluation time does not count against training throughput.
        interval.start += Clock::now() - eval_start;
      }
    }

    Fnv1a64 hash;
    for (const torch::Tensor& p : parameters) {
      const torch::Tensor values = p.detach().contiguous();
      hash.Update(values.data_ptr(), values.numel() * values.element_size());
    }
    outcome.steps = step;
    outcome.train_seconds = train_seconds;
    outcome.test_accuracy = last_eval.accuracy;
    outcome.test_loss = last_eval.loss;
    outcome.param_hash = hash.Hex();
    return outcome;
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("training failed: ", e.what()));
  }
}

}  // namespace tessera::trainer
