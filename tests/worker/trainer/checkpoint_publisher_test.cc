// Checkpoints on their way to disk (run/checkpoint_publisher.h), in a world of
// one: written in the background, published when durable, one at a time, and
// never published when the write failed.
#include "worker/trainer/run/checkpoint_publisher.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

namespace tessera::trainer {
namespace {

using ::testing::HasSubstr;

std::string TempDir(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/checkpoint_publisher_test_" + name;
  std::filesystem::remove_all(dir);
  return dir;
}

CheckpointFiles FilesOf(const CheckpointDirectory& dir, int64_t step) {
  CheckpointFiles files;
  files.step = step;
  files.step_dir = dir.StepDir(step);
  files.files.emplace_back(dir.RankPath(step, 0), "rank zero's part");
  return files;
}

TEST(CheckpointPublisherTest, PublishesACheckpointOnceItIsDurable) {
  const CheckpointDirectory dir(TempDir("publish"));
  LocalCommunicator communicator;
  PhaseReporter phases(nullptr);
  std::ostringstream log;
  CheckpointPublisher publisher(dir, communicator, phases, c10::Device(c10::kCPU),
                                CheckpointPublisherOptions{.log = &log});
  EXPECT_FALSE(publisher.in_flight().has_value());
  ASSERT_TRUE(publisher.Start(4, FilesOf(dir, 4), absl::Milliseconds(3)).ok());
  EXPECT_EQ(publisher.in_flight(), std::optional<int64_t>(4));
  ASSERT_TRUE(publisher.PublishWhenDurable(/*block=*/true, 5).ok());
  EXPECT_FALSE(publisher.in_flight().has_value());
  EXPECT_EQ(*dir.LatestStep(), std::optional<int64_t>(4));
  EXPECT_THAT(log.str(), HasSubstr("checkpoint 4 published at step 5"));
}

TEST(CheckpointPublisherTest, KeepsOneInFlightAndFinishesItBeforeTheNext) {
  const CheckpointDirectory dir(TempDir("one_at_a_time"));
  LocalCommunicator communicator;
  PhaseReporter phases(nullptr);
  std::ostringstream log;
  absl::Notification release;
  CheckpointPublisher publisher(
      dir, communicator, phases, c10::Device(c10::kCPU),
      CheckpointPublisherOptions{.log = &log, .before_write = [&](int64_t step) {
                                   if (step == 2) release.WaitForNotification();
                                 }});
  ASSERT_TRUE(publisher.Start(2, FilesOf(dir, 2), absl::ZeroDuration()).ok());
  // Held back: asking once publishes nothing.
  ASSERT_TRUE(publisher.PublishWhenDurable(/*block=*/false, 3).ok());
  EXPECT_EQ(publisher.in_flight(), std::optional<int64_t>(2));
  EXPECT_FALSE(dir.LatestStep()->has_value());
  EXPECT_EQ(publisher.Start(4, FilesOf(dir, 4), absl::ZeroDuration()).code(),
            absl::StatusCode::kFailedPrecondition);
  release.Notify();
  ASSERT_TRUE(publisher.FinishPrevious(4).ok());
  EXPECT_THAT(log.str(), HasSubstr("checkpoint 2 is still being written at step 4"));
  EXPECT_EQ(*dir.LatestStep(), std::optional<int64_t>(2));
  ASSERT_TRUE(publisher.Start(4, FilesOf(dir, 4), absl::ZeroDuration()).ok());
  ASSERT_TRUE(publisher.PublishWhenDurable(/*block=*/true, 4).ok());
  EXPECT_EQ(*dir.LatestStep(), std::optional<int64_t>(4));
  EXPECT_TRUE(publisher.FinishPrevious(5).ok());  // none in flight
}

TEST(CheckpointPublisherTest, AFailedWriteIsNeverPublished) {
  const std::string root = TempDir("failed");
  std::filesystem::create_directories(root);
  const CheckpointDirectory dir(root);
  LocalCommunicator communicator;
  PhaseReporter phases(nullptr);
  CheckpointPublisher publisher(dir, communicator, phases, c10::Device(c10::kCPU),
                                CheckpointPublisherOptions{});
  // The step directory's place is taken by a file.
  std::ofstream(dir.StepDir(6)) << "not a directory";
  ASSERT_TRUE(publisher.Start(6, FilesOf(dir, 6), absl::ZeroDuration()).ok());
  const absl::Status published = publisher.PublishWhenDurable(/*block=*/true, 6);
  EXPECT_FALSE(published.ok());
  EXPECT_THAT(published.message(), HasSubstr("writing checkpoint 6"));
  EXPECT_FALSE(dir.LatestStep()->has_value());
}

}  // namespace
}  // namespace tessera::trainer
