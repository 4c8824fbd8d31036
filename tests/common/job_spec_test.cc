#include "common/job_spec.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/trainer_choices.h"
#include "gmock/gmock.h"
#include "google/protobuf/descriptor.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// A minimal valid spec; tests break one thing at a time.
constexpr char kValidSpec[] = R"(
name: demo
world_size: 2
trainer:
  model: vit-micro
  dataset: synthetic
  epochs: 1
  batch_size: 8
)";

std::string ReadExampleSpec() {
  std::filesystem::path root;
  if (const char* dir = std::getenv("TESSERA_SOURCE_DIR"); dir != nullptr) {
    root = dir;
  } else {
    root = std::filesystem::path(__FILE__).parent_path().parent_path().parent_path();
  }
  std::ifstream in(root / "examples" / "fmnist-2rank.yaml");
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

absl::Status ParseValidate(const std::string& yaml) {
  return ParseAndValidateJobSpec(yaml, SpecLimits{}).status();
}

TEST(JobSpecTest, ExampleSpecParsesAndValidates) {
  const std::string text = ReadExampleSpec();
  ASSERT_FALSE(text.empty()) << "examples/fmnist-2rank.yaml not found";
  absl::StatusOr<v1::JobSpec> spec = ParseAndValidateJobSpec(text, SpecLimits{});
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->name(), "fmnist-vit-micro");
  EXPECT_EQ(spec->world_size(), 2);
  EXPECT_EQ(spec->trainer().model(), "vit-micro");
  EXPECT_EQ(spec->trainer().dataset(), "fashion-mnist");
  EXPECT_EQ(spec->trainer().data_dir(), "/usr/share/datasets/fashion-mnist");
  EXPECT_GT(spec->trainer().epochs(), 0);
  EXPECT_GT(spec->trainer().batch_size(), 0);
  EXPECT_FALSE(spec->trainer().has_allreduce());
}

TEST(JobSpecTest, TextThatIsNotUtf8IsRejected) {
  // Protobuf cannot parse such strings back, so storing one would break reads.
  absl::StatusOr<v1::JobSpec> bytes =
      ParseJobSpec(std::string("name: a\xff\nworld_size: 1\n"));
  EXPECT_TRUE(absl::IsInvalidArgument(bytes.status())) << bytes.status();
  EXPECT_THAT(bytes.status().message(), HasSubstr("UTF-8"));
}

TEST(JobSpecTest, ControlCharactersInStringsAreRejected) {
  // A NUL would cut the trainer's argv entry short.
  absl::StatusOr<v1::JobSpec> spec = ParseAndValidateJobSpec(
      "name: j\nworld_size: 1\ntrainer:\n  model: vit-micro\n  dataset: "
      "\"syn\\0thetic\"\n"
      "  batch_size: 8\n  epochs: 1\n",
      SpecLimits{});
  EXPECT_TRUE(absl::IsInvalidArgument(spec.status())) << spec.status();
  EXPECT_THAT(spec.status().message(),
              HasSubstr("trainer.dataset: must not contain control"));
}

TEST(JobSpecTest, EveryExampleSpecParsesAndValidates) {
  std::filesystem::path root =
      std::filesystem::path(__FILE__).parent_path().parent_path().parent_path();
  if (const char* dir = std::getenv("TESSERA_SOURCE_DIR"); dir != nullptr) root = dir;
  int checked = 0;
  for (const auto& entry : std::filesystem::directory_iterator(root / "examples")) {
    if (entry.path().extension() != ".yaml") continue;
    std::ifstream in(entry.path());
    std::stringstream text;
    text << in.rdbuf();
    // Sweep specs (examples/sweep-*.yaml and the paper study) are checked by
    // sweep_spec_test, search specs (examples/search-*.yaml) by
    // search_commands_test.
    if (text.str().find("\ngrid:") != std::string::npos) continue;
    if (text.str().find("\nsearch:") != std::string::npos) continue;
    absl::StatusOr<v1::JobSpec> spec = ParseAndValidateJobSpec(text.str(), SpecLimits{});
    EXPECT_TRUE(spec.ok()) << entry.path() << ": " << spec.status();
    ++checked;
  }
  EXPECT_GE(checked, 3);
}

