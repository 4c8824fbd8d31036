#include "cli/sweep_commands.h"

#include <map>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "cli/command_util.h"
#include "cli/follow.h"
#include "cli/sweep_output.h"
#include "common/job_spec.h"
#include "common/sweep_spec.h"

namespace tessera::cli {

namespace v1 = tessera::v1;
using json = nlohmann::ordered_json;

namespace {

std::string SweepSubject(int64_t sweep_id) { return absl::StrCat("sweep ", sweep_id); }

int ReportSweepEnd(const v1::Sweep& sweep, absl::Duration waited, std::ostream& out) {
  const PointCounts counts = CountPoints(sweep);
  const absl::Duration took =
      RunDuration(sweep.created_unix_ms(), sweep.updated_unix_ms(), waited);
  if (sweep.state() == v1::SWEEP_STATE_SUCCEEDED) {
    out << "sweep " << sweep.id() << " SUCCEEDED in " << HumanDuration(took) << ": "
        << counts.succeeded << " of " << counts.total
        << " points succeeded; see tessctl sweep report " << sweep.id() << "\n";
    return kExitOk;
  }
  out << "sweep " << sweep.id() << " " << SweepStateName(sweep.state()) << " after "
      << HumanDuration(took);
  if (!sweep.reason().empty()) out << ": " << Sanitize(sweep.reason());
  out << " (" << counts.succeeded << " of " << counts.total << " points succeeded)\n";
  return kExitFailed;
}

// The point whose progress the status line shows: the first one running.
const v1::SweepPoint* RunningPoint(const v1::Sweep& sweep) {
  for (const v1::SweepPoint& p : sweep.points()) {
    if (p.job_id() != 0 &&
        (p.state() == v1::JOB_STATE_RUNNING || p.state() == v1::JOB_STATE_SCHEDULED)) {
      return &p;
    }
  }
  return nullptr;
}

// What `sweep follow` prints between polls: a line per point whose job or
// state changed, and a status line with the progress of the first running
// point.
class SweepFollower : public FollowTarget<v1::Sweep> {
 public:
  SweepFollower(int64_t sweep_id, CoordinatorClient& client, std::ostream& err)
      : sweep_id_(sweep_id), client_(client), err_(err) {}

  absl::StatusOr<v1::Sweep> Poll() override { return client_.GetSweep(sweep_id_); }

  void PrintChanges(const v1::Sweep& sweep, absl::Duration elapsed,
                    FollowScreen& screen) override {
    for (const v1::SweepPoint& p : sweep.points()) {
      if (p.job_id() == 0) continue;
      const std::pair<int64_t, v1::JobState> now_at(p.job_id(), p.state());
      auto it = printed_.find(p.index());
      if (it != printed_.end() && it->second == now_at) continue;
      printed_[p.index()] = now_at;
      screen.PrintEvent(elapsed, absl::StrCat(DescribePoint(p), ": job ", p.job_id(), " ",
                                              JobStateName(p.state())));
    }
  }

  bool Ended(const v1::Sweep& sweep) const override { return IsTerminal(sweep.state()); }

  // The points done so far, then the running point's progress when its job
  // can be read, else the counts of running and waiting points.
  std::string StatusLine(const v1::Sweep& sweep, absl::Duration elapsed) override {
    const PointCounts counts = CountPoints(sweep);
    const std::string summary = absl::StrCat(
        "sweep ", sweep.id(), ": ", counts.done(), "/", counts.total, " done",
        counts.failed > 0 ? absl::StrCat(", ", counts.failed, " failed") : "");
    const v1::SweepPoint* running = RunningPoint(sweep);
    absl::StatusOr<std::string> progress = absl::NotFoundError("no running point");
    if (running != nullptr) {
      progress = progress_.Line(client_, running->job_id(), elapsed,
                                absl::StrCat(summary, ", point ", running->index(),
                                             " job ", running->job_id()));
    }
    if (progress.ok()) return *std::move(progress);
    return absl::StrCat(ElapsedPrefix(elapsed), summary, ", ", counts.running,
                        " running, ", counts.waiting, " waiting");
  }

  int ReportEnd(const v1::Sweep& sweep, absl::Duration elapsed,
                std::ostream& out) override {
    return ReportSweepEnd(sweep, elapsed, out);
  }

  int ReportPollError(const absl::Status& status) override {
    return ReportRpcError(status, client_, SweepSubject(sweep_id_), err_);
  }

