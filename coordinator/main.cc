// tessera-coordinator: flags -> Options, wiring, signals. No logic here.
//
// main() runs these steps in order: parse the flags (coordinator_flags.h); run
// a `token` subcommand and exit, or complete the Options; start the logs and
// block the stop signals; wire the service manager and the dashboard; read the
// Slurm pools; then Serve(): start the CoordinatorServer and the Slurm pools,
// publish the ports, wait for SIGTERM or SIGINT and shut down.
#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "CLI/CLI.hpp"
#include "common/file_io.h"
#include "common/process/unix_account.h"
#include "common/service_notify.h"
#include "coordinator/coordinator_flags.h"
#include "coordinator/coordinator_server.h"
#include "coordinator/core/auth.h"
#include "coordinator/core/slurm/slurm_pool_config.h"
#include "coordinator/core/slurm/slurm_pool_manager.h"
#include "coordinator/core/tls_identity.h"
#include "coordinator/db_command.h"
#include "coordinator/slurm/slurm_command_client.h"
#include "coordinator/store/sqlite_store.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"
#include "web/assets.h"

namespace {

// What the workers in Slurm allocations dial: --slurm-coordinator-address,
// else this host's name (or the --listen host) and the gRPC port.
std::string SlurmCoordinatorAddress(const tessera::CoordinatorOptions& options, int port,
                                    const std::string& address) {
  if (!address.empty()) return address;
  std::string host = tessera::HostOfAddress(options.listen);
  if (host.empty() || host == "0.0.0.0" || host == "::" || host == "[::]") {
    char name[256] = {};
    gethostname(name, sizeof(name) - 1);
    host = name;
  }
  return absl::StrCat(host, ":", port);
}

// The certificate pin the join credentials carry under --tls-self-signed; ""
// otherwise.
absl::StatusOr<std::string> SlurmCredentialPin(tessera::Store& store,
                                               const tessera::CoordinatorOptions& options,
                                               bool tls_self_signed) {
  if (!tls_self_signed) return std::string();
  auto identity = tessera::LoadOrCreateSelfSignedIdentity(
      store,
      {tessera::HostOfAddress(options.listen), tessera::HostOfAddress(options.http)});
  if (!identity.ok()) return identity.status();
  return tessera::CertificateFingerprint(identity->cert_pem);
}

// A join token of its own for the allocation about to be submitted for
// `decision`, written to a new 0600 file in `dir` owned by `run_as` (the
// service account when empty). Never in the script or an argv.
absl::StatusOr<tessera::SlurmCredential> WriteSlurmCredential(
    tessera::Store& store, const std::string& dir, const std::string& pin,
    const tessera::SlurmSubmitDecision& decision, const std::string& run_as) {
  static const tessera::RealClock clock;
  const std::string name = tessera::SlurmCredentialName(decision.pool, decision.job_id);
  absl::StatusOr<std::string> token =
      tessera::CreateToken(store, clock, tessera::kJoinToken, name);
  if (!token.ok()) return token.status();
  absl::StatusOr<int64_t> token_id = tessera::TokenIdOf(*token);
  if (!token_id.ok()) return token_id.status();
  if (!pin.empty()) *token = tessera::AddPinToToken(*token, pin);
  const std::string path =
      absl::StrCat(dir, "/", name, "-", absl::ToUnixMillis(absl::Now()), ".token");
  const int fd =
      open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    (void)store.RevokeToken(*token_id);
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
    (void)store.RevokeToken(*token_id);
    return absl::FailedPreconditionError(
        absl::StrCat("cannot write the join credential ", path, " for ",
                     run_as.empty() ? std::string("the service account") : run_as));
  }
  return tessera::SlurmCredential{path, *token_id};
}

// Revokes a credential WriteSlurmCredential made (in this process or an
// earlier one: the id comes from the store) and removes its file.
void RevokeSlurmCredential(tessera::Store& store, const tessera::SlurmCredential& c) {
  if (c.id != 0) {
    if (absl::Status s = store.RevokeToken(c.id); !s.ok() && !absl::IsNotFound(s)) {
      spdlog::warn("cannot revoke the join credential of {}: {}", c.path, s.ToString());
    }
  }
  if (!c.path.empty()) unlink(c.path.c_str());
}