TEST(JobSpecTest, MemoryPerRankTakesSizesWithUnits) {
  for (const auto& [text, bytes] :
       std::vector<std::pair<std::string, int64_t>>{{"3GiB", int64_t{3} << 30},
                                                    {"3000MB", int64_t{3000} << 20},
                                                    {"\"512 MiB\"", int64_t{512} << 20},
                                                    {"4294967296", int64_t{4} << 30}}) {
    absl::StatusOr<v1::JobSpec> spec = ParseAndValidateJobSpec(
        absl::StrCat(kValidSpec, "memory_per_rank: ", text, "\n"), SpecLimits{});
    ASSERT_TRUE(spec.ok()) << text << ": " << spec.status();
    EXPECT_EQ(*MemoryPerRankBytes(*spec), bytes) << text;
  }
  // Unset: no limit.
  EXPECT_EQ(*MemoryPerRankBytes(*ParseJobSpec(kValidSpec)), 0);
}

TEST(JobSpecTest, BadMemoryPerRankIsRejectedNamingTheKey) {
  for (const char* bad : {"3 gigs", "-1GiB", "1.5GiB", "GiB", "3", "63MiB"}) {
    const absl::Status status =
        ParseValidate(absl::StrCat(kValidSpec, "memory_per_rank: ", bad, "\n"));
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(status.message(), HasSubstr("memory_per_rank: '")) << bad;
  }
  // Too small to start a trainer: named as such.
  EXPECT_THAT(ParseValidate(absl::StrCat(kValidSpec, "memory_per_rank: 3\n")).message(),
              HasSubstr("below the least a rank needs (64 MiB)"));
}

TEST(JobSpecTest, MalformedYamlReportsLineAndColumn) {
  absl::Status s = ParseJobSpec("name: demo\ntrainer:\n  model: [vit\n").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("malformed YAML at line"));
  EXPECT_THAT(s.message(), HasSubstr("column"));
}

TEST(JobSpecTest, TopLevelThatIsNotAMapIsRejected) {
  for (const char* text : {"- a\n- b\n", "just a string\n", ""}) {
    absl::Status s = ParseJobSpec(text).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << text;
    EXPECT_THAT(s.message(), HasSubstr("expected a map of fields at the top level"))
        << text;
  }
}

TEST(JobSpecTest, UnknownTopLevelFieldIsRejected) {
  absl::Status s = ParseJobSpec("name: demo\nworld_sise: 2\n").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "spec: unknown field 'world_sise'");
}

TEST(JobSpecTest, UnknownNestedFieldIsRejectedWithItsPath) {
  absl::Status s = ParseJobSpec("name: demo\ntrainer:\n  model: m\n  foo: 1\n").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "spec: unknown field 'trainer.foo'");
}

TEST(JobSpecTest, DuplicateFieldIsRejected) {
  absl::Status s = ParseJobSpec("name: a\nname: b\n").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("duplicate field 'name'"));
}

TEST(JobSpecTest, WrongScalarTypesNameFieldAndValue) {
  absl::Status s = ParseJobSpec("trainer:\n  epochs: abc\n").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "trainer.epochs: expected an integer, got 'abc'");

  s = ParseJobSpec("trainer:\n  lr: fast\n").status();
  EXPECT_EQ(s.message(), "trainer.lr: expected a finite number, got 'fast'");

  s = ParseJobSpec("trainer:\n  allreduce: maybe\n").status();
  EXPECT_EQ(s.message(), "trainer.allreduce: expected true or false, got 'maybe'");

  s = ParseJobSpec("world_size: 1.5\n").status();
  EXPECT_EQ(s.message(), "world_size: expected an integer, got '1.5'");

  s = ParseJobSpec("world_size: 99999999999\n").status();
  EXPECT_EQ(s.message(), "world_size: expected a 32-bit integer, got '99999999999'");

  s = ParseJobSpec("trainer: vit\n").status();
  EXPECT_EQ(s.message(), "trainer: expected a map, got 'vit'");

  s = ParseJobSpec("name: [a, b]\n").status();
  EXPECT_EQ(s.message(), "name: expected a string, got a list");
}

