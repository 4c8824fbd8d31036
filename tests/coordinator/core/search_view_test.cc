// SearchToProto over hand-written search_jobs rows: where each trial's best
// metric was recorded (rung, job, step), which `search best --export` takes
// the checkpoint of, is the best row's, not the latest one's.
#include "coordinator/core/search_view.h"

#include <optional>
#include <string>
#include <vector>

#include "common/search_spec.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

namespace v1 = ::tessera::v1;
using Outcome = SearchJobRecord::Outcome;

// An asha search of 3 rungs (100, 300 and 900 steps), scored by `metric`
// (its own mode: val_accuracy max, val_loss min).
SearchRecord AshaSearch(const std::string& metric) {
  absl::StatusOr<v1::SearchSpec> spec = ParseSearchSpec(R"(name: lr-study
search:
  method: asha
  seed: 3
  metric: val_accuracy
  max_trials: 9
  max_length: 900
  parameters:
    lr: {loguniform: [1e-4, 1e-2]}
  asha: {reduction_factor: 3, min_length: 100}
base:
  trainer: {model: vit-micro, dataset: synthetic, checkpoint_dir: /ckpt}
)");
  EXPECT_TRUE(spec.ok()) << spec.status();
  SearchRecord search;
  search.id = 4;
  search.name = "lr-study";
  search.state = v1::SEARCH_STATE_RUNNING;
  if (spec.ok()) search.spec = *spec;
  search.spec.mutable_search()->set_metric(metric);
  return search;
}

// A row of trial `trial`'s rung `rung`, its job `job_id` ended with `metric`
// at `steps` (nullopt: still running).
SearchJobRecord Row(int32_t trial, int32_t rung, int64_t job_id,
                    std::optional<double> metric, int64_t steps) {
  SearchJobRecord row;
  row.search_id = 4;
  row.trial = trial;
  row.rung = rung;
  row.job_id = job_id;
  if (metric.has_value()) {
    row.outcome = Outcome::kDone;
    row.job_state = v1::JOB_STATE_SUCCEEDED;
    row.metric = metric;
    row.steps = steps;
  }
  return row;
}

TEST(SearchToProtoTest, TheBestIsWhereTheTrialScoredBestNotItsLatestRung) {
  // Trial 0 scored 0.7 at rung 0 (job 11, step 100), worse at rung 1 (job
  // 15, step 300) and is training rung 2 (job 16).
  const std::vector<SearchJobRecord> rows = {
      Row(0, 0, 11, 0.7, 100), Row(0, 1, 15, 0.6, 300), Row(0, 2, 16, std::nullopt, 0)};
  const v1::Search search =
      SearchToProto(AshaSearch("val_accuracy"), rows, {{16, v1::JOB_STATE_RUNNING}});
  ASSERT_EQ(search.trials_size(), 1);
  const v1::SearchTrial& trial = search.trials(0);
  EXPECT_EQ(search.best_trial(), 0);
  EXPECT_EQ(trial.status(), "running");
  EXPECT_EQ(trial.rung(), 2);
  EXPECT_EQ(trial.steps(), 300);
  ASSERT_TRUE(trial.has_best_metric());
  EXPECT_DOUBLE_EQ(trial.best_metric(), 0.7);
  EXPECT_EQ(trial.best_rung(), 0);
  EXPECT_EQ(trial.best_job_id(), 11);
  EXPECT_EQ(trial.best_step(), 100);
}

TEST(SearchToProtoTest, AMetricMinimisedIsBestWhereItIsLowest) {
  const std::vector<SearchJobRecord> rows = {
      Row(2, 0, 13, 0.9, 100), Row(2, 1, 17, 0.4, 300), Row(2, 2, 21, 0.5, 900)};
  const v1::SearchTrial trial = SearchToProto(AshaSearch("val_loss"), rows, {}).trials(0);
  EXPECT_EQ(trial.status(), "completed");
  EXPECT_DOUBLE_EQ(trial.best_metric(), 0.4);
  EXPECT_EQ(trial.best_rung(), 1);
  EXPECT_EQ(trial.best_job_id(), 17);
  EXPECT_EQ(trial.best_step(), 300);
}

TEST(SearchToProtoTest, ATieGoesToTheLaterRung) {
  const std::vector<SearchJobRecord> rows = {Row(1, 0, 12, 0.8, 100),
                                             Row(1, 1, 14, 0.8, 300)};
  const v1::SearchTrial trial =
      SearchToProto(AshaSearch("val_accuracy"), rows, {}).trials(0);
  EXPECT_EQ(trial.best_rung(), 1);
  EXPECT_EQ(trial.best_job_id(), 14);
  EXPECT_EQ(trial.best_step(), 300);
}

TEST(SearchToProtoTest, ATrialWithoutAMetricHasNoBest) {
  SearchJobRecord failed = Row(3, 0, 19, std::nullopt, 0);
  failed.outcome = Outcome::kFailed;
  failed.job_state = v1::JOB_STATE_FAILED;
  const v1::Search search = SearchToProto(AshaSearch("val_accuracy"), {failed}, {});
  const v1::SearchTrial& trial = search.trials(0);
  EXPECT_EQ(search.best_trial(), -1);
  EXPECT_FALSE(trial.has_best_metric());
  EXPECT_EQ(trial.best_job_id(), 0);
  EXPECT_EQ(trial.best_step(), 0);
}

}  // namespace
}  // namespace tessera