 private:
  const int64_t sweep_id_;
  CoordinatorClient& client_;
  std::ostream& err_;
  // index -> (job id, state) last printed.
  std::map<int32_t, std::pair<int64_t, v1::JobState>> printed_;
  JobProgress progress_;  // of the point the status line shows
};

}  // namespace

int RunSweepSubmit(const SweepSubmitOptions& options, CoordinatorClient& client,
                   std::ostream& out, std::ostream& err) {
  std::optional<std::string> yaml =
      ReadSpecWithOverrides(options.spec_path, options.overrides, err);
  if (!yaml.has_value()) return kExitUsage;
  absl::StatusOr<v1::SweepSpec> spec = ParseAndValidateSweepSpec(*yaml, SpecLimits{});
  if (!spec.ok()) {
    err << "tessctl: invalid sweep spec " << options.spec_path << ": "
        << spec.status().message() << "\n";
    return kExitUsage;
  }

  v1::SubmitSweepRequest request;
  request.set_spec_yaml(*yaml);
  *request.mutable_spec() = *spec;
  request.set_client_request_id(NewRequestId());
  absl::StatusOr<v1::SubmitSweepResponse> response =
      CallWithRetries([&] { return client.SubmitSweep(request); }, options.max_attempts,
                      options.initial_backoff, "submit", err);
  if (!response.ok()) return ReportRpcError(response.status(), client, std::nullopt, err);

  int64_t points = response->points();
  if (points <= 0) {
    // The coordinator did not say; the local expansion is the same grid.
    absl::StatusOr<std::vector<SweepJob>> jobs = ExpandSweep(*spec, SpecLimits{});
    if (jobs.ok()) points = static_cast<int64_t>(jobs->size());
  }
  out << "submitted sweep " << response->sweep_id() << " (" << spec->name()
      << "): " << points << (points == 1 ? " point" : " points") << "\n"
      << response->sweep_id() << "\n";
  if (!options.follow) return kExitOk;
  out.flush();
  SweepFollowOptions follow = options.follow_options;
  follow.sweep_id = response->sweep_id();
  return RunSweepFollow(follow, client, out, err);
}

int RunSweepFollow(const SweepFollowOptions& options, CoordinatorClient& client,
                   std::ostream& out, std::ostream& err) {
  SweepFollower follower(options.sweep_id, client, err);
  return FollowUntilEnd(options, follower, out);
}

int RunSweepList(const ListOptions& options, CoordinatorClient& client, std::ostream& out,
                 std::ostream& err) {
  absl::StatusOr<std::vector<v1::Sweep>> sweeps = client.ListSweeps();
  if (!sweeps.ok()) return ReportRpcError(sweeps.status(), client, std::nullopt, err);
  switch (options.format) {
    case OutputFormat::kJson: {
      json array = json::array();
      for (const v1::Sweep& s : *sweeps) array.push_back(SweepToJson(s, false));
      PrintJson(array, out);
      break;
    }
    case OutputFormat::kCsv:
      out << FormatSweepsCsv(*sweeps);
      break;
    case OutputFormat::kTable:
      out << FormatSweepsTable(*sweeps, NowContext());
      break;
  }
  return kExitOk;
}

int RunSweepStatus(const SweepIdOptions& options, CoordinatorClient& client,
                   std::ostream& out, std::ostream& err) {
  absl::StatusOr<v1::Sweep> sweep = client.GetSweep(options.sweep_id);
  if (!sweep.ok()) {
    return ReportRpcError(sweep.status(), client, SweepSubject(options.sweep_id), err);
  }
  switch (options.format) {
    case OutputFormat::kJson:
      PrintJson(SweepToJson(*sweep, true), out);
      break;
    case OutputFormat::kCsv:
      out << FormatSweepPointsCsv(*sweep);
      break;
    case OutputFormat::kTable:
      out << FormatSweepStatus(*sweep, NowContext());
      break;
  }
  return kExitOk;
}

int RunSweepReport(const SweepIdOptions& options, CoordinatorClient& client,
                   std::ostream& out, std::ostream& err) {
  absl::StatusOr<v1::SweepReport> report = client.GetSweepReport(options.sweep_id);
  if (!report.ok()) {
    return ReportRpcError(report.status(), client, SweepSubject(options.sweep_id), err);
  }
  switch (options.format) {
    case OutputFormat::kJson:
      PrintJson(SweepReportToJson(*report), out);
      break;
    case OutputFormat::kCsv:
      out << FormatSweepReportCsv(*report);
      break;
    case OutputFormat::kTable:
      out << FormatSweepReportTable(*report);
      break;
  }
  return kExitOk;
}

int RunSweepCancel(const SweepIdOptions& options, CoordinatorClient& client,
                   std::ostream& out, std::ostream& err) {
  absl::StatusOr<v1::SweepState> state = client.CancelSweep(options.sweep_id);
  if (absl::IsFailedPrecondition(state.status())) {
    err << "tessctl: " << state.status().message() << "\n";
    return kExitFailed;
  }
  if (!state.ok()) {
    return ReportRpcError(state.status(), client, SweepSubject(options.sweep_id), err);
  }
  out << "sweep " << options.sweep_id << " " << SweepStateName(*state) << "\n";
  return kExitOk;
}

}  // namespace tessera::cli