TEST(JobSpecTest, NullValueLeavesFieldUnset) {
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpec("name:\nworld_size: 3\n");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->name(), "");
  EXPECT_EQ(spec->world_size(), 3);
}

TEST(JobSpecTest, MissingNameModelAndDatasetAreEachReported) {
  absl::Status s =
      ParseValidate("world_size: 1\ntrainer:\n  batch_size: 4\n  epochs: 1\n");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("name: missing"));
  EXPECT_THAT(s.message(), HasSubstr("trainer.model: missing"));
  EXPECT_THAT(s.message(), HasSubstr("trainer.dataset: missing"));
}

TEST(JobSpecTest, WorldSizeOutOfRangeIsRejected) {
  v1::JobSpec spec = *ParseJobSpec(kValidSpec);
  ASSERT_TRUE(ValidateJobSpec(spec, SpecLimits{}).ok());

  spec.set_world_size(0);
  EXPECT_EQ(ValidateJobSpec(spec, SpecLimits{}).message(),
            "world_size: must be between 1 and 1024, got 0");
  spec.set_world_size(-3);
  EXPECT_EQ(ValidateJobSpec(spec, SpecLimits{}).message(),
            "world_size: must be between 1 and 1024, got -3");
  spec.set_world_size(9);
  EXPECT_EQ(ValidateJobSpec(spec, SpecLimits{.max_world_size = 8}).message(),
            "world_size: must be between 1 and 8, got 9");
  spec.set_world_size(8);
  EXPECT_TRUE(ValidateJobSpec(spec, SpecLimits{.max_world_size = 8}).ok());
}

TEST(JobSpecTest, FaultHookIsCheckedForSyntaxAndForARankOfTheJob) {
  v1::JobSpec spec = *ParseJobSpec(kValidSpec);  // world_size 2
  spec.mutable_trainer()->set_fault("hang:rank=1,step=5,phase=data,attempt=1");
  EXPECT_TRUE(ValidateJobSpec(spec, SpecLimits{}).ok());
  spec.mutable_trainer()->set_fault("hang:rank=2,step=5,phase=data");
  EXPECT_EQ(ValidateJobSpec(spec, SpecLimits{}).message(),
            "trainer.fault: rank 2 is not a rank of this job (world_size 2)");
  spec.mutable_trainer()->set_fault("slow:rank=0,phase=data");
  EXPECT_THAT(ValidateJobSpec(spec, SpecLimits{}).message(),
              HasSubstr("trainer.fault \"slow:rank=0,phase=data\": slow needs ms="));
}

TEST(JobSpecTest, NonPositiveBatchSizeIsRejected) {
  v1::JobSpec spec = *ParseJobSpec(kValidSpec);
  spec.mutable_trainer()->set_batch_size(-4);
  absl::Status s = ValidateJobSpec(spec, SpecLimits{});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "trainer.batch_size: must be positive, got -4");

  spec.mutable_trainer()->clear_batch_size();
  EXPECT_EQ(ValidateJobSpec(spec, SpecLimits{}).message(),
            "trainer.batch_size: must be positive, got 0");
}

