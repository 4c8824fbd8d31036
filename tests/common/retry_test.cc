#include "common/retry.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/clock.h"

namespace tessera {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A random source that always draws the same bits: all zero (no shortening)
// or all one (the most the jitter takes off).
struct ConstantBits {
  using result_type = uint64_t;
  static constexpr result_type min() { return 0; }
  static constexpr result_type max() { return std::numeric_limits<result_type>::max(); }
  result_type operator()() { return value; }
  result_type value = 0;
};

RetryPolicy Schedule(double jitter) {
  return {.initial_delay = absl::Milliseconds(100),
          .max_delay = absl::Seconds(1),
          .jitter = jitter};
}

// The delays a Backoff gives, `count` of them (nullopt ends the list early).
std::vector<absl::Duration> Delays(Backoff& backoff, int count) {
  std::vector<absl::Duration> delays;
  for (int i = 0; i < count; ++i) {
    const std::optional<absl::Duration> delay = backoff.Next();
    if (!delay.has_value()) break;
    delays.push_back(*delay);
  }
  return delays;
}

TEST(BackoffTest, DoublesUpToTheCapWithoutJitter) {
  FakeClock clock;
  Backoff backoff(Schedule(0), clock);
  EXPECT_THAT(Delays(backoff, 6),
              ElementsAre(absl::Milliseconds(100), absl::Milliseconds(200),
                          absl::Milliseconds(400), absl::Milliseconds(800),
                          absl::Seconds(1), absl::Seconds(1)));
  EXPECT_EQ(backoff.attempts(), 7);
}

TEST(BackoffTest, JitterOnlyShortensEachDelayByAtMostItsFraction) {
  FakeClock clock;
  ConstantBits none{.value = 0};
  Backoff unshortened(Schedule(0.5), clock, none);
  EXPECT_THAT(Delays(unshortened, 3),
              ElementsAre(absl::Milliseconds(100), absl::Milliseconds(200),
                          absl::Milliseconds(400)));

  ConstantBits most{.value = std::numeric_limits<uint64_t>::max()};
  Backoff shortest(Schedule(0.5), clock, most);
  const std::vector<absl::Duration> delays = Delays(shortest, 3);
  ASSERT_EQ(delays.size(), 3u);
  // Half of the schedule's delay, give or take the last bit of the draw.
  EXPECT_NEAR(absl::ToDoubleMilliseconds(delays[0]), 50, 1e-6);
  EXPECT_NEAR(absl::ToDoubleMilliseconds(delays[1]), 100, 1e-6);
  EXPECT_NEAR(absl::ToDoubleMilliseconds(delays[2]), 200, 1e-6);
}

TEST(BackoffTest, JitteredScheduleStaysInsideItsBoundsAndReachesTheCap) {
  FakeClock clock;
  std::mt19937_64 random(42);
  Backoff backoff(Schedule(0.2), clock, random);
  absl::Duration schedule = absl::Milliseconds(100);
  for (int i = 0; i < 50; ++i) {
    const std::optional<absl::Duration> delay = backoff.Next();
    ASSERT_TRUE(delay.has_value());
    EXPECT_LE(*delay, schedule) << "delay " << i;
    EXPECT_GE(*delay, schedule * 0.8) << "delay " << i;
    schedule = std::min(schedule * 2, absl::Seconds(1));
  }
}

TEST(BackoffTest, OwnRandomSourceKeepsTheJitterInsideItsBounds) {
  FakeClock clock;
  Backoff backoff(Schedule(0.5), clock);
  for (int i = 0; i < 20; ++i) {
    const absl::Duration delay = backoff.Next().value();
    EXPECT_LE(delay, absl::Seconds(1));
    EXPECT_GE(delay, absl::Milliseconds(50));
  }
  EXPECT_LE(*backoff.Next(), absl::Seconds(1));
  EXPECT_GE(*backoff.Next(),
            absl::Milliseconds(500));  // the capped delay, at most halved
}

TEST(BackoffTest, SameSeedGivesTheSameDelays) {
  FakeClock clock;
  std::mt19937_64 first_random(7);
  std::mt19937_64 second_random(7);
  Backoff first(Schedule(0.5), clock, first_random);
  Backoff second(Schedule(0.5), clock, second_random);
  EXPECT_EQ(Delays(first, 8), Delays(second, 8));
}

TEST(BackoffTest, GivesUpWhenTheNextAttemptWouldStartPastTheDeadline) {
  FakeClock clock;
  RetryPolicy policy = Schedule(0);
  policy.deadline = absl::Seconds(1);
  Backoff backoff(policy, clock);
  std::vector<absl::Duration> slept;
  while (std::optional<absl::Duration> delay = backoff.Next()) {
    slept.push_back(*delay);
    clock.SleepFor(*delay);
  }
  // 100 + 200 + 400 ms; 800 more would end 1.5 s after the start.
  EXPECT_THAT(slept, ElementsAre(absl::Milliseconds(100), absl::Milliseconds(200),
                                 absl::Milliseconds(400)));
  EXPECT_EQ(backoff.attempts(), 4);
}

TEST(BackoffTest, GivesUpAfterMaxAttempts) {
  FakeClock clock;
  RetryPolicy policy = Schedule(0);
  policy.max_attempts = 3;
  Backoff backoff(policy, clock);
  EXPECT_EQ(Delays(backoff, 10).size(), 2u);
  EXPECT_EQ(backoff.attempts(), 3);
}

TEST(BackoffTest, ResetStartsTheScheduleAndTheDeadlineAgain) {
  FakeClock clock;
  RetryPolicy policy = Schedule(0);
  policy.deadline = absl::Seconds(1);
  Backoff backoff(policy, clock);
  Delays(backoff, 2);
  clock.Advance(absl::Seconds(5));
  EXPECT_EQ(backoff.Next(), std::nullopt);
  backoff.Reset();
  EXPECT_EQ(backoff.attempts(), 1);
  EXPECT_EQ(backoff.Next(), absl::Milliseconds(100));
}

// Fails with `error` `failures` times, then answers `value`.
struct Flaky {
  absl::StatusOr<int> operator()() {
    ++calls;
    if (calls <= failures)
      return absl::Status(error.code(), absl::StrCat(error.message(), " #", calls));
    return value;
  }
  int failures = 0;
  absl::Status error = absl::UnavailableError("down");
  int value = 42;
  int calls = 0;
};

TEST(RetryTest, SleepsTheScheduleThroughTheClockUntilSuccess) {
  FakeClock clock;
  const absl::Time start = clock.Now();
  Flaky flaky{.failures = 3};
  std::vector<std::string> seen;
  const absl::StatusOr<int> result = Retry(
      Schedule(0), clock, [&] { return flaky(); },
      [&](const absl::Status& error, int attempt, absl::Duration delay) {
        seen.push_back(absl::StrCat(attempt, " ", error.message(), " ",
                                    absl::FormatDuration(delay)));
      });
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(*result, 42);
  EXPECT_EQ(flaky.calls, 4);
  EXPECT_THAT(seen, ElementsAre("1 down #1 100ms", "2 down #2 200ms", "3 down #3 400ms"));
  EXPECT_EQ(clock.Now() - start, absl::Milliseconds(700));
}

TEST(RetryTest, DeadlineReturnsTheLastErrorNamingTheAttempts) {
  FakeClock clock;
  const absl::Time start = clock.Now();
  RetryPolicy policy = Schedule(0);
  policy.deadline = absl::Seconds(1);
  Flaky flaky{.failures = 100};
  const absl::StatusOr<int> result = Retry(policy, clock, [&] { return flaky(); });
  EXPECT_EQ(result.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(result.status().message(), "down #4 (4 attempts in 700ms)");
  EXPECT_EQ(flaky.calls, 4);
  EXPECT_LE(clock.Now() - start, policy.deadline);
}

TEST(RetryTest, MaxAttemptsReturnsTheLastErrorNamingThem) {
  FakeClock clock;
  RetryPolicy policy = Schedule(0);
  policy.max_attempts = 2;
  Flaky flaky{.failures = 100};
  const absl::Status status = Retry(policy, clock, [&] { return flaky().status(); });
  EXPECT_TRUE(absl::IsUnavailable(status));
  EXPECT_THAT(status.message(), HasSubstr("down #2 (2 attempts in 100ms)"));
  EXPECT_EQ(flaky.calls, 2);
}

TEST(RetryTest, NonRetryableErrorReturnsAtOnceUnchanged) {
  FakeClock clock;
  const absl::Time start = clock.Now();
  Flaky flaky{.failures = 100, .error = absl::InvalidArgumentError("bad")};
  const absl::StatusOr<int> result = Retry(Schedule(0), clock, [&] { return flaky(); });
  EXPECT_EQ(result.status(), absl::InvalidArgumentError("bad #1"));
  EXPECT_EQ(flaky.calls, 1);
  EXPECT_EQ(clock.Now(), start);
}

TEST(RetryTest, PredicateChoosesWhichErrorsAreRetried) {
  FakeClock clock;
  RetryPolicy policy = Schedule(0);
  policy.retryable = [](const absl::Status& s) { return absl::IsDeadlineExceeded(s); };
  Flaky slow{.failures = 2, .error = absl::DeadlineExceededError("slow")};
  EXPECT_EQ(Retry(policy, clock, [&] { return slow(); }).value_or(0), 42);
  EXPECT_EQ(slow.calls, 3);

  Flaky down{.failures = 2};
  EXPECT_TRUE(absl::IsUnavailable(Retry(policy, clock, [&] { return down(); }).status()));
  EXPECT_EQ(down.calls, 1);
}

TEST(RetryTest, SuccessAtFirstCallNeitherSleepsNorObserves) {
  FakeClock clock;
  const absl::Time start = clock.Now();
  int observed = 0;
  const absl::Status status = Retry(
      Schedule(0), clock, [] { return absl::OkStatus(); },
      [&](const absl::Status&, int, absl::Duration) { ++observed; });
  EXPECT_TRUE(status.ok());
  EXPECT_EQ(observed, 0);
  EXPECT_EQ(clock.Now(), start);
}

TEST(RetryTest, InjectedRandomSourceMakesTheJitteredWaitsRepeatable) {
  std::vector<absl::Duration> waits[2];
  for (std::vector<absl::Duration>& run : waits) {
    FakeClock clock;
    std::mt19937_64 random(3);
    Flaky flaky{.failures = 5};
    ASSERT_TRUE(
        Retry(
            Schedule(0.5), clock, random, [&] { return flaky(); },
            [&](const absl::Status&, int, absl::Duration delay) { run.push_back(delay); })
            .ok());
  }
  EXPECT_EQ(waits[0].size(), 5u);
  EXPECT_EQ(waits[0], waits[1]);
}

}  // namespace
}  // namespace tessera
