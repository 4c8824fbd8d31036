// Asha's decisions with a scripted metric source and no training: a
// hand-worked 27-trial run, asynchronous arrival orders, and the state
// rebuilt from records as a restarted coordinator rebuilds it.
#include "coordinator/core/asha.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/seeded_random.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

using Kind = Asha::Decision::Kind;

// The scripted metric: trial t scores (7 t) mod 27 at every rung, a
// permutation of 0..26 that rises within runs of four trials.
double Score(int32_t trial, int32_t /*rung*/) { return (7 * trial) % 27; }

std::string Text(const Asha::Decision& d) {
  switch (d.kind) {
    case Kind::kStart:
      return absl::StrCat("start ", d.trial);
    case Kind::kPromote:
      return absl::StrCat("promote ", d.trial, " to ", d.rung);
    case Kind::kWait:
      return "wait";
    case Kind::kDone:
      return "done";
  }
  return "?";
}

Asha::Options Options27() {
  Asha::Options o;
  o.rungs = 3;
  o.reduction_factor = 3;
  o.max_trials = 27;
  o.maximize = true;
  return o;
}

// The 27-trial, eta = 3 run with one slot, each job ending before the next
// decision, worked by hand from Algorithm 2: at each free slot, rung 1 then
// rung 0 is searched for a trial in its top floor(n/3) not yet promoted;
// failing that a new trial starts. E.g. after trials 0-2 (scores 0, 7, 14)
// rung 0 has 3 results, its top 1 is trial 2, promoted; after trial 6 (15)
// the top 2 of rung 0's 7 are trials 3 (21) and 6 (15), so 6 goes to rung 1,
// whose 3 results (14, 21, 15) then put trial 3 in its top 1, to rung 2.
TEST(AshaTest, TwentySevenTrialsWithOneSlotMatchTheHandWorkedTable) {
  const std::vector<std::string> expected = {"start 0",
                                             "start 1",
                                             "start 2",
                                             "promote 2 to 1",
                                             "start 3",
                                             "promote 3 to 1",
                                             "start 4",
                                             "start 5",
                                             "start 6",
                                             "promote 6 to 1",
                                             "promote 3 to 2",
                                             "start 7",
                                             "promote 7 to 1",
                                             "promote 7 to 2",
                                             "start 8",
                                             "start 9",
                                             "start 10",
                                             "promote 10 to 1",
                                             "start 11",
                                             "promote 11 to 1",
                                             "promote 11 to 2",
                                             "start 12",
                                             "start 13",
                                             "start 14",
                                             "promote 14 to 1",
                                             "start 15",
                                             "promote 15 to 1",
                                             "promote 15 to 2",
                                             "start 16",
                                             "start 17",
                                             "start 18",
                                             "promote 18 to 1",
                                             "start 19",
                                             "promote 19 to 1",
                                             "promote 19 to 2",
                                             "start 20",
                                             "start 21",
                                             "start 22",
                                             "promote 22 to 1",
                                             "start 23",
                                             "promote 23 to 1",
                                             "promote 23 to 2",
                                             "start 24",
                                             "start 25",
                                             "start 26",
                                             "promote 26 to 1",
                                             "done"};
  Asha asha(Options27());
  std::vector<std::string> decisions;
  for (int i = 0; i < 100; ++i) {
    const Asha::Decision d = asha.Next();
    decisions.push_back(Text(d));
    if (d.kind == Kind::kDone || d.kind == Kind::kWait) break;
    asha.Started(d.trial, d.rung);
    asha.Finished(d.trial, d.rung, Score(d.trial, d.rung));
  }
  EXPECT_EQ(decisions, expected);
  // Where each trial stopped: 6 trained to the end, 7 more stopped after rung
  // 1, the other 14 after rung 0.
  const std::vector<int32_t> rung2 = {3, 7, 11, 15, 19, 23};
  const std::vector<int32_t> rung1_only = {2, 6, 10, 14, 18, 22, 26};
  std::vector<int32_t> completed, stopped_at_1;
  for (const Asha::Result& r : asha.RungResults(2)) completed.push_back(r.trial);
  std::set<int32_t> in_rung2(completed.begin(), completed.end());
  for (const Asha::Result& r : asha.RungResults(1)) {
    if (!in_rung2.contains(r.trial)) stopped_at_1.push_back(r.trial);
  }
  std::sort(completed.begin(), completed.end());
  std::sort(stopped_at_1.begin(), stopped_at_1.end());
  EXPECT_EQ(completed, rung2);
  EXPECT_EQ(stopped_at_1, rung1_only);
  EXPECT_EQ(asha.RungResults(0).size(), 27u);
  EXPECT_EQ(asha.trials_started(), 27);
  EXPECT_EQ(asha.running(), 0);
}

