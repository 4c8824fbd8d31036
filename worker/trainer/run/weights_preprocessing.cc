#include "worker/trainer/run/weights_preprocessing.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "common/file_io.h"
#include "common/status_macros.h"
#include "common/trainer_choices.h"
#include "worker/trainer/data/image_dataset.h"
#include "worker/trainer/model/safetensors.h"

namespace tessera::trainer {
namespace {

using nlohmann::json;

// Bound on config.json: timm's are a few hundred bytes, Hugging Face's with
// label maps a few hundred kilobytes.
constexpr size_t kMaxConfigBytes = size_t{4} << 20;

absl::Status KeyError(absl::string_view source, absl::string_view key,
                      absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(source, ": ", key, " ", what));
}

// The value of `key` in `cfg`, or nullptr when it is absent or null.
const json* Find(const json& cfg, const char* key) {
  const auto it = cfg.find(key);
  return it == cfg.end() || it->is_null() ? nullptr : &*it;
}

template <typename T>
absl::StatusOr<std::optional<std::vector<T>>> NumberList(const json& cfg, const char* key,
                                                         absl::string_view source) {
  const json* value = Find(cfg, key);
  if (value == nullptr) return std::nullopt;
  std::vector<T> out;
  if (value->is_array()) {
    for (const json& item : *value) {
      const bool fits =
          std::is_integral_v<T> ? item.is_number_integer() : item.is_number();
      if (!fits) break;
      out.push_back(item.get<T>());
    }
    if (out.size() == value->size()) return out;
  }
  return KeyError(
      source, key,
      std::is_integral_v<T> ? "must be a list of integers" : "must be a list of numbers");
}

absl::StatusOr<std::optional<double>> Number(const json& cfg, const char* key,
                                             absl::string_view source) {
  const json* value = Find(cfg, key);
  if (value == nullptr) return std::nullopt;
  if (!value->is_number()) return KeyError(source, key, "must be a number");
  return value->get<double>();
}

absl::StatusOr<std::optional<std::string>> Text(const json& cfg, const char* key,
                                                absl::string_view source) {
  const json* value = Find(cfg, key);
  if (value == nullptr) return std::nullopt;
  if (!value->is_string()) return KeyError(source, key, "must be a string");
  return value->get<std::string>();
}

// A source of keys for ApplyWeightsPreprocessing, in precedence order.
struct Source {
  const WeightsPreprocessing* cfg;
  const char* name;
};

// The first source with `field` set: its value and name; {nullptr, nullptr}
// when none has it.
template <typename T>
std::pair<const T*, const char*> FirstWith(
    const std::vector<Source>& sources, std::optional<T> WeightsPreprocessing::*field) {
  for (const Source& source : sources) {
    const std::optional<T>& value = source.cfg->*field;
    if (value.has_value()) return {&*value, source.name};
  }
  return {nullptr, nullptr};
}

// The flag of a TrainerConfig key: crop_fraction -> crop-fraction.
std::string FlagName(absl::string_view key) {
  return absl::StrReplaceAll(key, {{"_", "-"}});
}

// Where a key no file sets, or one the command line gives, comes from.
std::string Unchanged(const std::set<std::string>& given, absl::string_view key) {
  const std::string flag = FlagName(key);
  return given.count(flag) != 0 ? absl::StrCat("--", flag) : "default";
}

// "mean=0.5,0.5,0.5 (the weights' metadata)": one key of the log line.
std::string Said(absl::string_view key, absl::string_view value, absl::string_view from) {
  return absl::StrCat(key, "=", value, " (", from, ")");
}

// mean and std: three values each, the std positive.
absl::Status TakeChannelStats(const std::vector<Source>& sources,
                              const std::set<std::string>& given, TrainerOptions& o,
                              std::vector<std::string>& said) {
  for (const auto& [key, field, target] :
       {std::tuple{"mean", &WeightsPreprocessing::mean, &o.mean},
        std::tuple{"std", &WeightsPreprocessing::std, &o.std}}) {
    const auto [value, from] = FirstWith(sources, field);
    if (given.count(key) != 0 || value == nullptr) {
      said.push_back(Said(key,
                          target->empty() ? "ImageNet's" : absl::StrJoin(*target, ","),
                          Unchanged(given, key)));
      continue;
    }
    const bool is_std = std::string_view(key) == "std";
    const bool usable = value->size() == 3 &&
                        std::all_of(value->begin(), value->end(), [is_std](double v) {
                          return std::isfinite(v) && (!is_std || v > 0);
                        });
    if (!usable) {
      return KeyError(from, key, "must be three usable values, one per RGB channel");
    }
    *target = *value;
    said.push_back(Said(key, absl::StrJoin(*target, ","), from));
  }
  return absl::OkStatus();
}

// crop_fraction (crop_pct), interpolation and image_size (input_size).
absl::Status TakeCropAndSize(const std::vector<Source>& sources,
                             const std::set<std::string>& given, TrainerOptions& o,
                             std::vector<std::string>& said) {
  if (const auto [crop, from] = FirstWith(sources, &WeightsPreprocessing::crop_pct);
      given.count("crop-fraction") == 0 && crop != nullptr) {
    if (!(*crop > 0 && *crop <= 1)) {
      return KeyError(from, "crop_pct", "must be in (0, 1]");
    }
    o.crop_fraction = *crop;
    said.push_back(Said("crop_fraction", absl::StrCat(o.crop_fraction), from));
  } else {
    said.push_back(Said("crop_fraction", absl::StrCat(o.crop_fraction),
                        Unchanged(given, "crop_fraction")));
  }
  if (const auto [name, from] = FirstWith(sources, &WeightsPreprocessing::interpolation);
      given.count("interpolation") == 0 && name != nullptr) {
    if (!IsChoice(kInterpolationChoices, *name)) {
      return KeyError(from, "interpolation",
                      absl::StrCat("\"", *name, "\" is not one the trainer has (",
                                   ChoicesText(kInterpolationChoices, ", "),
                                   "); give --interpolation"));
    }
    o.interpolation = *name;
    said.push_back(Said("interpolation", o.interpolation, from));
  } else {
    said.push_back(
        Said("interpolation", o.interpolation, Unchanged(given, "interpolation")));
  }
  if (const auto [size, from] = FirstWith(sources, &WeightsPreprocessing::input_size);
      given.count("image-size") == 0 && size != nullptr) {
    if (size->size() != 3 || (*size)[1] != (*size)[2] || (*size)[1] <= 0 ||
        (*size)[1] > 4096) {
      return KeyError(from, "input_size",
                      "must be [channels, size, size] with a size in [1, 4096]");
    }
    o.image_size = static_cast<int32_t>((*size)[1]);
    said.push_back(Said("image_size", absl::StrCat(o.image_size), from));
  } else {
    said.push_back(Said("image_size",
                        o.image_size == 0 ? "the preset's" : absl::StrCat(o.image_size),
                        Unchanged(given, "image_size")));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<WeightsPreprocessing> ParsePretrainedCfg(absl::string_view text,
                                                        absl::string_view source) {
  const json root = json::parse(text.begin(), text.end(), nullptr,
                                /*allow_exceptions=*/false);
  if (root.is_discarded() || !root.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": not a JSON object"));
  }
  const json* nested = Find(root, kPretrainedCfgKey);
  const json& cfg = nested != nullptr && nested->is_object() ? *nested : root;
  WeightsPreprocessing out;
  ASSIGN_OR_RETURN(out.mean, NumberList<double>(cfg, "mean", source));
  ASSIGN_OR_RETURN(out.std, NumberList<double>(cfg, "std", source));
  ASSIGN_OR_RETURN(out.crop_pct, Number(cfg, "crop_pct", source));
  ASSIGN_OR_RETURN(out.interpolation, Text(cfg, "interpolation", source));
  ASSIGN_OR_RETURN(out.input_size, NumberList<int64_t>(cfg, "input_size", source));
  return out;
}

std::string PretrainedCfgJson(const WeightsPreprocessing& cfg) {
  json out = json::object();
  if (cfg.mean) out["mean"] = *cfg.mean;
  if (cfg.std) out["std"] = *cfg.std;
  if (cfg.crop_pct) out["crop_pct"] = *cfg.crop_pct;
  if (cfg.interpolation) out["interpolation"] = *cfg.interpolation;
  if (cfg.input_size) out["input_size"] = *cfg.input_size;
  return out.dump();
}

absl::StatusOr<WeightsPreprocessingSources> ReadWeightsPreprocessing(
    const std::string& path) {
  ASSIGN_OR_RETURN(const std::unique_ptr<SafetensorsFile> file,
                   SafetensorsFile::Open(path));
  WeightsPreprocessingSources sources;
  const auto stored = file->metadata().find(kPretrainedCfgKey);
  if (stored != file->metadata().end()) {
    ASSIGN_OR_RETURN(sources.from_metadata,
                     ParsePretrainedCfg(stored->second, absl::StrCat(path, ": metadata ",
                                                                     kPretrainedCfgKey)));
  }
  const std::filesystem::path config =
      std::filesystem::path(path).parent_path() / kWeightsConfigFile;
  std::error_code error;
  if (std::filesystem::exists(config, error)) {
    ASSIGN_OR_RETURN(
        const std::string text,
        ReadFile(config.string(), ReadOptions{.max_bytes = kMaxConfigBytes,
                                              .what = "the weights' config"}));
    ASSIGN_OR_RETURN(sources.from_config, ParsePretrainedCfg(text, config.string()));
  }
  return sources;
}

absl::StatusOr<std::string> ApplyWeightsPreprocessing(
    const WeightsPreprocessingSources& sources, const std::set<std::string>& given,
    TrainerOptions& options) {
  const std::vector<Source> order = {
      {&sources.from_metadata, "the weights' metadata"},
      {&sources.from_config, "config.json beside the weights"}};
  std::vector<std::string> said;
  RETURN_IF_ERROR(TakeChannelStats(order, given, options, said));
  RETURN_IF_ERROR(TakeCropAndSize(order, given, options, said));
  return absl::StrJoin(said, ", ");
}

bool UsesWeightsPreprocessing(const TrainerOptions& options) {
  return options.eval_only && !options.init_from.empty() &&
         IsEncodedImageDataset(options.dataset);
}

}  // namespace tessera::trainer
