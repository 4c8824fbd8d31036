// CoordinatorServer: wires the store, the writer, the JobManager and the gRPC
// services into one running coordinator. main.cc fills Options from flags;
// tests build one in-process and talk to it through InProcessChannel().
//
// Thread-safety: Start and Shutdown from one thread; the services inside are
// thread-safe.
#ifndef TESSERA_COORDINATOR_COORDINATOR_SERVER_H_
#define TESSERA_COORDINATOR_COORDINATOR_SERVER_H_

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "common/clock.h"
#include "common/tls.h"
#include "coordinator/api/grpc_auth_gate.h"
#include "coordinator/api/http_api.h"
#include "coordinator/api/http_server.h"
#include "coordinator/api/job_service.h"
#include "coordinator/api/trainer_service.h"
#include "coordinator/api/worker_service.h"
#include "coordinator/core/auth.h"
#include "coordinator/core/job_manager.h"
#include "coordinator/core/search_manager.h"
#include "coordinator/core/sweep_manager.h"
#include "coordinator/core/worker_identity.h"
#include "coordinator/store/db_retention.h"
#include "coordinator/store/store.h"
#include "coordinator/store/store_writer.h"
#include "grpcpp/server.h"

namespace tessera {

struct CoordinatorOptions {
  // gRPC listen address; port 0 picks a free port (see Start's result).
  // Empty: no network listener, in-process channel only (tests).
  std::string listen = "127.0.0.1:50051";
  // Dashboard/JSON API address; port 0 picks a free port. Empty: no HTTP.
  std::string http;
  // Server-Sent Events streams served at once; the HTTP pool has this many
  // threads plus a reserve for plain requests, so open pages never starve the API.
  int http_max_streams = 16;
  // Connection, time and size limits of the HTTP listener (http_server.h).
  HttpLimits http_limits;
  // The dashboard's files (see HttpApi::Options::static_files); empty: none.
  std::function<const StaticFile*(std::string_view path)> static_files;
  // Largest size the database may grow to (0: no limit); past it writes fail as
  // on a full disk.
  int64_t db_max_bytes = 0;
  // SQLite database file; ":memory:" keeps everything in memory.
  std::string db_path = "tessera.db";
  // Free space kept on the database's file system for job state
  // (--db-reserve): below it metric rows and log lines are shed (counted per
  // job) while job, worker, token and Slurm writes go on. The reserve is
  // db_reserve_bytes, or when db_reserve_percent > 0 the smaller of that and
  // this share of the file system: by default the smaller of 64 MiB and 5%.
  // 0 bytes: no reserve.
  int64_t db_reserve_bytes = int64_t{64} << 20;
  double db_reserve_percent = 5;
  // Retention of finished jobs' metrics and logs by age and by size
  // (--retain-metrics, --retain-logs, --db-max-size; db_retention.h): by
  // default metrics are downsampled 90 days and logs dropped 30 days after a
  // job ended, with no size budget. A pass runs every retention.interval.
  DbRetention::Options retention;
  // How often the monitor thread runs JobManager::Tick (liveness, timeouts).
  absl::Duration monitor_interval = absl::Milliseconds(250);
  // Largest gRPC message accepted or sent, in bytes.
  int max_message_bytes = 16 * 1024 * 1024;
  // Memory gRPC may use for its buffers (a ResourceQuota); near it the
  // transport shrinks its flow-control windows and past it calls fail with
  // RESOURCE_EXHAUSTED, instead of the process growing.
  int64_t grpc_memory_bytes = int64_t{512} << 20;
  // Threads gRPC may run synchronous handlers on (the ResourceQuota's).
  int grpc_max_threads = 64;
  // Calls open at once on one client connection (HTTP/2 streams).
  int grpc_max_concurrent_streams = 100;
  JobManagerOptions manager;
  // Authentication; on unless the operator turns it off (--insecure-no-auth).
  Authenticator::Options auth;
  // TLS for the gRPC and HTTP listeners, from the operator's files
  // (--tls-cert/--tls-key). Empty: see tls_self_signed.
  TlsIdentity tls;
  // With no `tls`: generate a self-signed identity on first start and keep it in
  // the store (--tls-self-signed). Both off: the listeners are plaintext.
  bool tls_self_signed = false;
  // Called by the monitor thread after each JobManager::Tick: proof that the
  // core is not stuck (main.cc pets the service manager's watchdog here).
  std::function<void()> on_tick;
};

class CoordinatorServer {
 public:
  // Opens the store, recovers state and starts serving. Returns FailedPrecondition
  // with a clear message when the address cannot be bound.
  static absl::StatusOr<std::unique_ptr<CoordinatorServer>> Start(
      const CoordinatorOptions& options, const Clock* clock = nullptr);
  ~CoordinatorServer();

