// The tessera-coordinator command line: every flag of the serving process and
// the `token` subcommands, registered on one CLI::App, and the step that turns
// the parsed values into the CoordinatorServer's Options.
//
// Usage (main.cc):
//   CoordinatorFlags flags;
//   CLI::App app{...};
//   AddCoordinatorFlags(app, flags);
//   app.parse(argc, argv);   // a CLI::ParseError: app.exit(e), then exit 2
//   if (flags.token.command->parsed()) ...   // the token subcommands
//   absl::Status s = FinishCoordinatorOptions(flags);   // then flags.options
//
// The App keeps pointers into `flags`: it must outlive the App and stay where it
// is. Not thread-safe; used by main() only.
#ifndef TESSERA_COORDINATOR_COORDINATOR_FLAGS_H_
#define TESSERA_COORDINATOR_COORDINATOR_FLAGS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "coordinator/coordinator_server.h"

namespace CLI {
class App;
}  // namespace CLI

namespace tessera {

// `tessera-coordinator token create|list|revoke`: works on the database
// directly, with or without a running coordinator.
struct TokenCommandFlags {
  CLI::App* command = nullptr;  // `token`
  CLI::App* create = nullptr;   // `token create`
  CLI::App* list = nullptr;     // `token list`
  CLI::App* revoke = nullptr;   // `token revoke`
  std::string kind = "user";
  std::string name;
  bool admin = false;
  int64_t revoke_id = 0;
};

// `tessera-coordinator db stats`: reads the database directly, with or without
// a running coordinator.
struct DbCommandFlags {
  CLI::App* command = nullptr;  // `db`
  CLI::App* stats = nullptr;    // `db stats`
};

// The values the flags are parsed into. Most flags write straight into
// `options`; the ones below it are in the flags' own units (milliseconds,
// seconds, megabytes, negated switches) until FinishCoordinatorOptions.
struct CoordinatorFlags {
  CoordinatorOptions options;

  std::string port_file;               // the bound gRPC port is written here once serving
  std::string db_reserve = "auto";     // --db-reserve: "auto", "0", "64M", "5%"
  std::string retain_metrics = "90d";  // --retain-metrics: an age, or "never"
  std::string retain_logs = "30d";     // --retain-logs: likewise
  std::string db_max_size = "0";       // --db-max-size: a size; 0: no budget
  // --max-memory-per-rank: a size; 0: no cap.
  std::string max_memory_per_rank = "0";
  std::string http_port_file;  // the bound HTTP port, likewise
  int64_t heartbeat_ms = 1000;
  int64_t dead_after_ms = 15000;
  int64_t suspect_after_ms = 3000;
  int64_t rendezvous_timeout_ms = 300000;
  int64_t trainer_lease_ms = 90000;
  int64_t http_request_timeout_ms = 0;  // set from options when registered
  int64_t grpc_memory_mb = 0;           // likewise

  std::string tls_cert_file;
  std::string tls_key_file;
  bool tls_self_signed = false;
  std::string admin_group;
  bool no_auth = false;

  bool no_fair_share = false;
  int64_t usage_half_life_s = 0;  // set from options when registered

  // The watchdog, in seconds; set from options when registered.
  bool no_watchdog = false;
  double rank_silent_after_s = 0;
  double stall_after_min_s = 0;
  double straggler_window_s = 0;
  double progress_interval_s = 0;
  double drain_timeout_s = 0;

  // Slurm pools (docs/slurm.md).
  std::string slurm_pools_file;
  std::string slurm_conf;
  std::string slurm_address;
  std::string slurm_credential_dir;

  TokenCommandFlags token;
  DbCommandFlags db;
};

// Registers every flag and the token and db subcommands on `app`, in the order
// --help lists them, and sets the App's footer.
void AddCoordinatorFlags(CLI::App& app, CoordinatorFlags& flags);

// Completes flags.options from the parsed flags: loads --tls-cert/--tls-key,
// converts the units and resolves --admin-group. An error (its message is for
// the user, and the process exits 2) when a file cannot be read or the flags
// contradict each other.
absl::Status FinishCoordinatorOptions(CoordinatorFlags& flags);

}  // namespace tessera

#endif  // TESSERA_COORDINATOR_COORDINATOR_FLAGS_H_