TEST(JobSpecTest, NegativeCountsAndRatesAreRejected) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"  epochs: -1\n  max_steps: 5\n", "trainer.epochs: must be non-negative, got -1"},
      {"  max_steps: -2\n", "trainer.max_steps: must be non-negative, got -2"},
      {"  lr: -0.5\n", "trainer.lr: must be positive, got -0.5"},
      {"  train_subset: -1\n", "trainer.train_subset: must be non-negative, got -1"},
      {"  test_subset: -1\n", "trainer.test_subset: must be non-negative, got -1"},
      {"  metrics_every: -1\n", "trainer.metrics_every: must be non-negative, got -1"},
      {"  threads: -2\n", "trainer.threads: must be non-negative, got -2"},
  };
  for (const auto& [extra, want] : cases) {
    const std::string yaml = absl::StrCat(
        "name: n\nworld_size: 1\ntrainer:\n  model: m\n  dataset: d\n  batch_size: 2\n",
        extra.find("epochs") == std::string::npos ? "  epochs: 1\n" : "", extra);
    absl::Status s = ParseValidate(yaml);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << yaml;
    EXPECT_THAT(s.message(), HasSubstr(want)) << yaml;
  }
}

TEST(JobSpecTest, NeedsEpochsOrMaxSteps) {
  v1::JobSpec spec = *ParseJobSpec(kValidSpec);
  spec.mutable_trainer()->set_epochs(0);
  EXPECT_THAT(ValidateJobSpec(spec, SpecLimits{}).message(),
              HasSubstr("one of trainer.epochs and trainer.max_steps must be positive"));
  spec.mutable_trainer()->set_max_steps(100);
  EXPECT_TRUE(ValidateJobSpec(spec, SpecLimits{}).ok());
}

TEST(JobSpecTest, OverlongStringsAreRejected) {
  v1::JobSpec spec = *ParseJobSpec(kValidSpec);
  spec.set_name(std::string(129, 'n'));
  EXPECT_EQ(ValidateJobSpec(spec, SpecLimits{}).message(),
            "name: too long (129 bytes, limit 128)");
  spec.set_name("ok");
  spec.mutable_trainer()->set_data_dir(std::string(5000, 'd'));
  EXPECT_EQ(ValidateJobSpec(spec, SpecLimits{}).message(),
            "trainer.data_dir: too long (5000 bytes, limit 4096)");
}

TEST(JobSpecTest, NonFiniteNumbersAreRejected) {
  EXPECT_THAT(ParseJobSpec("trainer:\n  lr: .nan\n").status().message(),
              HasSubstr("trainer.lr: expected a finite number"));
  v1::JobSpec spec = *ParseJobSpec(kValidSpec);
  spec.mutable_trainer()->set_weight_decay(std::numeric_limits<double>::infinity());
  EXPECT_THAT(ValidateJobSpec(spec, SpecLimits{}).message(),
              HasSubstr("trainer.weight_decay: must be finite"));
}

TEST(JobSpecTest, OverrideSetsExistingNestedKey) {
  absl::StatusOr<std::string> yaml =
      ApplySpecOverrides(kValidSpec, {"trainer.batch_size=32"});
  ASSERT_TRUE(yaml.ok()) << yaml.status();
  absl::StatusOr<v1::JobSpec> spec = ParseAndValidateJobSpec(*yaml, SpecLimits{});
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->trainer().batch_size(), 32);
  EXPECT_EQ(spec->trainer().model(), "vit-micro");
  EXPECT_EQ(spec->name(), "demo");
}

TEST(JobSpecTest, OverrideAddsNewKeysAndMaps) {
  absl::StatusOr<std::string> yaml =
      ApplySpecOverrides("name: demo\n", {"trainer.lr=0.25", "trainer.allreduce=false",
                                          "world_size=4", "trainer.data_dir='a: b'"});
  ASSERT_TRUE(yaml.ok()) << yaml.status();
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpec(*yaml);
  ASSERT_TRUE(spec.ok()) << spec.status() << "\n" << *yaml;
  EXPECT_EQ(spec->world_size(), 4);
  EXPECT_DOUBLE_EQ(spec->trainer().lr(), 0.25);
  ASSERT_TRUE(spec->trainer().has_allreduce());
  EXPECT_FALSE(spec->trainer().allreduce());
  EXPECT_EQ(spec->trainer().data_dir(), "a: b");
}

