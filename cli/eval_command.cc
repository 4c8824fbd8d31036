#include "cli/eval_command.h"

#include <algorithm>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cli/command_util.h"
#include "cli/exit_codes.h"
#include "common/job_spec.h"

namespace tessera::cli {
namespace {

// The settings common to both forms, as `--set` overrides; the user's own
// --set last.
void AddCommonOverrides(const EvalOptions& options, std::vector<std::string>& set) {
  set.push_back("kind=eval");
  set.push_back("trainer.eval_only=true");
  set.push_back(absl::StrCat("world_size=", options.world_size));
  if (!options.data_dir.empty()) set.push_back("trainer.data_dir=" + options.data_dir);
  if (!options.split.empty()) set.push_back("trainer.eval_split=" + options.split);
  if (!options.device.empty()) set.push_back("trainer.device=" + options.device);
  set.insert(set.end(), options.overrides.begin(), options.overrides.end());
}

// Every --set names one of kEvalSetKeys: an evaluation's other settings come
// from the job or from the flags.
absl::Status CheckEvalOverrides(const std::vector<std::string>& overrides) {
  for (const std::string& text : overrides) {
    constexpr std::string_view kPrefix = "trainer.";
    const size_t eq = text.find('=');
    const std::string_view key = std::string_view(text).substr(0, eq);
    if (eq != std::string::npos && key.starts_with(kPrefix) &&
        std::find(kEvalSetKeys.begin(), kEvalSetKeys.end(), key.substr(kPrefix.size())) !=
            kEvalSetKeys.end()) {
      continue;
    }
    std::vector<std::string> keys;
    for (const std::string_view k : kEvalSetKeys) {
      keys.push_back(std::string(kPrefix).append(k));
    }
    return absl::InvalidArgumentError(
        absl::StrCat("--set ", text, ": an evaluation takes the data's preprocessing: ",
                     absl::StrJoin(keys, ", "), " (KEY=VALUE, e.g. --set ",
                     "trainer.crop_fraction=1 or --set 'trainer.mean=[0.5,0.5,0.5]')"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> FromFileSpec(const EvalOptions& options) {
  if (options.model.empty() || options.data_dir.empty()) {
    return absl::InvalidArgumentError("--from needs --model and --data");
  }
  if (options.step > 0) {
    return absl::InvalidArgumentError(
        "--step picks a checkpoint of a job, not of --from");
  }
  const std::string name =
      options.name.empty()
          ? absl::StrCat("eval-", std::filesystem::path(options.from).stem().string())
          : options.name;
  std::vector<std::string> set = {"name=" + name, "trainer.model=" + options.model,
                                  "trainer.dataset=" + options.dataset,
                                  "trainer.init_from=" + options.from,
                                  "trainer.init_names=" + options.names};
  if (options.image_size > 0) {
    set.push_back(absl::StrCat("trainer.image_size=", options.image_size));
  }
  AddCommonOverrides(options, set);
  return ApplySpecOverrides("", set);
}

absl::StatusOr<std::string> FromJobSpec(const EvalOptions& options, const v1::Job& job) {
  if (job.spec().trainer().checkpoint_dir().empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job ", job.id(), " wrote no checkpoints (no trainer.checkpoint_dir)"));
  }
  if (job.spec().kind() == "eval") {
    return absl::InvalidArgumentError(absl::StrCat(
        "job ", job.id(), " is an evaluation; evaluate the job it evaluated"));
  }
  std::vector<std::string> set = {
      "name=" + (options.name.empty() ? absl::StrCat(job.name(), "-eval") : options.name),
      "trainer.resume=true", absl::StrCat("trainer.eval_step=", options.step),
      absl::StrCat("eval_of=", job.id()),
      // The spec's own placement and fine-tuning start do not apply.
      "nodes=0", "per_node=0",
      "trainer.init_from=", "trainer.fault=", "trainer.profile_steps="};
  AddCommonOverrides(options, set);
  return ApplySpecOverrides(job.spec_yaml(), set);
}

}  // namespace

absl::StatusOr<std::string> EvalSpecYaml(const EvalOptions& options,
                                         const v1::Job* source) {
  if (options.from.empty() == (source == nullptr)) {
    return absl::InvalidArgumentError(
        "give a job to evaluate its checkpoint, or --from FILE, not both");
  }
  if (absl::Status checked = CheckEvalOverrides(options.overrides); !checked.ok()) {
    return checked;
  }
  return source == nullptr ? FromFileSpec(options) : FromJobSpec(options, *source);
}

int RunEval(const EvalOptions& options, CoordinatorClient& client, std::ostream& out,
            std::ostream& err) {
  std::optional<v1::Job> source;
  if (options.job_id > 0) {
    absl::StatusOr<v1::Job> job = client.GetJob(options.job_id);
    if (!job.ok()) {
      return ReportRpcError(job.status(), client, absl::StrCat("job ", options.job_id),
                            err);
    }
    source = *std::move(job);
  }
  absl::StatusOr<std::string> yaml =
      EvalSpecYaml(options, source.has_value() ? &*source : nullptr);
  if (!yaml.ok()) {
    err << "tessctl eval: " << yaml.status().message() << "\n";
    return kExitUsage;
  }
  absl::StatusOr<v1::JobSpec> spec = ParseAndValidateJobSpec(*yaml, SpecLimits{});
  if (!spec.ok()) {
    err << "tessctl eval: invalid eval spec: " << spec.status().message() << "\n";
    return kExitUsage;
  }
  v1::SubmitJobRequest request;
  request.set_spec_yaml(*yaml);
  *request.mutable_spec() = *spec;
  request.set_client_request_id(NewRequestId());
  absl::StatusOr<int64_t> job_id = CallWithRetries(
      [&] { return client.SubmitJob(request); }, options.submit.max_attempts,
      options.submit.initial_backoff, "submit", err);
  if (!job_id.ok()) return ReportRpcError(job_id.status(), client, std::nullopt, err);
  out << "submitted eval job " << *job_id << " (" << spec->name() << ")\n"
      << *job_id << "\n";
  if (!options.submit.follow) return kExitOk;
  out.flush();
  WaitOptions wait = options.submit.follow_options;
  wait.job_id = *job_id;
  return RunWait(wait, client, out, err);
}

}  // namespace tessera::cli
