// Evaluation as a job, end to end: a real tessera-coordinator and
// tessera-worker, a training job that checkpoints, then `tessctl eval JOB`,
// which submits a job of kind eval that runs on the worker like any other and
// reports the same top-1 as the training job's final evaluation, with its
// per-class figures and confusion matrix in `tessctl status -o json`.
#include <sys/wait.h>

#include <optional>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/e2e/cluster_fixture.h"
#include "tests/testing/test_util.h"

namespace tessera {
namespace {

using ::testing::HasSubstr;

struct Ran {
  int code = -1;
  std::string out;
};

class EvalE2eTest : public ClusterTest {
 protected:
  Ran Tessctl(std::vector<std::string> args) {
    static int n = 0;
    const std::string log = dir_.File(absl::StrCat("tessctl-", ++n, ".out"));
    std::vector<std::string> argv = {testing::BinDir() + "/tessctl", "--coordinator",
                                     absl::StrCat("127.0.0.1:", port_), "--token",
                                     user_token_};
    argv.insert(argv.end(), args.begin(), args.end());
    Ran ran;
    auto p = ChildProcess::Start(argv, log);
    if (!p.ok()) return ran;
    std::optional<int> status = (*p)->Wait(absl::Seconds(30));
    if (status && WIFEXITED(*status)) ran.code = WEXITSTATUS(*status);
    ran.out = (*p)->Log();
    return ran;
  }

  // A short synthetic run that checkpoints at its end.
  std::string TrainingSpec() {
    return absl::StrCat(R"(name: e2e-train
world_size: 1
trainer:
  model: vit-micro
  dataset: synthetic
  epochs: 1
  max_steps: 8
  batch_size: 32
  train_subset: 512
  test_subset: 128
  metrics_every: 4
  seed: 7
  device: cpu
  checkpoint_dir: )",
                        dir_.File("ckpt"), "\n");
  }
};

TEST_F(EvalE2eTest, TessctlEvalRunsOnAWorkerAndRepeatsTheFinalTopOne) {
  StartCoordinator();
  StartWorker("w1", port_);
  WaitForWorkers(1);
  const int64_t trained_id = Submit(TrainingSpec());
  const v1::Job trained = WaitForEnd(trained_id, absl::Minutes(3));
  ASSERT_EQ(trained.state(), v1::JOB_STATE_SUCCEEDED) << trained.reason() << DumpLogs();
  ASSERT_TRUE(trained.ranks(0).has_result());

  const Ran submitted = Tessctl({"eval", absl::StrCat(trained_id), "--split", "test"});
  ASSERT_EQ(submitted.code, 0) << submitted.out;
  ASSERT_THAT(submitted.out, HasSubstr("submitted eval job"));
  const std::vector<std::string> lines =
      absl::StrSplit(submitted.out, '\n', absl::SkipWhitespace());
  int64_t eval_id = 0;
  ASSERT_TRUE(absl::SimpleAtoi(lines.back(), &eval_id)) << submitted.out;

  const v1::Job eval = WaitForEnd(eval_id, absl::Minutes(3));
  ASSERT_EQ(eval.state(), v1::JOB_STATE_SUCCEEDED) << eval.reason() << DumpLogs();
  EXPECT_EQ(eval.spec().kind(), "eval");
  EXPECT_EQ(eval.spec().eval_of(), trained_id);
  EXPECT_EQ(eval.owner(), trained.owner());
  ASSERT_TRUE(eval.ranks(0).has_eval()) << DumpLogs();
  const v1::EvalResult& result = eval.ranks(0).eval();
  EXPECT_EQ(result.step(), 8);
  EXPECT_EQ(result.samples(), 128);
  EXPECT_DOUBLE_EQ(result.top1(), trained.ranks(0).test_accuracy());
  EXPECT_EQ(result.class_accuracy_size(), 10);
  EXPECT_EQ(result.confusion_size(), 100);

  const Ran status = Tessctl({"status", absl::StrCat(eval_id), "-o", "json"});
  ASSERT_EQ(status.code, 0) << status.out;
  for (const char* key : {"\"kind\": \"eval\"", "\"top1\"", "\"top5\"", "\"loss\"",
                          "\"classes\"", "\"confusion\""}) {
    EXPECT_THAT(status.out, HasSubstr(key));
  }
  // An evaluation is not evaluated again: refused before anything is submitted.
  const Ran again = Tessctl({"eval", absl::StrCat(eval_id)});
  EXPECT_EQ(again.code, 2) << again.out;
  EXPECT_THAT(again.out, HasSubstr("is an evaluation"));
}

}  // namespace
}  // namespace tessera
