// The image preprocessing that comes with a set of weights, as timm names it
// in a model's `pretrained_cfg` (mean, std, crop_pct, interpolation,
// input_size), and its use by an evaluation of those weights.
//
// Where it is found, for a weights file F (trainer.init_from):
//  - F's safetensors metadata, key "pretrained_cfg": a JSON object of those
//    keys (what Tessera's export writes, tessera-export);
//  - F's directory's config.json, as timm and the Hugging Face hub publish it:
//    the keys nested under "pretrained_cfg", or at the top level (older
//    timm configs).
// An evaluation (--eval-only --init-from F) of image data takes each data key
// from the first of: the command line (a flag given, which a job spec's key
// becomes), F's metadata, config.json beside F, the trainer's default; and
// says which for each key.
//
// Free functions without shared state: thread-safe.
#ifndef TESSERA_WORKER_TRAINER_RUN_WEIGHTS_PREPROCESSING_H_
#define TESSERA_WORKER_TRAINER_RUN_WEIGHTS_PREPROCESSING_H_

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "worker/trainer/run/trainer_options.h"

namespace tessera::trainer {

// The safetensors metadata key of the preprocessing, and its file beside weights.
inline constexpr char kPretrainedCfgKey[] = "pretrained_cfg";
inline constexpr char kWeightsConfigFile[] = "config.json";

// The pretrained_cfg keys a source has; unset where it has none.
struct WeightsPreprocessing {
  std::optional<std::vector<double>> mean;  // per RGB channel
  std::optional<std::vector<double>> std;
  std::optional<double> crop_pct;                  // the evaluation crop's share
  std::optional<std::string> interpolation;        // "bilinear", "bicubic", ...
  std::optional<std::vector<int64_t>> input_size;  // [channels, height, width]
};

// The keys of a JSON object's text: the object under "pretrained_cfg" where it
// has one, else its top level; other keys are ignored. InvalidArgument naming
// `source` and the key for text that is not a JSON object or a key whose
// value has the wrong type (a null value counts as absent).
absl::StatusOr<WeightsPreprocessing> ParsePretrainedCfg(absl::string_view json,
                                                        absl::string_view source);

// The JSON object text of the keys `cfg` has, for the metadata.
std::string PretrainedCfgJson(const WeightsPreprocessing& cfg);

// The preprocessing of weights file `path`: its metadata's keys (`from_metadata`)
// and config.json's beside it (`from_config`; absent when there is no such
// file). Errors: those of opening the file, an unreadable config.json or either
// one's malformed keys, each naming the file.
struct WeightsPreprocessingSources {
  WeightsPreprocessing from_metadata;
  WeightsPreprocessing from_config;
};
absl::StatusOr<WeightsPreprocessingSources> ReadWeightsPreprocessing(
    const std::string& path);

// Sets each data key of `options` (mean, std, crop_fraction, interpolation,
// image_size) that `given` (the flag names given, without dashes) does not
// name from `sources`, in the order above, and returns one line naming each
// key's value and source, for the log. InvalidArgument naming the source and
// the key for a value the trainer cannot use (a crop outside (0, 1], an
// interpolation other than bilinear or bicubic, an input that is not square,
// a mean or std that is not three values).
absl::StatusOr<std::string> ApplyWeightsPreprocessing(
    const WeightsPreprocessingSources& sources, const std::set<std::string>& given,
    TrainerOptions& options);

// Whether the preprocessing of the weights applies to this run: an evaluation
// (--eval-only) of a weights file (--init-from) on image data (imagefolder,
// shards), whose preprocessing these keys are.
bool UsesWeightsPreprocessing(const TrainerOptions& options);

}  // namespace tessera::trainer

#endif  // TESSERA_WORKER_TRAINER_RUN_WEIGHTS_PREPROCESSING_H_
