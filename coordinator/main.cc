// tessera-coordinator: flags -> Options, wiring, signals. No logic here.
#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/process/unix_account.h"
#include "common/service_notify.h"
#include "coordinator/coordinator_server.h"
#include "coordinator/core/auth.h"
#include "coordinator/core/slurm_pool_config.h"
#include "coordinator/core/slurm_pool_manager.h"
#include "coordinator/core/tls_identity.h"
#include "coordinator/slurm/slurm_cli.h"
#include "coordinator/store/sqlite_store.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"
#include "web/assets.h"

namespace {

// Whether Unix account `user` is a member of group `group` (primary or
// supplementary). False when either does not exist. Called from the RPC
// threads at once: the lookups are the reentrant ones.
bool UserInGroup(const std::string& user, const std::string& group) {
  absl::StatusOr<gid_t> want = tessera::LookUpGroupId(group);
  if (!want.ok()) return false;
  absl::StatusOr<tessera::UnixAccount> account = tessera::LookUpUnixAccount(user);
  return account.ok() && account->InGroup(*want);
}

// The Slurm pools: their client over sbatch/squeue/scancel and the manager
// the JobManager ticks. Each allocation gets a join token of its own, written
// to a 0600 file in `credential_dir` owned by the account the allocation runs
// as (never in the script or an argv).
absl::StatusOr<std::unique_ptr<tessera::SlurmPoolManager>> StartSlurmPools(
    std::vector<tessera::SlurmPoolConfig> pools,
    const tessera::CoordinatorOptions& options, int port, const std::string& slurm_conf,
    std::string address, const std::string& credential_dir, bool tls_self_signed,
    std::unique_ptr<tessera::SlurmCli>* cli) {
  std::error_code ec;
  std::filesystem::create_directories(credential_dir, ec);
  if (ec || chmod(credential_dir.c_str(), 0711) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("--slurm-credential-dir ", credential_dir, ": cannot create it (",
                     ec ? ec.message() : std::string(std::strerror(errno)), ")"));
  }
  if (address.empty()) {
    std::string host = tessera::HostOfAddress(options.listen);
    if (host.empty() || host == "0.0.0.0" || host == "::" || host == "[::]") {
      char name[256] = {};
      gethostname(name, sizeof(name) - 1);
      host = name;
    }
    address = absl::StrCat(host, ":", port);
  }
  tessera::SlurmCliOptions cli_options;
  cli_options.slurm_conf = slurm_conf;
  *cli = std::make_unique<tessera::SlurmCli>(cli_options);
  auto opened = tessera::SqliteStore::Open(options.db_path);  // for the tokens
  if (!opened.ok()) return opened.status();
  std::shared_ptr<tessera::Store> store = *std::move(opened);
  static const tessera::RealClock clock;
  std::string pin;
  if (tls_self_signed) {
    auto identity = tessera::LoadOrCreateSelfSignedIdentity(
        *store,
        {tessera::HostOfAddress(options.listen), tessera::HostOfAddress(options.http)});
    if (!identity.ok()) return identity.status();
    auto fingerprint = tessera::CertificateFingerprint(identity->cert_pem);
    if (!fingerprint.ok()) return fingerprint.status();
    pin = *fingerprint;
  }
  // Credential file -> its token's id, for the revocation once the
  // allocation has ended.
  struct Issued {
    absl::Mutex mu;
    std::map<std::string, int64_t> ids ABSL_GUARDED_BY(mu);
  };
  auto issued = std::make_shared<Issued>();
  auto write_credential = [store, credential_dir, pin, issued](
                              const tessera::SlurmSubmitDecision& decision,
                              const std::string& run_as) -> absl::StatusOr<std::string> {
    const std::string name =
        absl::StrCat("slurm-", decision.pool, "-job", decision.job_id);
    absl::StatusOr<std::string> token =
        tessera::CreateToken(*store, clock, tessera::kJoinToken, name);
    if (!token.ok()) return token.status();
    absl::StatusOr<int64_t> token_id = tessera::TokenIdOf(*token);
    if (!token_id.ok()) return token_id.status();
    if (!pin.empty()) *token = tessera::AddPinToToken(*token, pin);
    const std::string path = absl::StrCat(credential_dir, "/", name, "-",
                                          absl::ToUnixMillis(absl::Now()), ".token");
    const int fd =
        open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot write ", path, ": ", std::strerror(errno)));
    }
    const std::string line = *token + "\n";
    bool ok = write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size());
    if (ok && !run_as.empty()) {
      absl::StatusOr<tessera::UnixAccount> owner = tessera::LookUpUnixAccount(run_as);
      ok = owner.ok() && fchown(fd, owner->uid, owner->gid) == 0;
    }
    close(fd);
    if (!ok) {
      unlink(path.c_str());
      (void)store->RevokeToken(*token_id);
      return absl::FailedPreconditionError(
          absl::StrCat("cannot write the join credential ", path, " for ",
                       run_as.empty() ? std::string("the service account") : run_as));
    }
    absl::MutexLock lock(&issued->mu);
    issued->ids[path] = *token_id;
    return path;
  };
  auto revoke_credential = [store, issued](const std::string& path) {
    std::optional<int64_t> id;
    {
      absl::MutexLock lock(&issued->mu);
      if (auto it = issued->ids.find(path); it != issued->ids.end()) {
        id = it->second;
        issued->ids.erase(it);
      }
    }
    if (id.has_value()) {
      if (absl::Status s = store->RevokeToken(*id); !s.ok()) {
        spdlog::warn("cannot revoke the join credential of {}: {}", path, s.ToString());
      }
    }
    unlink(path.c_str());
  };
  tessera::SlurmPoolManagerOptions manager_options;
  manager_options.coordinator_address = address;
  manager_options.can_submit_as_owner = tessera::SlurmCli::CanSubmitAsOtherUsers();
  spdlog::info("Slurm pools: {}; workers in allocations dial {}", pools.size(), address);
  return std::make_unique<tessera::SlurmPoolManager>(
      std::move(pools), cli->get(), &clock, std::move(write_credential), manager_options,
      std::move(revoke_credential));
}

}  // namespace

