// Search spec parsing, validation, trial expansion and rungs.
#include "common/search_spec.h"

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "common/seeded_random.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

namespace v1 = ::tessera::v1;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;

constexpr char kBase[] = R"(
base:
  world_size: 1
  trainer:
    model: vit-micro
    dataset: fashion-mnist
    batch_size: 8
    val_fraction: 0.1
    checkpoint_dir: /ckpt
)";

// A spec with `search` as the search block's body (indented two spaces).
std::string Spec(const std::string& search) {
  return "name: s\nsearch:\n" + search + kBase;
}

constexpr char kRandom[] = R"(  method: random
  seed: 7
  metric: val_accuracy
  max_trials: 20
  max_length: 1000
  parameters:
    lr: {loguniform: [1e-4, 1e-2]}
    weight_decay: {choice: [0, 0.05, 0.1]}
    warmup_steps: {int: [0, 200]}
    label_smoothing: {uniform: [0, 0.2]}
)";

absl::StatusOr<std::vector<SearchTrialJob>> Expand(const std::string& yaml) {
  absl::StatusOr<v1::SearchSpec> spec = ParseSearchSpec(yaml);
  if (!spec.ok()) return spec.status();
  return ExpandSearch(*spec, SpecLimits());
}

// The error of a spec that must be refused.
std::string ErrorOf(const std::string& yaml) {
  absl::StatusOr<std::vector<SearchTrialJob>> trials = Expand(yaml);
  EXPECT_FALSE(trials.ok()) << "accepted:\n" << yaml;
  EXPECT_TRUE(absl::IsInvalidArgument(trials.status())) << trials.status();
  return std::string(trials.status().message());
}

std::map<std::string, std::string> Values(const SearchTrialJob& trial) {
  return {trial.parameters.begin(), trial.parameters.end()};
}

TEST(SearchSpecTest, GridIsExhaustiveInAFixedOrderWithTheLastParameterFastest) {
  auto trials = Expand(Spec(R"(  method: grid
  metric: val_loss
  max_length: 500
  parameters:
    optimizer: {choice: [adamw, lamb]}
    warmup_steps: {int: [0, 2]}
)"));
  ASSERT_TRUE(trials.ok()) << trials.status();
  ASSERT_EQ(trials->size(), 6u);
  const std::vector<std::pair<std::string, int64_t>> expected = {
      {"adamw", 0}, {"adamw", 1}, {"adamw", 2}, {"lamb", 0}, {"lamb", 1}, {"lamb", 2}};
  for (size_t i = 0; i < expected.size(); ++i) {
    const SearchTrialJob& t = (*trials)[i];
    EXPECT_EQ(t.index, static_cast<int32_t>(i));
    EXPECT_THAT(t.parameters,
                ElementsAre(Pair("optimizer", expected[i].first),
                            Pair("warmup_steps", std::to_string(expected[i].second))));
    EXPECT_EQ(t.job.trainer().optimizer(), expected[i].first);
    EXPECT_EQ(t.job.trainer().warmup_steps(), expected[i].second);
    EXPECT_TRUE(t.job.trainer().has_warmup_steps());
  }
  // Every combination once.
  std::set<std::map<std::string, std::string>> distinct;
  for (const SearchTrialJob& t : *trials) distinct.insert(Values(t));
  EXPECT_EQ(distinct.size(), 6u);
}

TEST(SearchSpecTest, GridMaxTrialsMayNotCutTheGridShort) {
  const std::string grid = R"(  method: grid
  metric: val_loss
  max_length: 500
  max_trials: 2
  parameters:
    optimizer: {choice: [adamw, lamb, sgd]}
)";
  EXPECT_THAT(ErrorOf(Spec(grid)), HasSubstr("search.max_trials"));
}