TEST(JobSpecTest, OverrideWithAListSetsARepeatedField) {
  absl::StatusOr<std::string> yaml = ApplySpecOverrides(
      kValidSpec, {"trainer.mean=[0.5, 0.5, 0.5]", "trainer.std=[0.25,0.25,0.25]"});
  ASSERT_TRUE(yaml.ok()) << yaml.status();
  absl::StatusOr<v1::JobSpec> spec = ParseAndValidateJobSpec(*yaml, SpecLimits{});
  ASSERT_TRUE(spec.ok()) << spec.status() << "\n" << *yaml;
  EXPECT_THAT(spec->trainer().mean(), ElementsAre(0.5, 0.5, 0.5));
  EXPECT_THAT(spec->trainer().std(), ElementsAre(0.25, 0.25, 0.25));
}

TEST(JobSpecTest, OverrideWithoutOverridesKeepsTextVerbatim) {
  const std::string text = "# comment\nname: demo\n";
  EXPECT_EQ(*ApplySpecOverrides(text, {}), text);
}

TEST(JobSpecTest, MalformedOverridesAreRejectedByName) {
  struct Case {
    std::string override_text;
    std::string want;
  };
  const std::vector<Case> cases = {
      {"trainer.batch_size", "override 'trainer.batch_size': expected key=value"},
      {"=3", "override '=3': empty key"},
      {"trainer..lr=1",
       "override 'trainer..lr=1': key 'trainer..lr' has an empty component"},
      {"name.first=x", "override 'name.first=x': 'name' is not a map"},
      {"name={a: b}", "override 'name={a: b}': value must be a scalar or a list"},
      {"name=[[a]]", "override 'name=[[a]]': value must be a scalar or a list"},
  };
  for (const Case& c : cases) {
    absl::Status s = ApplySpecOverrides(kValidSpec, {c.override_text}).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.override_text;
    EXPECT_THAT(s.message(), HasSubstr(c.want)) << c.override_text;
  }
}

TEST(JobSpecTest, OverrideOfMalformedYamlIsRejected) {
  absl::Status s = ApplySpecOverrides("name: [x\n", {"name=y"}).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("malformed YAML"));
}

TEST(JobSpecTest, FlagsCoverOnlySetFieldsInFieldOrder) {
  v1::TrainerConfig config;
  EXPECT_THAT(TrainerConfigToFlags(config), IsEmpty());

  config.set_model("vit-micro");
  config.set_batch_size(64);
  config.set_train_subset(12000);
  config.set_lr(0.002);
  EXPECT_THAT(TrainerConfigToFlags(config),
              ElementsAre("--model=vit-micro", "--batch-size=64", "--lr=0.002",
                          "--train-subset=12000"));
}

TEST(JobSpecTest, OptionalBoolUsesPresence) {
  v1::TrainerConfig config;
  config.set_allreduce(false);
  EXPECT_THAT(TrainerConfigToFlags(config), ElementsAre("--allreduce=false"));
  config.set_allreduce(true);
  EXPECT_THAT(TrainerConfigToFlags(config), ElementsAre("--allreduce=true"));
}

TEST(JobSpecTest, DoubleFlagsRoundTripExactly) {
  for (double value : {0.1, 1.0 / 3.0, 2e-5, 6.02214076e23, 0.30000000000000004}) {
    v1::TrainerConfig config;
    config.set_lr(value);
    const std::vector<std::string> flags = TrainerConfigToFlags(config);
    ASSERT_EQ(flags.size(), 1u);
    const std::string prefix = "--lr=";
    ASSERT_EQ(flags[0].rfind(prefix, 0), 0u) << flags[0];
    EXPECT_EQ(std::strtod(flags[0].c_str() + prefix.size(), nullptr), value) << flags[0];
  }
  v1::TrainerConfig config;
  config.set_lr(0.1);
  EXPECT_THAT(TrainerConfigToFlags(config), ElementsAre("--lr=0.1"));  // shortest form
}

