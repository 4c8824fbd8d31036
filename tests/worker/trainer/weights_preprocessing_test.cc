// The preprocessing that comes with weights (weights_preprocessing.h): timm's
// pretrained_cfg read from config.json (nested and at the top level) and from
// a safetensors file's metadata, and the precedence an evaluation applies:
// the command line, then the metadata, then config.json, then the defaults.
#include "worker/trainer/run/weights_preprocessing.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/trainer/model/safetensors.h"
#include "worker/trainer/run/trainer_flags.h"

namespace tessera::trainer {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// timm's config.json as the Hugging Face hub publishes it (abridged).
constexpr char kNestedConfig[] = R"({
  "architecture": "vit_base_patch16_224",
  "num_classes": 1000,
  "pretrained_cfg": {
    "tag": "augreg2_in21k_ft_in1k",
    "input_size": [3, 224, 224],
    "interpolation": "bicubic",
    "crop_pct": 0.9,
    "crop_mode": "center",
    "mean": [0.5, 0.5, 0.5],
    "std": [0.5, 0.5, 0.5],
    "pool_size": null
  }
})";

// An older timm config: the same keys at the top level.
constexpr char kTopLevelConfig[] = R"({
  "architecture": "vit_small_patch16_384",
  "input_size": [3, 384, 384],
  "interpolation": "bilinear",
  "crop_pct": 1.0,
  "mean": [0.485, 0.456, 0.406],
  "std": [0.229, 0.224, 0.225]
})";