int main(int argc, char** argv) {
  // The database holds the credential signing key and TLS private key: every
  // file this process creates is for its own account only.
  umask(077);
  tessera::CoordinatorOptions options;
  options.http = "127.0.0.1:8080";
  std::string port_file;
  std::string http_port_file;
  int64_t heartbeat_ms = 1000;
  int64_t dead_after_ms = 15000;
  int64_t suspect_after_ms = 3000;
  int64_t rendezvous_timeout_ms = 300000;
  int64_t trainer_lease_ms = 90000;

  CLI::App app{"tessera-coordinator: schedules data-parallel training jobs onto workers"};
  app.footer(
      "Example:\n"
      "  tessera-coordinator --listen 0.0.0.0:50051 --http 127.0.0.1:8080 --db "
      "/var/lib/tessera/tessera.db\n"
      "Stops cleanly on SIGTERM or SIGINT.");
  app.add_option("--listen", options.listen,
                 "gRPC listen address HOST:PORT (port 0: any free port)")
      ->capture_default_str();
  app.add_option("--http", options.http, "dashboard/API listen address HOST:PORT")
      ->capture_default_str();
  app.add_option("--db", options.db_path, "SQLite database file")->capture_default_str();
  app.add_option(
         "--db-max-bytes", options.db_max_bytes,
         "cap on the database size; past it writes fail as on a full disk (0: none)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--port-file", port_file,
                 "write the bound gRPC port to this file once serving");
  app.add_option("--http-port-file", http_port_file,
                 "write the bound HTTP port to this file once serving");
  app.add_option("--http-max-streams", options.http_max_streams,
                 "live dashboard streams (open pages) served at once")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  // Listener limits (docs/security.md, "Listeners under abuse").
  tessera::HttpLimits& http_limits = options.http_limits;
  app.add_option("--http-max-connections", http_limits.max_connections,
                 "HTTP connections open at once; more are closed when accepted")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 16));
  app.add_option("--http-max-connections-per-ip", http_limits.max_connections_per_ip,
                 "HTTP connections open at once from one client address (0: no limit)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 16));
  int64_t http_request_timeout_ms =
      absl::ToInt64Milliseconds(http_limits.request_read_timeout);
  app.add_option("--http-request-timeout-ms", http_request_timeout_ms,
                 "time a client has to send a whole request (head and body) from the "
                 "connection's start or its previous response; then it is disconnected")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{100}, int64_t{600000}));
  app.add_option("--http-max-header-count", http_limits.max_header_count,
                 "header fields in one HTTP request; more get 431")
      ->capture_default_str()
      ->check(CLI::Range(8, 10000));
  app.add_option("--http-max-queued-requests", http_limits.max_queued_requests,
                 "HTTP requests waiting for a thread; more get 503 at once")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 16));
  int64_t grpc_memory_mb = options.grpc_memory_bytes >> 20;
  app.add_option("--grpc-memory-mb", grpc_memory_mb,
                 "memory gRPC may use for its buffers; past it calls fail with "
                 "RESOURCE_EXHAUSTED")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{32}, int64_t{1} << 20));
  app.add_option("--grpc-max-threads", options.grpc_max_threads,
                 "threads gRPC may run synchronous handlers on")
      ->capture_default_str()
      ->check(CLI::Range(4, 4096));
  app.add_option("--grpc-max-concurrent-streams", options.grpc_max_concurrent_streams,
                 "gRPC calls open at once on one client connection")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--max-world-size", options.manager.spec_limits.max_world_size,
                 "largest world size accepted at submit")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--heartbeat-interval-ms", heartbeat_ms, "worker heartbeat interval")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{50}, int64_t{60000}));
  app.add_option("--worker-dead-after-ms", dead_after_ms,
                 "a worker silent this long is declared dead: its ranks count as lost")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{100}, int64_t{3600000}));
  app.add_option("--worker-suspect-after-ms", suspect_after_ms,
                 "a worker silent this long gets no new ranks")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{50}, int64_t{3600000}));
  app.add_option("--rendezvous-timeout-ms", rendezvous_timeout_ms,
                 "an attempt whose ranks have not all joined by then fails")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{100}, int64_t{86400000}));
  app.add_option(
         "--trainer-lease-ms", trainer_lease_ms,
         "trainer lease: a rank that cannot reach the coordinator for this long stops "
         "itself, so a coordinator down for longer stops running jobs (they restart "
         "from their checkpoints when allowed); a job whose ranks were lost with a "
         "partitioned worker restarts only once they are confirmed stopped or about "
         "1.1x this long after their last renewal")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1000}, int64_t{86400000}));
  std::string tls_cert_file;
  std::string tls_key_file;
  bool tls_self_signed = false;
  CLI::Option* tls_cert_opt = app.add_option(
      "--tls-cert", tls_cert_file,
      "PEM certificate (chain) for TLS on the gRPC and HTTP listeners; needs --tls-key");
  CLI::Option* tls_key_opt =
      app.add_option("--tls-key", tls_key_file, "PEM private key of --tls-cert");
  tls_cert_opt->needs(tls_key_opt);
  tls_key_opt->needs(tls_cert_opt);
  app.add_flag("--tls-self-signed", tls_self_signed,
               "TLS with a self-signed certificate made on first start and kept in --db; "
               "join tokens created with this flag carry its SHA-256 for workers to pin")
      ->excludes(tls_cert_opt);
  std::string admin_group;
  app.add_option("--admin-group", admin_group,
                 "Unix group whose members' user tokens act as admins (see and act on "
                 "every user's jobs); tokens made with 'token create --admin' always do");
  tessera::UserLimits& user_limits = options.manager.user_limits;
  tessera::JobLimits& job_limits = options.manager.job_limits;
  app.add_option("--max-queued-jobs", user_limits.max_queued_jobs,
                 "jobs one user may have queued at once (0: no limit; admins exempt)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 20));
  app.add_option("--max-running-ranks", user_limits.max_running_ranks,
                 "ranks one user may have placed at once (0: no limit; admins exempt)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 20));
  app.add_option("--max-slot-share", user_limits.max_slot_share,
                 "share of the cluster's slots one user may hold while another user's "
                 "job waits (1: no limit; admins exempt)")
      ->capture_default_str()
      ->check(CLI::Range(0.01, 1.0));
  app.add_option("--max-user-priority", user_limits.max_priority,
                 "highest job priority a non-admin may submit")
      ->capture_default_str();
  app.add_option("--max-metric-rows", job_limits.max_metric_rows,
                 "metric rows one job may store (0: no limit)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--max-log-bytes", job_limits.max_log_bytes,
                 "log bytes one job may store, all ranks together (0: no limit)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--max-metric-names", job_limits.max_metric_names,
                 "distinct metric names one job may store (0: no limit)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 20));
  bool no_fair_share = false;
  app.add_flag("--no-fair-share", no_fair_share,
               "order equal-priority jobs by age alone (first come, first served) "
               "instead of by each owner's recent usage");
  int64_t usage_half_life_s = absl::ToInt64Seconds(options.manager.usage_half_life);
  app.add_option("--usage-half-life-s", usage_half_life_s,
                 "fair share: a user's usage this old counts half when ordering "
                 "equal-priority jobs")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{365} * 86400));
  // The watchdog over running attempts and drains (docs/robustness.md).
  tessera::WatchdogOptions& watchdog = options.manager.watchdog;
  double rank_silent_after_s = absl::ToDoubleSeconds(watchdog.rank_silent_after);
  double stall_after_min_s = absl::ToDoubleSeconds(watchdog.stall_after_min);
  double straggler_window_s = absl::ToDoubleSeconds(watchdog.straggler_window);
  double progress_interval_s =
      absl::ToDoubleSeconds(options.manager.progress_report_interval);
  double drain_timeout_s = absl::ToDoubleSeconds(options.manager.drain_timeout);
  bool no_watchdog = false;
  app.add_flag("--no-watchdog", no_watchdog,
               "never end an attempt for an unresponsive or stalled rank (stragglers "
               "are still flagged); a job's spec may turn it on or off with "
               "watchdog.enabled");
  app.add_option("--rank-silent-after", rank_silent_after_s,
                 "seconds: a running rank that sent no progress report this long is "
                 "unresponsive (e.g. stopped); its attempt is ended and restarted from "
                 "the checkpoint when max_restarts allows")
      ->capture_default_str()
      ->check(CLI::Range(1.0, 86400.0));
  app.add_option("--stall-after-min", stall_after_min_s,
                 "seconds: an attempt in which no rank moved (step or phase) for "
                 "max(this, --stall-step-factor x the median step time) is stalled; "
                 "the rank not waiting on its peers is named and the attempt ended")
      ->capture_default_str()
      ->check(CLI::Range(1.0, 86400.0));
  app.add_option("--stall-step-factor", watchdog.stall_step_factor,
                 "k in the stall threshold max(--stall-after-min, k x median step time)")
      ->capture_default_str()
      ->check(CLI::Range(1.0, 10000.0));
  app.add_option("--straggler-ratio", watchdog.straggler_ratio,
                 "a rank whose own work per step exceeds this x its peers' median for "
                 "--straggler-window is flagged (not stopped)")
      ->capture_default_str()
      ->check(CLI::Range(1.01, 100.0));
  app.add_option("--straggler-window", straggler_window_s,
                 "seconds a rank must stay above --straggler-ratio to be flagged")
      ->capture_default_str()
      ->check(CLI::Range(1.0, 86400.0));
  app.add_option("--progress-interval", progress_interval_s,
                 "seconds: how often trainers report progress (with their lease renewal)")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 60.0));
  app.add_option("--drain-timeout", drain_timeout_s,
                 "seconds a drained worker's ranks get to checkpoint and leave before "
                 "they are stopped (tessctl drain --timeout overrides it)")
      ->capture_default_str()
      ->check(CLI::Range(1.0, 86400.0));
  // Slurm pools (docs/slurm.md).
  std::string slurm_pools_file;
  std::string slurm_conf;
  std::string slurm_address;
  std::string slurm_credential_dir;
  app.add_option("--slurm-pools", slurm_pools_file,
                 "YAML file of Slurm worker pools: a job the registered workers cannot "
                 "host gets an allocation from the first pool that fits "
                 "(docs/slurm.md)");
  app.add_option("--slurm-conf", slurm_conf,
                 "slurm.conf for sbatch, squeue and scancel (default: Slurm's own)");
  app.add_option("--slurm-coordinator-address", slurm_address,
                 "HOST:PORT the workers in Slurm allocations dial (default: this "
                 "host's name and the gRPC port)");
  app.add_option("--slurm-credential-dir", slurm_credential_dir,
                 "where each allocation's join credential is written (0600, owned by "
                 "the account the allocation runs as); must be on storage the compute "
                 "nodes see (default: slurm/ next to --db)");
  bool no_auth = false;
  app.add_flag("--insecure-no-auth", no_auth,
               "accept every call without a token (anyone who can reach the coordinator "
               "can then run code on its workers); for throwaway local clusters only");

  // Token management works on the database directly, with or without a
  // running coordinator.
  app.fallthrough();
  CLI::App* token_cmd = app.add_subcommand(
      "token",
      "Create, list or revoke API tokens (user: tessctl and the web API; "
      "join: workers)");
  token_cmd->require_subcommand(1);
  std::string token_kind = "user";
  std::string token_name;
  bool token_admin = false;
  int64_t revoke_id = 0;
  CLI::App* token_create = token_cmd->add_subcommand(
      "create", "Create a token and print it once; only its hash is stored");
  token_create->add_option("--kind", token_kind, "user or join")
      ->capture_default_str()
      ->check(CLI::IsMember({"user", "join"}));
  token_create
      ->add_option("--name", token_name, "who the token is for, e.g. alice or rack-3")
      ->required();
  token_create->add_flag("--admin", token_admin,
                         "an admin token: sees and acts on every user's jobs and sweeps, "
                         "and is exempt from the per-user limits");
  token_create->footer(
      "Example:\n"
      "  tessera-coordinator --db /var/lib/tessera/tessera.db token create --kind join "
      "--name rack-3 > /etc/tessera/join-token\n"
      "  export TESSERA_TOKEN=$(tessera-coordinator --db tessera.db token create --name "
      "alice)\n"
      "  tessera-coordinator --db tessera.db token create --name lab-admin --admin");
  CLI::App* token_list =
      token_cmd->add_subcommand("list", "List tokens (never their secrets)");
  CLI::App* token_revoke = token_cmd->add_subcommand("revoke", "Revoke a token by id");
  token_revoke->add_option("id", revoke_id, "token id (the number after tsr_KIND_)")
      ->required();
  CLI11_PARSE(app, argc, argv);
  options.auth.enabled = !no_auth;
  if (token_cmd->parsed()) {
    auto store = tessera::SqliteStore::Open(options.db_path);
    if (!store.ok()) {
      std::cerr << "tessera-coordinator: " << store.status().message() << "\n";
      return 1;
    }
    tessera::RealClock clock;
    if (token_create->parsed()) {
      auto token =
          tessera::CreateToken(**store, clock, token_kind, token_name, token_admin);
      if (!token.ok()) {
        std::cerr << "tessera-coordinator: " << token.status().message() << "\n";
        return 1;
      }
      if (tls_self_signed) {
        // Workers (and tessctl) pin the certificate this token carries.
        auto identity = tessera::LoadOrCreateSelfSignedIdentity(
            **store, {tessera::HostOfAddress(options.listen),
                      tessera::HostOfAddress(options.http)});
        auto pin = identity.ok() ? tessera::CertificateFingerprint(identity->cert_pem)
                                 : absl::StatusOr<std::string>(identity.status());
        if (!pin.ok()) {
          std::cerr << "tessera-coordinator: " << pin.status().message() << "\n";
          return 1;
        }
        *token = tessera::AddPinToToken(*token, *pin);
      }
      std::cout << *token << "\n";
      return 0;
    }
    if (token_list->parsed()) {
      auto tokens = (*store)->ListTokens();
      if (!tokens.ok()) {
        std::cerr << "tessera-coordinator: " << tokens.status().message() << "\n";
        return 1;
      }
      std::cout << "ID\tKIND\tNAME\tADMIN\tCREATED_MS\tREVOKED\n";
      for (const auto& t : *tokens) {
        std::cout << t.id << "\t" << t.kind << "\t" << t.name << "\t"
                  << (t.admin ? "yes" : "no") << "\t" << t.created_unix_ms << "\t"
                  << (t.revoked ? "yes" : "no") << "\n";
      }
      return 0;
    }
    absl::Status revoked = (*store)->RevokeToken(revoke_id);
    if (!revoked.ok()) {
      std::cerr << "tessera-coordinator: " << revoked.message() << "\n";
      return 1;
    }
    std::cout << "token " << revoke_id
              << " revoked; running coordinators refuse it within "
              << "30 s, and end its open event streams within a few seconds\n";
    return 0;
  }
  if (!tls_cert_file.empty()) {
    auto identity = tessera::LoadTlsIdentityFiles(tls_cert_file, tls_key_file);
    if (!identity.ok()) {
      std::cerr << "tessera-coordinator: " << identity.status().message() << "\n";
      return 2;
    }
    options.tls = std::move(*identity);
  }
  options.tls_self_signed = tls_self_signed;
  options.manager.worker_suspect_after = absl::Milliseconds(suspect_after_ms);
  options.manager.rendezvous_timeout = absl::Milliseconds(rendezvous_timeout_ms);
  options.manager.heartbeat_interval = absl::Milliseconds(heartbeat_ms);
  options.manager.worker_dead_after = absl::Milliseconds(dead_after_ms);
  options.manager.trainer_lease = absl::Milliseconds(trainer_lease_ms);
  options.http_limits.request_read_timeout = absl::Milliseconds(http_request_timeout_ms);
  options.grpc_memory_bytes = grpc_memory_mb << 20;
  options.manager.usage_half_life = absl::Seconds(usage_half_life_s);
  options.manager.fair_share = !no_fair_share;
  watchdog.enabled = !no_watchdog;
  watchdog.rank_silent_after = absl::Seconds(rank_silent_after_s);
  watchdog.stall_after_min = absl::Seconds(stall_after_min_s);
  watchdog.straggler_window = absl::Seconds(straggler_window_s);
  options.manager.progress_report_interval = absl::Seconds(progress_interval_s);
  options.manager.drain_timeout = absl::Seconds(drain_timeout_s);
  if (options.manager.progress_report_interval * 3 > watchdog.rank_silent_after) {
    std::cerr << "tessera-coordinator: --rank-silent-after must be at least 3x "
                 "--progress-interval, so that "
                 "one late report does not end an attempt\n";
    return 2;
  }
  if (!admin_group.empty()) {
    if (!tessera::LookUpGroupId(admin_group).ok()) {
      std::cerr << "tessera-coordinator: --admin-group: no group named '" << admin_group
                << "'\n";
      return 2;
    }
    options.auth.is_admin = [admin_group](const std::string& user) {
      return UserInGroup(user, admin_group);
    };
  }

  // Logs go to stderr; stdout stays free for output meant for programs.
  spdlog::set_default_logger(spdlog::stderr_color_mt("tessera"));
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ coordinator: %v");
  // Block the stop signals in every thread; this thread waits for them below.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  tessera::ServiceNotifier notifier;
  options.on_tick = [&notifier] { notifier.Watchdog(); };
  if (notifier.watchdog_interval() < options.monitor_interval) {
    options.monitor_interval = notifier.watchdog_interval();
  }
  // The dashboard, compiled into this binary.
  options.static_files = [](std::string_view path) -> const tessera::StaticFile* {
    // One StaticFile per embedded asset, built on first use.
    static const auto* files = [] {
      auto* map = new std::map<std::string_view, tessera::StaticFile>();
      for (const tessera::web::Asset& a : tessera::web::AllAssets()) {
        (*map)[a.path] = tessera::StaticFile{a.content_type, a.body};
      }
      return map;
    }();
    const tessera::web::Asset* asset = tessera::web::FindAsset(path);
    if (asset == nullptr) return nullptr;
    auto it = files->find(asset->path);
    return it == files->end() ? nullptr : &it->second;
  };
  std::vector<tessera::SlurmPoolConfig> slurm_pools;
  if (!slurm_pools_file.empty()) {
    std::ifstream in(slurm_pools_file);
    std::stringstream text;
    text << in.rdbuf();
    auto pools = in ? tessera::ParseSlurmPools(text.str())
                    : absl::StatusOr<std::vector<tessera::SlurmPoolConfig>>(
                          absl::NotFoundError("cannot read the file"));
    if (!pools.ok()) {
      std::cerr << "tessera-coordinator: --slurm-pools " << slurm_pools_file << ": "
                << pools.status().message() << "\n";
      return 2;
    }
    slurm_pools = *std::move(pools);
  }
  std::unique_ptr<tessera::SlurmCli> slurm_cli;
  std::unique_ptr<tessera::SlurmPoolManager> slurm_manager;
  auto server = tessera::CoordinatorServer::Start(options);
  if (!server.ok()) {
    std::cerr << "tessera-coordinator: " << server.status().message() << "\n";
    return 1;
  }
  if (!slurm_pools.empty()) {
    absl::StatusOr<std::unique_ptr<tessera::SlurmPoolManager>> made = StartSlurmPools(
        slurm_pools, options, (*server)->port(), slurm_conf, slurm_address,
        slurm_credential_dir.empty()
            ? (std::filesystem::path(options.db_path).parent_path() / "slurm").string()
            : slurm_credential_dir,
        tls_self_signed, &slurm_cli);
    if (!made.ok()) {
      std::cerr << "tessera-coordinator: " << made.status().message() << "\n";
      (*server)->Shutdown();
      return 1;
    }
    slurm_manager = *std::move(made);
    (*server)->manager().SetSlurmPools(slurm_manager.get());
  }
  // Written whole, then renamed: a reader never sees a partial number.
  auto write_port = [](const std::string& path, int port) {
    if (path.empty()) return;
    const std::string tmp = path + ".tmp";
    std::ofstream(tmp) << port << "\n";
    std::rename(tmp.c_str(), path.c_str());
  };
  write_port(port_file, (*server)->port());
  write_port(http_port_file, (*server)->http_port());
  notifier.Ready("serving gRPC on port " + std::to_string((*server)->port()));
  int sig = 0;
  sigwait(&stop_signals, &sig);
  spdlog::info("received signal {}; shutting down", sig);
  notifier.Stopping();
  (*server)->Shutdown();
  spdlog::info("stopped");
  return 0;
}
