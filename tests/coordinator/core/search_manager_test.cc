// SearchManager over a JobManager with a fake clock and an SQLite store in
// memory: a simulated worker runs each trial's job, which reports the
// search's metric from a script and exits, and coordinator restarts are new
// managers over the same store.
#include "coordinator/core/search_manager.h"

#include <atomic>
#include <functional>
#include <future>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/search_spec.h"
#include "coordinator/core/job_manager.h"
#include "coordinator/store/sqlite_store.h"
#include "coordinator/store/store_wrapper.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

namespace v1 = ::tessera::v1;
using ::testing::HasSubstr;

// A store whose job creation or search-job writes fail on demand, as a
// coordinator that dies at that point would leave things.
class FaultyStore final : public StoreWrapper {
 public:
  using StoreWrapper::StoreWrapper;
  absl::StatusOr<int64_t> CreateJob(const JobRecord& job) override {
    if (fail_create_job) return absl::UnavailableError("injected: no job stored");
    return StoreWrapper::CreateJob(job);
  }
  absl::Status PutSearchJob(const SearchJobRecord& job) override {
    // The write that records a submitted job's id (not its outcome).
    if (fail_put_submitted && job.job_id != 0 &&
        job.outcome == SearchJobRecord::Outcome::kRunning) {
      return absl::UnavailableError("injected: submitted job not recorded");
    }
    return StoreWrapper::PutSearchJob(job);
  }
  std::atomic<bool> fail_create_job{false};
  std::atomic<bool> fail_put_submitted{false};
};

// What a trial's job does when it runs.
struct Script {
  double metric = 0;
  int exit_code = 0;
};

class SearchManagerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto sqlite = SqliteStore::Open(":memory:");
    ASSERT_TRUE(sqlite.ok()) << sqlite.status();
    store_ = std::make_unique<FaultyStore>(std::move(*sqlite));
    Start();
  }

  void TearDown() override {
    if (jobs_ != nullptr) EXPECT_EQ(jobs_->illegal_transitions(), 0);
  }

  // (Re)creates the managers over the same store, as a coordinator restart does.
  void Start() {
    searches_.reset();
    jobs_.reset();
    writer_ = std::make_unique<StoreWriter>(store_.get());
    jobs_ = std::make_unique<JobManager>(store_.get(), writer_.get(), &clock_,
                                         JobManagerOptions());
    ASSERT_TRUE(jobs_->Recover().ok());
    SearchManager::Options options;
    options.cluster_slots = [this] { return slots_; };
    searches_ =
        std::make_unique<SearchManager>(store_.get(), &jobs_->jobs(), &clock_, options);
    ASSERT_TRUE(searches_->Recover().ok());
    v1::RegisterWorkerRequest req;
    req.set_name("w");
    req.set_slots(4);
    auto resp = jobs_->workers().RegisterWorker(req);
    ASSERT_TRUE(resp.ok()) << resp.status();
    epoch_ = resp->epoch();
  }

  static v1::SearchSpec Spec(const std::string& search) {
    auto spec = ParseSearchSpec(
        "name: s\nsearch:\n" + search +
        "base:\n  world_size: 1\n  trainer:\n    model: vit-micro\n"
        "    dataset: fashion-mnist\n    batch_size: 8\n    val_fraction: 0.1\n"
        "    checkpoint_dir: /ckpt\n");
    EXPECT_TRUE(spec.ok()) << spec.status();
    return *spec;
  }

  // asha over 9 trials, eta 3: rungs of 100, 300 and 900 steps.
  static v1::SearchSpec AshaSpec(int max_concurrent) {
    return Spec(
        absl::StrCat("  method: asha\n  metric: val_accuracy\n  max_trials: 9\n"
                     "  max_concurrent: ",
                     max_concurrent,
                     "\n  max_length: 900\n  seed: 3\n"
                     "  parameters:\n    lr: {loguniform: [1e-4, 1e-2]}\n"));
  }

  static v1::SearchSpec RandomSpec(int max_trials, int max_concurrent) {
    return Spec(absl::StrCat("  method: random\n  metric: val_accuracy\n  max_trials: ",
                             max_trials, "\n  max_concurrent: ", max_concurrent,
                             "\n  max_length: 100\n"
                             "  parameters:\n    weight_decay: {uniform: [0, 0.1]}\n"));
  }

  void Report(const v1::LaunchOrder& o, const std::string& name, double value,
              int64_t step) {
    v1::ReportMetricsRequest req;
    req.set_job_id(o.job_id());
    req.set_attempt(o.attempt());
    req.set_rank(o.rank());
    v1::MetricPoint* p = req.add_points();
    p->set_step(step);
    p->set_name(name);
    p->set_value(value);
    std::promise<absl::Status> done;
    jobs_->ranks().ReportMetrics(req, [&done](absl::Status s) { done.set_value(s); });
    ASSERT_TRUE(done.get_future().get().ok());
  }

  // (trial, rung) of a trial's job, from its name "s/t<trial>[-r<rung>]".
  std::pair<int, int> TrialOf(int64_t job_id) {
    auto job = jobs_->jobs().GetJob(Caller::Admin(), job_id);
    EXPECT_TRUE(job.ok()) << job.status();
    std::vector<std::string> parts = absl::StrSplit(job->name().substr(3), "-r");
    int trial = 0, rung = 0;
    EXPECT_TRUE(absl::SimpleAtoi(parts[0], &trial)) << job->name();
    if (parts.size() == 2) EXPECT_TRUE(absl::SimpleAtoi(parts[1], &rung));
    return {trial, rung};
  }

  // Runs every launched job: it reports val_accuracy (the script's metric,
  // at its stop step) and exits with the script's code. Returns the orders.
  std::vector<v1::LaunchOrder> RunLaunched(
      const std::function<Script(int trial, int rung)>& script) {
    v1::HeartbeatRequest beat;
    beat.set_name("w");
    beat.set_epoch(epoch_);
    auto orders = jobs_->workers().Heartbeat(beat);
    EXPECT_TRUE(orders.ok()) << orders.status();
    std::vector<v1::LaunchOrder> launched(orders->launch().begin(),
                                          orders->launch().end());
    for (const v1::LaunchOrder& o : launched) {
      const auto [trial, rung] = TrialOf(o.job_id());
      const Script s = script(trial, rung);
      const double fraction =
          o.trainer().stop_fraction() > 0 ? o.trainer().stop_fraction() : 1.0;
      const int64_t stop = static_cast<int64_t>(fraction * o.trainer().max_steps() + 0.5);
      // An earlier, worse value first: the rung's metric is the last one.
      Report(o, "val_accuracy", s.metric - 0.5, stop / 2);
      Report(o, "val_accuracy", s.metric, stop);
      v1::LocalRank* r = beat.add_ranks();
      r->set_job_id(o.job_id());
      r->set_attempt(o.attempt());
      r->set_rank(o.rank());
      r->set_pid(100 + o.rank());
      r->set_exited(true);
      r->set_exit_code(s.exit_code);
    }
    EXPECT_TRUE(jobs_->workers().Heartbeat(beat).ok());
    return launched;
  }

  // Runs jobs and ticks until the search ends (or `rounds` pass).
  void RunToEnd(int64_t id, const std::function<Script(int, int)>& script,
                int rounds = 100) {
    for (int i = 0; i < rounds && State(id) == v1::SEARCH_STATE_RUNNING; ++i) {
      RunLaunched(script);
      searches_->Tick();
    }
  }

  v1::SearchState State(int64_t id) {
    auto search = searches_->Get(Caller::Admin(), id);
    EXPECT_TRUE(search.ok()) << search.status();
    return search.ok() ? search->state() : v1::SEARCH_STATE_UNSPECIFIED;
  }

  // Every job in the store, by name: each (trial, rung) must have one.
  std::map<std::string, int> JobsByName() {
    writer_->Flush();
    auto all = store_->ListJobs();
    EXPECT_TRUE(all.ok());
    std::map<std::string, int> names;
    for (const JobRecord& job : *all) ++names[job.name];
    return names;
  }

  FakeClock clock_;
  int64_t slots_ = 4;
  std::unique_ptr<FaultyStore> store_;
  std::unique_ptr<StoreWriter> writer_;
  std::unique_ptr<JobManager> jobs_;
  std::unique_ptr<SearchManager> searches_;
  int64_t epoch_ = 0;
};

