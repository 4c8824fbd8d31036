#include "worker/trainer/run/evaluation.h"

#include <torch/torch.h>

#include <algorithm>
#include <exception>
#include <filesystem>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/rank_phase.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"
#include "worker/trainer/data/batch_feed.h"
#include "worker/trainer/data/distributed_sampler.h"
#include "worker/trainer/model/safetensors.h"
#include "worker/trainer/model/vit.h"
#include "worker/trainer/model/vit_config.h"
#include "worker/trainer/model/vit_weights.h"
#include "worker/trainer/run/checkpoint.h"
#include "worker/trainer/run/checkpoint_model.h"
#include "worker/trainer/run/progress.h"

namespace tessera::trainer {
namespace {

// The class names in a safetensors file's __metadata__ (tessera-export writes
// them as a JSON array); empty when it has none.
std::vector<std::string> MetadataClassNames(const PretrainedSummary& summary) {
  const auto it = summary.metadata.find("class_names");
  if (it == summary.metadata.end()) return {};
  const nlohmann::json names = nlohmann::json::parse(it->second, nullptr, false);
  std::vector<std::string> out;
  if (!names.is_array()) return out;
  for (const nlohmann::json& name : names) {
    if (name.is_string()) out.push_back(name.get<std::string>());
  }
  return out;
}

// One rank's evaluation, as a sequence of named steps (Run).
class EvaluationRun {
 public:
  EvaluationRun(const TrainerOptions& options, const TrainingData& data,
                Communicator& communicator, MetricsReporter& reporter,
                const TrainerLoopOptions& loop)
      : options_(options),
        data_(data),
        communicator_(communicator),
        reporter_(reporter),
        loop_(loop) {}

  absl::StatusOr<EvalReport> Run() {
    ASSIGN_OR_RETURN(split_, EvalSplitOf(options_.eval_split));
    RETURN_IF_ERROR(CheckHasSplit(data_.shape(), split_));
    ASSIGN_OR_RETURN(placement_, ResolveDevice(options_, loop_.local_rank));
    device_ =
        placement_.cuda
            ? torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(placement_.index))
            : torch::Device(torch::kCPU);
    const DataShape& shape = data_.shape();
    ASSIGN_OR_RETURN(config_, ResolveViTConfig(options_.model, shape.channels,
                                               shape.num_classes, options_.image_size));
    config_.cpu_kernels = options_.cpu_kernels;
    if (options_.resume) {
      RETURN_IF_ERROR(LoadCheckpoint());
    } else {
      RETURN_IF_ERROR(LoadWeightsFile());
    }
    (*model_)->to(device_);
    (*model_)->eval();
    ASSIGN_OR_RETURN(std::vector<double> counts, CountSplit());
    // The confusion cells, then the top-5 hits and the summed loss.
    const double loss_sum = counts.back();
    counts.pop_back();
    const double top5_hits = counts.back();
    counts.pop_back();
    // Data without a test split scores its validation split, named so.
    const std::string split_name = split_ == Split::kTest
                                       ? (shape.test_is_val ? "val" : "test")
                                       : options_.eval_split;
    ASSIGN_OR_RETURN(EvalReport report,
                     SummarizeEvalCounts(split_name, step_, shape.class_names, counts,
                                         top5_hits, loss_sum));
    reporter_.Report(step_, EvalScalarMetrics(report));
    if (loop_.progress != nullptr) loop_.progress->Enter(RankPhase::kDone);
    return report;
  }

 private:
  absl::Status LoadCheckpoint();
  absl::Status LoadWeightsFile();
  void BuildModel();
  // Every rank's counts summed: classes x classes confusion cells, then the
  // top-5 hits, then the summed loss.
  absl::StatusOr<std::vector<double>> CountSplit();
  void Log(const std::string& line) const {
    if (loop_.log != nullptr && communicator_.rank() == 0) {
      *loop_.log << "[rank 0] " << line << std::endl;
    }
  }

