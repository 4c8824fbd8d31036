// tessera-worker: flags -> WorkerOptions, wiring, signals. No logic here.
#include <limits.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/file_io.h"
#include "common/flag_checks.h"
#include "common/grpc_tls.h"
#include "common/retry.h"
#include "common/tls.h"
#include "common/worker_fields.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"
#include "worker/cgroup.h"
#include "worker/credential_file.h"
#include "worker/device_probe.h"
#include "worker/work_dir.h"
#include "worker/worker_agent.h"

namespace {

std::string Hostname() {
  char buf[HOST_NAME_MAX + 1] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "localhost";
  return buf;
}

std::string DefaultTrainerPath() {
  std::error_code ec;
  std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return "tessera-train";
  return (self.parent_path() / "tessera-train").string();
}

// The signals the signal thread takes, blocked in every thread; so this runs
// before anything starts one (gRPC does). Ranks start with an empty mask
// (supervisor.cc).
sigset_t BlockWorkerSignals() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  return signals;
}

// The command line: WorkerOptions, and the flags that main() turns into
// options after parsing.
struct WorkerFlags {
  tessera::WorkerOptions options;
  int64_t grace_ms = 10000;
  bool use_cgroups = true;
  std::string gpus = "auto";
  std::string drain_timeout = "120s";
  std::string join_token_file;
  std::string tls_ca_file;
  std::vector<std::string> data_roots;
  std::vector<std::string> checkpoint_roots;
};

// The defaults that come from this machine.
WorkerFlags DefaultFlags() {
  WorkerFlags flags;
  flags.options.hostname = Hostname();
  flags.options.name = flags.options.hostname;
  flags.options.trainer_path = DefaultTrainerPath();
  return flags;
}

void SetHelpFooter(CLI::App& app) {
  app.footer(
      "Example:\n"
      "  tessera-worker --coordinator 10.0.0.1:50051 --name node07 --cpu-slots 4 "
      "--join-token-file /etc/tessera/join-token\n"
      "  tessera-worker --coordinator 10.0.0.1:50051 --pool gpu-a100 --slurm-job-id "
      "81234 "
      "--drain-timeout 5m ...\n"
      "Keeps retrying while the coordinator is unreachable.\n"
      "SIGTERM or SIGINT: drains, then exits. The worker takes no new ranks, asks its\n"
      "ranks to checkpoint and exit (SIGUSR1), and waits until they have and the\n"
      "coordinator has their exits, at most --drain-timeout; then it stops what is left\n"
      "(SIGTERM, then SIGKILL after --kill-grace-ms). A second SIGTERM stops at once.\n"
      "SIGUSR1 (e.g. Slurm's --signal=USR1@120 before preemption or the time limit):\n"
      "asks the ranks to checkpoint and exit and takes no new ranks, without exiting.\n"
      "Exit codes: 0 stopped, 2 bad flags or start-up error, 3 a worker with\n"
      "--slurm-job-id whose join credential the coordinator refused (revoked).");
}

// The coordinator, this node's name and slots, its directories, the trainer
// and how its ranks are stopped.
void AddNodeFlags(CLI::App& app, WorkerFlags& flags) {
  tessera::WorkerOptions& options = flags.options;
  app.add_option("--coordinator", options.coordinator,
                 "coordinator gRPC address HOST:PORT")
      ->capture_default_str();
  app.add_option("--name", options.name, "worker name, unique in the cluster")
      ->capture_default_str();
  app.add_option("--cpu-slots", options.cpu_slots,
                 "ranks this node runs at once (no GPU)")
      ->capture_default_str()
      ->check(tessera::NumberInRange(1, 4096));
  app.add_option("--work-dir", options.work_dir,
                 "directory for rank logs and credential files; must belong to the "
                 "worker's user and not be writable by group or others (created 0711)")
      ->capture_default_str();
  app.add_option("--state-dir", options.state_dir,
                 "directory where the worker keeps its own credential "
                 "(worker-NAME.credential, 0600); the same rules as --work-dir")
      ->capture_default_str();
  app.add_option("--pass-env", options.pass_env,
                 "name of a variable of the worker's environment that ranks get too "
                 "(repeatable; LANG, LC_ALL and TZ always pass, nothing else does)");
  app.add_option("--trainer", options.trainer_path, "tessera-train executable")
      ->capture_default_str();
  app.add_option("--kill-grace-ms", flags.grace_ms,
                 "time between SIGTERM and SIGKILL for a rank")
      ->capture_default_str()
      ->check(tessera::NumberInRange(int64_t{0}, int64_t{600000}));
  app.add_option("--drain-timeout", flags.drain_timeout,
                 "on SIGTERM, how long the ranks get to checkpoint and exit before the "
                 "worker stops them and exits: seconds or a duration (90s, 5m); 0 stops "
                 "at once")
      ->capture_default_str();
}

