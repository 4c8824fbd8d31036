// The trainer on image folders and tar shards (image_data.h): exact resume
// mid-epoch from both kinds, equal steps per rank over a sample count that
// does not divide evenly, bad files skipped, counted and named, and a class
// missing from val refused. The images are generated here at run time.
#include "worker/trainer/data/image_data.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/worker/trainer/data/data_test_util.h"
#include "tests/worker/trainer/fake_coordinator_client.h"
#include "worker/trainer/data/shard_packer.h"
#include "worker/trainer/dist/communicator.h"
#include "worker/trainer/dist/gloo_communicator.h"
#include "worker/trainer/run/checkpoint.h"
#include "worker/trainer/run/metrics_reporter.h"
#include "worker/trainer/run/trainer.h"

namespace tessera::trainer {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

// 3 classes; `train` images per class in train, 4 per class in val; 24 px.
std::string MakeFolder(const std::string& root, int train) {
  data::testing::MakeImageFolder(root, {"ant", "bee", "cat"},
                                 {{"train", train}, {"val", 4}}, 24);
  return root;
}

std::string Fresh(const std::string& name) {
  const fs::path dir =
      fs::path(::testing::TempDir()) / (name + "-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

TrainerOptions ImageRun(const std::string& kind, const std::string& root) {
  TrainerOptions options;
  options.model = "vit-micro";
  options.dataset = kind;
  options.data_dir = root;
  options.image_size = 16;
  options.batch_size = 4;
  options.lr = 1e-3;
  options.epochs = 3;
  options.metrics_every = 1;
  options.data_workers = 2;
  options.seed = 5;
  return options;
}

std::unique_ptr<TrainingData> Open(const TrainerOptions& options,
                                   std::vector<std::string>* log = nullptr) {
  ImageDataOptions opening;
  opening.kind = options.dataset;
  opening.root = options.data_dir;
  opening.max_skipped_fraction = options.data_max_skipped;
  if (log != nullptr)
    opening.log = [log](const std::string& line) { log->push_back(line); };
  absl::StatusOr<std::unique_ptr<TrainingData>> data = OpenImageData(opening);
  EXPECT_TRUE(data.ok()) << data.status();
  return data.ok() ? *std::move(data) : nullptr;
}

struct Reported {
  absl::StatusOr<TrainingOutcome> outcome = absl::UnknownError("not run");
  std::map<std::string, std::map<int64_t, double>> values;
};

Reported TrainAlone(const TrainerOptions& options, const TrainingData& data,
                    TrainerLoopOptions loop = {}) {
  Reported run;
  LocalCommunicator communicator;
  testing::FakeCoordinatorClient coordinator;
  MetricsReporterOptions reporting;
  reporting.flush_interval = absl::InfiniteDuration();
  auto reporter = MetricsReporter::Create(reporting, &coordinator);
  EXPECT_TRUE(reporter.ok());
  Trainer trainer(options, data, communicator, **reporter, loop);
  run.outcome = trainer.Run();
  EXPECT_TRUE((*reporter)->Flush(absl::Seconds(10)).ok());
  for (const MetricSample& p : coordinator.received())
    run.values[p.name][p.step] = p.value;
  return run;
}

// Stops after step 3 of 8 (mid-epoch: 9 steps per epoch), resumes, and ends
// with exactly the parameters of the run that never stopped.
void ExpectExactResume(const std::string& kind, const std::string& root) {
  TrainerOptions options = ImageRun(kind, root);
  options.max_steps = 8;
  options.dropout = 0.1;
  options.checkpoint_dir = Fresh(kind + "-ckpt");
  options.checkpoint_every = 3;
  TrainerLoopOptions loop;
  loop.checkpoint_keep = 10;
  std::unique_ptr<TrainingData> data = Open(options);
  ASSERT_NE(data, nullptr);
  const Reported uninterrupted = TrainAlone(options, *data, loop);
  ASSERT_TRUE(uninterrupted.outcome.ok()) << uninterrupted.outcome.status();
  ASSERT_TRUE(CheckpointDirectory(options.checkpoint_dir).PublishLatest(3).ok());
  options.resume = true;
  const Reported resumed = TrainAlone(options, *data, loop);
  ASSERT_TRUE(resumed.outcome.ok()) << resumed.outcome.status();
  EXPECT_EQ(resumed.outcome->resumed_from, 3);
  EXPECT_EQ(resumed.outcome->param_hash, uninterrupted.outcome->param_hash) << kind;
  for (const auto& [step, loss] : resumed.values.at("loss")) {
    EXPECT_EQ(loss, uninterrupted.values.at("loss").at(step)) << kind << " step " << step;
  }
  // The class mapping is stored beside the model.
  EXPECT_THAT(
      data::testing::ReadFile(CheckpointDirectory(options.checkpoint_dir).StepDir(8) +
                              "/classes.json"),
      HasSubstr("\"bee\""));
}

TEST(ImageDataTest, AnImageFolderResumedMidEpochEndsLikeTheUninterruptedRun) {
  ExpectExactResume("imagefolder", MakeFolder(Fresh("folder"), 12));
}

TEST(ImageDataTest, ShardsResumedMidEpochEndLikeTheUninterruptedRun) {
  const std::string folder = MakeFolder(Fresh("to-pack"), 12);
  data::PackOptions packing;
  packing.root = folder;
  packing.out = Fresh("shards");
  packing.shard_size = 10;  // 36 training samples in 4 shards
  absl::StatusOr<data::PackReport> packed = data::PackImageFolder(packing);
  ASSERT_TRUE(packed.ok()) << packed.status();
  ASSERT_EQ(packed->samples.at("train"), 36);
  ExpectExactResume("shards", packing.out);
}

TEST(ImageDataTest, TwoRanksOverAnUnevenSampleCountRunTheSameStepsAndFinish) {
  // 3 x 13 = 39 training images, 2 ranks x 4: 4 steps per epoch, 7 dropped.
  TrainerOptions options = ImageRun("imagefolder", MakeFolder(Fresh("uneven"), 13));
  options.epochs = 2;
  std::unique_ptr<TrainingData> data = Open(options);
  ASSERT_NE(data, nullptr);
  std::vector<std::optional<TrainingOutcome>> outcomes(2);
  auto hosted = RendezvousStore::Host("127.0.0.1", 0, absl::Seconds(60));
  ASSERT_TRUE(hosted.ok()) << hosted.status();
  const int port = (*hosted)->port();
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < 2; ++rank) {
    std::unique_ptr<RendezvousStore> own = rank == 0 ? *std::move(hosted) : nullptr;
    ranks.emplace_back([&, rank, store = std::move(own)]() mutable {
      if (store == nullptr)
        store = *RendezvousStore::Connect("127.0.0.1", port, absl::Seconds(60));
      GlooOptions gloo;
      gloo.timeout = absl::Seconds(60);
      auto communicator = GlooCommunicator::Create(std::move(store), rank, 2, gloo);
      ASSERT_TRUE(communicator.ok()) << communicator.status();
      MetricsReporterOptions reporting;
      reporting.flush_interval = absl::InfiniteDuration();
      auto reporter = MetricsReporter::Create(reporting, nullptr);
      ASSERT_TRUE(reporter.ok());
      Trainer trainer(options, *data, **communicator, **reporter);
      absl::StatusOr<TrainingOutcome> outcome = trainer.Run();
      ASSERT_TRUE(outcome.ok()) << outcome.status();
      outcomes[rank] = *outcome;
    });
  }
  for (std::thread& t : ranks) t.join();
  ASSERT_TRUE(outcomes[0].has_value() && outcomes[1].has_value());
  EXPECT_EQ(outcomes[0]->steps, 8);
  EXPECT_EQ(outcomes[1]->steps, 8);
  EXPECT_EQ(outcomes[0]->train_images, 8 * 4);
  EXPECT_EQ(outcomes[0]->param_hash, outcomes[1]->param_hash);
}

TEST(ImageDataTest, BadFilesAreSkippedCountedAndNamedAndTooManyFailTheRun) {
  const std::string root = MakeFolder(Fresh("bad"), 12);
  const auto first = [&](const std::string& cls) {
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(root + "/train/" + cls))
      files.push_back(e);
    std::sort(files.begin(), files.end());
    return files;
  };
  const std::vector<fs::path> ants = first("ant");
  // A truncated JPEG and a zero-byte file are skipped; a PNG named .jpg is an
  // image like any other.
  const std::string jpeg = data::testing::ReadFile(ants[0].string());
  data::testing::WriteFile(ants[0].string(), jpeg.substr(0, jpeg.size() / 3));
  data::testing::WriteFile(ants[1].string(), "");
  data::testing::WriteFile(ants[2].string(), data::testing::MakePng(24, 24, 9));
  TrainerOptions options = ImageRun("imagefolder", root);
  options.max_steps = 9;  // one epoch: every sample is read once
  options.data_max_skipped = 0.1;
  std::vector<std::string> log;
  std::unique_ptr<TrainingData> data = Open(options, &log);
  ASSERT_NE(data, nullptr);
  const Reported run = TrainAlone(options, *data);
  ASSERT_TRUE(run.outcome.ok()) << run.outcome.status();
  EXPECT_EQ(run.outcome->steps, 9) << "skipped samples keep the batch count";
  EXPECT_EQ(run.values.at("data_skipped").rbegin()->second, 2);
  ASSERT_EQ(log.size(), 2u) << "each bad file named once";
  EXPECT_THAT(log[0] + log[1], HasSubstr(ants[0].filename().string()));
  EXPECT_THAT(log[0] + log[1], HasSubstr(ants[1].filename().string()));

  // Past the limit (3% of 36: 1), the run fails naming the files.
  options.data_max_skipped = 0.03;
  std::unique_ptr<TrainingData> strict = Open(options, &log);
  ASSERT_NE(strict, nullptr);
  const Reported failed = TrainAlone(options, *strict);
  ASSERT_FALSE(failed.outcome.ok());
  EXPECT_THAT(failed.outcome.status().message(), HasSubstr("could not be read"));
  EXPECT_THAT(failed.outcome.status().message(), HasSubstr("ant"));
}

TEST(ImageDataTest, AClassMissingFromValIsRefusedByName) {
  const std::string root = MakeFolder(Fresh("missing"), 4);
  fs::remove_all(root + "/val/bee");
  ImageDataOptions opening;
  opening.kind = "imagefolder";
  opening.root = root;
  absl::StatusOr<std::unique_ptr<TrainingData>> data = OpenImageData(opening);
  ASSERT_FALSE(data.ok());
  EXPECT_THAT(data.status().message(), HasSubstr("bee"));
}

}  // namespace
}  // namespace tessera::trainer
