// End-to-end search: a real tessera-coordinator, two tessera-worker daemons
// with one CPU slot each and real tessera-train ranks on 127.0.0.1. `tessctl
// search FILE` submits a small ASHA search on synthetic data; once a trial's
// first job has ended and others train, the coordinator is killed and
// restarted on the same database. The search must still end SUCCEEDED with
// every trial it started, one job per (trial, rung), each promoted rung
// resuming its trial's checkpoint and stopping at its rung's length, and the
// best trial the one with the best rung metric (docs/search.md).
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/e2e/cluster_fixture.h"
#include "tests/testing/test_util.h"

namespace tessera {
namespace {

// Per-call deadline for the quick unary RPCs.
constexpr auto kRpcDeadline = std::chrono::seconds(10);

constexpr char kSearchName[] = "e2e-asha";
constexpr int kMaxTrials = 5;
constexpr int kEta = 2;
constexpr int64_t kMaxLength = 16;
// The rungs' lengths in steps: max_length / eta^2, x eta, max_length.
const std::vector<int64_t> kRungSteps = {4, 8, 16};

// ASHA over 5 trials, eta 2, 3 rungs: every trial trains 4 steps, at least 2
// go on to 8 and at least one to 16. The learning rate is searched, so the
// trials' metrics differ.
std::string SearchYaml(const std::string& checkpoint_dir) {
  return absl::StrCat("name: ", kSearchName, R"(
search:
  method: asha
  seed: 5
  metric: val_accuracy
  mode: max
  max_trials: )",
                      kMaxTrials, R"(
  max_concurrent: 2
  max_length: )",
                      kMaxLength, R"(
  parameters:
    lr: {loguniform: [1e-4, 1e-2]}
  asha:
    reduction_factor: )",
                      kEta, R"(
    max_rungs: 3
base:
  world_size: 1
  trainer:
    model: vit-micro
    dataset: synthetic
    device: cpu
    threads: 1
    seed: 3
    batch_size: 16
    train_subset: 320
    test_subset: 64
    val_fraction: 0.2
    metrics_every: 2
    checkpoint_dir: )",
                      checkpoint_dir, "\n");
}

void SetDeadline(grpc::ClientContext& ctx) {
  ctx.set_deadline(std::chrono::system_clock::now() + kRpcDeadline);
}

// (trial, rung) of a search job, from its name "<search>/t<trial>-r<rung>".
std::optional<std::pair<int, int>> TrialAndRung(const std::string& job_name) {
  const std::string prefix = absl::StrCat(kSearchName, "/t");
  if (!absl::StartsWith(job_name, prefix)) return std::nullopt;
  const std::vector<std::string> parts =
      absl::StrSplit(job_name.substr(prefix.size()), "-r");
  std::pair<int, int> out;
  if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &out.first) ||
      !absl::SimpleAtoi(parts[1], &out.second)) {
    return std::nullopt;
  }
  return out;
}

// One line per trial: index, status, rung, jobs and rung metrics.
std::string Progress(const v1::Search& search) {
  std::string out =
      absl::StrCat("search ", search.id(), " ", v1::SearchState_Name(search.state()),
                   " (", search.reason(), "), best trial ", search.best_trial(), "\n");
  for (const v1::SearchTrial& t : search.trials()) {
    absl::StrAppend(&out, "  trial ", t.index(), " ", t.status(), " rung ", t.rung(),
                    " steps ", t.steps(), " jobs [", absl::StrJoin(t.job_ids(), " "),
                    "] metrics [", absl::StrJoin(t.rung_metrics(), " "), "]\n");
  }
  return out;
}

class SearchE2eTest : public ClusterTest {
 protected:
  // `tessctl search FILE`; its last line is the search's id (0 on failure).
  int64_t SubmitSearch(const std::string& yaml) {
    const std::string path = dir_.File("search.yaml");
    std::ofstream(path) << yaml;
    const Ran ran = Tessctl({"search", path});
    EXPECT_EQ(ran.code, 0) << ran.out;
    const std::vector<std::string> lines =
        absl::StrSplit(ran.out, '\n', absl::SkipWhitespace());
    int64_t id = 0;
    if (lines.empty() || !absl::SimpleAtoi(lines.back(), &id)) {
      ADD_FAILURE() << "no search id in: " << ran.out;
    }
    return id;
  }