// Where the worker sits: its pool, its Slurm allocation, its GPUs.
void AddPlacementFlags(CLI::App& app, WorkerFlags& flags) {
  tessera::WorkerOptions& options = flags.options;
  app.add_option("--pool", options.pool,
                 "worker pool this worker belongs to, sent to the coordinator, e.g. "
                 "--pool slurm-gpu (default: none)");
  if (const char* env = std::getenv("SLURM_JOB_ID"); env != nullptr) {
    options.slurm_job_id = env;
  }
  app.add_option("--slurm-job-id", options.slurm_job_id,
                 "Slurm allocation this worker runs in, sent to the coordinator, e.g. "
                 "--slurm-job-id 81234 (default: $SLURM_JOB_ID when set)")
      ->capture_default_str();
  app.add_option(
         "--gpus", flags.gpus,
         "GPUs to offer: auto (those this worker was given: CUDA_VISIBLE_DEVICES, "
         "else SLURM_STEP_GPUS or SLURM_JOB_GPUS, else every GPU under "
         "/proc/driver/nvidia/gpus), none, or a count N (the first N of those; "
         "more is refused)")
      ->capture_default_str();
}

// How the worker proves itself to the coordinator and checks it, and what its
// ranks run as and may touch.
void AddTrustAndIsolationFlags(CLI::App& app, WorkerFlags& flags) {
  tessera::WorkerOptions& options = flags.options;
  app.add_option("--join-token-file", flags.join_token_file,
                 "file holding the cluster join token (tessera-coordinator token create "
                 "--kind join); default: $TESSERA_JOIN_TOKEN");
  app.add_option("--tls-ca", flags.tls_ca_file,
                 "PEM roots to verify the coordinator's TLS certificate with (operator "
                 "PKI); without it, a join token that carries a certificate pin turns "
                 "TLS on");
  app.add_flag("!--no-cgroups", flags.use_cgroups,
               "do not put each job attempt in its own cgroup v2 group");
  app.add_flag("--allow-root-jobs", options.allow_root_jobs,
               "when running as root, let ranks run as root: jobs whose owner is root "
               "here, and jobs without an owner when --job-user is not set");
  app.add_option("--job-user", options.job_user,
                 "when running as root, the account for jobs without an owner "
                 "(coordinator with --insecure-no-auth), e.g. nobody");
  app.add_option("--data-root", flags.data_roots,
                 "directory that trainer.data_dir must lie under (repeatable; default: "
                 "/usr/share/datasets, /var/lib/tessera/data, /data)");
  app.add_option("--checkpoint-root", flags.checkpoint_roots,
                 "directory that trainer.checkpoint_dir must lie under (repeatable; "
                 "default: /var/lib/tessera/checkpoints, /shared/checkpoints)");
}

// --drain-timeout: whole seconds, or an absl duration; at most a day.
absl::StatusOr<absl::Duration> ParseDrainTimeout(const std::string& text) {
  absl::Duration timeout;
  if (int64_t seconds = 0; absl::SimpleAtoi(text, &seconds) && seconds >= 0) {
    timeout = absl::Seconds(seconds);
  } else if (!absl::ParseDuration(text, &timeout) || timeout < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--drain-timeout must be seconds or a duration such as 90s or 5m, "
                     "got '",
                     text, "'"));
  }
  if (timeout > absl::Hours(24)) {
    return absl::InvalidArgumentError("--drain-timeout is at most 24h");
  }
  return timeout;
}

// The token is secret: never a flag value, which every user can read in
// /proc/PID/cmdline. From the file when one is named, else $TESSERA_JOIN_TOKEN.
absl::Status LoadJoinToken(const std::string& file, tessera::WorkerOptions& options) {
  if (!file.empty()) {
    absl::StatusOr<std::string> text =
        tessera::ReadFile(file, {.max_bytes = 1 << 16, .what = "the join token file"});
    if (!text.ok()) return absl::InvalidArgumentError(text.status().message());
    options.join_token = text->substr(0, text->find('\n'));
    if (options.join_token.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("cannot read a join token from ",
                                                     file, ": its first line is empty"));
    }
  } else if (const char* env = std::getenv("TESSERA_JOIN_TOKEN"); env != nullptr) {
    options.join_token = env;
  }
  return absl::OkStatus();
}

// The GPUs this worker was given (CUDA_VISIBLE_DEVICES, Slurm's, or the
// node's): ranks get only these.
absl::StatusOr<tessera::GpuSet> SelectOfferedGpus(const std::string& flag) {
  absl::StatusOr<tessera::GpuSet> gpus =
      tessera::SelectGpus(flag, tessera::SystemDeviceEnvironment());
  if (!gpus.ok()) return gpus.status();
  if (gpus->ids.size() > static_cast<size_t>(tessera::kMaxWorkerSlots)) {
    return absl::InvalidArgumentError(
        absl::StrCat(gpus->ids.size(), " GPUs, at most ", tessera::kMaxWorkerSlots));
  }
  return gpus;
}