// Trial t scores (7 t) mod 9 / 10 at rung 0 and gains 0.05 per rung.
Script Scored(int trial, int rung) {
  return Script{((7 * trial) % 9) / 10.0 + 0.05 * rung};
}

TEST_F(SearchManagerTest, APromotionResumesTheTrialWithTheNextStopFraction) {
  auto submitted = searches_->Submit(AshaSpec(/*max_concurrent=*/1), "", "req-1");
  ASSERT_TRUE(submitted.ok()) << submitted.status();
  EXPECT_EQ(submitted->max_trials(), 9);
  const int64_t id = submitted->search_id();
  // Trials 0, 1, 2 score 0, 0.7, 0.5 at rung 0: after the third, trial 1 is
  // the top third of rung 0 and is promoted.
  std::vector<v1::LaunchOrder> orders;
  for (int i = 0; i < 4; ++i) {
    std::vector<v1::LaunchOrder> launched = RunLaunched(Scored);
    ASSERT_EQ(launched.size(), 1u) << "round " << i;
    orders.push_back(launched[0]);
    searches_->Tick();
  }
  EXPECT_EQ(TrialOf(orders[2].job_id()), std::make_pair(2, 0));
  EXPECT_EQ(TrialOf(orders[3].job_id()), std::make_pair(1, 1));
  const v1::TrainerConfig& first = orders[1].trainer();
  const v1::TrainerConfig& promoted = orders[3].trainer();
  EXPECT_FALSE(first.resume());
  EXPECT_DOUBLE_EQ(first.stop_fraction(), 1.0 / 9);
  EXPECT_TRUE(promoted.resume());
  EXPECT_DOUBLE_EQ(promoted.stop_fraction(), 1.0 / 3);
  EXPECT_EQ(promoted.max_steps(), 900) << "the schedule stays the whole run's";
  EXPECT_EQ(promoted.checkpoint_dir(), first.checkpoint_dir());
  EXPECT_EQ(promoted.checkpoint_dir(), absl::StrCat("/ckpt/search-", id, "/trial-1"));
  EXPECT_EQ(promoted.lr(), first.lr());

  RunToEnd(id, Scored);
  auto search = searches_->Get(Caller::Admin(), id);
  ASSERT_TRUE(search.ok()) << search.status();
  EXPECT_EQ(search->state(), v1::SEARCH_STATE_SUCCEEDED) << search->reason();
  ASSERT_EQ(search->trials_size(), 9);
  std::map<std::string, int> statuses;
  for (const v1::SearchTrial& t : search->trials()) ++statuses[t.status()];
  // Rung 0 has 9 results, rung 1 at least 3, and the last rung at least 1.
  EXPECT_GE(statuses["completed"], 1);
  EXPECT_EQ(statuses["completed"] + statuses["stopped"], 9);
  const v1::SearchTrial& best = search->trials(search->best_trial());
  EXPECT_EQ(best.status(), "completed");
  EXPECT_EQ(best.rung(), 2);
  EXPECT_EQ(best.job_ids_size(), 3);
  EXPECT_EQ(best.steps(), 900);
  EXPECT_TRUE(best.promoted());
  EXPECT_EQ(best.parameters().count("lr"), 1u);
  // The rung's metric is the job's last value, not an earlier one.
  EXPECT_DOUBLE_EQ(best.rung_metrics(0), Scored(best.index(), 0).metric);
  EXPECT_DOUBLE_EQ(best.best_metric(), Scored(best.index(), 2).metric);
  // Where it was recorded: the last rung's job, at the step that rung stopped.
  EXPECT_EQ(best.best_rung(), 2);
  EXPECT_EQ(best.best_job_id(), best.job_ids(2));
  EXPECT_EQ(best.best_step(), 900);
  EXPECT_THAT(search->reason(), HasSubstr(absl::StrCat("best trial ", best.index())));
}