// Every TrainerConfig field must have a flag spelling; a nested message would not.
TEST(JobSpecTest, TrainerConfigIsFlatSoEveryFieldBecomesAFlag) {
  const google::protobuf::Descriptor* desc = v1::TrainerConfig::descriptor();
  for (int i = 0; i < desc->field_count(); ++i) {
    EXPECT_NE(desc->field(i)->cpp_type(),
              google::protobuf::FieldDescriptor::CPPTYPE_MESSAGE)
        << desc->field(i)->name();
  }
}

TEST(JobSpecTest, ParsedSpecFlagsMatchTheYaml) {
  absl::StatusOr<v1::JobSpec> spec = ParseAndValidateJobSpec(
      absl::StrCat(kValidSpec, "  data_dir: /data/fm\n  seed: 7\n  allreduce: no\n"),
      SpecLimits{});
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_THAT(
      TrainerConfigToFlags(spec->trainer()),
      ElementsAre("--model=vit-micro", "--dataset=synthetic", "--data-dir=/data/fm",
                  "--epochs=1", "--batch-size=8", "--allreduce=false", "--seed=7"));
}

TEST(JobSpecTest, TrainerChoicesAndFractionsAreChecked) {
  absl::Status s = ParseAndValidateJobSpec(R"(name: x
world_size: 1
trainer:
  model: vit-micro
  dataset: synthetic
  batch_size: 8
  epochs: 1
  optimizer: adagrad
  precision: fp8
  label_smoothing: 1.5
  resume: true
)",
                                           SpecLimits{})
                       .status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(
      s.message(),
      HasSubstr("trainer.optimizer: must be one of adamw, sgd, lamb; got 'adagrad'"));
  EXPECT_THAT(s.message(), HasSubstr("trainer.precision"));
  EXPECT_THAT(s.message(), HasSubstr("trainer.label_smoothing: must be in [0, 1)"));
  EXPECT_THAT(s.message(), HasSubstr("trainer.resume: needs trainer.checkpoint_dir"));
}

TEST(JobSpecTest, EveryChoiceTableNamesAStringFieldAndItsValuesAreChecked) {
  for (const ChoiceField& f : kTrainerChoiceFields) {
    const google::protobuf::FieldDescriptor* field =
        v1::TrainerConfig::descriptor()->FindFieldByName(f.field);
    ASSERT_NE(field, nullptr) << f.field;
    EXPECT_EQ(field->type(), google::protobuf::FieldDescriptor::TYPE_STRING) << f.field;
    for (const char* value : {static_cast<const char*>(f.choices[0]), "no-such-choice"}) {
      // The spec's own dataset unless the table under test is the dataset's.
      const std::string dataset =
          std::string(f.field) == "dataset" ? "" : "  dataset: synthetic\n";
      const absl::Status s =
          ParseAndValidateJobSpec(
              absl::StrCat("name: x\nworld_size: 1\ntrainer:\n"
                           "  model: vit-micro\n  batch_size: 8\n",
                           dataset, "  epochs: 1\n  ", f.field, ": ", value, "\n"),
              SpecLimits{})
              .status();
      const std::string complaint = absl::StrCat("trainer.", f.field, ": must be one of ",
                                                 ChoicesText(f.choices, ", "));
      if (std::string(value) == "no-such-choice") {
        EXPECT_THAT(s.message(), HasSubstr(complaint));
      } else {
        EXPECT_THAT(s.message(), ::testing::Not(HasSubstr(complaint))) << value;
      }
    }
  }
}

TEST(JobSpecTest, EitherInterpolationIsAcceptedForEveryDataset) {
  // The in-memory datasets resize in the trainer's preprocessor, image
  // folders and shards as they decode: both ways take bilinear and bicubic.
  for (const char* dataset :
       {"fashion-mnist", "cifar10", "synthetic", "imagefolder", "shards"}) {
    for (const char* interpolation : {"bilinear", "bicubic"}) {
      const absl::StatusOr<v1::JobSpec> spec = ParseAndValidateJobSpec(
          absl::StrCat("name: x\nworld_size: 1\ntrainer:\n  model: vit-micro\n"
                       "  batch_size: 8\n  epochs: 1\n  data_dir: /data\n  dataset: ",
                       dataset, "\n  interpolation: ", interpolation, "\n"),
          SpecLimits{});
      ASSERT_TRUE(spec.ok()) << dataset << " " << interpolation << ": " << spec.status();
      EXPECT_EQ(spec->trainer().interpolation(), interpolation);
    }
  }
}

