#include "cli/search_commands.h"

#include <map>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "cli/command_util.h"
#include "cli/exit_codes.h"
#include "cli/follow.h"
#include "cli/search_output.h"
#include "common/job_spec.h"
#include "common/search_spec.h"

namespace tessera::cli {

namespace v1 = tessera::v1;
using json = nlohmann::ordered_json;

namespace {

std::string SearchSubject(int64_t search_id) {
  return absl::StrCat("search ", search_id);
}

// The search, or the exit code after reporting why not.
absl::StatusOr<v1::Search> GetSearchOrReport(int64_t search_id, CoordinatorClient& client,
                                             std::ostream& err, int* exit_code) {
  absl::StatusOr<v1::Search> search = client.GetSearch(search_id);
  if (!search.ok()) {
    *exit_code = ReportRpcError(search.status(), client, SearchSubject(search_id), err);
  }
  return search;
}

// The trial whose progress the status line shows: the first one whose job runs.
const v1::SearchTrial* RunningTrial(const v1::Search& search) {
  for (const v1::SearchTrial& t : search.trials()) {
    if (t.status() == "running" && LatestJob(t) != 0 &&
        (t.state() == v1::JOB_STATE_RUNNING || t.state() == v1::JOB_STATE_SCHEDULED)) {
      return &t;
    }
  }
  return nullptr;
}

// What `search follow` prints between polls: a line per trial whose job, job
// state or status changed, and a status line with the counts, the best trial
// and the progress of the first running trial.
class SearchFollower : public FollowTarget<v1::Search> {
 public:
  SearchFollower(int64_t search_id, CoordinatorClient& client, std::ostream& err)
      : search_id_(search_id), client_(client), err_(err) {}

  absl::StatusOr<v1::Search> Poll() override { return client_.GetSearch(search_id_); }

  void PrintChanges(const v1::Search& search, absl::Duration elapsed,
                    FollowScreen& screen) override {
    for (const v1::SearchTrial& t : search.trials()) {
      if (LatestJob(t) == 0) continue;
      TrialLine now{LatestJob(t), t.state(), t.status(), t.rung()};
      auto it = printed_.find(t.index());
      if (it != printed_.end() && it->second == now) continue;
      const bool promoted = it != printed_.end() && t.rung() > it->second.rung;
      printed_[t.index()] = std::move(now);
      screen.PrintEvent(elapsed, FormatTrialChange(search, t, promoted));
    }
  }

  bool Ended(const v1::Search& search) const override {
    return IsTerminal(search.state());
  }

  std::string StatusLine(const v1::Search& search, absl::Duration elapsed) override {
    const std::string summary = FormatSearchProgress(search);
    const v1::SearchTrial* running = RunningTrial(search);
    if (running != nullptr) {
      const int64_t job = LatestJob(*running);
      absl::StatusOr<std::string> line = progress_.Line(
          client_, job, elapsed,
          absl::StrCat(summary, "; trial ", running->index(), " job ", job));
      if (line.ok()) return *std::move(line);
    }
    return absl::StrCat(ElapsedPrefix(elapsed), summary);
  }

  int ReportEnd(const v1::Search& search, absl::Duration elapsed,
                std::ostream& out) override {
    out << FormatSearchEnd(search, RunDuration(search.created_unix_ms(),
                                               search.updated_unix_ms(), elapsed))
        << "\n";
    return search.state() == v1::SEARCH_STATE_SUCCEEDED ? kExitOk : kExitFailed;
  }

  int ReportPollError(const absl::Status& status) override {
    return ReportRpcError(status, client_, SearchSubject(search_id_), err_);
  }

 private:
  // What a trial's last line showed.
  struct TrialLine {
    int64_t job = 0;
    v1::JobState state = v1::JOB_STATE_UNSPECIFIED;
    std::string status;
    int32_t rung = 0;
    bool operator==(const TrialLine&) const = default;
  };

