// SlurmCommandClient: the SlurmClient that runs Slurm's own commands.
//
//   Submit  sbatch --parsable            (the script on stdin)
//   Query   squeue -h --states=all -j ID,ID,... -o %i|%t|%r|%N
//   Cancel  scancel [--signal=SIG] ID
//
// Each command is an argv run through RunCommand (common/process/): no
// shell, a fixed environment (PATH, LANG=C, HOME/USER/LOGNAME, SLURM_CONF
// when set, and Options::env), a timeout, and stderr in every error.
// Job ids and signal names are checked before they reach an argv, so that
// nothing from outside can turn into an option.
//
// Which account sbatch runs as: with SbatchRequest::run_as set, Submit
// switches to that account (setgroups, setgid, setuid) before exec, as
// Determined's HPC launcher submits as the job's owner: Slurm then runs the
// job as that user and charges its account and fair share. This needs the
// coordinator to run as root (CanSubmitAsOtherUsers()); otherwise Submit
// fails with PermissionDenied and the caller submits as the service account
// (the coordinator's own), recording the owner itself. Query and Cancel
// always run as the coordinator's account: root, or the service account that
// submitted the jobs, may act on them.
//
// sbatch's default --export=ALL passes the command's environment to the job;
// the environment above is all it gets of the coordinator's.
//
// Thread-safety: thread-safe; every call runs its own process and blocks
// until it ends or times out.
#ifndef TESSERA_COORDINATOR_SLURM_SLURM_COMMAND_CLIENT_H_
#define TESSERA_COORDINATOR_SLURM_SLURM_COMMAND_CLIENT_H_

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/process/run_command.h"
#include "coordinator/core/slurm/slurm_client.h"

namespace tessera {

struct SlurmCommandClientOptions {
  // Directory holding sbatch, squeue and scancel.
  std::string bin_dir = "/usr/bin";
  // slurm.conf the commands use (SLURM_CONF); empty: Slurm's default
  // (/etc/slurm/slurm.conf or configless).
  std::string slurm_conf;
  // A command still running after this long is killed and the call fails
  // with DeadlineExceeded (slurmctld answers in milliseconds when healthy).
  absl::Duration timeout = absl::Seconds(30);
  // PATH for the commands and, through sbatch, for the job's batch script.
  std::string path = "/usr/local/bin:/usr/bin:/bin";
  // More environment for the commands, as "NAME=value".
  std::vector<std::string> env;
};

class SlurmCommandClient final : public SlurmClient {
 public:
  explicit SlurmCommandClient(SlurmCommandClientOptions options);

  // Whether Submit can honour SbatchRequest::run_as (the process is root).
  static bool CanSubmitAsOtherUsers();

  absl::StatusOr<std::string> Submit(const SbatchRequest& request) override;
  absl::StatusOr<std::map<std::string, SlurmJobInfo>> Query(
      const std::vector<std::string>& ids) override;
  absl::Status Cancel(const std::string& id,
                      std::optional<std::string> signal = std::nullopt) override;

 private:
  // Runs `tool` (sbatch, squeue, scancel) from bin_dir with `args`.
  absl::StatusOr<CommandResult> Run(const std::string& tool,
                                    const std::vector<std::string>& args,
                                    const std::string& stdin_data,
                                    const std::optional<UnixAccount>& run_as,
                                    const std::string& working_dir) const;

  const SlurmCommandClientOptions options_;
};

// Parses sbatch --parsable output ("1234" or "1234;cluster") into the job id.
absl::StatusOr<std::string> ParseSbatchParsable(const std::string& out);

// Parses squeue -h -o "%i|%t|%r|%N" output, one job per line.
absl::StatusOr<std::map<std::string, SlurmJobInfo>> ParseSqueue(const std::string& out);

}  // namespace tessera

#endif  // TESSERA_COORDINATOR_SLURM_SLURM_COMMAND_CLIENT_H_