TEST(SearchSpecTest, RandomIsReproducibleForASeedAndDrawsWithinTheSpace) {
  auto first = Expand(Spec(kRandom));
  auto again = Expand(Spec(kRandom));
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(again.ok()) << again.status();
  ASSERT_EQ(first->size(), 20u);
  std::set<std::string> weight_decays;
  for (size_t i = 0; i < first->size(); ++i) {
    EXPECT_EQ((*first)[i].parameters, (*again)[i].parameters) << "trial " << i;
    const v1::TrainerConfig& t = (*first)[i].job.trainer();
    EXPECT_GE(t.lr(), 1e-4);
    EXPECT_LE(t.lr(), 1e-2);
    EXPECT_GE(t.warmup_steps(), 0);
    EXPECT_LE(t.warmup_steps(), 200);
    EXPECT_GE(t.label_smoothing(), 0);
    EXPECT_LE(t.label_smoothing(), 0.2);
    weight_decays.insert(Values((*first)[i]).at("weight_decay"));
    // The text reads back as the value the job got.
    double lr = 0;
    ASSERT_TRUE(absl::SimpleAtod(Values((*first)[i]).at("lr"), &lr));
    EXPECT_EQ(lr, t.lr());
  }
  EXPECT_EQ(weight_decays, (std::set<std::string>{"0", "0.05", "0.1"}));
  // Another seed draws other values.
  std::string reseeded = Spec(kRandom);
  reseeded.replace(reseeded.find("seed: 7"), 7, "seed: 8");
  auto other = Expand(reseeded);
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_NE((*other)[0].parameters, (*first)[0].parameters);
}

TEST(SearchSpecTest, ATrialsValuesDependOnlyOnSeedAndIndexNotOnTheBudget) {
  std::string fewer = Spec(kRandom);
  fewer.replace(fewer.find("max_trials: 20"), 14, "max_trials: 3");
  auto all = Expand(Spec(kRandom));
  auto some = Expand(fewer);
  ASSERT_TRUE(all.ok() && some.ok());
  for (int i = 0; i < 3; ++i) EXPECT_EQ((*some)[i].parameters, (*all)[i].parameters);
}

TEST(SearchSpecTest, SeededRandomDrawsTheSameNumbersEverywhere) {
  // SplitMix64 of seed 0 (Steele et al.'s reference sequence).
  SeededRandom rng(0);
  EXPECT_EQ(rng.Next(), 0xe220a8397b1dcdafULL);
  EXPECT_EQ(rng.Next(), 0x6e789e6aa1b965f4ULL);
  SeededRandom a = SeededRandom::ForStream(7, 3), b = SeededRandom::ForStream(7, 3);
  for (int i = 0; i < 100; ++i) {
    const int64_t x = a.UniformInt(-5, 5);
    EXPECT_EQ(x, b.UniformInt(-5, 5));
    EXPECT_GE(x, -5);
    EXPECT_LE(x, 5);
    const double u = a.NextDouble();
    EXPECT_EQ(u, b.NextDouble());
    EXPECT_GE(u, 0);
    EXPECT_LT(u, 1);
  }
}

TEST(SearchSpecTest, TrialJobTrainsTheWholeLengthInItsOwnCheckpointFolder) {
  auto spec = ParseSearchSpec(Spec(kRandom));
  ASSERT_TRUE(spec.ok()) << spec.status();
  auto trial = MakeSearchTrial(*spec, 12, 3, SpecLimits());
  ASSERT_TRUE(trial.ok()) << trial.status();
  EXPECT_EQ(trial->job.name(), "s/t3");
  EXPECT_EQ(trial->job.trainer().max_steps(), 1000);
  EXPECT_EQ(trial->job.trainer().epochs(), 1000) << "enough passes for every step";
  EXPECT_EQ(trial->job.trainer().checkpoint_dir(), "/ckpt/search-12/trial-3");
  EXPECT_EQ(trial->job.trainer().stop_fraction(), 0);
  EXPECT_FALSE(trial->job.trainer().resume());
}

