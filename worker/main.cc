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
#include <fstream>
#include <iostream>
#include <string>
#include <thread>

#include "CLI/CLI.hpp"
#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/grpc_tls.h"
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

}  // namespace

int main(int argc, char** argv) {
  // Blocked in every thread, and so before anything starts one (gRPC does);
  // the signal thread takes them. Ranks start with an empty mask (supervisor.cc).
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  tessera::WorkerOptions options;
  options.hostname = Hostname();
  options.name = options.hostname;
  options.trainer_path = DefaultTrainerPath();
  int64_t grace_ms = 10000;
  bool use_cgroups = true;
  std::string gpus_flag = "auto";

  CLI::App app{
      "tessera-worker: runs training ranks on this node for a tessera-coordinator"};
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
      "asks the ranks to checkpoint and exit and takes no new ranks, without exiting.");
  app.add_option("--coordinator", options.coordinator,
                 "coordinator gRPC address HOST:PORT")
      ->capture_default_str();
  app.add_option("--name", options.name, "worker name, unique in the cluster")
      ->capture_default_str();
  app.add_option("--cpu-slots", options.cpu_slots,
                 "ranks this node runs at once (no GPU)")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
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
  app.add_option("--kill-grace-ms", grace_ms,
                 "time between SIGTERM and SIGKILL for a rank")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{600000}));
  std::string drain_timeout = "120s";
  app.add_option("--drain-timeout", drain_timeout,
                 "on SIGTERM, how long the ranks get to checkpoint and exit before the "
                 "worker stops them and exits: seconds or a duration (90s, 5m); 0 stops "
                 "at once")
      ->capture_default_str();
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
         "--gpus", gpus_flag,
         "GPUs to offer: auto (those this worker was given: CUDA_VISIBLE_DEVICES, "
         "else SLURM_STEP_GPUS or SLURM_JOB_GPUS, else every GPU under "
         "/proc/driver/nvidia/gpus), none, or a count N (the first N of those; "
         "more is refused)")
      ->capture_default_str();
  std::string join_token_file;
  app.add_option("--join-token-file", join_token_file,
                 "file holding the cluster join token (tessera-coordinator token create "
                 "--kind join); default: $TESSERA_JOIN_TOKEN");
  std::string tls_ca_file;
  app.add_option("--tls-ca", tls_ca_file,
                 "PEM roots to verify the coordinator's TLS certificate with (operator "
                 "PKI); without it, a join token that carries a certificate pin turns "
                 "TLS on");
  app.add_flag("!--no-cgroups", use_cgroups,
               "do not put each job attempt in its own cgroup v2 group");
  app.add_flag("--allow-root-jobs", options.allow_root_jobs,
               "when running as root, let ranks run as root: jobs whose owner is root "
               "here, and jobs without an owner when --job-user is not set");
  app.add_option("--job-user", options.job_user,
                 "when running as root, the account for jobs without an owner "
                 "(coordinator with --insecure-no-auth), e.g. nobody");
  std::vector<std::string> data_roots;
  std::vector<std::string> checkpoint_roots;
  app.add_option("--data-root", data_roots,
                 "directory that trainer.data_dir must lie under (repeatable; default: "
                 "/usr/share/datasets, /var/lib/tessera/data, /data)");
  app.add_option("--checkpoint-root", checkpoint_roots,
                 "directory that trainer.checkpoint_dir must lie under (repeatable; "
                 "default: /var/lib/tessera/checkpoints, /shared/checkpoints)");
  CLI11_PARSE(app, argc, argv);
  if (!data_roots.empty()) options.data_roots = data_roots;
  if (!checkpoint_roots.empty()) options.checkpoint_roots = checkpoint_roots;
  options.kill_grace = absl::Milliseconds(grace_ms);
  if (int64_t seconds = 0; absl::SimpleAtoi(drain_timeout, &seconds) && seconds >= 0) {
    options.drain_timeout = absl::Seconds(seconds);
  } else if (!absl::ParseDuration(drain_timeout, &options.drain_timeout) ||
             options.drain_timeout < absl::ZeroDuration()) {
    std::cerr << "tessera-worker: --drain-timeout must be seconds or a duration such as "
                 "90s or 5m, got '"
              << drain_timeout << "'\n";
    return 2;
  }
  if (options.drain_timeout > absl::Hours(24)) {
    std::cerr << "tessera-worker: --drain-timeout is at most 24h\n";
    return 2;
  }
  // The token is secret: never a flag value, which every user can read in
  // /proc/PID/cmdline.
  if (!join_token_file.empty()) {
    std::ifstream in(join_token_file);
    std::getline(in, options.join_token);
    if (options.join_token.empty()) {
      std::cerr << "tessera-worker: cannot read a join token from " << join_token_file
                << "\n";
      return 2;
    }
  } else if (const char* env = std::getenv("TESSERA_JOIN_TOKEN"); env != nullptr) {
    options.join_token = env;
  }
  // The GPUs this worker was given (CUDA_VISIBLE_DEVICES, Slurm's, or the
  // node's): ranks get only these.
  absl::StatusOr<tessera::GpuSet> gpus =
      tessera::SelectGpus(gpus_flag, tessera::SystemDeviceEnvironment());
  if (!gpus.ok()) {
    std::cerr << "tessera-worker: " << gpus.status().message() << "\n";
    return 2;
  }
  if (gpus->ids.size() > static_cast<size_t>(tessera::kMaxWorkerSlots)) {
    std::cerr << "tessera-worker: " << gpus->ids.size() << " GPUs, at most "
              << tessera::kMaxWorkerSlots << "\n";
    return 2;
  }
  options.gpu_ids = gpus->ids;

  // Logs go to stderr; stdout stays free for output meant for programs.
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
    spdlog::info("no GPU to offer ({}): {} CPU slots", gpus->source, options.cpu_slots);
  } else {
    spdlog::info("offering GPUs {} ({})", absl::StrJoin(options.gpu_ids, ","),
                 gpus->source);
  }
  if (access(options.trainer_path.c_str(), X_OK) != 0) {
    std::cerr << "tessera-worker: trainer " << options.trainer_path
              << " is not an executable file (set --trainer)\n";
    return 2;
  }
  if (absl::Status name_ok = tessera::CheckWorkerName(options.name); !name_ok.ok()) {
    std::cerr << "tessera-worker: --" << name_ok.message() << " (got '" << options.name
              << "')\n";
    return 2;
  }
  // Ranks get the work dir's paths; the worker's cwd is nothing to them.
  options.work_dir = std::filesystem::absolute(options.work_dir).lexically_normal();
  if (absl::StatusOr<tessera::ScopedFd> work = tessera::OpenWorkDir(options.work_dir);
      !work.ok()) {
    std::cerr << "tessera-worker: " << work.status().message() << " (--work-dir)\n";
    return 2;
  }
  if (!options.state_dir.empty()) {
    options.state_dir = std::filesystem::absolute(options.state_dir).lexically_normal();
    if (absl::StatusOr<std::string> kept =
            tessera::LoadWorkerCredential(options.state_dir, options.name);
        !kept.ok()) {
      std::cerr << "tessera-worker: " << kept.status().message() << " (--state-dir)\n";
      return 2;
    }
  }

  // TLS: --tls-ca, or the certificate pin the join token carries.
  tessera::TokenParts token_parts = tessera::SplitTokenPin(options.join_token);
  options.join_token = token_parts.token;
  absl::StatusOr<tessera::ClientTls> tls;
  for (absl::Duration backoff = absl::Milliseconds(500);;
       backoff = std::min(2 * backoff, absl::Seconds(3))) {
    tls = tessera::ResolveClientTls(options.coordinator, tls_ca_file, token_parts.pin);
    if (!absl::IsUnavailable(tls.status())) break;
    // Not up yet: keep trying, as the agent does.
    spdlog::warn("cannot fetch the coordinator's certificate to check its pin: {}",
                 tls.status().ToString());
    absl::SleepFor(backoff);
  }
  if (!tls.ok()) {
    std::cerr << "tessera-worker: " << tls.status().message() << "\n";
    return 2;
  }
  if (tls->enabled) {
    options.tls_server_name = tls->server_name;
    if (!tls_ca_file.empty()) {
      options.tls_ca_file = std::filesystem::absolute(tls_ca_file).string();
    } else {
      // The pinned certificate, for the trainers; not secret.
      options.tls_ca_file =
          std::filesystem::absolute(std::filesystem::path(options.work_dir) /
                                    "coordinator-cert.pem")
              .string();
      const std::string tmp = options.tls_ca_file + ".tmp";
      std::ofstream(tmp, std::ios::trunc) << tls->root_pem;
      // Ranks run as their submitters' accounts and must read it.
      if (::chmod(tmp.c_str(), 0644) != 0 ||
          std::rename(tmp.c_str(), options.tls_ca_file.c_str()) != 0) {
        std::cerr << "tessera-worker: cannot write " << options.tls_ca_file << "\n";
        return 2;
      }
      spdlog::info("coordinator certificate matches the join token's pin {}",
                   tls->pinned_fingerprint);
    }
  } else {
    spdlog::warn(
        "talking to the coordinator in plaintext (no --tls-ca, no pin in the "
        "join token)");
  }

  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 20000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10000);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetMaxReceiveMessageSize(16 * 1024 * 1024);
  auto channel = grpc::CreateCustomChannel(
      options.coordinator, tessera::ChannelCredentialsFor(*tls, args), args);
  tessera::PosixLauncher launcher;
  std::unique_ptr<tessera::CgroupTree> cgroups;
  if (use_cgroups) {
    absl::StatusOr<std::unique_ptr<tessera::CgroupTree>> tree =
        tessera::CgroupTree::Create(options.name);
    if (tree.ok()) {
      cgroups = std::move(*tree);
      spdlog::info("ranks run in cgroups under {}", cgroups->root());
    } else {
      spdlog::warn(
          "no writable cgroup2 ({}); stopping jobs relies on process groups only",
          tree.status().ToString());
    }
  }
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
  return 0;
}
