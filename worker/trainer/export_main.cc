// tessera-export: a Tessera checkpoint's model as a safetensors file with timm,
// Hugging Face, torchvision or Tessera parameter names, which PyTorch loads
// (docs/pretrained.md has the Python snippets). The class names stored with
// the checkpoint go into the file's __metadata__, and for image data the job's
// preprocessing, as timm's pretrained_cfg (--mean, --std, --crop-fraction,
// --interpolation and the model's input size).
//
//   tessera-export --checkpoint /shared/ckpt/pets --model vit-ti16 --image-size 224 \
//       --names torchvision -o pets-vit.safetensors
//
// Exit codes: 0 written, 1 failed (the reason on stderr), 2 bad flags.
#include <CLI/CLI.hpp>
#include <filesystem>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/flag_checks.h"
#include "worker/trainer/data/image_data.h"
#include "worker/trainer/data/image_dataset.h"
#include "worker/trainer/model/vit_config.h"
#include "worker/trainer/model/vit_weights.h"
#include "worker/trainer/run/checkpoint.h"
#include "worker/trainer/run/checkpoint_model.h"
#include "worker/trainer/run/weights_preprocessing.h"

namespace {

using tessera::trainer::IsEncodedImageDataset;
using tessera::trainer::kImageNetMean;
using tessera::trainer::kImageNetStd;
using tessera::trainer::kPretrainedCfgKey;
using tessera::trainer::PretrainedCfgJson;
using tessera::trainer::ViTConfig;
using tessera::trainer::WeightsPreprocessing;

struct ExportFlags {
  std::string checkpoint;
  std::string model = "vit-micro";
  int channels = 3;
  int classes = 0;
  int image_size = 0;
  std::string names = "torchvision";
  std::string out;
  int64_t step = 0;
  // The job's data and preprocessing: for image data, written into the file's
  // metadata as timm's pretrained_cfg, which an evaluation of the file takes
  // (run/weights_preprocessing.h).
  std::string dataset = "imagefolder";
  std::vector<double> mean{kImageNetMean.begin(), kImageNetMean.end()};
  std::vector<double> std{kImageNetStd.begin(), kImageNetStd.end()};
  double crop_fraction = 0.875;
  std::string interpolation = "bilinear";
};

// The job's preprocessing, for tessctl export to pass on from the spec.
void AddPreprocessingFlags(CLI::App& app, ExportFlags& f) {
  const std::string group = "Preprocessing (written as the file's pretrained_cfg)";
  app.add_option("--dataset", f.dataset,
                 "the job's dataset; image data (imagefolder, shards) gets its "
                 "preprocessing written into the metadata")
      ->capture_default_str()
      ->group(group);
  app.add_option("--mean", f.mean, "the job's trainer.mean, three values")
      ->expected(3)
      ->check(tessera::IsNumber<double>())
      ->capture_default_str()
      ->group(group);
  app.add_option("--std", f.std, "the job's trainer.std, three values")
      ->expected(3)
      ->check(tessera::IsNumber<double>())
      ->capture_default_str()
      ->group(group);
  app.add_option("--crop-fraction", f.crop_fraction,
                 "the job's trainer.crop_fraction (crop_pct)")
      ->capture_default_str()
      ->check(tessera::NumberAtLeast<double>(0))
      ->check(CLI::Range(0.0, 1.0))
      ->group(group);
  app.add_option("--interpolation", f.interpolation, "the job's trainer.interpolation")
      ->capture_default_str()
      ->check(CLI::IsMember({"bilinear", "bicubic"}))
      ->group(group);
}

// The pretrained_cfg metadata of an image-data job's export; none for the
// in-memory datasets, which normalise with their own statistics.
std::map<std::string, std::string> PreprocessingMetadata(const ExportFlags& f,
                                                         const ViTConfig& config) {
  if (!IsEncodedImageDataset(f.dataset) || config.in_channels != 3) return {};
  WeightsPreprocessing cfg;
  cfg.mean = f.mean;
  cfg.std = f.std;
  cfg.crop_pct = f.crop_fraction;
  cfg.interpolation = f.interpolation;
  cfg.input_size =
      std::vector<int64_t>{config.in_channels, config.image_size, config.image_size};
  return {{kPretrainedCfgKey, PretrainedCfgJson(cfg)}};
}

void AddExportFlags(CLI::App& app, ExportFlags& f) {
  app.add_option("--checkpoint", f.checkpoint,
                 "a checkpoint directory (its latest checkpoint), a step directory or a "
                 "model.pt")
      ->required();
  app.add_option("--model", f.model, "the job's model preset")->capture_default_str();
  app.add_option("--channels", f.channels,
                 "input channels the job trained with (1 for Fashion-MNIST, 3 otherwise)")
      ->capture_default_str()
      ->check(CLI::Range(1, 4));
  app.add_option("--classes", f.classes,
                 "the job's class count (0: the class names stored in the checkpoint)")
      ->check(CLI::Range(0, 1 << 20));
  app.add_option("--image-size", f.image_size, "the job's image_size (0: the preset's)")
      ->check(CLI::Range(0, 4096));
  app.add_option("--names", f.names, "timm | hf | torchvision | tessera")
      ->capture_default_str();
  app.add_option("--step", f.step,
                 "the checkpoint of this step in a checkpoint directory (0: the latest)")
      ->check(tessera::NumberAtLeast<int64_t>(0));
  app.add_option("-o,--out", f.out, "the safetensors file to write")->required();
  AddPreprocessingFlags(app, f);
  app.footer(
      "Example:\n"
      "  tessera-export --checkpoint /shared/ckpt/pets --model vit-ti16 --image-size 224 "
      "\\\n"
      "      --names timm -o pets.safetensors\n"
      "Then in Python: timm.create_model('vit_tiny_patch16_224', num_classes=N)"
      ".load_state_dict(safetensors.torch.load_file('pets.safetensors'))");
}

// A failure: its message and the exit code to end with.
struct ExportError {
  std::string message;
  int exit_code;
};

// With --step, the step directory of that checkpoint.
std::optional<ExportError> SelectStep(ExportFlags& f) {
  if (f.step == 0) return std::nullopt;
  // One step's checkpoint of a checkpoint directory.
  const tessera::trainer::CheckpointDirectory dir(f.checkpoint);
  if (!std::filesystem::is_regular_file(dir.ModelPath(f.step))) {
    return ExportError{absl::StrCat(f.checkpoint, " holds no checkpoint of step ", f.step,
                                    " (no ", dir.ModelPath(f.step), ")"),
                       1};
  }
  f.checkpoint = dir.StepDir(f.step);
  return std::nullopt;
}

// --classes, or the class count from the names the checkpoint stored.
std::variant<int, ExportError> ClassCount(const ExportFlags& f) {
  if (f.classes != 0) return f.classes;
  absl::StatusOr<std::string> model_path =
      tessera::trainer::FindCheckpointModel(f.checkpoint);
  if (!model_path.ok()) return ExportError{std::string(model_path.status().message()), 1};
  absl::StatusOr<std::vector<std::string>> names =
      tessera::trainer::ReadCheckpointClassNames(*model_path);
  if (!names.ok() || names->empty()) {
    return ExportError{"the checkpoint stores no class names; give --classes", 2};
  }
  return static_cast<int>(names->size());
}

int Report(const ExportError& error) {
  std::cerr << "tessera-export: " << error.message << std::endl;
  return error.exit_code;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace tessera::trainer;
  ExportFlags f;
  CLI::App app(
      "tessera-export: writes a Tessera checkpoint's model as safetensors with the "
      "parameter names of timm, Hugging Face, torchvision or Tessera");
  AddExportFlags(app, f);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  absl::StatusOr<WeightLayout> layout = ParseWeightLayout(f.names);
  if (!layout.ok()) {
    std::cerr << "tessera-export: --names: " << layout.status().message() << std::endl;
    return 2;
  }
  if (std::optional<ExportError> error = SelectStep(f)) return Report(*error);
  const std::variant<int, ExportError> class_count = ClassCount(f);
  if (const auto* error = std::get_if<ExportError>(&class_count)) return Report(*error);
  const int classes = std::get<int>(class_count);
  absl::StatusOr<ViTConfig> config =
      ResolveViTConfig(f.model, f.channels, classes, f.image_size);
  if (!config.ok()) return Report({std::string(config.status().message()), 2});
  const absl::Status exported = ExportCheckpoint(
      f.checkpoint, *config, *layout, {}, f.out, PreprocessingMetadata(f, *config));
  if (!exported.ok()) return Report({std::string(exported.message()), 1});
  std::cout << "tessera-export: wrote " << f.out << " (" << WeightLayoutName(*layout)
            << " names, " << classes << " classes)" << std::endl;
  return 0;
}