  const TrainerOptions& options_;
  const TrainingData& data_;    // Not owned.
  Communicator& communicator_;  // Not owned.
  MetricsReporter& reporter_;   // Not owned.
  const TrainerLoopOptions& loop_;
  Split split_ = Split::kTest;
  DevicePlacement placement_;
  torch::Device device_ = torch::Device(torch::kCPU);
  ViTConfig config_;
  std::optional<VisionTransformer> model_;
  int64_t step_ = 0;  // the checkpoint's; 0 for a weights file
};

void EvaluationRun::BuildModel() {
  // The weights replace every parameter; the seed only keeps runs alike.
  torch::manual_seed(static_cast<uint64_t>(options_.seed));
  model_.emplace(config_);
}

absl::Status EvaluationRun::LoadCheckpoint() {
  const CheckpointDirectory dir(options_.checkpoint_dir);
  std::string model_path;
  if (options_.eval_step > 0) {
    model_path = dir.ModelPath(options_.eval_step);
    if (!std::filesystem::is_regular_file(model_path)) {
      return absl::NotFoundError(
          absl::StrCat(options_.checkpoint_dir, " holds no checkpoint of step ",
                       options_.eval_step, " (no ", model_path, ")"));
    }
    step_ = options_.eval_step;
  } else {
    ASSIGN_OR_RETURN(const std::optional<int64_t> latest, dir.LatestStep());
    if (!latest.has_value()) {
      return absl::NotFoundError(absl::StrCat(
          "no checkpoint in ", options_.checkpoint_dir, " (no ", dir.root(), "/latest)"));
    }
    step_ = *latest;
    model_path = dir.ModelPath(step_);
  }
  ASSIGN_OR_RETURN(const std::vector<std::string> stored,
                   ReadCheckpointClassNames(model_path));
  RETURN_IF_ERROR(
      CheckClassMapping("the checkpoint's", stored, data_.shape().class_names));
  BuildModel();
  ASSIGN_OR_RETURN(const std::vector<std::string> loaded,
                   LoadCheckpointModel(model_path, **model_));
  (void)loaded;
  Log(absl::StrCat("eval: the model of checkpoint ", model_path, " (step ", step_, ")"));
  return absl::OkStatus();
}

absl::Status EvaluationRun::LoadWeightsFile() {
  ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> file,
                   SafetensorsFile::Open(options_.init_from));
  std::vector<std::string> names;
  for (const TensorView& t : file->tensors()) names.push_back(t.name);
  WeightLayout layout = WeightLayout::kTessera;
  if (options_.init_names == "auto") {
    ASSIGN_OR_RETURN(layout, DetectWeightLayout(names));
  } else {
    ASSIGN_OR_RETURN(layout, ParseWeightLayout(options_.init_names));
  }
  config_.layer_norm_eps = ConventionsOf(layout).layer_norm_eps;
  BuildModel();
  PretrainedOptions loading;
  loading.layout = layout;
  absl::StatusOr<PretrainedSummary> summary = LoadPretrained(**model_, *file, loading);
  if (!summary.ok()) {
    return absl::Status(
        summary.status().code(),
        absl::StrCat("--init-from ", options_.init_from, " does not fit --model ",
                     options_.model, ": ", summary.status().message()));
  }
  if (!summary->reinitialised.empty()) {
    // Training would start such a head afresh; evaluating it measures noise.
    return absl::InvalidArgumentError(absl::StrCat(
        "--init-from ", options_.init_from, " does not fit --model ", options_.model,
        " on this data: ", absl::StrJoin(summary->reinitialised, ", "),
        " would stay untrained (the file's head is not for the data's ",
        config_.num_classes, " classes)"));
  }
  RETURN_IF_ERROR(CheckClassMapping("the weights file's", MetadataClassNames(*summary),
                                    data_.shape().class_names));
  Log(absl::StrCat("eval: init_from ", options_.init_from, " (",
                   WeightLayoutName(summary->layout), " names): ", summary->ToString()));
  return absl::OkStatus();
}