  const int64_t search_id_;
  CoordinatorClient& client_;
  std::ostream& err_;
  std::map<int32_t, TrialLine> printed_;  // by trial index
  JobProgress progress_;                  // of the trial the status line shows
};

}  // namespace

int RunSearchSubmit(const SearchSubmitOptions& options, CoordinatorClient& client,
                    std::ostream& out, std::ostream& err) {
  std::optional<std::string> yaml =
      ReadSpecWithOverrides(options.spec_path, options.overrides, err);
  if (!yaml.has_value()) return kExitUsage;
  absl::StatusOr<v1::SearchSpec> spec = ParseAndValidateSearchSpec(*yaml, SpecLimits{});
  if (!spec.ok()) {
    err << "tessctl: invalid search spec " << options.spec_path << ": "
        << spec.status().message() << "\n";
    return kExitUsage;
  }
  for (const std::string& warning : SearchSpecWarnings(*spec)) {
    err << "tessctl: warning: " << warning << "\n";
  }

  v1::SubmitSearchRequest request;
  request.set_spec_yaml(*yaml);
  *request.mutable_spec() = *spec;
  request.set_client_request_id(NewRequestId());
  absl::StatusOr<v1::SubmitSearchResponse> response =
      CallWithRetries([&] { return client.SubmitSearch(request); }, options.max_attempts,
                      options.initial_backoff, "submit", err);
  if (!response.ok()) return ReportRpcError(response.status(), client, std::nullopt, err);

  // The coordinator's count, else the same count made here.
  const int32_t trials =
      response->max_trials() > 0 ? response->max_trials() : SearchTrialCount(*spec);
  out << "submitted search " << response->search_id() << " (" << spec->name()
      << "): " << spec->search().method() << ", " << trials
      << (trials == 1 ? " trial" : " trials") << "\n"
      << response->search_id() << "\n";
  if (!options.follow) return kExitOk;
  out.flush();
  SearchFollowOptions follow = options.follow_options;
  follow.search_id = response->search_id();
  return RunSearchFollow(follow, client, out, err);
}

int RunSearchFollow(const SearchFollowOptions& options, CoordinatorClient& client,
                    std::ostream& out, std::ostream& err) {
  SearchFollower follower(options.search_id, client, err);
  return FollowUntilEnd(options, follower, out);
}

int RunSearchList(const ListOptions& options, CoordinatorClient& client,
                  std::ostream& out, std::ostream& err) {
  absl::StatusOr<std::vector<v1::Search>> searches = client.ListSearches();
  if (!searches.ok()) return ReportRpcError(searches.status(), client, std::nullopt, err);
  switch (options.format) {
    case OutputFormat::kJson: {
      json array = json::array();
      for (const v1::Search& s : *searches) array.push_back(SearchToJson(s, false));
      PrintJson(array, out);
      break;
    }
    case OutputFormat::kCsv:
      out << FormatSearchesCsv(*searches);
      break;
    case OutputFormat::kTable:
      out << FormatSearchesTable(*searches, NowContext());
      break;
  }
  return kExitOk;
}

int RunSearchStatus(const SearchIdOptions& options, CoordinatorClient& client,
                    std::ostream& out, std::ostream& err) {
  int code = kExitOk;
  absl::StatusOr<v1::Search> search =
      GetSearchOrReport(options.search_id, client, err, &code);
  if (!search.ok()) return code;
  if (options.format == OutputFormat::kJson) {
    PrintJson(SearchToJson(*search, true), out);
  } else {
    out << FormatSearchStatus(*search, NowContext());
  }
  return kExitOk;
}

int RunSearchReport(const SearchIdOptions& options, CoordinatorClient& client,
                    std::ostream& out, std::ostream& err) {
  int code = kExitOk;
  absl::StatusOr<v1::Search> search =
      GetSearchOrReport(options.search_id, client, err, &code);
  if (!search.ok()) return code;
  switch (options.format) {
    case OutputFormat::kJson:
      PrintJson(SearchReportToJson(*search), out);
      break;
    case OutputFormat::kCsv:
      out << FormatSearchReportCsv(*search);
      break;
    case OutputFormat::kTable:
      out << FormatSearchReportTable(*search);
      break;
  }
  return kExitOk;
}

int RunSearchCancel(const SearchIdOptions& options, CoordinatorClient& client,
                    std::ostream& out, std::ostream& err) {
  absl::StatusOr<v1::SearchState> state = client.CancelSearch(options.search_id);
  if (absl::IsFailedPrecondition(state.status())) {
    err << "tessctl: " << state.status().message() << "\n";
    return kExitFailed;
  }
  if (!state.ok()) {
    return ReportRpcError(state.status(), client, SearchSubject(options.search_id), err);
  }
  out << "search " << options.search_id << " " << SearchStateName(*state) << "\n";
  return kExitOk;
}

namespace {

// For a coordinator that predates SearchTrial.best_job_id: whether the
// trial's newest checkpoint is the model that scored its best, as when its
// latest rung ended with that metric.
bool NewestScoredBest(const v1::SearchTrial& trial) {
  return trial.status() != "running" && !trial.rung_metrics().empty() &&
         trial.rung_metrics_size() == trial.job_ids_size() &&
         trial.rung_metrics(trial.rung_metrics_size() - 1) == trial.best_metric();
}

// `search best --export`: the checkpoint of the step where `best` scored
// its best metric, from that rung's job; a later rung may have scored worse
// or still be training, so the trial's newest checkpoint may be another
// model. The export's progress goes to `out`.
int ExportBestCheckpoint(const SearchBestOptions& options, const v1::SearchTrial& best,
                         CoordinatorClient& client, std::ostream& out,
                         std::ostream& err) {
  const int64_t latest = LatestJob(best);
  const std::string newest =
      absl::StrCat("`tessctl export ", latest, " -o ", options.export_options.out, "`");
  ExportOptions export_options = options.export_options;
  if (best.best_job_id() == 0) {
    if (!NewestScoredBest(best)) {
      err << "tessctl: the coordinator does not say at which step trial " << best.index()
          << " scored best (it predates best_step); " << newest
          << " exports the trial's newest checkpoint\n";
      return kExitFailed;
    }
    export_options.job_id = latest;
    return RunExport(export_options, client, out, err);
  }
  const bool running = best.status() == "running";
  if (running || best.best_job_id() != latest) {
    err << "tessctl: trial " << best.index() << " scored best at rung "
        << best.best_rung() << " (job " << best.best_job_id() << ", step "
        << best.best_step() << ")";
    if (running) {
      err << " and is still training rung " << best.rung();
    } else {
      err << "; its latest rung " << best.rung() << " (job " << latest
          << ") did not score better";
    }
    err << ": exporting the checkpoint of step " << best.best_step() << "\n";
  }
  export_options.job_id = best.best_job_id();
  export_options.step = best.best_step();
  const int code = RunExport(export_options, client, out, err);
  if (code == kExitFailed) {
    err << "tessctl: the checkpoint of step " << best.best_step() << " (job "
        << best.best_job_id() << ", where trial " << best.index()
        << " scored best) was not exported; if it is gone, " << newest
        << " exports the trial's newest checkpoint instead\n";
  }
  return code;
}

}  // namespace

int RunSearchBest(const SearchBestOptions& options, CoordinatorClient& client,
                  std::ostream& out, std::ostream& err) {
  int code = kExitOk;
  absl::StatusOr<v1::Search> search =
      GetSearchOrReport(options.search_id, client, err, &code);
  if (!search.ok()) return code;
  const v1::SearchTrial* best = BestTrial(*search);
  if (best == nullptr) {
    err << "tessctl: search " << search->id() << " (" << SearchStateName(search->state())
        << ") has no best trial yet: no trial "
        << "has reported " << search->spec().search().metric() << "\n";
    return kExitFailed;
  }
  if (options.format == OutputFormat::kJson) {
    PrintJson(SearchTrialToJson(*search, *best), out);
  } else {
    out << FormatBestTrial(*search, *best);
  }
  if (options.export_options.out.empty()) return kExitOk;
  return ExportBestCheckpoint(options, *best, client,
                              options.format == OutputFormat::kJson ? err : out, err);
}

}  // namespace tessera::cli
