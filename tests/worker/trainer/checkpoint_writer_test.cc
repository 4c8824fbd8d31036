// The checkpoint writer (checkpoint_writer.h): the write runs on a thread of
// its own while the caller goes on, its progress and status come back, and a
// second write waits for the first to be collected.
#include "worker/trainer/run/checkpoint_writer.h"

#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace tessera::trainer {
namespace {

bool WaitFor(const std::function<bool()>& condition) {
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (!condition()) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(1));
  }
  return true;
}

TEST(CheckpointWriterTest, TheWriteRunsBesideTheCallerAndWaitReturnsItsStatus) {
  CheckpointWriter writer;
  EXPECT_FALSE(writer.busy());
  EXPECT_FALSE(writer.done());
  absl::Notification release;
  std::thread::id caller = std::this_thread::get_id();
  std::thread::id writer_thread;
  ASSERT_TRUE(writer
                  .Start([&](const CheckpointWriter::Progress& progress) {
                    writer_thread = std::this_thread::get_id();
                    progress(4 << 20);
                    release.WaitForNotification();
                    progress(9 << 20);
                    return absl::DataLossError("disk full");
                  })
                  .ok());
  // The caller is free while the write is held back.
  ASSERT_TRUE(WaitFor([&] { return writer.bytes_written() == (4 << 20); }));
  EXPECT_TRUE(writer.busy());
  EXPECT_FALSE(writer.done());
  const absl::Status second =
      writer.Start([](const CheckpointWriter::Progress&) { return absl::OkStatus(); });
  EXPECT_EQ(second.code(), absl::StatusCode::kFailedPrecondition) << second;

  release.Notify();
  ASSERT_TRUE(WaitFor([&] { return writer.done(); }));
  EXPECT_EQ(writer.bytes_written(), 9 << 20);
  const absl::Status status = writer.Wait();
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(status.message(), "disk full");
  EXPECT_NE(writer_thread, caller);
  EXPECT_FALSE(writer.busy());
  EXPECT_TRUE(writer.Wait().ok()) << "nothing in flight";

  // Free again once collected.
  ASSERT_TRUE(
      writer.Start([](const CheckpointWriter::Progress&) { return absl::OkStatus(); })
          .ok());
  EXPECT_TRUE(writer.Wait().ok());
}

TEST(CheckpointWriterTest, DestroyingTheWriterWaitsForTheWriteInFlight) {
  bool finished = false;
  {
    CheckpointWriter writer;
    ASSERT_TRUE(writer
                    .Start([&](const CheckpointWriter::Progress&) {
                      absl::SleepFor(absl::Milliseconds(50));
                      finished = true;
                      return absl::OkStatus();
                    })
                    .ok());
  }
  EXPECT_TRUE(finished);
}

}  // namespace
}  // namespace tessera::trainer
