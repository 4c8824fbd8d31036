#include "worker/trainer/run/trainer_flags.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/util/message_differencer.h>

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/time/time.h"
#include "common/job_spec.h"
#include "common/trainer_choices.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tessera/v1/tessera.pb.h"
#include "worker/trainer/model/vit_config.h"

namespace tessera::trainer {
namespace {

using ::google::protobuf::FieldDescriptor;
using ::tessera::v1::TrainerConfig;
using ::testing::HasSubstr;

std::string FlagName(const FieldDescriptor* field) {
  return absl::StrReplaceAll(field->name(), {{"_", "-"}});
}

// Sets every TrainerConfig field to a value different from both the proto default
// and the trainer default, so a field that went to the wrong place shows.
TrainerConfig FullyPopulatedConfig() {
  TrainerConfig config;
  const auto* descriptor = TrainerConfig::descriptor();
  const auto* reflection = config.GetReflection();
  for (int i = 0; i < descriptor->field_count(); ++i) {
    const FieldDescriptor* field = descriptor->field(i);
    const int n = field->number();
    if (field->is_repeated() && field->cpp_type() == FieldDescriptor::CPPTYPE_DOUBLE) {
      // Three values (an RGB triple), each its own flag occurrence.
      for (int k = 0; k < 3; ++k)
        reflection->AddDouble(&config, field, 0.25 + k + n / 1024.0);
      continue;
    }
    switch (field->cpp_type()) {
      case FieldDescriptor::CPPTYPE_STRING:
        reflection->SetString(&config, field, absl::StrCat("value-of-", field->name()));
        break;
      case FieldDescriptor::CPPTYPE_INT32:
        reflection->SetInt32(&config, field, 100 + n);
        break;
      case FieldDescriptor::CPPTYPE_INT64:
        reflection->SetInt64(&config, field, 1000000 + n);
        break;
      case FieldDescriptor::CPPTYPE_DOUBLE:
        reflection->SetDouble(&config, field, 0.5 + n / 1024.0);
        break;
      case FieldDescriptor::CPPTYPE_BOOL:
        // The non-default value: false for fields with presence (which
        // default to true in the trainer), true for plain proto3 bools.
        reflection->SetBool(&config, field, !field->has_presence());
        break;
      default:
        ADD_FAILURE() << "TrainerConfig." << field->name()
                      << " has a type with no flag spelling; teach the trainer";
    }
  }
  return config;
}

// The trainer's parsed options, written back as a TrainerConfig field by field.
TrainerConfig AsConfig(const TrainerOptions& o) {
  TrainerConfig config;
  config.set_model(o.model);
  config.set_dataset(o.dataset);
  config.set_data_dir(o.data_dir);
  config.set_epochs(o.epochs);
  config.set_max_steps(o.max_steps);
  config.set_batch_size(o.batch_size);
  config.set_lr(o.lr);
  config.set_train_subset(o.train_subset);
  config.set_test_subset(o.test_subset);
  config.set_allreduce(o.allreduce);
  config.set_metrics_every(o.metrics_every);
  config.set_seed(o.seed);
  config.set_threads(o.threads);
  config.set_weight_decay(o.weight_decay);
  config.set_optimizer(o.optimizer);
  config.set_momentum(o.momentum);
  config.set_warmup_steps(o.warmup_steps);
  config.set_label_smoothing(o.label_smoothing);
  config.set_grad_accum(o.grad_accum);
  config.set_clip_grad_norm(o.clip_grad_norm);
  config.set_precision(o.precision);
  config.set_scaling(o.scaling);
  config.set_weak_fraction(o.weak_fraction);
  config.set_checkpoint_dir(o.checkpoint_dir);
  config.set_checkpoint_every(o.checkpoint_every);
  config.set_resume(o.resume);
  config.set_dropout(o.dropout);
  config.set_bucket_cap_mb(o.bucket_cap_mb);
  config.set_image_size(o.image_size);
  if (o.augment.has_value()) config.set_augment(*o.augment);
  config.set_device(o.device);
  config.set_data_workers(o.data_workers);
  config.set_first_bucket_mb(o.first_bucket_mb);
  config.set_overlap(o.overlap);
  config.set_fault(o.fault);
  for (double v : o.mean) config.add_mean(v);
  for (double v : o.std) config.add_std(v);
  config.set_crop_fraction(o.crop_fraction);
  config.set_data_max_skipped(o.data_max_skipped);
  config.set_init_from(o.init_from);
  config.set_init_names(o.init_names);
  config.set_layer_decay(o.layer_decay);
  config.set_head_warmup_steps(o.head_warmup_steps);
  config.set_profile_steps(o.profile_steps);
  config.set_cuda_graph(o.cuda_graph);
  config.set_zero_stage(o.zero_stage);
  config.set_eval_only(o.eval_only);
  config.set_eval_split(o.eval_split);
  config.set_eval_step(o.eval_step);
  config.set_val_fraction(o.val_fraction);
  config.set_val_seed(o.val_seed);
  config.set_eval_every(o.eval_every);
  config.set_interpolation(o.interpolation);
  for (double v : o.adam_betas) config.add_adam_betas(v);
  config.set_adam_eps(o.adam_eps);
  config.set_lamb_max_trust(o.lamb_max_trust);
  config.set_lamb_min_trust(o.lamb_min_trust);
  config.set_lamb_trust_when_no_decay(o.lamb_trust_when_no_decay);
  config.set_stop_fraction(o.stop_fraction);
  return config;
}

TEST(TrainerFlagsTest, EveryTrainerConfigFieldIsAcceptedAsAFlag) {
  const TrainerConfig config = FullyPopulatedConfig();
  const auto* descriptor = TrainerConfig::descriptor();
  for (int i = 0; i < descriptor->field_count(); ++i) {
    const FieldDescriptor* field = descriptor->field(i);
    TrainerConfig one;
    one.CopyFrom(config);
    // Keep only this field set.
    for (int j = 0; j < descriptor->field_count(); ++j) {
      if (j != i) one.GetReflection()->ClearField(&one, descriptor->field(j));
    }
    const std::vector<std::string> flags = TrainerConfigToFlags(one);
    ASSERT_EQ(flags.size(), field->is_repeated() ? 3u : 1u) << field->name();
    EXPECT_THAT(flags[0], ::testing::StartsWith("--" + FlagName(field) + "="));
    const absl::StatusOr<TrainerFlags> parsed = ParseTrainerFlags(flags);
    EXPECT_TRUE(parsed.ok()) << "tessera-train rejects " << flags[0] << ": "
                             << parsed.status();
  }
}

TEST(TrainerFlagsTest, WorkerArgvCarriesEveryFieldIntoTheOptions) {
  const TrainerConfig config = FullyPopulatedConfig();
  std::vector<std::string> argv = {"--coordinator=127.0.0.1:50051",
                                   "--job-id=7",
                                   "--attempt=2",
                                   "--rank=1",
                                   "--world-size=3",
                                   "--local-rank=1"};
  const std::vector<std::string> config_flags = TrainerConfigToFlags(config);
  int expected_flags = 0;
  for (int i = 0; i < TrainerConfig::descriptor()->field_count(); ++i) {
    expected_flags += TrainerConfig::descriptor()->field(i)->is_repeated() ? 3 : 1;
  }
  ASSERT_EQ(static_cast<int>(config_flags.size()), expected_flags);
  argv.insert(argv.end(), config_flags.begin(), config_flags.end());

  const absl::StatusOr<TrainerFlags> parsed = ParseTrainerFlags(argv);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  std::string difference;
  google::protobuf::util::MessageDifferencer differencer;
  differencer.ReportDifferencesToString(&difference);
  EXPECT_TRUE(differencer.Compare(config, AsConfig(parsed->trainer))) << difference;
  EXPECT_EQ(parsed->launch.coordinator, "127.0.0.1:50051");
  EXPECT_EQ(parsed->launch.job_id, 7);
  EXPECT_EQ(parsed->launch.attempt, 2);
  EXPECT_EQ(parsed->launch.rank, 1);
  EXPECT_EQ(parsed->launch.world_size, 3);
  EXPECT_EQ(parsed->launch.local_rank, 1);
}

TEST(TrainerFlagsTest, DeclaredConfigFlagsAreExactlyTheTrainerConfigFields) {
  std::vector<std::string> from_proto;
  const auto* descriptor = TrainerConfig::descriptor();
  for (int i = 0; i < descriptor->field_count(); ++i) {
    from_proto.push_back(FlagName(descriptor->field(i)));
  }
  EXPECT_EQ(TrainerConfigFlagNames(), from_proto);
}

TEST(TrainerFlagsTest, DefaultsAreTheDocumentedOnes) {
  const absl::StatusOr<TrainerFlags> parsed = ParseTrainerFlags({});
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const TrainerOptions& t = parsed->trainer;
  EXPECT_EQ(t.model, "vit-micro");
  EXPECT_EQ(t.dataset, "fashion-mnist");
  EXPECT_EQ(t.data_dir, "/usr/share/datasets/fashion-mnist");
  EXPECT_EQ(t.epochs, 1);
  EXPECT_EQ(t.batch_size, 64);
  EXPECT_DOUBLE_EQ(t.lr, 1e-3);
  EXPECT_DOUBLE_EQ(t.weight_decay, 0.05);
  EXPECT_EQ(t.metrics_every, 10);
  EXPECT_EQ(t.seed, 0);
  EXPECT_EQ(t.threads, 1);
  EXPECT_TRUE(t.allreduce);
  EXPECT_EQ(parsed->launch.world_size, 1);
  EXPECT_TRUE(parsed->launch.coordinator.empty());
  EXPECT_TRUE(parsed->help.empty());
}

TEST(TrainerFlagsTest, AcceptsSpaceSeparatedValuesAndBooleanWords) {
  const absl::StatusOr<TrainerFlags> parsed = ParseTrainerFlags(
      {"--batch-size", "32", "--allreduce=false", "--metrics-file", "/tmp/m.jsonl"});
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->trainer.batch_size, 32);
  EXPECT_FALSE(parsed->trainer.allreduce);
  EXPECT_EQ(parsed->launch.metrics_file, "/tmp/m.jsonl");
  EXPECT_TRUE(ParseTrainerFlags({"--allreduce=true"})->trainer.allreduce);
}

TEST(TrainerFlagsTest, CpuKernelsChooseTesseraByDefaultOrAtenAndRejectOthers) {
  EXPECT_TRUE(ParseTrainerFlags({})->trainer.cpu_kernels);
  EXPECT_TRUE(ParseTrainerFlags({"--cpu-kernels", "tessera"})->trainer.cpu_kernels);
  EXPECT_FALSE(ParseTrainerFlags({"--cpu-kernels=aten"})->trainer.cpu_kernels);
  const absl::StatusOr<TrainerFlags> bad = ParseTrainerFlags({"--cpu-kernels=fast"});
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("--cpu-kernels"));
}