TEST(JobSpecTest, ProfileStepsAndCudaGraphAreCheckedAndBecomeTrainerFlags) {
  const absl::Status bad = ParseAndValidateJobSpec(R"(name: profiled
world_size: 1
trainer:
  model: vit-micro
  dataset: synthetic
  batch_size: 8
  epochs: 1
  profile_steps: 9-3
  cuda_graph: sometimes
)",
                                                   SpecLimits{})
                               .status();
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.message(),
              HasSubstr("trainer.profile_steps: profile steps must be A-B"));
  EXPECT_THAT(bad.message(),
              HasSubstr(absl::StrCat("trainer.cuda_graph: must be one of ",
                                     ChoicesText(kCudaGraphChoices, ", "))));

  absl::StatusOr<v1::JobSpec> good = ParseAndValidateJobSpec(R"(name: profiled
world_size: 1
trainer:
  model: vit-micro
  dataset: synthetic
  batch_size: 8
  epochs: 1
  profile_steps: 20-25
  cuda_graph: "off"
)",
                                                             SpecLimits{});
  ASSERT_TRUE(good.ok()) << good.status();
  EXPECT_THAT(TrainerConfigToFlags(good->trainer()),
              ::testing::IsSupersetOf({"--profile-steps=20-25", "--cuda-graph=off"}));
}

TEST(JobSpecTest, ZeroStageIsCheckedAndBecomesATrainerFlag) {
  const absl::Status bad = ParseAndValidateJobSpec(R"(name: zero
world_size: 2
trainer:
  model: vit-micro
  dataset: synthetic
  batch_size: 8
  epochs: 1
  zero_stage: 4
)",
                                                   SpecLimits{})
                               .status();
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.message(), HasSubstr("trainer.zero_stage: must be one of 0, 1, 2, 3"));

  absl::StatusOr<v1::JobSpec> good = ParseAndValidateJobSpec(R"(name: zero
world_size: 2
trainer:
  model: vit-micro
  dataset: synthetic
  batch_size: 8
  epochs: 1
  zero_stage: 3
)",
                                                             SpecLimits{});
  ASSERT_TRUE(good.ok()) << good.status();
  EXPECT_THAT(TrainerConfigToFlags(good->trainer()),
              ::testing::Contains("--zero-stage=3"));
}

