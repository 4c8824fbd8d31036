#include "coordinator/slurm/slurm_command_client.h"

#include <unistd.h>

#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/status_macros.h"

namespace tessera {

namespace {

// A Slurm job id as sbatch prints it: digits only.
bool IsJobId(absl::string_view id) {
  if (id.empty() || id.size() > 20) return false;
  for (char c : id) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

absl::Status CheckJobId(const std::string& id) {
  if (IsJobId(id)) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("not a Slurm job id: '", absl::CHexEscape(id.substr(0, 40)), "'"));
}

// A signal name as scancel takes it: "USR1", "SIGTERM", "15".
bool IsSignalName(absl::string_view s) {
  if (s.empty() || s.size() > 12) return false;
  for (char c : s) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

// Errors of a command that talks to slurmctld: retryable when the controller
// could not be reached, otherwise a refusal.
absl::Status CommandError(const std::string& tool, const CommandResult& r) {
  const std::string err(absl::StripAsciiWhitespace(r.err));
  const std::string what =
      absl::StrCat(tool, " failed (", DescribeExit(r), ")", err.empty() ? "" : ": ", err);
  for (const char* transient :
       {"Unable to contact slurm controller", "Socket timed out", "Connection refused",
        "Zero Bytes were transmitted", "Slurm temporarily unable", "try again later"}) {
    if (absl::StrContains(err, transient)) return absl::UnavailableError(what);
  }
  return absl::FailedPreconditionError(what);
}

}  // namespace

SlurmCommandClient::SlurmCommandClient(SlurmCommandClientOptions options)
    : options_(std::move(options)) {}

bool SlurmCommandClient::CanSubmitAsOtherUsers() { return geteuid() == 0; }

absl::StatusOr<CommandResult> SlurmCommandClient::Run(
    const std::string& tool, const std::vector<std::string>& args,
    const std::string& stdin_data, const std::optional<UnixAccount>& run_as,
    const std::string& working_dir) const {
  CommandSpec spec;
  spec.argv.push_back(absl::StrCat(options_.bin_dir, "/", tool));
  spec.argv.insert(spec.argv.end(), args.begin(), args.end());
  spec.env = {"PATH=" + options_.path, "LANG=C"};
  if (run_as) {
    spec.env.push_back("HOME=" + run_as->home);
    spec.env.push_back("USER=" + run_as->name);
    spec.env.push_back("LOGNAME=" + run_as->name);
  } else if (const char* home = getenv("HOME"); home != nullptr) {
    spec.env.push_back(absl::StrCat("HOME=", home));
  }
  if (!options_.slurm_conf.empty())
    spec.env.push_back("SLURM_CONF=" + options_.slurm_conf);
  spec.env.insert(spec.env.end(), options_.env.begin(), options_.env.end());
  spec.stdin_data = stdin_data;
  spec.working_dir = working_dir.empty() ? "/" : working_dir;
  spec.run_as = run_as;
  spec.timeout = options_.timeout;
  spec.max_output_bytes = 4 << 20;
  return RunCommand(spec);
}

absl::StatusOr<std::string> SlurmCommandClient::Submit(const SbatchRequest& request) {
  if (request.script.empty()) return absl::InvalidArgumentError("sbatch: empty script");
  std::optional<UnixAccount> run_as;
  if (!request.run_as.empty()) {
    if (!CanSubmitAsOtherUsers()) {
      return absl::PermissionDeniedError(absl::StrCat(
          "cannot submit as ", request.run_as, ": the coordinator does not run as root"));
    }
    ASSIGN_OR_RETURN(run_as, LookUpUnixAccount(request.run_as));
  }
  ASSIGN_OR_RETURN(CommandResult r, Run("sbatch", {"--parsable"}, request.script, run_as,
                                        request.working_dir));
  if (!r.succeeded()) return CommandError("sbatch", r);
  return ParseSbatchParsable(r.out);
}

absl::StatusOr<std::map<std::string, SlurmJobInfo>> SlurmCommandClient::Query(
    const std::vector<std::string>& ids) {
  if (ids.empty()) return std::map<std::string, SlurmJobInfo>{};
  for (const std::string& id : ids) RETURN_IF_ERROR(CheckJobId(id));
  ASSIGN_OR_RETURN(CommandResult r,
                   Run("squeue",
                       {"--noheader", "--states=all", "--jobs=" + absl::StrJoin(ids, ","),
                        "--format=%i|%t|%r|%N"},
                       "", std::nullopt, ""));
  if (!r.succeeded()) {
    // squeue refuses a list in which slurmctld knows no id at all: every one
    // of them has ended and been purged.
    if (absl::StrContains(r.err, "Invalid job id specified")) {
      return std::map<std::string, SlurmJobInfo>{};
    }
    return CommandError("squeue", r);
  }
  return ParseSqueue(r.out);
}

absl::Status SlurmCommandClient::Cancel(const std::string& id,
                                        std::optional<std::string> signal) {
  RETURN_IF_ERROR(CheckJobId(id));
  std::vector<std::string> args;
  if (signal) {
    if (!IsSignalName(*signal)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "not a signal name: '", absl::CHexEscape(signal->substr(0, 20)), "'"));
    }
    args.push_back("--signal=" + *signal);
  }
  args.push_back(id);
  ASSIGN_OR_RETURN(CommandResult r, Run("scancel", args, "", std::nullopt, ""));
  if (r.succeeded()) return absl::OkStatus();
  if (absl::StrContains(r.err, "Invalid job id specified") ||
      absl::StrContains(r.err, "already completing or completed")) {
    // Plain scancel of an ended job exits 0; a signal to one fails like this.
    if (!signal) return absl::OkStatus();
    return absl::NotFoundError(absl::StrCat("Slurm job ", id, " has ended"));
  }
  return CommandError("scancel", r);
}

absl::StatusOr<std::string> ParseSbatchParsable(const std::string& out) {
  absl::string_view line = absl::StripAsciiWhitespace(out);
  // The last line holds the id ("1234" or "1234;cluster").
  if (size_t nl = line.rfind('\n'); nl != absl::string_view::npos)
    line = line.substr(nl + 1);
  absl::string_view id = line.substr(0, line.find(';'));
  if (!IsJobId(id)) {
    return absl::InternalError(absl::StrCat("sbatch printed no job id: '",
                                            absl::CHexEscape(out.substr(0, 200)), "'"));
  }
  return std::string(id);
}

absl::StatusOr<std::map<std::string, SlurmJobInfo>> ParseSqueue(const std::string& out) {
  std::map<std::string, SlurmJobInfo> jobs;
  for (absl::string_view line : absl::StrSplit(out, '\n', absl::SkipWhitespace())) {
    std::vector<std::string> f = absl::StrSplit(absl::StripAsciiWhitespace(line), '|');
    if (f.size() != 4 || !IsJobId(f[0])) {
      return absl::InternalError(absl::StrCat(
          "unexpected squeue line: '", absl::CHexEscape(line.substr(0, 200)), "'"));
    }
    SlurmJobInfo info;
    info.id = f[0];
    info.state = f[1];
    info.reason = f[2];
    info.nodes = f[3];
    jobs[info.id] = std::move(info);
  }
  return jobs;
}

}  // namespace tessera