TEST(TrainerFlagsTest, CollectiveTimeoutIsFiveMinutesByDefaultAndTakesDurations) {
  // Longer than the coordinator's 60 s stall threshold, which must act first.
  EXPECT_EQ(ParseTrainerFlags({})->launch.collective_timeout, absl::Minutes(5));
  EXPECT_GT(ParseTrainerFlags({})->launch.collective_timeout, absl::Seconds(60));
  EXPECT_EQ(ParseTrainerFlags({"--collective-timeout=90s"})->launch.collective_timeout,
            absl::Seconds(90));
  EXPECT_EQ(ParseTrainerFlags({"--collective-timeout", "2m"})->launch.collective_timeout,
            absl::Minutes(2));
  EXPECT_EQ(ParseTrainerFlags({"--collective-timeout=120"})->launch.collective_timeout,
            absl::Seconds(120));
  for (const char* bad : {"--collective-timeout=soon", "--collective-timeout=inf",
                          "--collective-timeout=5 parsecs"}) {
    const absl::StatusOr<TrainerFlags> parsed = ParseTrainerFlags({bad});
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(parsed.status().message(), HasSubstr("--collective-timeout")) << bad;
  }
}

TEST(TrainerFlagsTest, RejectsUnknownFlagsAndMalformedValues) {
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"--no-such-flag=1"},
                                             {"--batch-size=many"},
                                             {"--lr=fast"},
                                             {"--allreduce=maybe"},
                                             {"stray-positional"},
                                             {"--epochs"}}) {
    const absl::StatusOr<TrainerFlags> parsed = ParseTrainerFlags(args);
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << args[0];
  }
  EXPECT_THAT(ParseTrainerFlags({"--no-such-flag=1"}).status().message(),
              HasSubstr("--no-such-flag"));
}