std::string FreshDirectory(const std::string& name) {
  const fs::path dir =
      fs::path(::testing::TempDir()) / (name + "-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

// A one-tensor safetensors file with this metadata.
std::string WriteWeights(const std::string& dir,
                         const std::map<std::string, std::string>& metadata) {
  const float value = 1.0f;
  const std::string path = dir + "/model.safetensors";
  EXPECT_TRUE(WriteSafetensors(path,
                               {{"w",
                                 SafetensorsDtype::kF32,
                                 {1},
                                 absl::string_view(reinterpret_cast<const char*>(&value),
                                                   sizeof(value))}},
                               metadata)
                  .ok());
  return path;
}

void WriteText(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
}

TrainerOptions EvalOfImages(const std::string& weights) {
  TrainerOptions options;
  options.dataset = "imagefolder";
  options.eval_only = true;
  options.init_from = weights;
  return options;
}

TEST(WeightsPreprocessingTest, ReadsTimmsNestedPretrainedCfg) {
  const absl::StatusOr<WeightsPreprocessing> cfg =
      ParsePretrainedCfg(kNestedConfig, "config.json");
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  EXPECT_THAT(*cfg->mean, ElementsAre(0.5, 0.5, 0.5));
  EXPECT_THAT(*cfg->std, ElementsAre(0.5, 0.5, 0.5));
  EXPECT_DOUBLE_EQ(*cfg->crop_pct, 0.9);
  EXPECT_EQ(*cfg->interpolation, "bicubic");
  EXPECT_THAT(*cfg->input_size, ElementsAre(3, 224, 224));
}

TEST(WeightsPreprocessingTest, ReadsTheKeysAtTheTopLevelToo) {
  const absl::StatusOr<WeightsPreprocessing> cfg =
      ParsePretrainedCfg(kTopLevelConfig, "config.json");
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  EXPECT_THAT(*cfg->mean, ElementsAre(0.485, 0.456, 0.406));
  EXPECT_DOUBLE_EQ(*cfg->crop_pct, 1.0);
  EXPECT_EQ(*cfg->interpolation, "bilinear");
  EXPECT_THAT(*cfg->input_size, ElementsAre(3, 384, 384));
}

TEST(WeightsPreprocessingTest, MissingAndNullKeysAreAbsentAndOthersIgnored) {
  const absl::StatusOr<WeightsPreprocessing> cfg = ParsePretrainedCfg(
      R"({"model_type": "vit", "image_size": 224, "crop_pct": null})", "config.json");
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  EXPECT_FALSE(cfg->mean.has_value());
  EXPECT_FALSE(cfg->crop_pct.has_value());
  EXPECT_FALSE(cfg->interpolation.has_value());
  EXPECT_FALSE(cfg->input_size.has_value());
}

TEST(WeightsPreprocessingTest, MalformedValuesNameTheSourceAndTheKey) {
  for (const char* text :
       {R"({"crop_pct": "0.9"})", R"({"mean": [0.5, "x", 0.5]})",
        R"({"input_size": [3, 224.5, 224]})", R"({"interpolation": 3})"}) {
    const absl::StatusOr<WeightsPreprocessing> cfg =
        ParsePretrainedCfg(text, "w/config.json");
    ASSERT_FALSE(cfg.ok()) << text;
    EXPECT_EQ(cfg.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(cfg.status().message(), HasSubstr("w/config.json: "));
  }
  EXPECT_FALSE(ParsePretrainedCfg("[1, 2]", "config.json").ok());
  EXPECT_FALSE(ParsePretrainedCfg("{", "config.json").ok());
}

TEST(WeightsPreprocessingTest, WhatTheExportWritesReadsBack) {
  WeightsPreprocessing cfg;
  cfg.mean = {0.1, 0.2, 0.3};
  cfg.std = {0.4, 0.5, 0.6};
  cfg.crop_pct = 0.95;
  cfg.interpolation = "bicubic";
  cfg.input_size = {3, 32, 32};
  const absl::StatusOr<WeightsPreprocessing> back =
      ParsePretrainedCfg(PretrainedCfgJson(cfg), "metadata");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->mean, cfg.mean);
  EXPECT_EQ(back->std, cfg.std);
  EXPECT_EQ(back->crop_pct, cfg.crop_pct);
  EXPECT_EQ(back->interpolation, cfg.interpolation);
  EXPECT_EQ(back->input_size, cfg.input_size);
}

TEST(WeightsPreprocessingTest, FlagsBeatMetadataWhichBeatsConfigWhichBeatsDefaults) {
  const std::string dir = FreshDirectory("weights-precedence");
  // The metadata has the crop and the mean; config.json beside it has those
  // too, and the interpolation and size; nothing has the std.
  const std::string weights = WriteWeights(
      dir, {{"format", "pt"},
            {"pretrained_cfg", R"({"crop_pct": 1.0, "mean": [0.5, 0.5, 0.5]})"}});
  WriteText(dir + "/config.json",
            R"({"pretrained_cfg": {"crop_pct": 0.9, "mean": [0.1, 0.1, 0.1],
                "interpolation": "bicubic", "input_size": [3, 32, 32]}})");
  const absl::StatusOr<WeightsPreprocessingSources> sources =
      ReadWeightsPreprocessing(weights);
  ASSERT_TRUE(sources.ok()) << sources.status();

  TrainerOptions options = EvalOfImages(weights);
  absl::StatusOr<std::string> said = ApplyWeightsPreprocessing(*sources, {}, options);
  ASSERT_TRUE(said.ok()) << said.status();
  EXPECT_DOUBLE_EQ(options.crop_fraction, 1.0);
  EXPECT_THAT(options.mean, ElementsAre(0.5, 0.5, 0.5));
  EXPECT_TRUE(options.std.empty());
  EXPECT_EQ(options.interpolation, "bicubic");
  EXPECT_EQ(options.image_size, 32);
  EXPECT_THAT(*said, HasSubstr("crop_fraction=1 (the weights' metadata)"));
  EXPECT_THAT(*said, HasSubstr("mean=0.5,0.5,0.5 (the weights' metadata)"));
  EXPECT_THAT(*said, HasSubstr("std=ImageNet's (default)"));
  EXPECT_THAT(*said, HasSubstr("interpolation=bicubic (config.json beside the weights)"));
  EXPECT_THAT(*said, HasSubstr("image_size=32 (config.json beside the weights)"));

  // What the command line gives stays, whatever the files say.
  TrainerOptions given = EvalOfImages(weights);
  given.crop_fraction = 0.875;
  given.interpolation = "bilinear";
  said = ApplyWeightsPreprocessing(*sources, {"crop-fraction", "interpolation"}, given);
  ASSERT_TRUE(said.ok()) << said.status();
  EXPECT_DOUBLE_EQ(given.crop_fraction, 0.875);
  EXPECT_EQ(given.interpolation, "bilinear");
  EXPECT_THAT(given.mean, ElementsAre(0.5, 0.5, 0.5));
  EXPECT_THAT(*said, HasSubstr("crop_fraction=0.875 (--crop-fraction)"));
  EXPECT_THAT(*said, HasSubstr("interpolation=bilinear (--interpolation)"));
}

