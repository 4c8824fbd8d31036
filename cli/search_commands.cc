#include "cli/search_commands.h"

#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "cli/command_util.h"
#include "cli/exit_codes.h"
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
  return kExitOk;
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
  if (best->status() == "running") {
    err << "tessctl: trial " << best->index()
        << " is still training; its newest checkpoint is exported\n";
  }
  ExportOptions export_options = options.export_options;
  export_options.job_id = LatestJob(*best);
  // Export's progress line goes with the diagnostics when stdout carries JSON.
  return RunExport(export_options, client,
                   options.format == OutputFormat::kJson ? err : out, err);
}

}  // namespace tessera::cli