TEST(TrainerFlagsTest, MalformedNumbersSayWhatTheFlagExpects) {
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  for (const Case& c :
       {Case{{"--max-steps", "abc"}, "--max-steps: expected a whole number, got \"abc\""},
        Case{{"--crop-fraction=1/2"}, "--crop-fraction: expected a number, got \"1/2\""},
        Case{{"--mean", "0.5", "x", "0.5"}, "--mean: expected a number, got \"x\""}}) {
    const absl::StatusOr<TrainerFlags> parsed = ParseTrainerFlags(c.args);
    ASSERT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << c.message;
    EXPECT_EQ(parsed.status().message(), c.message);
  }
}

TEST(TrainerFlagsTest, HelpIsReturnedAsTextListingTheFlags) {
  const absl::StatusOr<TrainerFlags> parsed = ParseTrainerFlags({"--help"});
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_THAT(parsed->help, HasSubstr("--batch-size"));
  EXPECT_THAT(parsed->help, HasSubstr("--coordinator"));
  EXPECT_THAT(parsed->help, HasSubstr("--collective-timeout"));
}

// A boolean flag alone means true, as everywhere on a command line; the
// spelled forms the worker writes from a job spec keep working.
TEST(TrainerFlagsTest, BooleanFlagsTakeTheBareFormAndExplicitValues) {
  absl::StatusOr<TrainerFlags> bare = ParseTrainerFlags({"--eval-only", "--resume"});
  ASSERT_TRUE(bare.ok()) << bare.status();
  EXPECT_TRUE(bare->trainer.eval_only);
  EXPECT_TRUE(bare->trainer.resume);
  absl::StatusOr<TrainerFlags> spelled =
      ParseTrainerFlags({"--allreduce=false", "--resume=true", "--overlap=false"});
  ASSERT_TRUE(spelled.ok()) << spelled.status();
  EXPECT_FALSE(spelled->trainer.allreduce);
  EXPECT_TRUE(spelled->trainer.resume);
  EXPECT_FALSE(spelled->trainer.overlap);
  // The flag before another is not mistaken for a value.
  absl::StatusOr<TrainerFlags> before =
      ParseTrainerFlags({"--eval-only", "--init-from", "/models/m.safetensors"});
  ASSERT_TRUE(before.ok()) << before.status();
  EXPECT_TRUE(before->trainer.eval_only);
  EXPECT_EQ(before->trainer.init_from, "/models/m.safetensors");
}