// The Slurm pools: their client over sbatch/squeue/scancel and the manager
// the JobManager ticks, which keeps its allocations in the database and
// gives each a join credential of its own in `credential_dir`.
absl::StatusOr<std::unique_ptr<tessera::SlurmPoolManager>> StartSlurmPools(
    std::vector<tessera::SlurmPoolConfig> pools,
    const tessera::CoordinatorOptions& options, int port, const std::string& slurm_conf,
    std::string address, const std::string& credential_dir, bool tls_self_signed,
    tessera::Authenticator* auth, std::unique_ptr<tessera::SlurmCommandClient>* cli) {
  std::error_code ec;
  std::filesystem::create_directories(credential_dir, ec);
  if (ec || chmod(credential_dir.c_str(), 0711) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("--slurm-credential-dir ", credential_dir, ": cannot create it (",
                     ec ? ec.message() : std::string(std::strerror(errno)), ")"));
  }
  address = SlurmCoordinatorAddress(options, port, address);
  tessera::SlurmCommandClientOptions cli_options;
  cli_options.slurm_conf = slurm_conf;
  *cli = std::make_unique<tessera::SlurmCommandClient>(cli_options);
  // The tokens and the allocations, on a connection of the pools' own. The
  // credential functions hold it, so it lives as long as the manager.
  auto opened = tessera::SqliteStore::Open(options.db_path);
  if (!opened.ok()) return opened.status();
  std::shared_ptr<tessera::Store> store = *std::move(opened);
  absl::StatusOr<std::string> pin = SlurmCredentialPin(*store, options, tls_self_signed);
  if (!pin.ok()) return pin.status();
  auto write = [store, credential_dir, pin = *pin](const tessera::SlurmSubmitDecision& d,
                                                   const std::string& run_as) {
    return WriteSlurmCredential(*store, credential_dir, pin, d, run_as);
  };
  // Revoked in the store, then dropped from the server's token cache: the
  // credential is refused from this moment, not cache_ttl later.
  auto revoke = [store, auth](const tessera::SlurmCredential& c) {
    RevokeSlurmCredential(*store, c);
    if (c.id != 0) auth->Forget(c.id);
  };
  tessera::SlurmPoolManagerOptions manager_options;
  manager_options.coordinator_address = address;
  manager_options.can_submit_as_owner =
      tessera::SlurmCommandClient::CanSubmitAsOtherUsers();
  spdlog::info("Slurm pools: {}; workers in allocations dial {}", pools.size(), address);
  static const tessera::RealClock clock;
  tessera::Store* const allocations = store.get();
  return std::make_unique<tessera::SlurmPoolManager>(
      std::move(pools), cli->get(), allocations, &clock, std::move(write),
      manager_options, std::move(revoke));
}

