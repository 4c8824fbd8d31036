#include "cli/commands.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "cli/command_util.h"
#include "cli/progress.h"
#include "cli/rank_memory.h"
#include "common/job_spec.h"

namespace tessera::cli {

namespace v1 = tessera::v1;
using json = nlohmann::ordered_json;

namespace {

std::string JobSubject(int64_t job_id) { return absl::StrCat("job ", job_id); }

bool RejectCsv(OutputFormat format, absl::string_view command, std::ostream& err) {
  if (format != OutputFormat::kCsv) return false;
  err << "tessctl: " << command << " supports -o table|json, not csv\n";
  return true;
}

// Final test accuracy of a succeeded job: the ranks' reported results, else the
// newest stored "test_accuracy" metric.
std::optional<double> FinalAccuracy(const v1::Job& job, CoordinatorClient& client) {
  double sum = 0;
  int count = 0;
  for (const v1::RankStatus& rank : job.ranks()) {
    if (rank.has_result()) {
      sum += rank.test_accuracy();
      ++count;
    }
  }
  if (count > 0) return sum / count;
  absl::StatusOr<std::vector<v1::MetricPoint>> points =
      FetchMetrics(client, job.id(), -1, kTestAccuracyMetric);
  if (!points.ok()) return std::nullopt;
  return LatestStepMean(*points, kTestAccuracyMetric);
}

absl::Duration JobDuration(const v1::Job& job, absl::Duration fallback) {
  if (job.created_unix_ms() > 0 && job.updated_unix_ms() >= job.created_unix_ms()) {
    return absl::Milliseconds(job.updated_unix_ms() - job.created_unix_ms());
  }
  return fallback;
}

// The split FinalAccuracy measured: an evaluation's own (as its result names
// it, else as its spec asks), the test split otherwise.
std::string FinalSplit(const v1::Job& job) {
  if (job.spec().kind() != "eval") return "test";
  for (const v1::RankStatus& rank : job.ranks()) {
    if (rank.has_eval() && !rank.eval().split().empty()) return rank.eval().split();
  }
  const std::string& asked = job.spec().trainer().eval_split();
  return asked.empty() ? "test" : asked;
}

int ReportTerminal(const v1::Job& job, absl::Duration waited, CoordinatorClient& client,
                   std::ostream& out) {
  const absl::Duration took = JobDuration(job, waited);
  if (job.state() == v1::JOB_STATE_SUCCEEDED) {
    out << "job " << job.id() << " SUCCEEDED in " << HumanDuration(took);
    if (std::optional<double> accuracy = FinalAccuracy(job, client)) {
      out << ": " << FinalSplit(job) << " accuracy " << FormatPercent(*accuracy);
    }
    out << "\n";
    return kExitOk;
  }
  out << "job " << job.id() << " " << JobStateName(job.state()) << " after "
      << HumanDuration(took);
  if (!job.reason().empty()) out << ": " << job.reason();
  out << "\n";
  return kExitFailed;
}

}  // namespace

int RunSubmit(const SubmitOptions& options, CoordinatorClient& client, std::ostream& out,
              std::ostream& err) {
  std::optional<std::string> yaml =
      ReadSpecWithOverrides(options.spec_path, options.overrides, err);
  if (!yaml.has_value()) return kExitUsage;
  absl::StatusOr<v1::JobSpec> spec = ParseAndValidateJobSpec(*yaml, SpecLimits{});
  if (!spec.ok()) {
    err << "tessctl: invalid spec " << options.spec_path << ": "
        << spec.status().message() << "\n";
    return kExitUsage;
  }

  v1::SubmitJobRequest request;
  request.set_spec_yaml(*yaml);
  *request.mutable_spec() = *spec;
  request.set_client_request_id(NewRequestId());

  absl::StatusOr<int64_t> job_id =
      CallWithRetries([&] { return client.SubmitJob(request); }, options.max_attempts,
                      options.initial_backoff, "submit", err);
  if (!job_id.ok()) return ReportRpcError(job_id.status(), client, std::nullopt, err);

  out << "submitted job " << *job_id << " (" << spec->name() << ")\n" << *job_id << "\n";
  if (!options.follow) return kExitOk;
  out.flush();
  WaitOptions wait = options.follow_options;
  wait.job_id = *job_id;
  return RunWait(wait, client, out, err);
}

int RunJobs(const JobsOptions& options, CoordinatorClient& client, std::ostream& out,
            std::ostream& err) {
  v1::ListJobsRequest request;
  if (!options.state.empty()) {
    absl::StatusOr<v1::JobState> state = ParseJobState(options.state);
    if (!state.ok()) {
      err << "tessctl: --state: " << state.status().message() << "\n";
      return kExitUsage;
    }
    request.set_state(*state);
  }
  if (options.limit < 0) {
    err << "tessctl: --limit must not be negative, got " << options.limit << "\n";
    return kExitUsage;
  }
  request.set_limit(options.limit);
  request.set_sweep_id(options.sweep_id);
  request.set_before_id(options.before_id);
  request.set_owner(options.owner);
  absl::StatusOr<v1::ListJobsResponse> page = client.ListJobs(request);
  if (!page.ok()) return ReportRpcError(page.status(), client, std::nullopt, err);
  absl::StatusOr<std::vector<v1::Job>> jobs =
      std::vector<v1::Job>(page->jobs().begin(), page->jobs().end());
  // A coordinator that predates the filters returns every job; apply them here
  // too (a no-op when the coordinator did).
  std::erase_if(*jobs, [&](const v1::Job& job) {
    return (request.state() != v1::JOB_STATE_UNSPECIFIED &&
            job.state() != request.state()) ||
           (request.sweep_id() != 0 && job.sweep_id() != request.sweep_id());
  });
  if (request.limit() > 0 && jobs->size() > static_cast<size_t>(request.limit())) {
    jobs->resize(static_cast<size_t>(request.limit()));
  }
  switch (options.format) {
    case OutputFormat::kJson: {
      json array = json::array();
      for (const v1::Job& job : *jobs) array.push_back(JobToJson(job, false));
      PrintJson(array, out);
      break;
    }
    case OutputFormat::kCsv:
      out << FormatJobsCsv(*jobs);
      break;
    case OutputFormat::kTable:
      out << FormatJobsTable(*jobs, NowContext());
      break;
  }
  if (page->next_before_id() != 0) {
    err << "tessctl: more jobs: tessctl jobs --before " << page->next_before_id() << "\n";
  }
  return kExitOk;
}

int RunStatus(const StatusOptions& options, CoordinatorClient& client, std::ostream& out,
              std::ostream& err) {
  if (RejectCsv(options.format, "status", err)) return kExitUsage;
  absl::StatusOr<v1::Job> job = client.GetJob(options.job_id);
  if (!job.ok())
    return ReportRpcError(job.status(), client, JobSubject(options.job_id), err);
  if (options.format == OutputFormat::kJson) {
    PrintJson(JobToJson(*job), out);
  } else {
    out << FormatJobStatus(*job, NowContext(), FetchRankMemory(client, *job));
  }
  return kExitOk;
}

int RunWorkers(const ListOptions& options, CoordinatorClient& client, std::ostream& out,
               std::ostream& err) {
  absl::StatusOr<std::vector<v1::Worker>> workers = client.ListWorkers();
  if (!workers.ok()) return ReportRpcError(workers.status(), client, std::nullopt, err);
  switch (options.format) {
    case OutputFormat::kJson: {
      json array = json::array();
      for (const v1::Worker& w : *workers) array.push_back(WorkerToJson(w));
      PrintJson(array, out);
      break;
    }
    case OutputFormat::kCsv:
      out << FormatWorkersCsv(*workers);
      break;
    case OutputFormat::kTable:
      out << FormatWorkersTable(*workers, NowContext());
      break;
  }
  return kExitOk;
}

int RunDrain(const DrainOptions& options, CoordinatorClient& client, std::ostream& out,
             std::ostream& err) {
  absl::StatusOr<v1::Worker> worker = client.DrainWorker(
      options.worker, static_cast<int64_t>(options.timeout_s * 1000), options.undrain);
  if (!worker.ok()) return ReportRpcError(worker.status(), client, std::nullopt, err);
  if (options.undrain) {
    out << "worker " << worker->name() << " takes new ranks again\n";
  } else if (worker->drained()) {
    out << "worker " << worker->name() << " is drained: no rank runs there\n";
  } else {
    out << "worker " << worker->name() << " is draining: " << worker->slots_used()
        << " slot(s) in use; their ranks checkpoint and their jobs move elsewhere "
           "(watch with `tessctl workers`)\n";
  }
  return kExitOk;
}

int RunShare(const ListOptions& options, CoordinatorClient& client, std::ostream& out,
             std::ostream& err) {
  absl::StatusOr<std::vector<v1::UserShare>> users = client.GetShare();
  if (!users.ok()) return ReportRpcError(users.status(), client, std::nullopt, err);
  switch (options.format) {
    case OutputFormat::kJson: {
      json array = json::array();
      for (const v1::UserShare& u : *users) array.push_back(UserShareToJson(u));
      PrintJson(array, out);
      break;
    }
    case OutputFormat::kCsv:
      out << FormatShareCsv(*users);
      break;
    case OutputFormat::kTable:
      out << FormatShareTable(*users);
      break;
  }
  return kExitOk;
}

int RunWait(const WaitOptions& options, CoordinatorClient& client, std::ostream& out,
            std::ostream& err) {
  const absl::Time start = absl::Now();
  const absl::Time deadline = options.timeout > absl::ZeroDuration()
                                  ? start + options.timeout
                                  : absl::InfiniteFuture();
  absl::Time next_progress = start;
  int failures = 0;
  ProgressTracker tracker;
  std::optional<v1::JobState> state;
  // A live line is on screen: end it before printing anything else.
  bool drawn = false;
  auto end_line = [&] {
    if (drawn) out << "\n";
    drawn = false;
  };

  while (true) {
    absl::StatusOr<v1::Job> job = client.GetJob(options.job_id);
    if (job.ok()) {
      failures = 0;
      state = job->state();
      if (IsTerminal(job->state())) {
        end_line();
        return ReportTerminal(*job, absl::Now() - start, client, out);
      }
      if (options.progress && (options.live || absl::Now() >= next_progress)) {
        absl::StatusOr<std::vector<v1::MetricPoint>> points =
            FetchMetrics(client, options.job_id, tracker.FetchAfter(), "");
        // Without new points the line still shows the state and elapsed time.
        if (points.ok()) {
          tracker.Update(job->attempt(), job->spec().world_size(), *points, absl::Now());
        }
        const std::string line = FormatProgress(tracker.Info(*job, absl::Now() - start));
        if (options.live) {
          out << RedrawLine(line, options.columns) << std::flush;
          drawn = true;
        } else {
          out << line << std::endl;
        }
        next_progress = absl::Now() + options.progress_interval;
      }
    } else if (IsRetryable(job.status()) && ++failures < options.max_poll_failures) {
      // The coordinator may be restarting; keep polling.
    } else {
      end_line();
      return ReportRpcError(job.status(), client, JobSubject(options.job_id), err);
    }

    const absl::Time now = absl::Now();
    if (now >= deadline) {
      end_line();
      err << "tessctl: timed out after " << absl::FormatDuration(options.timeout)
          << " waiting for job " << options.job_id;
      if (state) err << " (" << JobStateName(*state) << ")";
      err << "\n";
      return kExitTimeout;
    }
    absl::SleepFor(std::min(options.poll_interval, deadline - now));
  }
}

int RunCancel(const CancelOptions& options, CoordinatorClient& client, std::ostream& out,
              std::ostream& err) {
  absl::StatusOr<v1::JobState> state = client.CancelJob(options.job_id);
  if (absl::IsFailedPrecondition(state.status())) {
    err << "tessctl: " << state.status().message() << "\n";
    return kExitFailed;
  }
  if (!state.ok())
    return ReportRpcError(state.status(), client, JobSubject(options.job_id), err);
  out << "job " << options.job_id << " " << JobStateName(*state) << "\n";
  return kExitOk;
}

int RunLogs(const LogsOptions& options, CoordinatorClient& client, std::ostream& out,
            std::ostream& err) {
  v1::GetLogsRequest request;
  request.set_job_id(options.job_id);
  request.set_rank(options.rank);
  request.set_attempt(options.attempt);
  int failures = 0;
  while (true) {
    absl::StatusOr<v1::GetLogsResponse> chunk = client.GetLogs(request);
    if (!chunk.ok()) {
      if (options.follow && IsRetryable(chunk.status()) && ++failures < 10) {
        absl::SleepFor(options.poll_interval);
        continue;
      }
      return ReportRpcError(chunk.status(), client, JobSubject(options.job_id), err);
    }
    failures = 0;
    out << chunk->data();
    out.flush();
    // Pin the attempt once known, so a restart does not switch logs mid-stream.
    request.set_attempt(chunk->attempt());
    request.set_offset(chunk->next_offset());
    if (!chunk->data().empty()) continue;  // more may be ready at once
    if (!options.follow || chunk->complete()) return kExitOk;
    absl::SleepFor(options.poll_interval);
  }
}

int RunMetrics(const MetricsOptions& options, CoordinatorClient& client,
               std::ostream& out, std::ostream& err) {
  // Asking for the job first turns an unknown id into "not found" rather than an
  // empty listing.
  absl::StatusOr<v1::Job> job = client.GetJob(options.job_id);
  if (!job.ok())
    return ReportRpcError(job.status(), client, JobSubject(options.job_id), err);
  absl::StatusOr<std::vector<v1::MetricPoint>> points =
      FetchMetrics(client, options.job_id, -1, options.name);
  if (!points.ok())
    return ReportRpcError(points.status(), client, JobSubject(options.job_id), err);
  switch (options.format) {
    case OutputFormat::kJson: {
      json array = json::array();
      for (const v1::MetricPoint& p : *points) array.push_back(MetricPointToJson(p));
      PrintJson(array, out);
      break;
    }
    case OutputFormat::kCsv:
      out << FormatMetricsCsv(*points);
      break;
    case OutputFormat::kTable:
      out << FormatMetricsTable(*points, NowContext());
      break;
  }
  return kExitOk;
}

}  // namespace tessera::cli