// --model's help is the preset table, every entry of which its validation takes.
TEST(TrainerFlagsTest, TheModelsHelpListsEveryPresetItAccepts) {
  const absl::StatusOr<TrainerFlags> help = ParseTrainerFlags({"--help"});
  ASSERT_TRUE(help.ok()) << help.status();
  const size_t at = help->help.find("\n  --model ");
  ASSERT_NE(at, std::string::npos);
  const std::string entry = help->help.substr(at, help->help.find("\n  --", at + 1) - at);
  for (const ViTPreset& preset : ViTPresets()) {
    EXPECT_THAT(entry, HasSubstr(preset.name));
    absl::StatusOr<TrainerFlags> parsed =
        ParseTrainerFlags({"--model=" + preset.name, "--data-dir=/data"});
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_THAT(
        std::string(ValidateTrainerOptions(parsed->trainer, OptionLimits{}).message()),
        ::testing::Not(HasSubstr("--model")))
        << preset.name;
  }
}

// The help of every choice-valued flag lists exactly the table the validation
// uses (common/trainer_choices.h): each listed value passes the flag's check,
// and a value outside the table is refused naming the flag.
TEST(TrainerFlagsTest, EveryChoiceFlagsHelpListsTheChoicesItsValidationAccepts) {
  const absl::StatusOr<TrainerFlags> help = ParseTrainerFlags({"--help"});
  ASSERT_TRUE(help.ok()) << help.status();
  for (const ChoiceField& f : kTrainerChoiceFields) {
    const std::string flag =
        absl::StrCat("--", absl::StrReplaceAll(f.field, {{"_", "-"}}));
    const size_t at = help->help.find(absl::StrCat("\n  ", flag, " "));
    ASSERT_NE(at, std::string::npos) << flag << " is not in the help";
    // The flag's entry: its line, and the next one where CLI11 wraps a long
    // flag column, up to the next flag.
    const size_t next = help->help.find("\n  --", at + 1);
    const std::string entry = help->help.substr(at + 1, next - at - 1);
    EXPECT_THAT(entry, HasSubstr(ChoicesText(f.choices))) << flag;
    for (const char* value : f.choices) {
      absl::StatusOr<TrainerFlags> parsed =
          ParseTrainerFlags({absl::StrCat(flag, "=", value), "--data-dir=/data"});
      ASSERT_TRUE(parsed.ok()) << parsed.status();
      const absl::Status valid = ValidateTrainerOptions(parsed->trainer, OptionLimits{});
      EXPECT_THAT(std::string(valid.message()), ::testing::Not(HasSubstr(flag)))
          << flag << "=" << value;
    }
    absl::StatusOr<TrainerFlags> bogus =
        ParseTrainerFlags({absl::StrCat(flag, "=no-such-choice")});
    ASSERT_TRUE(bogus.ok()) << bogus.status();
    const absl::Status refused = ValidateTrainerOptions(bogus->trainer, OptionLimits{});
    EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument) << flag;
    EXPECT_THAT(std::string(refused.message()), HasSubstr(flag.substr(2))) << flag;
  }
}

}  // namespace
}  // namespace tessera::trainer