// `tessera-coordinator token create|list|revoke`, on the database in --db.
// Returns the process's exit code.
int RunTokenCommand(const tessera::CoordinatorFlags& flags) {
  const tessera::TokenCommandFlags& command = flags.token;
  const tessera::CoordinatorOptions& options = flags.options;
  auto store = tessera::SqliteStore::Open(options.db_path);
  if (!store.ok()) {
    std::cerr << "tessera-coordinator: " << store.status().message() << "\n";
    return 1;
  }
  tessera::RealClock clock;
  if (command.create->parsed()) {
    auto token =
        tessera::CreateToken(**store, clock, command.kind, command.name, command.admin);
    if (!token.ok()) {
      std::cerr << "tessera-coordinator: " << token.status().message() << "\n";
      return 1;
    }
    if (flags.tls_self_signed) {
      // Workers (and tessctl) pin the certificate this token carries.
      auto identity = tessera::LoadOrCreateSelfSignedIdentity(
          **store,
          {tessera::HostOfAddress(options.listen), tessera::HostOfAddress(options.http)});
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
  if (command.list->parsed()) {
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
  absl::Status revoked = (*store)->RevokeToken(command.revoke_id);
  if (!revoked.ok()) {
    std::cerr << "tessera-coordinator: " << revoked.message() << "\n";
    return 1;
  }
  std::cout << "token " << command.revoke_id
            << " revoked; running coordinators refuse it within about a second, and "
            << "end its open event streams within a few seconds\n";
  return 0;
}

// Sends the logs to stderr (stdout stays free for output meant for programs)
// and blocks the stop signals in this thread and so in every thread started
// after it. Returns them, for the sigwait at the end of Serve().
sigset_t StartLogsAndBlockStopSignals() {
  spdlog::set_default_logger(spdlog::stderr_color_mt("tessera"));
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ coordinator: %v");
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  return stop_signals;
}

// The dashboard, compiled into this binary: the embedded asset at `path`, or
// null.
const tessera::StaticFile* DashboardFile(std::string_view path) {
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
}

// The core's monitor pets the service manager's watchdog (and ticks at least
// as often as it asks), and the HTTP API serves the dashboard.
void WireServiceManagerAndDashboard(tessera::ServiceNotifier& notifier,
                                    tessera::CoordinatorOptions& options) {
  options.on_tick = [&notifier] { notifier.Watchdog(); };
  if (notifier.watchdog_interval() < options.monitor_interval) {
    options.monitor_interval = notifier.watchdog_interval();
  }
  options.static_files = DashboardFile;
}

// The pools in the --slurm-pools file; none when `file` is empty.
absl::StatusOr<std::vector<tessera::SlurmPoolConfig>> ReadSlurmPools(
    const std::string& file) {
  if (file.empty()) return std::vector<tessera::SlurmPoolConfig>();
  absl::StatusOr<std::string> text = tessera::ReadFile(file, size_t{1} << 20);
  if (!text.ok()) return text.status();
  return tessera::ParseSlurmPools(*text);
}

// Writes `port` to `path` (nothing when it is empty), atomically: a reader
// never sees a partial number. A failure is logged; the coordinator serves on.
void WritePortFile(const std::string& path, int port) {
  if (path.empty()) return;
  if (absl::Status s = tessera::WriteFileAtomically(path, absl::StrCat(port, "\n"));
      !s.ok()) {
    spdlog::warn("{}", std::string(s.message()));
  }
}

// Starts the coordinator and its Slurm pools, publishes the ports, tells the
// service manager it is ready, and serves until SIGTERM or SIGINT; then shuts
// down. Returns the process's exit code.
int Serve(const tessera::CoordinatorFlags& flags,
          const std::vector<tessera::SlurmPoolConfig>& slurm_pools,
          tessera::ServiceNotifier& notifier, const sigset_t& stop_signals) {
  const tessera::CoordinatorOptions& options = flags.options;
  std::unique_ptr<tessera::SlurmCommandClient> slurm_client;
  std::unique_ptr<tessera::SlurmPoolManager> slurm_manager;
  auto server = tessera::CoordinatorServer::Start(options);
  if (!server.ok()) {
    std::cerr << "tessera-coordinator: " << server.status().message() << "\n";
    return 1;
  }
  if (!slurm_pools.empty()) {
    absl::StatusOr<std::unique_ptr<tessera::SlurmPoolManager>> made = StartSlurmPools(
        slurm_pools, options, (*server)->port(), flags.slurm_conf, flags.slurm_address,
        flags.slurm_credential_dir.empty()
            ? (std::filesystem::path(options.db_path).parent_path() / "slurm").string()
            : flags.slurm_credential_dir,
        flags.tls_self_signed, &(*server)->auth(), &slurm_client);
    if (!made.ok()) {
      std::cerr << "tessera-coordinator: " << made.status().message() << "\n";
      (*server)->Shutdown();
      return 1;
    }
    slurm_manager = *std::move(made);
    (*server)->manager().SetSlurmPools(slurm_manager.get());
  }
  WritePortFile(flags.port_file, (*server)->port());
  WritePortFile(flags.http_port_file, (*server)->http_port());
  notifier.Ready("serving gRPC on port " + std::to_string((*server)->port()));
  int sig = 0;
  sigwait(&stop_signals, &sig);
  spdlog::info("received signal {}; shutting down", sig);
  notifier.Stopping();
  (*server)->Shutdown();
  spdlog::info("stopped");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // The database holds the credential signing key and TLS private key: every
  // file this process creates is for its own account only.
  umask(077);
  tessera::CoordinatorFlags flags;
  CLI::App app{"tessera-coordinator: schedules data-parallel training jobs onto workers"};
  tessera::AddCoordinatorFlags(app, flags);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help exits 0; a bad command line is a usage error, like bad options.
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (flags.token.command->parsed()) return RunTokenCommand(flags);
  if (flags.db.command->parsed()) return tessera::RunDbCommand(flags.options.db_path);
  if (absl::Status s = tessera::FinishCoordinatorOptions(flags); !s.ok()) {
    std::cerr << "tessera-coordinator: " << s.message() << "\n";
    return 2;
  }
  const sigset_t stop_signals = StartLogsAndBlockStopSignals();
  tessera::ServiceNotifier notifier;
  WireServiceManagerAndDashboard(notifier, flags.options);
  absl::StatusOr<std::vector<tessera::SlurmPoolConfig>> slurm_pools =
      ReadSlurmPools(flags.slurm_pools_file);
  if (!slurm_pools.ok()) {
    std::cerr << "tessera-coordinator: --slurm-pools " << flags.slurm_pools_file << ": "
              << slurm_pools.status().message() << "\n";
    return 2;
  }
  return Serve(flags, *slurm_pools, notifier, stop_signals);
}