// Logs go to stderr; stdout stays free for output meant for programs. Says
// whom ranks run as and what the worker offers.
void SetUpLogging(const tessera::WorkerOptions& options, const std::string& gpu_source) {
  spdlog::set_default_logger(spdlog::stderr_color_mt("tessera"));
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ worker " + options.name + ": %v");
  if (geteuid() == 0) {
    spdlog::info(
        "ranks run as their job's owner{}{}",
        options.job_user.empty() ? "" : "; jobs without one as " + options.job_user,
        options.allow_root_jobs ? "; root jobs allowed" : "; never as root");
  } else {
    spdlog::info("not running as root: every rank runs as uid {}, whoever submitted it",
                 geteuid());
  }
  if (options.gpu_ids.empty()) {
    spdlog::info("no GPU to offer ({}): {} CPU slots", gpu_source, options.cpu_slots);
  } else {
    spdlog::info("offering GPUs {} ({})", absl::StrJoin(options.gpu_ids, ","),
                 gpu_source);
  }
}

// The trainer, the name and the directories; makes the directories absolute.
absl::Status CheckLocalSetup(tessera::WorkerOptions& options) {
  if (access(options.trainer_path.c_str(), X_OK) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "trainer ", options.trainer_path, " is not an executable file (set --trainer)"));
  }
  if (absl::Status name_ok = tessera::CheckWorkerName(options.name); !name_ok.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", name_ok.message(), " (got '", options.name, "')"));
  }
  // Ranks get the work dir's paths; the worker's cwd is nothing to them.
  options.work_dir = std::filesystem::absolute(options.work_dir).lexically_normal();
  if (absl::StatusOr<tessera::ScopedFd> work = tessera::OpenWorkDir(options.work_dir);
      !work.ok()) {
    return absl::Status(work.status().code(),
                        absl::StrCat(work.status().message(), " (--work-dir)"));
  }
  if (!options.state_dir.empty()) {
    options.state_dir = std::filesystem::absolute(options.state_dir).lexically_normal();
    if (absl::StatusOr<std::string> kept =
            tessera::LoadWorkerCredential(options.state_dir, options.name);
        !kept.ok()) {
      return absl::Status(kept.status().code(),
                          absl::StrCat(kept.status().message(), " (--state-dir)"));
    }
  }
  return absl::OkStatus();
}

// How to talk to the coordinator: --tls-ca, or the certificate pin the join
// token carries. Waits while the coordinator cannot be reached.
absl::StatusOr<tessera::ClientTls> FetchCoordinatorTls(const std::string& coordinator,
                                                       const std::string& tls_ca_file,
                                                       const std::string& pin) {
  // Not up yet (UNAVAILABLE): keep trying, as the agent does, on its default
  // schedule.
  tessera::RealClock clock;
  return tessera::Retry(
      {.initial_delay = absl::Milliseconds(500), .max_delay = absl::Seconds(3)}, clock,
      [&] { return tessera::ResolveClientTls(coordinator, tls_ca_file, pin); },
      [](const absl::Status& error, int, absl::Duration) {
        spdlog::warn("cannot fetch the coordinator's certificate to check its pin: {}",
                     error.ToString());
      });
}

// Hands the TLS settings on to the trainers: the CA file, or the pinned
// certificate written into the work dir.
absl::Status PassTlsToRanks(const tessera::ClientTls& tls, const std::string& tls_ca_file,
                            tessera::WorkerOptions& options) {
  if (!tls.enabled) {
    spdlog::warn(
        "talking to the coordinator in plaintext (no --tls-ca, no pin in the "
        "join token)");
    return absl::OkStatus();
  }
  options.tls_server_name = tls.server_name;
  if (!tls_ca_file.empty()) {
    options.tls_ca_file = std::filesystem::absolute(tls_ca_file).string();
    return absl::OkStatus();
  }
  // The pinned certificate, for the trainers; not secret.
  options.tls_ca_file =
      std::filesystem::absolute(std::filesystem::path(options.work_dir) /
                                "coordinator-cert.pem")
          .string();
  // Ranks run as their submitters' accounts and must read it.
  if (absl::Status written =
          tessera::WriteFileAtomically(options.tls_ca_file, tls.root_pem, {.mode = 0644});
      !written.ok()) {
    return written;
  }
  spdlog::info("coordinator certificate matches the join token's pin {}",
               tls.pinned_fingerprint);
  return absl::OkStatus();
}