TEST(WeightsPreprocessingTest, WeightsWithoutEitherSourceKeepTheDefaults) {
  const std::string dir = FreshDirectory("weights-plain");
  const std::string weights = WriteWeights(dir, {{"format", "pt"}});
  const absl::StatusOr<WeightsPreprocessingSources> sources =
      ReadWeightsPreprocessing(weights);
  ASSERT_TRUE(sources.ok()) << sources.status();
  TrainerOptions options = EvalOfImages(weights);
  const absl::StatusOr<std::string> said =
      ApplyWeightsPreprocessing(*sources, {}, options);
  ASSERT_TRUE(said.ok()) << said.status();
  EXPECT_DOUBLE_EQ(options.crop_fraction, 0.875);
  EXPECT_EQ(options.interpolation, "bilinear");
  EXPECT_EQ(options.image_size, 0);
  EXPECT_THAT(*said, HasSubstr("crop_fraction=0.875 (default)"));
}

TEST(WeightsPreprocessingTest, ValuesTheTrainerCannotUseAreRefusedNamingTheSource) {
  struct Case {
    const char* cfg;
    const char* expected;
  };
  for (const Case& c :
       {Case{R"({"crop_pct": 1.5})", "crop_pct"},
        Case{R"({"interpolation": "nearest"})", "interpolation \"nearest\""},
        Case{R"({"input_size": [3, 224, 160]})", "input_size"},
        Case{R"({"std": [0.5, 0.0, 0.5]})", "std"},
        Case{R"({"mean": [0.5, 0.5]})", "mean"}}) {
    WeightsPreprocessingSources sources;
    sources.from_config = *ParsePretrainedCfg(c.cfg, "config.json");
    TrainerOptions options = EvalOfImages("/w.safetensors");
    const absl::StatusOr<std::string> said =
        ApplyWeightsPreprocessing(sources, {}, options);
    ASSERT_FALSE(said.ok()) << c.cfg;
    EXPECT_THAT(said.status().message(), HasSubstr("config.json beside the weights"));
    EXPECT_THAT(said.status().message(), HasSubstr(c.expected));
  }
}

TEST(WeightsPreprocessingTest, AMalformedConfigBesideTheWeightsFailsNamingIt) {
  const std::string dir = FreshDirectory("weights-bad-config");
  const std::string weights = WriteWeights(dir, {});
  WriteText(dir + "/config.json", R"({"pretrained_cfg": {"crop_pct": "all"}})");
  const absl::StatusOr<WeightsPreprocessingSources> sources =
      ReadWeightsPreprocessing(weights);
  ASSERT_FALSE(sources.ok());
  EXPECT_THAT(sources.status().message(), HasSubstr(dir + "/config.json"));
  EXPECT_THAT(sources.status().message(), HasSubstr("crop_pct"));
}

TEST(WeightsPreprocessingTest, AppliesToEvaluationsOfWeightsFilesOnImageData) {
  EXPECT_TRUE(UsesWeightsPreprocessing(EvalOfImages("/w.safetensors")));
  TrainerOptions training = EvalOfImages("/w.safetensors");
  training.eval_only = false;
  EXPECT_FALSE(UsesWeightsPreprocessing(training));
  TrainerOptions checkpoint = EvalOfImages("");
  EXPECT_FALSE(UsesWeightsPreprocessing(checkpoint));
  TrainerOptions in_memory = EvalOfImages("/w.safetensors");
  in_memory.dataset = "cifar10";
  EXPECT_FALSE(UsesWeightsPreprocessing(in_memory));
}

TEST(WeightsPreprocessingTest, FlagsRecordWhichConfigFlagsWereGiven) {
  const absl::StatusOr<TrainerFlags> flags =
      ParseTrainerFlags({"--crop-fraction", "0.875", "--mean=0.5", "--mean=0.5",
                         "--mean=0.5", "--eval-only", "--rank", "0"});
  ASSERT_TRUE(flags.ok()) << flags.status();
  EXPECT_EQ(flags->given, (std::set<std::string>{"crop-fraction", "mean", "eval-only"}));
}

}  // namespace
}  // namespace tessera::trainer