absl::StatusOr<std::vector<double>> EvaluationRun::CountSplit() {
  if (loop_.progress != nullptr) loop_.progress->Enter(RankPhase::kEval);
  torch::NoGradGuard no_grad;
  const DataShape& shape = data_.shape();
  const int64_t k = shape.num_classes;
  const BatchStage stage = loop_.finish_batches_on_device.value_or(placement_.cuda)
                               ? BatchStage::kDevice
                               : BatchStage::kHost;
  BatchLoaderOptions loading;
  loading.image_size = config_.image_size;
  loading.interpolation = EffectiveInterpolation(options_);
  loading.stage = stage;
  loading.pin_memory = placement_.cuda && stage == BatchStage::kDevice;
  const std::unique_ptr<SampleLoader> loader = data_.MakeLoader(split_, loading);
  BatchFeedOptions feeding;
  feeding.device = device_;
  feeding.stage = stage;
  feeding.stats = data_.stats();
  feeding.image_size = config_.image_size;
  feeding.interpolation = loading.interpolation;
  BatchFeed feed(nullptr, feeding);
  DistributedSamplerOptions sampling;
  sampling.dataset_size = SplitSize(shape, split_);
  sampling.rank = communicator_.rank();
  sampling.world_size = communicator_.world_size();
  sampling.shuffle = false;
  sampling.keep_tail = true;
  ASSIGN_OR_RETURN(const DistributedSampler sampler,
                   DistributedSampler::Create(sampling));
  const std::vector<int64_t> indices = sampler.EpochIndices(0);
  const auto options = torch::TensorOptions(device_).dtype(torch::kDouble);
  torch::Tensor counts = torch::zeros({k * k + 2}, options);
  const int64_t top = std::min<int64_t>(5, k);
  const auto n = static_cast<int64_t>(indices.size());
  for (int64_t begin = 0; begin < n; begin += loop_.eval_batch_size) {
    const int64_t end = std::min(n, begin + loop_.eval_batch_size);
    ASSIGN_OR_RETURN(const Batch loaded, loader->Load(indices, begin, end, 0));
    const Batch batch = feed.ToDevice(loaded);
    const torch::Tensor logits = (*model_)->forward(batch.images).to(torch::kFloat);
    const torch::Tensor cells = batch.labels * k + logits.argmax(1);
    counts.narrow(0, 0, k * k)
        .index_add_(0, cells, torch::ones({cells.size(0)}, options));
    const torch::Tensor hits =
        std::get<1>(logits.topk(top, 1)).eq(batch.labels.unsqueeze(1)).any(1).sum();
    counts[k * k].add_(hits.to(torch::kDouble));
    counts[k * k + 1].add_(torch::nn::functional::cross_entropy(
        logits, batch.labels,
        torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum)));
    if (loop_.progress != nullptr) loop_.progress->AddPhaseItem();
  }
  if (loop_.progress != nullptr) loop_.progress->Enter(RankPhase::kCollective);
  RETURN_IF_ERROR(communicator_.AllReduceSum(counts));
  if (loop_.progress != nullptr) loop_.progress->Enter(RankPhase::kEval);
  const torch::Tensor host = counts.cpu().contiguous();
  const double* values = host.data_ptr<double>();
  return std::vector<double>(values, values + host.numel());
}

}  // namespace

absl::StatusOr<Split> EvalSplitOf(const std::string& eval_split) {
  if (eval_split.empty() || eval_split == "test") return Split::kTest;
  if (eval_split == "val") return Split::kVal;
  if (eval_split == "train") return Split::kTrain;
  return absl::InvalidArgumentError(
      absl::StrCat("--eval-split must be test, val or train, got \"", eval_split, "\""));
}

absl::Status CheckClassMapping(const std::string& source,
                               const std::vector<std::string>& stored,
                               const std::vector<std::string>& data) {
  if (stored.empty() || stored == data) return absl::OkStatus();
  for (size_t i = 0; i < std::max(stored.size(), data.size()); ++i) {
    const std::string a = i < stored.size() ? stored[i] : "(none)";
    const std::string b = i < data.size() ? data[i] : "(none)";
    if (a != b) {
      return absl::FailedPreconditionError(
          absl::StrCat(source, " class names differ from the data's: class ", i, " is '",
                       a, "' in the weights and '", b, "' in the data (", stored.size(),
                       " vs ", data.size(), " classes)"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<EvalReport> RunEvaluation(const TrainerOptions& options,
                                         const TrainingData& data,
                                         Communicator& communicator,
                                         MetricsReporter& reporter,
                                         const TrainerLoopOptions& loop) {
  RETURN_IF_ERROR(data.Check());
  try {
    EvaluationRun run(options, data, communicator, reporter, loop);
    return run.Run();
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("evaluation failed: ", e.what()));
  }
}

}  // namespace tessera::trainer