  v1::Search GetSearch(int64_t id) {
    grpc::ClientContext ctx;
    SetDeadline(ctx);
    v1::GetSearchRequest req;
    req.set_search_id(id);
    v1::GetSearchResponse resp;
    grpc::Status s = jobs_->GetSearch(&ctx, req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp.search();
  }

  // Polls GetSearch until `done` holds or `timeout` runs out (then fails,
  // saying `what` it waited for).
  v1::Search WaitForSearch(int64_t id, const std::function<bool(const v1::Search&)>& done,
                           absl::Duration timeout, const std::string& what) {
    const absl::Time until = absl::Now() + timeout;
    v1::Search search;
    while (absl::Now() < until) {
      search = GetSearch(id);
      if (done(search)) return search;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ADD_FAILURE() << "search " << id << ": " << what << " not within " << timeout << "\n"
                  << Progress(search) << Logs();
    return search;
  }

  // SIGKILLs the coordinator and starts it again on its port and database.
  // The first one's log is kept beside the new one's.
  void RestartCoordinator(int port) {
    coordinator_->Signal(SIGKILL);
    ASSERT_TRUE(coordinator_->Wait(absl::Seconds(10)).has_value());
    std::filesystem::rename(dir_.File("coordinator.log"),
                            dir_.File("coordinator-before-restart.log"));
    ASSERT_NO_FATAL_FAILURE(StartCoordinator(port));
  }

  std::string Logs() {
    const std::string before = dir_.File("coordinator-before-restart.log");
    std::string out;
    if (std::filesystem::exists(before)) {
      out = "--- coordinator before the restart ---\n" + testing::ReadFile(before);
    }
    return out + DumpLogs();
  }

  // Every job of the cluster (all of them the search's), by id.
  std::map<int64_t, v1::Job> AllJobs() {
    grpc::ClientContext ctx;
    SetDeadline(ctx);
    v1::ListJobsRequest req;
    req.set_limit(1000);
    v1::ListJobsResponse resp;
    grpc::Status s = jobs_->ListJobs(&ctx, req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    std::map<int64_t, v1::Job> out;
    for (const v1::Job& j : resp.jobs()) out[j.id()] = j;
    return out;
  }

  // Rank 0's points of metric `name` of the job, in step order.
  std::vector<v1::MetricPoint> Points(int64_t job_id, const std::string& name) {
    grpc::ClientContext ctx;
    SetDeadline(ctx);
    v1::GetMetricsRequest req;
    req.set_job_id(job_id);
    req.set_name(name);
    req.set_limit(100000);
    v1::GetMetricsResponse resp;
    grpc::Status s = jobs_->GetMetrics(&ctx, req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    std::vector<v1::MetricPoint> out;
    for (const v1::MetricPoint& p : resp.points()) {
      if (p.name() == name && p.rank() == 0) out.push_back(p);
    }
    std::sort(out.begin(), out.end(),
              [](const auto& a, const auto& b) { return a.step() < b.step(); });
    return out;
  }

  void CheckTrialJobs(const v1::SearchTrial& trial,
                      const std::map<int64_t, v1::Job>& jobs);
};

// The trial's job of each rung it reached: succeeded, named after (trial,
// rung), rung 0 fresh and later rungs resumed, stopped at its rung's length
// through stop_fraction (the last rung at max_length), its last val_accuracy
// the trial's metric of that rung.
void SearchE2eTest::CheckTrialJobs(const v1::SearchTrial& trial,
                                   const std::map<int64_t, v1::Job>& jobs) {
  const int last = static_cast<int>(kRungSteps.size()) - 1;
  ASSERT_EQ(trial.job_ids_size(), trial.rung() + 1) << "one job per rung reached";
  ASSERT_EQ(trial.rung_metrics_size(), trial.job_ids_size())
      << "every rung's job reported the metric";
  EXPECT_EQ(trial.steps(), kRungSteps[trial.rung()]);
  EXPECT_EQ(trial.status(), trial.rung() == last ? "completed" : "stopped");
  for (int rung = 0; rung <= trial.rung(); ++rung) {
    SCOPED_TRACE(absl::StrCat("rung ", rung, ", job ", trial.job_ids(rung)));
    auto it = jobs.find(trial.job_ids(rung));
    ASSERT_NE(it, jobs.end()) << "the job is not listed";
    const v1::Job& job = it->second;
    EXPECT_EQ(job.state(), v1::JOB_STATE_SUCCEEDED) << job.reason();
    EXPECT_EQ(TrialAndRung(job.name()), std::make_pair(trial.index(), rung))
        << job.name();
    const v1::TrainerConfig& t = job.spec().trainer();
    EXPECT_EQ(t.max_steps(), kMaxLength);
    EXPECT_EQ(t.resume(), rung > 0);
    const double fraction =
        rung < last ? static_cast<double>(kRungSteps[rung]) / kMaxLength : 0.0;
    EXPECT_DOUBLE_EQ(t.stop_fraction(), fraction);

    const std::vector<v1::MetricPoint> val = Points(job.id(), "val_accuracy");
    ASSERT_FALSE(val.empty());
    EXPECT_EQ(val.back().step(), kRungSteps[rung]) << "stopped at its rung's length";
    EXPECT_DOUBLE_EQ(val.back().value(), trial.rung_metrics(rung));
    // A promoted rung goes on from the previous rung's checkpoint.
    const std::vector<v1::MetricPoint> loss = Points(job.id(), "loss");
    ASSERT_FALSE(loss.empty());
    const int64_t resumed_from = rung == 0 ? 0 : kRungSteps[rung - 1];
    EXPECT_GT(loss.front().step(), resumed_from);
    EXPECT_EQ(loss.back().step(), kRungSteps[rung]);
  }
}

// ASHA's end state: in every rung below the last, the top floor(n / eta) of
// its n results (ties: the lower index) were promoted to the next rung.
void ExpectTopTrialsPromoted(const v1::Search& search) {
  for (int rung = 0; rung + 1 < static_cast<int>(kRungSteps.size()); ++rung) {
    std::vector<std::pair<double, int>> results;  // (-metric, trial)
    std::set<int> promoted;
    for (const v1::SearchTrial& t : search.trials()) {
      if (t.rung_metrics_size() > rung) {
        results.push_back({-t.rung_metrics(rung), t.index()});
      }
      if (t.rung() > rung) promoted.insert(t.index());
    }
    std::sort(results.begin(), results.end());
    const size_t top = results.size() / kEta;
    EXPECT_GE(top, 1u) << "rung " << rung << " promoted no trial";
    for (size_t i = 0; i < top; ++i) {
      EXPECT_TRUE(promoted.contains(results[i].second))
          << "trial " << results[i].second << " is in rung " << rung << "'s top " << top
          << " but was not promoted";
    }
  }
}

// The search's best trial holds the best metric of any rung, and its reason
// names it.
void ExpectBestTrialHoldsTheBestMetric(const v1::Search& search) {
  double best = -1;
  for (const v1::SearchTrial& t : search.trials()) {
    for (double m : t.rung_metrics()) best = std::max(best, m);
  }
  ASSERT_GE(search.best_trial(), 0);
  ASSERT_LT(search.best_trial(), search.trials_size());
  const v1::SearchTrial& winner = search.trials(search.best_trial());
  ASSERT_TRUE(winner.has_best_metric());
  EXPECT_DOUBLE_EQ(winner.best_metric(), best);
  EXPECT_TRUE(absl::StrContains(search.reason(),
                                absl::StrCat("best trial ", search.best_trial())))
      << search.reason();
}

// Each trial's best was recorded where its best rung stopped, and the
// checkpoint of every rung it finished is still in its folder (the trainer
// never prunes a rung's stopping checkpoint), so `search best --export`
// finds the one that scored.
void ExpectEveryRungsCheckpointKept(const v1::Search& search, const std::string& root) {
  for (const v1::SearchTrial& t : search.trials()) {
    SCOPED_TRACE(absl::StrCat("trial ", t.index()));
    const std::filesystem::path dir = std::filesystem::path(root) /
                                      absl::StrCat("search-", search.id()) /
                                      absl::StrCat("trial-", t.index());
    for (int r = 0; r < t.rung_metrics_size(); ++r) {
      const std::filesystem::path model =
          dir / absl::StrFormat("step-%012d", kRungSteps[r]) / "model.pt";
      EXPECT_TRUE(std::filesystem::exists(model)) << model;
    }
    if (!t.has_best_metric()) continue;
    ASSERT_LT(t.best_rung(), t.job_ids_size());
    EXPECT_EQ(t.best_job_id(), t.job_ids(t.best_rung()));
    EXPECT_EQ(t.best_step(), kRungSteps[t.best_rung()]);
    EXPECT_DOUBLE_EQ(t.best_metric(), t.rung_metrics(t.best_rung()));
  }
}

// Whether the search runs, some trial's job has ended with its metric and
// another trains: the moment for the restart.
bool SomeEndedWhileOthersRun(const v1::Search& s) {
  bool ended = false, running = false;
  for (const v1::SearchTrial& t : s.trials()) {
    ended = ended || t.rung_metrics_size() > 0;
    running = running || t.status() == "running";
  }
  return s.state() == v1::SEARCH_STATE_RUNNING && ended && running;
}

TEST_F(SearchE2eTest, AnAshaSearchRunsItsTrialsAsJobsAndSurvivesACoordinatorRestart) {
  const int port = testing::PickUnusedPort();
  ASSERT_NO_FATAL_FAILURE(StartCoordinator(port));
  ASSERT_NO_FATAL_FAILURE(StartWorker("w1", port_));
  ASSERT_NO_FATAL_FAILURE(StartWorker("w2", port_));
  ASSERT_NO_FATAL_FAILURE(WaitForWorkers(2));

  const absl::Time start = absl::Now();
  const int64_t id = SubmitSearch(SearchYaml(dir_.File("ckpt")));
  ASSERT_GT(id, 0);

  // Restart once a trial's job has ended with its metric and another trains.
  const v1::Search before = WaitForSearch(id, SomeEndedWhileOthersRun, absl::Minutes(2),
                                          "a trial's job ended while another runs");
  ASSERT_EQ(before.state(), v1::SEARCH_STATE_RUNNING) << Progress(before) << Logs();
  ASSERT_NO_FATAL_FAILURE(RestartCoordinator(port));

  const v1::Search search = WaitForSearch(
      id, [](const v1::Search& s) { return s.state() != v1::SEARCH_STATE_RUNNING; },
      absl::Minutes(4), "the end");
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  ASSERT_EQ(search.state(), v1::SEARCH_STATE_SUCCEEDED) << Progress(search) << Logs();
  SCOPED_TRACE(Progress(search));

  // No trial lost: ASHA starts every one of max_trials, and the trials and
  // jobs from before the restart are the same ones after it.
  ASSERT_EQ(search.trials_size(), kMaxTrials);
  for (int i = 0; i < kMaxTrials; ++i) EXPECT_EQ(search.trials(i).index(), i);
  int jobs_before = 0;
  for (const v1::SearchTrial& b : before.trials()) {
    jobs_before += b.job_ids_size();
    const v1::SearchTrial& a = search.trials(b.index());
    for (int r = 0; r < b.job_ids_size(); ++r) {
      ASSERT_LT(r, a.job_ids_size());
      EXPECT_EQ(a.job_ids(r), b.job_ids(r)) << "trial " << b.index() << " rung " << r;
    }
  }

  // None duplicated: every job of the cluster is one (trial, rung) of the
  // search, each once, and each is the job the search records for it.
  const std::map<int64_t, v1::Job> jobs = AllJobs();
  std::map<std::pair<int, int>, int64_t> by_trial_rung;
  for (const auto& [job_id, job] : jobs) {
    const std::optional<std::pair<int, int>> key = TrialAndRung(job.name());
    ASSERT_TRUE(key.has_value()) << "not a job of the search: " << job.name();
    EXPECT_TRUE(by_trial_rung.emplace(*key, job_id).second)
        << "trial " << key->first << " rung " << key->second << " has two jobs";
  }
  int recorded = 0;
  for (const v1::SearchTrial& t : search.trials()) {
    SCOPED_TRACE(absl::StrCat("trial ", t.index()));
    ASSERT_NO_FATAL_FAILURE(CheckTrialJobs(t, jobs));
    for (int r = 0; r < t.job_ids_size(); ++r) {
      EXPECT_EQ(by_trial_rung[std::make_pair(t.index(), r)], t.job_ids(r));
    }
    recorded += t.job_ids_size();
  }
  EXPECT_EQ(static_cast<int>(jobs.size()), recorded);
  EXPECT_GT(recorded, jobs_before) << "the restarted coordinator started no job";
  ExpectTopTrialsPromoted(search);

  ExpectBestTrialHoldsTheBestMetric(search);
  ExpectEveryRungsCheckpointKept(search, dir_.File("ckpt"));

  std::cout << "FIGURE search_trials=" << search.trials_size() << "\n"
            << "FIGURE search_jobs=" << jobs.size() << "\n"
            << "FIGURE search_seconds=" << seconds << std::endl;
}

}  // namespace
}  // namespace tessera