// Checks a promotion against the rung's results at that moment: the trial is
// in the top floor(n/eta), not promoted before, and the best such trial.
void ExpectSoundPromotion(const Asha& asha, const Asha::Decision& d,
                          const std::set<std::pair<int32_t, int32_t>>& started, int eta) {
  const std::vector<Asha::Result> results = asha.RungResults(d.rung - 1);
  const size_t top = results.size() / eta;
  size_t position = results.size();
  for (size_t i = 0; i < results.size(); ++i) {
    if (results[i].trial == d.trial) position = i;
  }
  EXPECT_LT(position, top) << "trial " << d.trial << " promoted to rung " << d.rung
                           << " from outside the top " << top << " of " << results.size();
  EXPECT_FALSE(started.contains({d.trial, d.rung})) << "promoted twice";
  for (size_t i = 0; i < position && i < results.size(); ++i) {
    EXPECT_TRUE(started.contains({results[i].trial, d.rung}))
        << "trial " << results[i].trial << " ranks above " << d.trial << " and waits";
  }
}

// An Asha rebuilt from `records` taken in a shuffled order.
Asha Rebuilt(const Asha::Options& options,
             std::vector<std::tuple<int32_t, int32_t, int, double>> records,
             SeededRandom& rng) {
  for (size_t i = records.size(); i > 1; --i) {
    std::swap(records[i - 1], records[rng.UniformInt(0, static_cast<int64_t>(i) - 1)]);
  }
  Asha asha(options);
  for (const auto& [trial, rung, state, metric] : records) {
    if (state == 0) asha.Started(trial, rung);
    if (state == 1) asha.Finished(trial, rung, metric);
    if (state == 2) asha.Failed(trial, rung);
  }
  return asha;
}

// Runs the 27-trial search with `slots` slots; results arrive in an order
// drawn from `seed` (any running job may end next). Checks every decision.
void RunAsynchronously(int slots, uint64_t seed) {
  const Asha::Options options = Options27();
  Asha asha(options);
  SeededRandom rng(seed);
  std::set<std::pair<int32_t, int32_t>> started;
  std::vector<std::pair<int32_t, int32_t>> running;
  std::map<std::pair<int32_t, int32_t>, std::tuple<int32_t, int32_t, int, double>>
      records;
  for (int step = 0; step < 1000; ++step) {
    while (static_cast<int>(running.size()) < slots) {
      const Asha::Decision d = asha.Next();
      // The state rebuilt from the records, in any order, decides the same.
      std::vector<std::tuple<int32_t, int32_t, int, double>> list;
      for (const auto& [key, record] : records) list.push_back(record);
      EXPECT_EQ(Rebuilt(options, list, rng).Next(), d);
      if (d.kind != Kind::kStart && d.kind != Kind::kPromote) break;
      if (d.kind == Kind::kPromote) ExpectSoundPromotion(asha, d, started, 3);
      if (d.kind == Kind::kStart) EXPECT_EQ(d.trial, asha.trials_started());
      asha.Started(d.trial, d.rung);
      started.insert({d.trial, d.rung});
      running.push_back({d.trial, d.rung});
      records[{d.trial, d.rung}] = {d.trial, d.rung, 0, 0.0};
    }
    if (running.empty()) break;
    const size_t i = rng.UniformInt(0, static_cast<int64_t>(running.size()) - 1);
    const auto [trial, rung] = running[i];
    running.erase(running.begin() + static_cast<ptrdiff_t>(i));
    asha.Finished(trial, rung, Score(trial, rung));
    records[{trial, rung}] = {trial, rung, 1, Score(trial, rung)};
  }
  EXPECT_EQ(asha.Next().kind, Kind::kDone);
  EXPECT_EQ(asha.trials_started(), 27);
  for (int32_t rung = 0; rung + 1 < options.rungs; ++rung) {
    const std::vector<Asha::Result> results = asha.RungResults(rung);
    const size_t n = results.size();
    size_t promoted = 0;
    for (const Asha::Result& r : results)
      promoted += started.contains({r.trial, rung + 1});
    // At the end the whole top 1/eta of the rung has been promoted...
    for (size_t i = 0; i < n / 3; ++i) {
      EXPECT_TRUE(started.contains({results[i].trial, rung + 1}))
          << "seed " << seed << ": trial " << results[i].trial << " of rung " << rung;
    }
    // ...and the eta - 1 worst of a rung never are (each promotion is from
    // the top floor(m/eta) of the m results then, which they never reach).
    EXPECT_GE(promoted, n / 3);
    if (n >= 2) EXPECT_LE(promoted, n - 2) << "seed " << seed << " rung " << rung;
    // Every trial of the next rung came from this one.
    EXPECT_EQ(promoted, asha.RungResults(rung + 1).size());
  }
}