  // The port actually bound (0 without a network listener).
  int port() const { return port_; }
  // The HTTP port actually bound (0 without HTTP).
  int http_port() const { return http_ != nullptr ? http_->port() : 0; }
  // SHA-256 of the certificate both listeners present; empty when plaintext.
  const std::string& tls_fingerprint() const { return tls_fingerprint_; }
  std::shared_ptr<grpc::Channel> InProcessChannel();
  // An in-process channel whose calls pass through `interceptors` (tests use
  // one to attach a token).
  std::shared_ptr<grpc::Channel> InProcessChannel(
      std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>>
          interceptors);
  JobManager& manager() { return *manager_; }
  SearchManager& searches() { return *searches_; }
  Store& store() { return *store_; }
  Authenticator& auth() { return *auth_; }

  // Stops accepting calls, finishes waiting ones, flushes the store. Idempotent.
  void Shutdown();

 private:
  CoordinatorServer() = default;

  // Start's steps, in order. OpenCore: the store, writer, JobManager (recovered)
  // and Authenticator. ResolveTls: the listeners' identity (the operator's, or
  // the self-signed one kept in the store; none: plaintext) and its
  // fingerprint. BuildServices: the SweepManager, SearchManager and WorkerIdentity
  // (recovered) and the gRPC services. StartGrpc: the gRPC server and its listener (with
  // the auth gate). StartHttp: the HTTP API and server, when options.http is
  // set. StartMonitor: the thread that ticks the managers.
  absl::Status OpenCore(const CoordinatorOptions& options, const Clock* clock);
  absl::StatusOr<TlsIdentity> ResolveTls(const CoordinatorOptions& options);
  absl::Status BuildServices(const CoordinatorOptions& options, const Clock* clock);
  absl::Status StartGrpc(const CoordinatorOptions& options, const TlsIdentity& tls);
  absl::Status StartHttp(const CoordinatorOptions& options, const TlsIdentity& tls);
  void StartMonitor(const CoordinatorOptions& options);

  // Members in dependency order; destroyed in reverse.
  RealClock real_clock_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<StoreWriter> writer_;
  std::unique_ptr<DbRetention> retention_;  // its loop runs while serving
  std::unique_ptr<JobManager> manager_;
  std::unique_ptr<Authenticator> auth_;
  std::unique_ptr<SweepManager> sweeps_;
  std::unique_ptr<SearchManager> searches_;
  std::unique_ptr<WorkerIdentity> workers_;
  std::unique_ptr<JobServiceImpl> job_service_;
  std::unique_ptr<WorkerServiceImpl> worker_service_;
  std::unique_ptr<TrainerServiceImpl> trainer_service_;
  // Authenticates network calls before their messages are read; null
  // without a network listener or without authentication.
  std::shared_ptr<GrpcAuthGate> auth_gate_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<HttpApi> http_api_;
  std::unique_ptr<HttpServer> http_;
  int port_ = 0;
  // The reserve the writer keeps on the database's disk (--db-reserve).
  int64_t db_reserve_bytes_ = 0;
  std::string tls_fingerprint_;
  bool shut_down_ = false;
  absl::Notification stop_monitor_;
  std::thread monitor_;  // runs JobManager::Tick until stop_monitor_
};

}  // namespace tessera

#endif  // TESSERA_COORDINATOR_COORDINATOR_SERVER_H_