TEST_F(SearchManagerTest, AFailedTrialIsRecordedFailedAndTheSearchGoesOn) {
  auto submitted = searches_->Submit(RandomSpec(3, 1), "", "");
  ASSERT_TRUE(submitted.ok()) << submitted.status();
  const int64_t id = submitted->search_id();
  RunToEnd(id, [](int trial, int) {
    return Script{0.5 + trial * 0.1, trial == 1 ? 1 : 0};
  });
  auto search = searches_->Get(Caller::Admin(), id);
  ASSERT_TRUE(search.ok()) << search.status();
  EXPECT_EQ(search->state(), v1::SEARCH_STATE_SUCCEEDED) << search->reason();
  ASSERT_EQ(search->trials_size(), 3);
  EXPECT_EQ(search->trials(1).status(), "failed");
  EXPECT_EQ(search->trials(1).state(), v1::JOB_STATE_FAILED);
  EXPECT_FALSE(search->trials(1).has_best_metric());
  EXPECT_EQ(search->trials(2).status(), "completed");
  EXPECT_EQ(search->best_trial(), 2);
}

TEST_F(SearchManagerTest, ASearchWhoseTrialsAllFailEndsFailed) {
  auto submitted = searches_->Submit(RandomSpec(2, 2), "", "");
  ASSERT_TRUE(submitted.ok()) << submitted.status();
  const int64_t id = submitted->search_id();
  RunToEnd(id, [](int, int) { return Script{0, 1}; });
  auto search = searches_->Get(Caller::Admin(), id);
  ASSERT_TRUE(search.ok());
  EXPECT_EQ(search->state(), v1::SEARCH_STATE_FAILED);
  EXPECT_THAT(search->reason(), HasSubstr("none reported val_accuracy"));
  EXPECT_EQ(search->best_trial(), -1);
}

TEST_F(SearchManagerTest, CancelCancelsTheRunningTrialsAndStartsNoMore) {
  auto submitted = searches_->Submit(RandomSpec(6, 2), "", "");
  ASSERT_TRUE(submitted.ok()) << submitted.status();
  const int64_t id = submitted->search_id();
  auto state = searches_->Cancel(Caller::Admin(), id);
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_EQ(*state, v1::SEARCH_STATE_CANCELLED);
  searches_->Tick();
  auto search = searches_->Get(Caller::Admin(), id);
  ASSERT_TRUE(search.ok());
  EXPECT_EQ(search->state(), v1::SEARCH_STATE_CANCELLED);
  ASSERT_EQ(search->trials_size(), 2) << "two ran at once; no more started";
  for (const v1::SearchTrial& t : search->trials()) {
    ASSERT_EQ(t.job_ids_size(), 1);
    auto job = jobs_->jobs().GetJob(Caller::Admin(), t.job_ids(0));
    ASSERT_TRUE(job.ok());
    EXPECT_EQ(job->state(), v1::JOB_STATE_CANCELLED);
    EXPECT_EQ(t.status(), "stopped");
  }
  EXPECT_TRUE(
      absl::IsFailedPrecondition(searches_->Cancel(Caller::Admin(), id).status()));
  EXPECT_EQ(JobsByName().size(), 2u);
}

