// SIGUSR1 reaches tessera-train's preemption flag through the listening
// thread, while the thread that started the listener, and every thread it
// starts afterwards, keep the signal blocked (no compute thread is ever
// interrupted by it).
#include "worker/trainer/run/preemption.h"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <memory>
#include <thread>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace tessera::trainer {
namespace {

bool BlockedHere(int signal) {
  sigset_t mask;
  sigemptyset(&mask);
  pthread_sigmask(SIG_BLOCK, nullptr, &mask);
  return sigismember(&mask, signal) == 1;
}

// Waits (polling) for the flag; false after `limit`.
bool WaitForFlag(absl::Duration limit) {
  const absl::Time give_up = absl::Now() + limit;
  while (!PreemptionRequested().load()) {
    if (absl::Now() > give_up) return false;
    absl::SleepFor(absl::Milliseconds(5));
  }
  return true;
}

TEST(PreemptionListenerTest, SigUsr1ToTheProcessSetsTheFlag) {
  absl::StatusOr<std::unique_ptr<PreemptionListener>> listener =
      PreemptionListener::Start();
  ASSERT_TRUE(listener.ok()) << listener.status();
  PreemptionRequested().store(false);
  ASSERT_EQ(kill(getpid(), SIGUSR1), 0);
  EXPECT_TRUE(WaitForFlag(absl::Seconds(30)));
  PreemptionRequested().store(false);
}

TEST(PreemptionListenerTest, TheStartingThreadAndThreadsStartedLaterKeepItBlocked) {
  absl::StatusOr<std::unique_ptr<PreemptionListener>> listener =
      PreemptionListener::Start();
  ASSERT_TRUE(listener.ok()) << listener.status();
  EXPECT_TRUE(BlockedHere(SIGUSR1));
  bool blocked_in_worker = false;
  std::thread worker([&] { blocked_in_worker = BlockedHere(SIGUSR1); });
  worker.join();
  EXPECT_TRUE(blocked_in_worker);
}

TEST(PreemptionListenerTest, SignalsSentWhileNoListenerRunsWaitForTheNextOne) {
  PreemptionRequested().store(false);
  {
    absl::StatusOr<std::unique_ptr<PreemptionListener>> first =
        PreemptionListener::Start();
    ASSERT_TRUE(first.ok()) << first.status();
  }  // stopped and joined
  // Blocked everywhere now, so the signal stays pending rather than ending
  // the process, and the next listener takes it.
  ASSERT_EQ(kill(getpid(), SIGUSR1), 0);
  absl::StatusOr<std::unique_ptr<PreemptionListener>> second =
      PreemptionListener::Start();
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_TRUE(WaitForFlag(absl::Seconds(30)));
  PreemptionRequested().store(false);
}

}  // namespace
}  // namespace tessera::trainer