std::shared_ptr<grpc::Channel> CoordinatorChannel(const std::string& coordinator,
                                                  const tessera::ClientTls& tls) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 20000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10000);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetMaxReceiveMessageSize(16 * 1024 * 1024);
  return grpc::CreateCustomChannel(coordinator, tessera::ChannelCredentialsFor(tls, args),
                                   args);
}

// A cgroup tree for the ranks, or null (--no-cgroups, or no writable cgroup2).
std::unique_ptr<tessera::CgroupTree> MakeCgroups(bool use_cgroups,
                                                 const std::string& name) {
  if (!use_cgroups) return nullptr;
  absl::StatusOr<std::unique_ptr<tessera::CgroupTree>> tree =
      tessera::CgroupTree::Create(name);
  if (!tree.ok()) {
    spdlog::warn("no writable cgroup2 ({}); stopping jobs relies on process groups only",
                 tree.status().ToString());
    return nullptr;
  }
  spdlog::info("ranks run in cgroups under {}", (*tree)->root());
  return *std::move(tree);
}

// Runs the agent until it stops, with a thread that turns `signals` into
// drains and preemption notices; logs "stopped" before anything is torn down.
// Returns the exit code: 3 when the coordinator refused the join credential
// of a Slurm allocation's worker (the allocation's step then fails and the
// allocation ends), else 0.
int RunAgent(const tessera::WorkerOptions& options,
             std::shared_ptr<grpc::Channel> channel, bool use_cgroups,
             const sigset_t& signals) {
  tessera::PosixLauncher launcher;
  const std::unique_ptr<tessera::CgroupTree> cgroups =
      MakeCgroups(use_cgroups, options.name);
  tessera::WorkerAgent agent(options, channel, &launcher, cgroups.get());
  std::atomic<bool> done = false;
  std::thread signal_thread([&agent, &done, signals] {
    for (int sig = 0; sigwait(&signals, &sig) == 0 && !done.load();) {
      if (sig == SIGUSR1) {
        spdlog::info("received SIGUSR1 (preemption notice)");
        agent.Preempt();
      } else {
        spdlog::info("received {}", sig == SIGINT ? "SIGINT" : "SIGTERM");
        agent.Drain();  // the second one stops at once
      }
    }
  });
  agent.Run();
  // Wake the signal thread, which may still wait (a drain ends by itself).
  done = true;
  pthread_kill(signal_thread.native_handle(), SIGTERM);
  signal_thread.join();
  spdlog::info("stopped");
  return agent.refused() ? 3 : 0;
}

// A start-up error: the reason on stderr and exit code 2.
int StartupError(const absl::Status& status) {
  std::cerr << "tessera-worker: " << status.message() << "\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  const sigset_t signals = BlockWorkerSignals();
  WorkerFlags flags = DefaultFlags();
  CLI::App app{
      "tessera-worker: runs training ranks on this node for a tessera-coordinator"};
  SetHelpFooter(app);
  AddNodeFlags(app, flags);
  AddPlacementFlags(app, flags);
  AddTrustAndIsolationFlags(app, flags);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help exits 0; a bad command line exits 2, like a start-up error.
    return app.exit(e) == 0 ? 0 : 2;
  }
  tessera::WorkerOptions& options = flags.options;
  if (!flags.data_roots.empty()) options.data_roots = flags.data_roots;
  if (!flags.checkpoint_roots.empty()) options.checkpoint_roots = flags.checkpoint_roots;
  options.kill_grace = absl::Milliseconds(flags.grace_ms);
  absl::StatusOr<absl::Duration> drain_timeout = ParseDrainTimeout(flags.drain_timeout);
  if (!drain_timeout.ok()) return StartupError(drain_timeout.status());
  options.drain_timeout = *drain_timeout;
  if (absl::Status token = LoadJoinToken(flags.join_token_file, options); !token.ok()) {
    return StartupError(token);
  }
  absl::StatusOr<tessera::GpuSet> gpus = SelectOfferedGpus(flags.gpus);
  if (!gpus.ok()) return StartupError(gpus.status());
  options.gpu_ids = gpus->ids;

  SetUpLogging(options, gpus->source);
  if (absl::Status local = CheckLocalSetup(options); !local.ok()) {
    return StartupError(local);
  }
  const tessera::TokenParts token_parts = tessera::SplitTokenPin(options.join_token);
  options.join_token = token_parts.token;
  absl::StatusOr<tessera::ClientTls> tls =
      FetchCoordinatorTls(options.coordinator, flags.tls_ca_file, token_parts.pin);
  if (!tls.ok()) return StartupError(tls.status());
  if (absl::Status passed = PassTlsToRanks(*tls, flags.tls_ca_file, options);
      !passed.ok()) {
    return StartupError(passed);
  }
  return RunAgent(options, CoordinatorChannel(options.coordinator, *tls),
                  flags.use_cgroups, signals);
}
