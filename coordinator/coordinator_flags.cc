#include "coordinator/coordinator_flags.h"

#include <sys/types.h>

#include <limits>
#include <string>
#include <utility>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "common/byte_size.h"
#include "common/flag_checks.h"
#include "common/process/unix_account.h"
#include "coordinator/core/tls_identity.h"
#include "coordinator/store/db_retention.h"

namespace tessera {
namespace {

// Whether Unix account `user` is a member of group `group` (primary or
// supplementary). False when either does not exist. Called from the RPC
// threads at once: the lookups are the reentrant ones.
bool UserInGroup(const std::string& user, const std::string& group) {
  absl::StatusOr<gid_t> want = LookUpGroupId(group);
  if (!want.ok()) return false;
  absl::StatusOr<UnixAccount> account = LookUpUnixAccount(user);
  return account.ok() && account->InGroup(*want);
}

// Listen addresses, the database, port files and the listeners' limits
// (docs/security.md, "Listeners under abuse").
void AddListenerFlags(CLI::App& app, CoordinatorFlags& flags) {
  CoordinatorOptions& options = flags.options;
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
      ->check(NumberAtLeast<int64_t>(0));
  app.add_option("--db-reserve", flags.db_reserve,
                 "free space kept on the database's disk for job state; below it "
                 "metric rows and log lines are shed: a size (64M, 512k, bytes), a "
                 "share of the file system (5%), 0 for none, or auto (the smaller of "
                 "64M and 5%)")
      ->capture_default_str();
  app.add_option("--port-file", flags.port_file,
                 "write the bound gRPC port to this file once serving");
  app.add_option("--http-port-file", flags.http_port_file,
                 "write the bound HTTP port to this file once serving");
  app.add_option("--http-max-streams", options.http_max_streams,
                 "live dashboard streams (open pages) served at once")
      ->capture_default_str()
      ->check(NumberInRange(1, 1024));
  HttpLimits& http_limits = options.http_limits;
  app.add_option("--http-max-connections", http_limits.max_connections,
                 "HTTP connections open at once; more are closed when accepted")
      ->capture_default_str()
      ->check(NumberInRange(1, 1 << 16));
  app.add_option("--http-max-connections-per-ip", http_limits.max_connections_per_ip,
                 "HTTP connections open at once from one client address (0: no limit)")
      ->capture_default_str()
      ->check(NumberInRange(0, 1 << 16));
  flags.http_request_timeout_ms =
      absl::ToInt64Milliseconds(http_limits.request_read_timeout);
  app.add_option("--http-request-timeout-ms", flags.http_request_timeout_ms,
                 "time a client has to send a whole request (head and body) from the "
                 "connection's start or its previous response; then it is disconnected")
      ->capture_default_str()
      ->check(NumberInRange(int64_t{100}, int64_t{600000}));
  app.add_option("--http-max-header-count", http_limits.max_header_count,
                 "header fields in one HTTP request; more get 431")
      ->capture_default_str()
      ->check(NumberInRange(8, 10000));
  app.add_option("--http-max-queued-requests", http_limits.max_queued_requests,
                 "HTTP requests waiting for a thread; more get 503 at once")
      ->capture_default_str()
      ->check(NumberInRange(0, 1 << 16));
  flags.grpc_memory_mb = options.grpc_memory_bytes >> 20;
  app.add_option("--grpc-memory-mb", flags.grpc_memory_mb,
                 "memory gRPC may use for its buffers; past it calls fail with "
                 "RESOURCE_EXHAUSTED")
      ->capture_default_str()
      ->check(NumberInRange(int64_t{32}, int64_t{1} << 20));
  app.add_option("--grpc-max-threads", options.grpc_max_threads,
                 "threads gRPC may run synchronous handlers on")
      ->capture_default_str()
      ->check(NumberInRange(4, 4096));
  app.add_option("--grpc-max-concurrent-streams", options.grpc_max_concurrent_streams,
                 "gRPC calls open at once on one client connection")
      ->capture_default_str()
      ->check(NumberInRange(1, 1 << 20));
}

// Job size, worker liveness, rendezvous and trainer lease timing.
void AddClusterFlags(CLI::App& app, CoordinatorFlags& flags) {
  app.add_option("--max-world-size", flags.options.manager.spec_limits.max_world_size,
                 "largest world size accepted at submit")
      ->capture_default_str()
      ->check(NumberInRange(1, 1 << 20));
  app.add_option("--heartbeat-interval-ms", flags.heartbeat_ms,
                 "worker heartbeat interval")
      ->capture_default_str()
      ->check(NumberInRange(int64_t{50}, int64_t{60000}));
  app.add_option("--worker-dead-after-ms", flags.dead_after_ms,
                 "a worker silent this long is declared dead: its ranks count as lost")
      ->capture_default_str()
      ->check(NumberInRange(int64_t{100}, int64_t{3600000}));
  app.add_option("--worker-suspect-after-ms", flags.suspect_after_ms,
                 "a worker silent this long gets no new ranks")
      ->capture_default_str()
      ->check(NumberInRange(int64_t{50}, int64_t{3600000}));
  app.add_option("--rendezvous-timeout-ms", flags.rendezvous_timeout_ms,
                 "an attempt whose ranks have not all joined by then fails")
      ->capture_default_str()
      ->check(NumberInRange(int64_t{100}, int64_t{86400000}));
  app.add_option(
         "--trainer-lease-ms", flags.trainer_lease_ms,
         "trainer lease: a rank that cannot reach the coordinator for this long stops "
         "itself, so a coordinator down for longer stops running jobs (they restart "
         "from their checkpoints when allowed); a job whose ranks were lost with a "
         "partitioned worker restarts only once they are confirmed stopped or about "
         "1.1x this long after their last renewal")
      ->capture_default_str()
      ->check(NumberInRange(int64_t{1000}, int64_t{86400000}));
}

// TLS on both listeners, and which users act as admins.
void AddTlsAndAdminFlags(CLI::App& app, CoordinatorFlags& flags) {
  CLI::Option* tls_cert_opt = app.add_option(
      "--tls-cert", flags.tls_cert_file,
      "PEM certificate (chain) for TLS on the gRPC and HTTP listeners; needs --tls-key");
  CLI::Option* tls_key_opt =
      app.add_option("--tls-key", flags.tls_key_file, "PEM private key of --tls-cert");
  tls_cert_opt->needs(tls_key_opt);
  tls_key_opt->needs(tls_cert_opt);
  app.add_flag("--tls-self-signed", flags.tls_self_signed,
               "TLS with a self-signed certificate made on first start and kept in --db; "
               "join tokens created with this flag carry its SHA-256 for workers to pin")
      ->excludes(tls_cert_opt);
  app.add_option("--admin-group", flags.admin_group,
                 "Unix group whose members' user tokens act as admins (see and act on "
                 "every user's jobs); tokens made with 'token create --admin' always do");
}

// Per-user and per-job limits, and the fair-share order of the queue.
void AddLimitFlags(CLI::App& app, CoordinatorFlags& flags) {
  UserLimits& user_limits = flags.options.manager.user_limits;
  JobLimits& job_limits = flags.options.manager.job_limits;
  app.add_option("--max-queued-jobs", user_limits.max_queued_jobs,
                 "jobs one user may have queued at once (0: no limit; admins exempt)")
      ->capture_default_str()
      ->check(NumberInRange(0, 1 << 20));
  app.add_option("--max-running-ranks", user_limits.max_running_ranks,
                 "ranks one user may have placed at once (0: no limit; admins exempt)")
      ->capture_default_str()
      ->check(NumberInRange(0, 1 << 20));
  app.add_option("--max-slot-share", user_limits.max_slot_share,
                 "share of the cluster's slots one user may hold while another user's "
                 "job waits (1: no limit; admins exempt)")
      ->capture_default_str()
      ->check(NumberInRange(0.01, 1.0));
  app.add_option("--max-user-priority", user_limits.max_priority,
                 "highest job priority a non-admin may submit")
      ->capture_default_str()
      ->check(IsNumber<int>());
  app.add_option(
         "--max-memory-per-rank", flags.max_memory_per_rank,
         "largest memory_per_rank a non-admin's job may ask for, e.g. 8GiB; under "
         "a cap every job must set one (0: no cap; admins exempt)")
      ->capture_default_str();
  app.add_option("--max-metric-rows", job_limits.max_metric_rows,
                 "metric rows one job may store (0: no limit)")
      ->capture_default_str()
      ->check(NumberAtLeast<int64_t>(0));
  app.add_option("--max-log-bytes", job_limits.max_log_bytes,
                 "log bytes one job may store, all ranks together (0: no limit)")
      ->capture_default_str()
      ->check(NumberAtLeast<int64_t>(0));
  app.add_option("--max-metric-names", job_limits.max_metric_names,
                 "distinct metric names one job may store (0: no limit)")
      ->capture_default_str()
      ->check(NumberInRange(0, 1 << 20));
  app.add_flag("--no-fair-share", flags.no_fair_share,
               "order equal-priority jobs by age alone (first come, first served) "
               "instead of by each owner's recent usage");
  flags.usage_half_life_s = absl::ToInt64Seconds(flags.options.manager.usage_half_life);
  app.add_option("--usage-half-life-s", flags.usage_half_life_s,
                 "fair share: a user's usage this old counts half when ordering "
                 "equal-priority jobs")
      ->capture_default_str()
      ->check(NumberInRange(int64_t{1}, int64_t{365} * 86400));
}

// The watchdog over running attempts and drains (docs/robustness.md).
void AddWatchdogFlags(CLI::App& app, CoordinatorFlags& flags) {
  const JobManagerOptions& manager = flags.options.manager;
  const RankWatchOptions& watchdog = manager.watchdog;
  flags.rank_silent_after_s = absl::ToDoubleSeconds(watchdog.rank_silent_after);
  flags.stall_after_min_s = absl::ToDoubleSeconds(watchdog.stall_after_min);
  flags.straggler_window_s = absl::ToDoubleSeconds(watchdog.straggler_window);
  flags.progress_interval_s = absl::ToDoubleSeconds(manager.progress_report_interval);
  flags.drain_timeout_s = absl::ToDoubleSeconds(manager.drain_timeout);
  app.add_flag("--no-watchdog", flags.no_watchdog,
               "never end an attempt for an unresponsive or stalled rank (stragglers "
               "are still flagged); a job's spec may turn it on or off with "
               "watchdog.enabled");
  app.add_option("--rank-silent-after", flags.rank_silent_after_s,
                 "seconds: a running rank that sent no progress report this long is "
                 "unresponsive (e.g. stopped); its attempt is ended and restarted from "
                 "the checkpoint when max_restarts allows")
      ->capture_default_str()
      ->check(NumberInRange(1.0, 86400.0));
  app.add_option("--stall-after-min", flags.stall_after_min_s,
                 "seconds: an attempt in which no rank moved (step or phase) for "
                 "max(this, --stall-step-factor x the median step time) is stalled; "
                 "the rank not waiting on its peers is named and the attempt ended")
      ->capture_default_str()
      ->check(NumberInRange(1.0, 86400.0));
  app.add_option("--stall-step-factor", flags.options.manager.watchdog.stall_step_factor,
                 "k in the stall threshold max(--stall-after-min, k x median step time)")
      ->capture_default_str()
      ->check(NumberInRange(1.0, 10000.0));
  app.add_option("--straggler-ratio", flags.options.manager.watchdog.straggler_ratio,
                 "a rank whose own work per step exceeds this x its peers' median for "
                 "--straggler-window is flagged (not stopped)")
      ->capture_default_str()
      ->check(NumberInRange(1.01, 100.0));
  app.add_option("--straggler-window", flags.straggler_window_s,
                 "seconds a rank must stay above --straggler-ratio to be flagged")
      ->capture_default_str()
      ->check(NumberInRange(1.0, 86400.0));
  app.add_option("--progress-interval", flags.progress_interval_s,
                 "seconds: how often trainers report progress (with their lease renewal)")
      ->capture_default_str()
      ->check(NumberInRange(0.1, 60.0));
  app.add_option("--drain-timeout", flags.drain_timeout_s,
                 "seconds a drained worker's ranks get to checkpoint and leave before "
                 "they are stopped (tessctl drain --timeout overrides it)")
      ->capture_default_str()
      ->check(NumberInRange(1.0, 86400.0));
}

// Slurm pools (docs/slurm.md).
void AddSlurmFlags(CLI::App& app, CoordinatorFlags& flags) {
  app.add_option("--slurm-pools", flags.slurm_pools_file,
                 "YAML file of Slurm worker pools: a job the registered workers cannot "
                 "host gets an allocation from the first pool that fits "
                 "(docs/slurm.md)");
  app.add_option("--slurm-conf", flags.slurm_conf,
                 "slurm.conf for sbatch, squeue and scancel (default: Slurm's own)");
  app.add_option("--slurm-coordinator-address", flags.slurm_address,
                 "HOST:PORT the workers in Slurm allocations dial (default: this "
                 "host's name and the gRPC port)");
  app.add_option("--slurm-credential-dir", flags.slurm_credential_dir,
                 "where each allocation's join credential is written (0600, owned by "
                 "the account the allocation runs as); must be on storage the compute "
                 "nodes see (default: slurm/ next to --db)");
}

// Retention of finished jobs' outputs (docs/operations.md).
void AddRetentionFlags(CLI::App& app, CoordinatorFlags& flags) {
  app.add_option("--retain-metrics", flags.retain_metrics,
                 "age after a job ended at which its metrics are downsampled to at "
                 "most a few hundred points per series, every evaluation point kept "
                 "(90d, 2w, 12h; never: keep whole)")
      ->capture_default_str();
  app.add_option("--retain-logs", flags.retain_logs,
                 "age after a job ended at which its logs are dropped from the "
                 "database; the rank logs stay on the workers (never: keep)")
      ->capture_default_str();
  app.add_option("--db-max-size", flags.db_max_size,
                 "budget for the database: past it the oldest finished jobs' metrics "
                 "are thinned to each series' last point, then dropped with their "
                 "logs, never the evaluation metrics, what reports read or job "
                 "records, and the pages given back (20G, 512M; 0: none)")
      ->capture_default_str();
}

// `db stats`.
void AddDbCommands(CLI::App& app, DbCommandFlags& db) {
  db.command = app.add_subcommand("db", "Inspect the database");
  db.command->require_subcommand(1);
  db.stats = db.command->add_subcommand(
      "stats", "Print the database's size per table and the oldest data it keeps");
}

// `token create|list|revoke`.
void AddTokenCommands(CLI::App& app, TokenCommandFlags& token) {
  token.command = app.add_subcommand(
      "token",
      "Create, list or revoke API tokens (user: tessctl and the web API; "
      "join: workers; metrics: a Prometheus scraper, /metrics only)");
  token.command->require_subcommand(1);
  token.create = token.command->add_subcommand(
      "create", "Create a token and print it once; only its hash is stored");
  token.create->add_option("--kind", token.kind, "user, join or metrics")
      ->capture_default_str()
      ->check(CLI::IsMember({"user", "join", "metrics"}));
  token.create
      ->add_option("--name", token.name, "who the token is for, e.g. alice or rack-3")
      ->required();
  token.create->add_flag("--admin", token.admin,
                         "an admin token: sees and acts on every user's jobs and sweeps, "
                         "and is exempt from the per-user limits");
  token.create->footer(
      "Example:\n"
      "  tessera-coordinator --db /var/lib/tessera/tessera.db token create --kind join "
      "--name rack-3 > /etc/tessera/join-token\n"
      "  export TESSERA_TOKEN=$(tessera-coordinator --db tessera.db token create --name "
      "alice)\n"
      "  tessera-coordinator --db tessera.db token create --name lab-admin --admin");
  token.list = token.command->add_subcommand("list", "List tokens (never their secrets)");
  token.revoke = token.command->add_subcommand("revoke", "Revoke a token by id");
  token.revoke->add_option("id", token.revoke_id, "token id (the number after tsr_KIND_)")
      ->required()
      ->check(IsNumber<int64_t>());
}

// --db-reserve: "auto", a size, "N%" or 0.
absl::Status ParseDbReserve(absl::string_view text, CoordinatorOptions& options) {
  if (text == "auto") {
    options.db_reserve_bytes = int64_t{64} << 20;
    options.db_reserve_percent = 5;
    return absl::OkStatus();
  }
  if (absl::ConsumeSuffix(&text, "%")) {
    double percent = 0;
    if (!absl::SimpleAtod(text, &percent) || percent < 0 || percent > 50) {
      return absl::InvalidArgumentError(
          "--db-reserve: a share must be between 0% and 50% of the file system");
    }
    options.db_reserve_bytes = std::numeric_limits<int64_t>::max();
    options.db_reserve_percent = percent;
    return absl::OkStatus();
  }
  absl::StatusOr<int64_t> bytes = ParseByteSize(text, "--db-reserve");
  if (!bytes.ok()) return bytes.status();
  options.db_reserve_bytes = *bytes;
  options.db_reserve_percent = 0;
  return absl::OkStatus();
}

// --retain-metrics, --retain-logs and --db-max-size.
absl::Status ParseRetention(const CoordinatorFlags& flags, CoordinatorOptions& options) {
  DbRetention::Options& retention = options.retention;
  absl::StatusOr<absl::Duration> metrics =
      ParseRetentionAge(flags.retain_metrics, "--retain-metrics");
  if (!metrics.ok()) return metrics.status();
  retention.retain_metrics = *metrics;
  absl::StatusOr<absl::Duration> logs =
      ParseRetentionAge(flags.retain_logs, "--retain-logs");
  if (!logs.ok()) return logs.status();
  retention.retain_logs = *logs;
  absl::StatusOr<int64_t> size = ParseByteSize(flags.db_max_size, "--db-max-size");
  if (!size.ok()) return size.status();
  retention.max_size_bytes = *size;
  if (options.db_max_bytes > 0 && retention.max_size_bytes > options.db_max_bytes) {
    return absl::InvalidArgumentError(
        "--db-max-size must not be above --db-max-bytes: the budget is pruned to, the "
        "cap fails writes");
  }
  return absl::OkStatus();
}

}  // namespace

void AddCoordinatorFlags(CLI::App& app, CoordinatorFlags& flags) {
  flags.options.http = "127.0.0.1:8080";
  app.footer(
      "Example:\n"
      "  tessera-coordinator --listen 0.0.0.0:50051 --http 127.0.0.1:8080 --db "
      "/var/lib/tessera/tessera.db\n"
      "Stops cleanly on SIGTERM or SIGINT.");
  AddListenerFlags(app, flags);
  AddRetentionFlags(app, flags);
  AddClusterFlags(app, flags);
  AddTlsAndAdminFlags(app, flags);
  AddLimitFlags(app, flags);
  AddWatchdogFlags(app, flags);
  AddSlurmFlags(app, flags);
  app.add_flag("--insecure-no-auth", flags.no_auth,
               "accept every call without a token (anyone who can reach the coordinator "
               "can then run code on its workers); for throwaway local clusters only");
  // Token management works on the database directly, with or without a
  // running coordinator.
  app.fallthrough();
  AddTokenCommands(app, flags.token);
  AddDbCommands(app, flags.db);
}

absl::Status FinishCoordinatorOptions(CoordinatorFlags& flags) {
  CoordinatorOptions& options = flags.options;
  if (absl::Status reserve = ParseDbReserve(flags.db_reserve, options); !reserve.ok()) {
    return reserve;
  }
  if (absl::Status retention = ParseRetention(flags, options); !retention.ok()) {
    return retention;
  }
  absl::StatusOr<int64_t> memory_cap =
      ParseByteSize(flags.max_memory_per_rank, "--max-memory-per-rank");
  if (!memory_cap.ok()) return memory_cap.status();
  options.manager.user_limits.max_memory_per_rank_bytes = *memory_cap;
  options.auth.enabled = !flags.no_auth;
  if (!flags.tls_cert_file.empty()) {
    auto identity = LoadTlsIdentityFiles(flags.tls_cert_file, flags.tls_key_file);
    if (!identity.ok()) return identity.status();
    options.tls = std::move(*identity);
  }
  options.tls_self_signed = flags.tls_self_signed;
  JobManagerOptions& manager = options.manager;
  manager.worker_suspect_after = absl::Milliseconds(flags.suspect_after_ms);
  manager.rendezvous_timeout = absl::Milliseconds(flags.rendezvous_timeout_ms);
  manager.heartbeat_interval = absl::Milliseconds(flags.heartbeat_ms);
  manager.worker_dead_after = absl::Milliseconds(flags.dead_after_ms);
  manager.trainer_lease = absl::Milliseconds(flags.trainer_lease_ms);
  options.http_limits.request_read_timeout =
      absl::Milliseconds(flags.http_request_timeout_ms);
  options.grpc_memory_bytes = flags.grpc_memory_mb << 20;
  manager.usage_half_life = absl::Seconds(flags.usage_half_life_s);
  manager.fair_share = !flags.no_fair_share;
  RankWatchOptions& watchdog = manager.watchdog;
  watchdog.enabled = !flags.no_watchdog;
  watchdog.rank_silent_after = absl::Seconds(flags.rank_silent_after_s);
  watchdog.stall_after_min = absl::Seconds(flags.stall_after_min_s);
  watchdog.straggler_window = absl::Seconds(flags.straggler_window_s);
  manager.progress_report_interval = absl::Seconds(flags.progress_interval_s);
  manager.drain_timeout = absl::Seconds(flags.drain_timeout_s);
  if (manager.progress_report_interval * 3 > watchdog.rank_silent_after) {
    return absl::InvalidArgumentError(
        "--rank-silent-after must be at least 3x --progress-interval, so that "
        "one late report does not end an attempt");
  }
  if (!flags.admin_group.empty()) {
    if (!LookUpGroupId(flags.admin_group).ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--admin-group: no group named '", flags.admin_group, "'"));
    }
    options.auth.is_admin = [admin_group = flags.admin_group](const std::string& user) {
      return UserInGroup(user, admin_group);
    };
  }
  return absl::OkStatus();
}

}  // namespace tessera