TEST_F(SearchManagerTest, ARestartLosesAndDuplicatesNoTrialJob) {
  auto submitted = searches_->Submit(AshaSpec(/*max_concurrent=*/2), "", "");
  ASSERT_TRUE(submitted.ok()) << submitted.status();
  const int64_t id = submitted->search_id();
  RunLaunched(Scored);
  // The coordinator dies after submitting a job and before recording it...
  store_->fail_put_submitted = true;
  searches_->Tick();
  store_->fail_put_submitted = false;
  writer_->Flush();
  Start();
  RunLaunched(Scored);
  // ...and after deciding on a job and before submitting it.
  store_->fail_create_job = true;
  searches_->Tick();
  store_->fail_create_job = false;
  writer_->Flush();
  Start();
  RunToEnd(id, Scored);
  auto search = searches_->Get(Caller::Admin(), id);
  ASSERT_TRUE(search.ok());
  EXPECT_EQ(search->state(), v1::SEARCH_STATE_SUCCEEDED) << search->reason();
  ASSERT_EQ(search->trials_size(), 9) << "every trial ran";
  int rows = 0;
  for (const v1::SearchTrial& t : search->trials()) {
    EXPECT_EQ(t.job_ids_size(), t.rung() + 1) << "trial " << t.index();
    EXPECT_NE(t.status(), "failed") << "trial " << t.index();
    rows += t.job_ids_size();
  }
  const std::map<std::string, int> names = JobsByName();
  EXPECT_EQ(static_cast<int>(names.size()), rows);
  for (const auto& [name, count] : names) EXPECT_EQ(count, 1) << name << " duplicated";
}

TEST_F(SearchManagerTest, AnotherUsersSearchIsNotFound) {
  auto submitted = searches_->Submit(RandomSpec(2, 1), "", "", "alice");
  ASSERT_TRUE(submitted.ok()) << submitted.status();
  const int64_t id = submitted->search_id();
  EXPECT_TRUE(absl::IsNotFound(searches_->Get(Caller::User("bob"), id).status()));
  EXPECT_TRUE(absl::IsNotFound(searches_->Cancel(Caller::User("bob"), id).status()));
  EXPECT_TRUE(searches_->List(Caller::User("bob"))->empty());
  ASSERT_EQ(searches_->List(Caller::User("alice"))->size(), 1u);
  auto search = searches_->Get(Caller::User("alice"), id);
  ASSERT_TRUE(search.ok());
  EXPECT_EQ(search->owner(), "alice");
  auto job = jobs_->jobs().GetJob(Caller::Admin(), search->trials(0).job_ids(0));
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->owner(), "alice") << "trials run as the search's owner";
}

TEST_F(SearchManagerTest, MaxConcurrentAboveTheClustersSlotsIsRefusedNamingTheKey) {
  slots_ = 4;
  auto refused = searches_->Submit(RandomSpec(8, 5), "", "");
  EXPECT_TRUE(absl::IsInvalidArgument(refused.status())) << refused.status();
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr("search.max_concurrent"));
  v1::SearchSpec two_ranks = RandomSpec(8, 3);
  two_ranks.mutable_base()->set_world_size(2);  // 3 x 2 slots > 4
  EXPECT_TRUE(absl::IsInvalidArgument(searches_->Submit(two_ranks, "", "").status()));
  EXPECT_TRUE(searches_->List(Caller::Admin())->empty()) << "nothing stored";
  EXPECT_TRUE(searches_->Submit(RandomSpec(8, 4), "", "").ok());
}

TEST_F(SearchManagerTest, InvalidSpecIsRefusedAndARepeatedRequestIdReturnsTheFirst) {
  v1::SearchSpec bad = RandomSpec(2, 1);
  bad.mutable_search()->set_metric("val_top1");
  EXPECT_TRUE(absl::IsInvalidArgument(searches_->Submit(bad, "", "").status()));
  auto first = searches_->Submit(RandomSpec(2, 1), "", "same");
  auto second = searches_->Submit(RandomSpec(2, 1), "", "same");
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_EQ(first->search_id(), second->search_id());
  EXPECT_EQ(searches_->List(Caller::Admin())->size(), 1u);
  EXPECT_EQ(JobsByName().size(), 1u);
}

}  // namespace
}  // namespace tessera