TEST(JobSpecTest, EnvNamesThatLoadCodeAreRefusedNamingTheVariableAndWhy) {
  for (const auto& [name, why] : std::vector<std::pair<std::string, std::string>>{
           {"LD_PRELOAD", "dynamic loader"},
           {"LD_AUDIT", "dynamic loader"},
           {"NCCL_NET_PLUGIN", "libraries to load"},
           {"NCCL_TUNER_PLUGIN", "libraries to load"},
           {"CUDA_INJECTION64_PATH", "CUDA loads"},
           {"GCONV_PATH", "iconv modules"},
           {"PYTHONPATH", "Python"},
           {"PYTHONSTARTUP", "Python"},
           {"GLIBC_TUNABLES", "dynamic loader"},
           {"LOCPATH", "locale"},
           {"NLSPATH", "catalogs"},
           {"HOSTALIASES", "name resolution"},
           {"BASH_ENV", "bash"},
           {"ENV", "sh runs"},
           {"IFS", "shells"},
           {"PATH", "set by the worker"},
           {"HOME", "set by the worker"},
           {"PERL5OPT", "Perl"},
           {"RUBYOPT", "Ruby"},
           {"NODE_OPTIONS", "Node.js"},
           {"JAVA_TOOL_OPTIONS", "JVM"},
           {"OPENSSL_CONF", "OpenSSL"},
           {"KRB5_CONFIG", "Kerberos"},
           {"OMP_TOOL_LIBRARIES", "OpenMP"},
           {"NCCL_CONF_FILE", "NCCL_NET_PLUGIN"},
           {"TESSERA_JOB_ID", "set by the worker"},
           {"RANK", "set by the worker"}}) {
    const absl::Status s = CheckEnvName(name);
    ASSERT_TRUE(absl::IsInvalidArgument(s)) << name;
    EXPECT_THAT(s.message(), HasSubstr("'" + name + "'")) << s;
    EXPECT_THAT(s.message(), HasSubstr(why)) << s;
  }
  // What only tunes the submitter's own job passes.
  for (const char* ok :
       {"NCCL_DEBUG", "NCCL_SOCKET_IFNAME", "OMP_NUM_THREADS", "MALLOC_ARENA_MAX",
        "TMPDIR", "HF_TOKEN", "LANG", "TZ", "SSL_CERT_FILE", "CUDA_LAUNCH_BLOCKING"}) {
    EXPECT_TRUE(CheckEnvName(ok).ok()) << ok;
  }
  // And the spec validator refuses them the same way.
  v1::JobSpec spec;
  spec.set_name("j");
  spec.set_world_size(1);
  spec.mutable_trainer()->set_model("vit-micro");
  spec.mutable_trainer()->set_dataset("synthetic");
  spec.mutable_trainer()->set_batch_size(8);
  spec.mutable_trainer()->set_epochs(1);
  (*spec.mutable_env())["NCCL_NET_PLUGIN"] = "/tmp/evil.so";
  const absl::Status s = ValidateJobSpec(spec, SpecLimits{});
  ASSERT_TRUE(absl::IsInvalidArgument(s));
  EXPECT_THAT(s.message(), HasSubstr("env: name 'NCCL_NET_PLUGIN' is reserved"));
}

TEST(JobSpecTest, AnEvalJobHasOneModelSourceAndASplitTheDataOffers) {
  const std::string eval = absl::StrCat(kValidSpec,
                                        "  eval_only: true\n"
                                        "  resume: true\n"
                                        "  checkpoint_dir: /ckpt/demo\n"
                                        "  eval_step: 40\n"
                                        "  eval_split: val\n"
                                        "kind: eval\n");
  EXPECT_TRUE(ParseValidate(eval).ok()) << ParseValidate(eval);
  // Nor batch size nor length: an evaluation takes no training step.
  EXPECT_TRUE(
      ParseValidate("name: e\nworld_size: 1\nkind: eval\ntrainer:\n"
                    "  model: vit-micro\n  dataset: synthetic\n  eval_only: true\n"
                    "  init_from: /data/m.safetensors\n")
          .ok());
  // lr is not needed, and eval_only and kind go together.
  EXPECT_THAT(ParseValidate(absl::StrCat(kValidSpec, "kind: eval\n")).message(),
              HasSubstr("kind: eval needs trainer.eval_only"));
  EXPECT_THAT(ParseValidate(absl::StrCat(kValidSpec, "  eval_only: true\n")).message(),
              HasSubstr("trainer.eval_only: only in a job of kind eval"));
  EXPECT_THAT(ParseValidate(absl::StrCat(kValidSpec, "  eval_only: true\nkind: eval\n"))
                  .message(),
              HasSubstr("needs trainer.init_from, or trainer.resume"));
  EXPECT_THAT(
      ParseValidate(absl::StrCat(kValidSpec, "  eval_split: holdout\n")).message(),
      HasSubstr("trainer.eval_split: must be one of test, val, train"));
  EXPECT_THAT(ParseValidate(absl::StrCat(kValidSpec, "  eval_step: 4\n")).message(),
              HasSubstr("trainer.eval_step"));
  EXPECT_THAT(ParseValidate(absl::StrCat(kValidSpec, "kind: infer\n")).message(),
              HasSubstr("kind: must be one of train, eval"));
}

}  // namespace
}  // namespace tessera
