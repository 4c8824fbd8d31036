// The named choices of tessera.v1.TrainerConfig's string fields, defined once:
// the job spec's checks (common/job_spec.cc), tessera-train's validation
// (worker/trainer/run/trainer_options.cc) and its --help (trainer_flags.cc) all
// read these tables, so that the help lists exactly what the parsers accept.
// The first value of a table is the trainer's default where the field has one.
//
// Thread-safety: constants.
#ifndef TESSERA_COMMON_TRAINER_CHOICES_H_
#define TESSERA_COMMON_TRAINER_CHOICES_H_

#include <array>
#include <span>
#include <string>
#include <string_view>

namespace tessera {

using ChoiceList = std::span<const char* const>;

inline constexpr std::array<const char*, 6> kDatasetChoices = {
    "fashion-mnist", "cifar10", "cifar100", "synthetic", "imagefolder", "shards"};
inline constexpr std::array<const char*, 3> kOptimizerChoices = {"adamw", "sgd", "lamb"};
inline constexpr std::array<const char*, 3> kPrecisionChoices = {"fp32", "bf16", "fp16"};
inline constexpr std::array<const char*, 2> kScalingChoices = {"strong", "weak"};
inline constexpr std::array<const char*, 3> kDeviceChoices = {"auto", "cpu", "cuda"};
inline constexpr std::array<const char*, 5> kInitNamesChoices = {
    "auto", "timm", "hf", "torchvision", "tessera"};
inline constexpr std::array<const char*, 3> kCudaGraphChoices = {"off", "auto", "on"};
inline constexpr std::array<const char*, 2> kInterpolationChoices = {"bilinear",
                                                                     "bicubic"};

// trainer.zero_stage (an int32 field, so not in kTrainerChoiceFields): 0
// replicates the optimizer state (DDP), 1 shards it, 2 shards the gradients
// too, 3 the parameters as well (FSDP's full sharding).
inline constexpr std::array<int, 4> kZeroStageChoices = {0, 1, 2, 3};

inline bool IsZeroStage(int stage) {
  for (const int s : kZeroStageChoices) {
    if (stage == s) return true;
  }
  return false;
}

// "0, 1, 2", as errors name the stages.
inline std::string ZeroStageChoicesText() {
  std::string text;
  for (const int s : kZeroStageChoices) {
    if (!text.empty()) text.append(", ");
    text.append(std::to_string(s));
  }
  return text;
}

// A choice-valued TrainerConfig field: its proto name and its table.
struct ChoiceField {
  const char* field;  // e.g. "optimizer" (the flag is --optimizer)
  ChoiceList choices;
};

// Every choice-valued field, for checks that must cover them all.
inline constexpr std::array<ChoiceField, 8> kTrainerChoiceFields = {{
    {"dataset", kDatasetChoices},
    {"optimizer", kOptimizerChoices},
    {"precision", kPrecisionChoices},
    {"scaling", kScalingChoices},
    {"device", kDeviceChoices},
    {"init_names", kInitNamesChoices},
    {"cuda_graph", kCudaGraphChoices},
    {"interpolation", kInterpolationChoices},
}};

inline bool IsChoice(ChoiceList choices, std::string_view value) {
  for (const char* c : choices) {
    if (value == c) return true;
  }
  return false;
}

// "a | b | c", as the help writes a choice.
inline std::string ChoicesText(ChoiceList choices, std::string_view separator = " | ") {
  std::string text;
  for (const char* c : choices) {
    if (!text.empty()) text.append(separator);
    text.append(c);
  }
  return text;
}

}  // namespace tessera

#endif  // TESSERA_COMMON_TRAINER_CHOICES_H_
