#include "worker/trainer/run/checkpoint.h"

#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/file_io.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"
#include "worker/trainer/gpu/device.h"

namespace tessera::trainer {
namespace {

namespace fs = std::filesystem;

constexpr char kLatest[] = "latest";
constexpr char kKeepMarker[] = "keep";
constexpr char kStepPrefix[] = "step-";
constexpr int64_t kFormatVersion = 1;

std::optional<int64_t> ParseStepName(const std::string& name) {
  absl::string_view digits(name);
  if (!absl::ConsumePrefix(&digits, kStepPrefix)) return std::nullopt;
  int64_t step = 0;
  if (digits.empty() || !absl::SimpleAtoi(digits, &step) || step < 0) return std::nullopt;
  return step;
}

std::string TensorBytes(const torch::Tensor& tensor) {
  const torch::Tensor bytes = tensor.contiguous().to(torch::kCPU);
  return std::string(static_cast<const char*>(bytes.data_ptr()),
                     static_cast<size_t>(bytes.numel() * bytes.element_size()));
}

torch::Tensor BytesTensor(const std::string& bytes) {
  torch::Tensor tensor =
      torch::empty({static_cast<int64_t>(bytes.size())}, torch::kUInt8);
  std::memcpy(tensor.data_ptr(), bytes.data(), bytes.size());
  return tensor;
}

// Straight into one string: through an ostringstream the bytes were copied
// once more into the stream's buffer and again by str().
std::string Serialize(torch::serialize::OutputArchive& archive) {
  std::string out;
  archive.save_to([&out](const void* data, size_t size) -> size_t {
    out.append(static_cast<const char*>(data), size);
    return size;
  });
  return out;
}

int64_t ReadInt(torch::serialize::InputArchive& archive, const std::string& key) {
  c10::IValue value;
  archive.read(key, value);
  return value.toInt();
}

double ReadDouble(torch::serialize::InputArchive& archive, const std::string& key) {
  c10::IValue value;
  archive.read(key, value);
  return value.toDouble();
}

// The device the model's parameters live on (checkpoint tensors go there).
torch::Device ModelDevice(const torch::nn::Module& model) {
  const std::vector<torch::Tensor> parameters = model.parameters();
  return parameters.empty() ? torch::Device(torch::kCPU) : parameters.front().device();
}

}  // namespace

std::string CheckpointDirectory::StepDir(int64_t step) const {
  return (fs::path(root_) / absl::StrFormat("%s%012d", kStepPrefix, step)).string();
}

std::string CheckpointDirectory::ModelPath(int64_t step) const {
  return (fs::path(StepDir(step)) / "model.pt").string();
}

std::string CheckpointDirectory::RankPath(int64_t step, int rank) const {
  return (fs::path(StepDir(step)) / absl::StrFormat("rank-%05d.pt", rank)).string();
}

std::string CheckpointDirectory::KeepMarkerPath(int64_t step) const {
  return (fs::path(StepDir(step)) / kKeepMarker).string();
}

absl::StatusOr<std::optional<int64_t>> CheckpointDirectory::LatestStep() const {
  const std::string path = (fs::path(root_) / kLatest).string();
  std::error_code error;
  if (!fs::exists(path, error)) return std::optional<int64_t>();
  ASSIGN_OR_RETURN(std::string contents, tessera::ReadFile(path));
  const std::string name(absl::StripAsciiWhitespace(contents));
  const std::optional<int64_t> step = ParseStepName(name);
  if (!step.has_value()) {
    return absl::DataLossError(
        absl::StrCat(path, " does not name a checkpoint: \"", name, "\""));
  }
  return step;
}

absl::Status CheckpointDirectory::PublishLatest(int64_t step) const {
  return tessera::WriteFileAtomically((fs::path(root_) / kLatest).string(),
                                      fs::path(StepDir(step)).filename().string() + "\n");
}

absl::Status CheckpointDirectory::Prune(int64_t latest_step, int keep) const {
  std::vector<int64_t> steps;
  std::error_code error;
  for (fs::directory_iterator it(root_, error), end; !error && it != end;
       it.increment(error)) {
    std::error_code type_error;  // a racing removal: not ours to prune then
    if (!it->is_directory(type_error)) continue;
    const std::optional<int64_t> step = ParseStepName(it->path().filename().string());
    if (!step.has_value() || *step > latest_step) continue;
    // Kept, or not known not to be: it stays.
    if (fs::exists(it->path() / kKeepMarker, type_error) || type_error) continue;
    steps.push_back(*step);
  }
  if (error) {
    return absl::InternalError(absl::StrCat("listing ", root_, ": ", error.message()));
  }
  std::sort(steps.begin(), steps.end());
  const auto excess = static_cast<int64_t>(steps.size()) - std::max(keep, 1);
  for (int64_t i = 0; i < excess; ++i) {
    const std::string path = StepDir(steps[static_cast<size_t>(i)]);
    fs::remove_all(path, error);
    if (error) {
      return absl::InternalError(absl::StrCat("removing ", path, ": ", error.message()));
    }
  }
  return absl::OkStatus();
}

absl::Status PublishCheckpoint(const CheckpointDirectory& dir, int64_t step, int keep,
                               std::ostream& log) {
  RETURN_IF_ERROR(dir.PublishLatest(step));
  if (absl::Status pruned = dir.Prune(step, keep); !pruned.ok()) {
    log << "tessera-train: warning: checkpoint step " << step
        << " is published, but older checkpoints were not pruned: " << pruned.message()
        << std::endl;
  }
  return absl::OkStatus();
}

void CaptureRngState(int cuda_device, RankCheckpoint& state) {
  {
    at::Generator generator = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(generator.mutex());
    state.cpu_rng_state = TensorBytes(generator.get_state());
  }
  state.cuda_rng_state.clear();
  if (cuda_device >= 0) {
    if (const std::optional<at::Tensor> cuda = CudaRngState(cuda_device)) {
      state.cuda_rng_state = TensorBytes(*cuda);
    }
  }
}

absl::Status RestoreRngState(int cuda_device, const RankCheckpoint& state) {
  try {
    {
      at::Generator generator = at::detail::getDefaultCPUGenerator();
      std::lock_guard<std::mutex> lock(generator.mutex());
      generator.set_state(BytesTensor(state.cpu_rng_state));
    }
    if (cuda_device >= 0 && !state.cuda_rng_state.empty()) {
      SetCudaRngState(cuda_device, BytesTensor(state.cuda_rng_state));
    }
    return absl::OkStatus();
  } catch (const std::exception& e) {
    return absl::DataLossError(absl::StrCat("restoring RNG state: ", e.what()));
  }
}

int64_t CheckpointFiles::total_bytes() const {
  int64_t total = 0;
  for (const auto& [path, contents] : files)
    total += static_cast<int64_t>(contents.size());
  return total;
}

absl::StatusOr<CheckpointFiles> SerializeCheckpoint(
    const CheckpointDirectory& dir, const RankCheckpoint& state,
    const torch::nn::Module& model, const torch::optim::Optimizer& optimizer) {
  const int64_t step = state.position.step;
  CheckpointFiles out;
  out.step = step;
  out.step_dir = dir.StepDir(step);
  try {
    torch::serialize::OutputArchive rank_archive;
    rank_archive.write("format", c10::IValue(kFormatVersion));
    rank_archive.write("rank", c10::IValue(static_cast<int64_t>(state.rank)));
    rank_archive.write("world_size", c10::IValue(static_cast<int64_t>(state.world_size)));
    rank_archive.write("step", c10::IValue(state.position.step));
    rank_archive.write("epoch", c10::IValue(state.position.epoch));
    rank_archive.write("batch_in_epoch", c10::IValue(state.position.batch_in_epoch));
    rank_archive.write("sample_in_epoch", c10::IValue(state.position.sample_in_epoch));
    rank_archive.write("loss_scale", c10::IValue(state.loss_scaler.scale));
    rank_archive.write("loss_scale_good_steps",
                       c10::IValue(state.loss_scaler.good_steps));
    rank_archive.write("cpu_rng", BytesTensor(state.cpu_rng_state), /*is_buffer=*/true);
    rank_archive.write("cuda_rng", BytesTensor(state.cuda_rng_state), /*is_buffer=*/true);
    out.files.emplace_back(dir.RankPath(step, state.rank), Serialize(rank_archive));

    if (state.rank == 0) {
      torch::serialize::OutputArchive model_archive;
      model.save(model_archive);
      torch::serialize::OutputArchive optimizer_archive;
      if (state.zero_stage == 0) optimizer.save(optimizer_archive);
      torch::serialize::OutputArchive archive;
      archive.write("format", c10::IValue(kFormatVersion));
      archive.write("step", c10::IValue(step));
      archive.write("world_size", c10::IValue(static_cast<int64_t>(state.world_size)));
      archive.write("class_names", c10::IValue(absl::StrJoin(state.class_names, "\n")));
      archive.write("zero_stage", c10::IValue(static_cast<int64_t>(state.zero_stage)));
      archive.write("model", model_archive);
      archive.write("optimizer", optimizer_archive);
      out.files.emplace_back(dir.ModelPath(step), Serialize(archive));
      out.files.emplace_back(
          out.step_dir + "/classes.json",
          nlohmann::json{{"classes", state.class_names}}.dump(1) + "\n");
    }
  } catch (const std::exception& e) {
    return absl::InternalError(
        absl::StrCat("serialising checkpoint ", step, ": ", e.what()));
  }
  return out;
}

absl::Status WriteCheckpointFiles(const CheckpointFiles& files,
                                  const WriteProgress& progress) {
  std::error_code error;
  fs::create_directories(files.step_dir, error);
  if (error) {
    return absl::InternalError(
        absl::StrCat("creating ", files.step_dir, ": ", error.message()));
  }
  int64_t done = 0;
  for (const auto& [path, contents] : files.files) {
    WriteOptions options;
    if (progress) options.progress = [&](int64_t bytes) { progress(done + bytes); };
    RETURN_IF_ERROR(tessera::WriteFileAtomically(path, contents, options));
    done += static_cast<int64_t>(contents.size());
  }
  return absl::OkStatus();
}

absl::Status SaveCheckpointFiles(const CheckpointDirectory& dir,
                                 const RankCheckpoint& state,
                                 const torch::nn::Module& model,
                                 const torch::optim::Optimizer& optimizer) {
  ASSIGN_OR_RETURN(const CheckpointFiles files,
                   SerializeCheckpoint(dir, state, model, optimizer));
  return WriteCheckpointFiles(files);
}

namespace {

// The rank file's fields into `state` (the random generator states too).
void ReadRankArchive(torch::serialize::InputArchive& archive, RankCheckpoint& state) {
  state.rank = static_cast<int>(ReadInt(archive, "rank"));
  state.world_size = static_cast<int>(ReadInt(archive, "world_size"));
  state.position.step = ReadInt(archive, "step");
  state.position.epoch = ReadInt(archive, "epoch");
  state.position.batch_in_epoch = ReadInt(archive, "batch_in_epoch");
  c10::IValue sample;
  state.position.sample_in_epoch =
      archive.try_read("sample_in_epoch", sample) ? sample.toInt() : -1;
  state.loss_scaler.scale = ReadDouble(archive, "loss_scale");
  state.loss_scaler.good_steps = ReadInt(archive, "loss_scale_good_steps");
  torch::Tensor cpu_rng;
  archive.read("cpu_rng", cpu_rng, /*is_buffer=*/true);
  state.cpu_rng_state = TensorBytes(cpu_rng);
  torch::Tensor cuda_rng;
  archive.read("cuda_rng", cuda_rng, /*is_buffer=*/true);
  state.cuda_rng_state = TensorBytes(cuda_rng);
}

}  // namespace

absl::StatusOr<RankCheckpoint> LoadCheckpointFiles(const CheckpointDirectory& dir,
                                                   int64_t step, int rank, int world_size,
                                                   torch::nn::Module& model,
                                                   torch::optim::Optimizer& optimizer) {
  ASSIGN_OR_RETURN(const std::string model_bytes,
                   tessera::ReadFile(dir.ModelPath(step), kMaxCheckpointFileBytes));
  RankCheckpoint state;
  try {
    torch::serialize::InputArchive archive;
    archive.load_from(model_bytes.data(), model_bytes.size(), ModelDevice(model));
    const int writer_world = static_cast<int>(ReadInt(archive, "world_size"));
    // At the writer's world size each rank resumes from its own file; at
    // another, every rank takes rank 0's global position.
    const int file_rank = writer_world == world_size ? rank : 0;
    ASSIGN_OR_RETURN(
        const std::string rank_bytes,
        tessera::ReadFile(dir.RankPath(step, file_rank), kMaxCheckpointFileBytes));
    torch::serialize::InputArchive rank_archive;
    rank_archive.load_from(rank_bytes.data(), rank_bytes.size(),
                           torch::Device(torch::kCPU));
    if (ReadInt(rank_archive, "format") != kFormatVersion) {
      return absl::FailedPreconditionError(
          absl::StrCat(dir.RankPath(step, file_rank), " has an unknown format version"));
    }
    ReadRankArchive(rank_archive, state);
    if (state.rank != file_rank || state.world_size != writer_world ||
        ReadInt(archive, "step") != state.position.step) {
      return absl::DataLossError(absl::StrCat(
          "checkpoint ", dir.StepDir(step), ": ", dir.RankPath(step, file_rank),
          " (rank ", state.rank, " of ", state.world_size, ", step ", state.position.step,
          ") does not match its model file (world ", writer_world, ")"));
    }
    if (file_rank != rank) {
      state.rank = rank;
      state.cpu_rng_state.clear();
      state.cuda_rng_state.clear();
    }
    c10::IValue names;
    if (archive.try_read("class_names", names) && !names.toStringRef().empty()) {
      state.class_names = absl::StrSplit(names.toStringRef(), '\n');
    }
    torch::serialize::InputArchive model_archive;
    archive.read("model", model_archive);
    model.load(model_archive);
    c10::IValue zero_stage;
    state.zero_stage = archive.try_read("zero_stage", zero_stage)
                           ? static_cast<int>(zero_stage.toInt())
                           : 0;
    if (state.zero_stage == 0) {
      torch::serialize::InputArchive optimizer_archive;
      archive.read("optimizer", optimizer_archive);
      optimizer.load(optimizer_archive);
    }
  } catch (const std::exception& e) {
    return absl::DataLossError(
        absl::StrCat("reading checkpoint ", dir.StepDir(step), ": ", e.what()));
  }
  return state;
}

absl::StatusOr<std::vector<std::string>> ReadCheckpointClassNames(
    const std::string& model_path) {
  ASSIGN_OR_RETURN(const std::string bytes,
                   tessera::ReadFile(model_path, kMaxCheckpointFileBytes));
  try {
    torch::serialize::InputArchive archive;
    archive.load_from(bytes.data(), bytes.size(), torch::Device(torch::kCPU));
    c10::IValue names;
    if (!archive.try_read("class_names", names) || names.toStringRef().empty()) {
      return std::vector<std::string>();
    }
    return std::vector<std::string>(absl::StrSplit(names.toStringRef(), '\n'));
  } catch (const std::exception& e) {
    return absl::DataLossError(absl::StrCat("reading ", model_path, ": ", e.what()));
  }
}

}  // namespace tessera::trainer