TEST(AshaTest, AsynchronousArrivalOrdersGiveValidDecisions) {
  for (int slots : {1, 2, 4, 9}) {
    for (uint64_t seed = 1; seed <= 10; ++seed) {
      SCOPED_TRACE(absl::StrCat("slots ", slots, " seed ", seed));
      RunAsynchronously(slots, seed);
    }
  }
}

TEST(AshaTest, AFailedTrialIsNeverPromotedAndDoesNotCount) {
  Asha::Options o;
  o.rungs = 2;
  o.reduction_factor = 2;
  o.max_trials = 3;
  Asha asha(o);
  asha.Finished(0, 0, 0.5);
  asha.Failed(1, 0);
  // One result: floor(1/2) = 0, so no promotion; a new trial starts.
  EXPECT_EQ(asha.Next(), (Asha::Decision{Kind::kStart, 2, 0}));
  asha.Finished(2, 0, 0.1);
  EXPECT_EQ(asha.Next(), (Asha::Decision{Kind::kPromote, 0, 1}));
  asha.Failed(0, 1);  // the promoted job fails: nothing more to do
  EXPECT_EQ(asha.Next().kind, Kind::kDone);
  EXPECT_TRUE(asha.RungResults(1).empty());
}

TEST(AshaTest, TiesGoToTheLowerTrialAndNanRanksLast) {
  Asha::Options o;
  o.rungs = 2;
  o.reduction_factor = 2;
  o.max_trials = 4;
  o.maximize = false;  // a loss
  Asha asha(o);
  asha.Finished(3, 0, std::numeric_limits<double>::quiet_NaN());
  asha.Finished(2, 0, 0.7);
  asha.Finished(1, 0, 0.7);
  asha.Finished(0, 0, 0.9);
  const std::vector<Asha::Result> results = asha.RungResults(0);
  ASSERT_EQ(results.size(), 4u);
  EXPECT_EQ(results[0].trial, 1);
  EXPECT_EQ(results[1].trial, 2);
  EXPECT_EQ(results[2].trial, 0);
  EXPECT_EQ(results[3].trial, 3);
  EXPECT_EQ(asha.Next(), (Asha::Decision{Kind::kPromote, 1, 1}));
}

TEST(AshaTest, OneRungOnlyStartsTrialsThenWaitsThenIsDone) {
  Asha::Options o;
  o.rungs = 1;
  o.max_trials = 2;
  Asha asha(o);
  EXPECT_EQ(asha.Next(), (Asha::Decision{Kind::kStart, 0, 0}));
  asha.Started(0, 0);
  EXPECT_EQ(asha.Next(), (Asha::Decision{Kind::kStart, 1, 0}));
  asha.Started(1, 0);
  EXPECT_EQ(asha.Next().kind, Kind::kWait);
  asha.Finished(0, 0, 1);
  asha.Finished(1, 0, 2);
  EXPECT_EQ(asha.Next().kind, Kind::kDone);
}

TEST(AshaTest, PromotionsComeFromTheHighestRungFirst) {
  Asha::Options o;
  o.rungs = 3;
  o.reduction_factor = 2;
  o.max_trials = 10;
  Asha asha(o);
  for (int t = 0; t < 4; ++t) asha.Finished(t, 0, t);
  asha.Finished(3, 1, 0.5);
  asha.Finished(2, 1, 0.9);
  // Rung 1 has 2 results: trial 2 is its top; rung 0's top 2 (3, 2) are
  // both promoted already.
  EXPECT_EQ(asha.Next(), (Asha::Decision{Kind::kPromote, 2, 2}));
}

}  // namespace
}  // namespace tessera