TEST(SearchSpecTest, WorldSizeAndListKeysAreParametersToo) {
  auto trials = Expand(Spec(R"(  method: grid
  metric: test_accuracy
  max_length: 2
  length_unit: epochs
  parameters:
    world_size: {choice: [1, 2]}
    adam_betas: {choice: [[0.9, 0.999], [0.9, 0.95]]}
)"));
  ASSERT_TRUE(trials.ok()) << trials.status();
  ASSERT_EQ(trials->size(), 4u);
  EXPECT_EQ((*trials)[3].job.world_size(), 2);
  EXPECT_THAT((*trials)[3].job.trainer().adam_betas(), ElementsAre(0.9, 0.95));
  EXPECT_EQ(Values((*trials)[3]).at("adam_betas"), "[0.9, 0.95]");
  EXPECT_EQ((*trials)[3].job.trainer().epochs(), 2);
  EXPECT_EQ((*trials)[3].job.trainer().max_steps(), 0);
}

TEST(SearchSpecTest, ParametersMayBeWrittenAsTheProtosList) {
  auto spec = ParseSearchSpec(Spec(R"(  method: random
  metric: val_accuracy
  max_trials: 2
  max_length: 10
  parameters:
    - {key: lr, uniform: [0.001, 0.002]}
    - {key: batch_size, int_range: [8, 16]}
)"));
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_EQ(spec->search().parameters_size(), 2);
  EXPECT_EQ(spec->search().parameters(1).key(), "batch_size");
  EXPECT_TRUE(ValidateSearchSpec(*spec, SpecLimits()).ok());
}

TEST(SearchSpecTest, AshaRungsDefaultToMaxLengthOverEtaSquared) {
  v1::SearchConfig c;
  c.set_method("asha");
  c.set_max_length(900);
  EXPECT_THAT(SearchRungLengths(c), ElementsAre(100, 300, 900));
  c.set_max_length(1);  // one epoch: rungs of a ninth and a third of it
  const std::vector<double> epochs = SearchRungLengths(c);
  ASSERT_EQ(epochs.size(), 3u);
  EXPECT_DOUBLE_EQ(epochs[0], 1.0 / 9);
  EXPECT_DOUBLE_EQ(epochs[1], 1.0 / 3);
  EXPECT_EQ(epochs[2], 1);
  c.set_max_length(1000);
  c.mutable_asha()->set_reduction_factor(2);
  c.mutable_asha()->set_min_length(100);
  EXPECT_THAT(SearchRungLengths(c), ElementsAre(100, 200, 400, 800, 1000));
  c.mutable_asha()->set_max_rungs(3);  // the shortest are left out
  EXPECT_THAT(SearchRungLengths(c), ElementsAre(400, 800, 1000));
  c.set_method("random");
  EXPECT_THAT(SearchRungLengths(c), ElementsAre(1000));
}

TEST(SearchSpecTest, RungJobsStopAtTheirFractionAndResumeAfterTheFirst) {
  auto spec = ParseSearchSpec(Spec(R"(  method: asha
  metric: val_accuracy
  max_trials: 9
  max_length: 900
  parameters:
    lr: {loguniform: [1e-4, 1e-2]}
)"));
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_TRUE(ValidateSearchSpec(*spec, SpecLimits()).ok());
  auto trial = MakeSearchTrial(*spec, 4, 2, SpecLimits());
  ASSERT_TRUE(trial.ok()) << trial.status();
  const std::vector<double> rungs = SearchRungLengths(spec->search());
  ASSERT_EQ(rungs.size(), 3u);
  const v1::JobSpec r0 = SearchRungJob(*trial, rungs, 0);
  const v1::JobSpec r1 = SearchRungJob(*trial, rungs, 1);
  const v1::JobSpec r2 = SearchRungJob(*trial, rungs, 2);
  EXPECT_EQ(r0.name(), "s/t2-r0");
  EXPECT_FALSE(r0.trainer().resume());
  EXPECT_DOUBLE_EQ(r0.trainer().stop_fraction(), 1.0 / 9);
  EXPECT_TRUE(r1.trainer().resume());
  EXPECT_DOUBLE_EQ(r1.trainer().stop_fraction(), 1.0 / 3);
  EXPECT_TRUE(r2.trainer().resume());
  EXPECT_EQ(r2.trainer().stop_fraction(), 0) << "the last rung trains to the end";
  for (const v1::JobSpec* job : {&r0, &r1, &r2}) {
    EXPECT_EQ(job->trainer().max_steps(), 900) << "the schedule is the whole run's";
    EXPECT_EQ(job->trainer().checkpoint_dir(), "/ckpt/search-4/trial-2");
    EXPECT_EQ(job->trainer().lr(), trial->job.trainer().lr());
  }
  EXPECT_TRUE(SearchMaximizes(spec->search()));
}

TEST(SearchSpecTest, ModeDefaultsToTheMetricsOwnDirection) {
  v1::SearchConfig c;
  c.set_metric("val_loss");
  EXPECT_FALSE(SearchMaximizes(c));
  c.set_mode("max");
  EXPECT_TRUE(SearchMaximizes(c));
  c.set_metric("val_accuracy");
  c.clear_mode();
  EXPECT_TRUE(SearchMaximizes(c));
}

// The issue's "Bad input" list, each refused naming its key, and more.
TEST(SearchSpecTest, AnUnknownKeyIsRefusedNamingIt) {
  EXPECT_THAT(ErrorOf(Spec(std::string(kRandom) + "  budget: 3\n")),
              HasSubstr("search.budget"));
  EXPECT_THAT(ErrorOf(Spec(std::string(kRandom) + "    learning_rate: {choice: [1]}\n")),
              HasSubstr("search.parameters.learning_rate: not a trainer key"));
  EXPECT_THAT(ErrorOf(Spec(std::string(kRandom) + "    dropout: {normal: [0, 1]}\n")),
              HasSubstr("search.parameters.dropout.normal"));
  EXPECT_THAT(ErrorOf(Spec(std::string(kRandom) + "    max_steps: {choice: [10]}\n")),
              HasSubstr("search.parameters.max_steps: set by the search"));
}

TEST(SearchSpecTest, AnEmptyRangeIsRefusedNamingTheKey) {
  EXPECT_THAT(
      ErrorOf(Spec(std::string(kRandom) + "    dropout: {uniform: [0.5, 0.1]}\n")),
      HasSubstr("search.parameters.dropout.uniform: empty range"));
  EXPECT_THAT(ErrorOf(Spec(std::string(kRandom) + "    batch_size: {int: [64, 8]}\n")),
              HasSubstr("search.parameters.batch_size.int: empty range"));
  EXPECT_THAT(ErrorOf(Spec(std::string(kRandom) + "    optimizer: {choice: []}\n")),
              HasSubstr("search.parameters.optimizer.choice: empty"));
  EXPECT_THAT(ErrorOf(Spec(std::string(kRandom) + "    dropout: {uniform: [0.5]}\n")),
              HasSubstr("search.parameters.dropout.uniform: two values"));
}

TEST(SearchSpecTest, LogUniformWithABoundAtOrBelowZeroIsRefused) {
  EXPECT_THAT(
      ErrorOf(Spec(std::string(kRandom) + "    momentum: {loguniform: [0, 0.9]}\n")),
      HasSubstr("search.parameters.momentum.loguniform: bounds must be above 0"));
  EXPECT_THAT(
      ErrorOf(Spec(std::string(kRandom) + "    adam_eps: {loguniform: [-1e-8, 1e-6]}\n")),
      HasSubstr("search.parameters.adam_eps.loguniform"));
}

TEST(SearchSpecTest, AMetricTheTrainerDoesNotReportIsRefused) {
  std::string spec = Spec(kRandom);
  spec.replace(spec.find("metric: val_accuracy"), 20, "metric: val_top1");
  EXPECT_THAT(ErrorOf(spec),
              HasSubstr("search.metric: 'val_top1' is not a metric the trainer reports"));
}

TEST(SearchSpecTest, ValuesTheTrainerRefusesAreRefusedBeforeAnyTrialNamingTheKey) {
  // -0.5 may never be drawn; it is refused anyway.
  EXPECT_THAT(
      ErrorOf(Spec(std::string(kRandom) + "    dropout: {choice: [0.1, -0.5]}\n")),
      HasSubstr("search.parameters.dropout.choice[1] (-0.5): trainer.dropout"));
  EXPECT_THAT(
      ErrorOf(Spec(std::string(kRandom) + "    optimizer: {choice: [adamw, adam]}\n")),
      HasSubstr("search.parameters.optimizer.choice[1] (adam): trainer.optimizer"));
  EXPECT_THAT(ErrorOf(Spec(std::string(kRandom) + "    lr: {choice: [fast]}\n")),
              HasSubstr("search.parameters.lr"));
  EXPECT_THAT(
      ErrorOf(Spec(std::string(kRandom) + "    batch_size: {uniform: [8, 64]}\n")),
      HasSubstr("search.parameters.batch_size: uniform draws fractions"));
  EXPECT_THAT(
      ErrorOf(Spec(std::string(kRandom) + "    dropout: {uniform: [x, 1]}\n")),
      HasSubstr("search.parameters.dropout.uniform[0]: expected a finite number"));
  EXPECT_THAT(ErrorOf(Spec(std::string(kRandom) + "    lr: {uniform: [0.1, 1]}\n")),
              HasSubstr("duplicate field 'search.parameters.lr'"));
}

TEST(SearchSpecTest, MethodsAndBudgetsAreChecked) {
  std::string grid = Spec(kRandom);
  grid.replace(grid.find("method: random"), 14, "method: grid");
  EXPECT_THAT(ErrorOf(grid),
              HasSubstr("search.parameters.lr: a grid takes choice and int"));
  std::string bad = Spec(kRandom);
  bad.replace(bad.find("method: random"), 14, "method: bayes");
  EXPECT_THAT(ErrorOf(bad), HasSubstr("search.method"));
  std::string many = Spec(kRandom);
  many.replace(many.find("max_trials: 20"), 14, "max_trials: 5000");
  EXPECT_THAT(ErrorOf(many), HasSubstr("search.max_trials: must be between 1 and 1024"));
  std::string no_length = Spec(kRandom);
  no_length.replace(no_length.find("max_length: 1000"), 16, "max_length: 0");
  EXPECT_THAT(ErrorOf(no_length), HasSubstr("search.max_length"));
}

TEST(SearchSpecTest, AshaNeedsACheckpointFolderAndAReductionFactorOfTwoOrMore) {
  std::string search = kRandom;
  search.replace(search.find("method: random"), 14, "method: asha");
  const std::string asha = Spec(search);
  ASSERT_TRUE(Expand(asha).ok()) << Expand(asha).status();
  std::string no_dir = asha;
  no_dir.replace(no_dir.find("    checkpoint_dir: /ckpt\n"), 26, "");
  EXPECT_THAT(ErrorOf(no_dir), HasSubstr("base.trainer.checkpoint_dir"));
  EXPECT_THAT(ErrorOf(Spec(search + "  asha: {reduction_factor: 1}\n")),
              HasSubstr("search.asha.reduction_factor"));
  EXPECT_THAT(ErrorOf(Spec(search + "  asha: {min_length: 2000}\n")),
              HasSubstr("search.asha.min_length"));
  EXPECT_THAT(ErrorOf(Spec(std::string(kRandom) + "  asha: {reduction_factor: 3}\n")),
              HasSubstr("search.asha: only for method asha"));
}

TEST(SearchSpecTest, TheBaseMayNotSetWhatTheSearchSets) {
  std::string spec = Spec(kRandom);
  spec.replace(spec.find("    batch_size: 8\n"), 18,
               "    batch_size: 8\n    max_steps: 5\n");
  EXPECT_THAT(ErrorOf(spec), HasSubstr("base.trainer.max_steps"));
  std::string no_val = Spec(kRandom);
  no_val.replace(no_val.find("    val_fraction: 0.1\n"), 22, "");
  EXPECT_THAT(ErrorOf(no_val), HasSubstr("set base.trainer.val_fraction"));
}

TEST(SearchSpecTest, ATrialsInvalidJobNamesTheTrialAndItsValues) {
  // Each value alone is fine, but the base lacks a model.
  std::string spec = Spec(kRandom);
  spec.replace(spec.find("    model: vit-micro\n"), 21, "");
  const std::string error = ErrorOf(spec);
  EXPECT_THAT(error, HasSubstr("trial 0 (lr="));
  EXPECT_THAT(error, HasSubstr("trainer.model: missing"));
}

TEST(SearchSpecTest, MalformedYamlAndWrongTypesAreRefused) {
  EXPECT_FALSE(ParseSearchSpec("name: [x\n").ok());
  EXPECT_THAT(
      std::string(
          ParseSearchSpec("name: s\nsearch:\n  parameters: 3\n").status().message()),
      HasSubstr("search.parameters"));
  EXPECT_THAT(
      std::string(
          ParseSearchSpec("name: s\nsearch:\n  max_trials: many\n").status().message()),
      HasSubstr("search.max_trials"));
}

// An asha search whose first rung ends before a trial's warmup is warned
// about: in steps, and in epochs where train_subset counts an epoch's steps.
TEST(SearchSpecTest, AFirstRungShorterThanTheLongestWarmupIsWarnedAbout) {
  auto warnings = [](const std::string& search, const std::string& base_extra = "") {
    std::string yaml = Spec(search) + base_extra;
    auto spec = ParseSearchSpec(yaml);
    EXPECT_TRUE(spec.ok()) << spec.status();
    return spec.ok() ? SearchSpecWarnings(*spec) : std::vector<std::string>{};
  };
  // Rungs of 100, 300 and 900 steps; warmups up to 200.
  constexpr char kAsha[] = R"(  method: asha
  metric: val_accuracy
  max_trials: 9
  max_length: 900
  parameters:
    lr: {loguniform: [1e-4, 1e-2]}
    warmup_steps: {choice: [0, 200]}
)";
  EXPECT_THAT(warnings(kAsha),
              ElementsAre(HasSubstr("search.asha: the first rung ends after about 100 "
                                    "steps, before the warmup of trials with "
                                    "warmup_steps up to 200 ends")));
  // A first rung of 300 steps outlasts it; random has no rungs.
  EXPECT_THAT(warnings(std::string(kAsha) + "  asha: {min_length: 300}\n"),
              ElementsAre());
  std::string random = kAsha;
  random.replace(random.find("asha"), 4, "random");
  EXPECT_THAT(warnings(random), ElementsAre());
  // The base's own warmup counts too; an int range counts its top.
  std::string in_base = kAsha;
  in_base.replace(in_base.find("    warmup_steps: {choice: [0, 200]}\n"),
                  std::string("    warmup_steps: {choice: [0, 200]}\n").size(), "");
  EXPECT_THAT(warnings(in_base), ElementsAre());
  EXPECT_THAT(warnings(in_base, "    warmup_steps: 150\n"),
              ElementsAre(HasSubstr("warmup_steps up to 150")));
  std::string ranged = kAsha;
  ranged.replace(ranged.find("{choice: [0, 200]}"), 18, "{int: [10, 120]}");
  EXPECT_THAT(warnings(ranged), ElementsAre(HasSubstr("warmup_steps up to 120")));

  // One epoch of 20000 images, 10% held out, 8 per step: 2250 steps; the
  // first rung is a ninth of it, 250 steps.
  std::string epochs = kAsha;
  epochs.replace(epochs.find("max_length: 900"), 15,
                 "max_length: 1\n  length_unit: epochs");
  EXPECT_THAT(warnings(epochs), ElementsAre())
      << "no train_subset: an epoch's steps are unknown";
  EXPECT_THAT(warnings(epochs, "    train_subset: 20000\n"), ElementsAre());
  epochs.replace(epochs.find("[0, 200]"), 8, "[0, 400]");
  EXPECT_THAT(warnings(epochs, "    train_subset: 20000\n"),
              ElementsAre(HasSubstr("first rung ends after about 250 steps")));
}

TEST(SearchSpecTest, TheExampleInTheDocsIsAValidSpec) {
  std::filesystem::path root =
      std::filesystem::path(__FILE__).parent_path().parent_path().parent_path();
  if (const char* dir = std::getenv("TESSERA_SOURCE_DIR"); dir != nullptr) root = dir;
  std::ifstream in(root / "docs" / "search.md");
  std::stringstream text;
  text << in.rdbuf();
  const std::string doc = text.str();
  const size_t begin = doc.find("```yaml\n");
  ASSERT_NE(begin, std::string::npos) << "docs/search.md has no YAML example";
  const size_t end = doc.find("```", begin + 8);
  ASSERT_NE(end, std::string::npos);
  auto spec =
      ParseAndValidateSearchSpec(doc.substr(begin + 8, end - begin - 8), SpecLimits());
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->search().method(), "asha");
  EXPECT_THAT(SearchRungLengths(spec->search()), ElementsAre(300, 900, 2700));
}

}  // namespace
}  // namespace tessera
