#include "coordinator/coordinator_server.h"

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "coordinator/core/tls_identity.h"
#include "coordinator/store/sqlite_store.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/resource_quota.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"
#include "spdlog/spdlog.h"

namespace tessera {

namespace {

// /metrics' database figures: the file and its write-ahead log, the limit,
// the free space and the reserve.
DatabaseFigures ReadDatabaseFigures(const std::string& path, Store& store,
                                    int64_t max_bytes, int64_t reserve_bytes) {
  DatabaseFigures db;
  db.max_bytes = max_bytes;
  db.reserve_bytes = reserve_bytes;
  if (path != ":memory:") {
    std::error_code error;
    db.size_bytes = 0;
    for (const std::string& file : {path, path + "-wal"}) {
      const std::uintmax_t size = std::filesystem::file_size(file, error);
      if (!error) db.size_bytes += static_cast<int64_t>(size);
    }
  }
  absl::StatusOr<DiskSpace> space = store.GetDiskSpace();
  if (space.ok()) db.disk_free_bytes = space->free_bytes;
  return db;
}

// /metrics' retention figures: how far over its budget the last pass left the
// data (with a budget), and what the passes removed.
DatabaseFigures WithRetention(DatabaseFigures db, const DbRetention::Totals& totals,
                              bool budget) {
  db.bytes_over_budget = budget ? totals.bytes_over_budget : -1;
  db.metric_rows_downsampled = totals.metric_rows_downsampled;
  db.metric_rows_thinned = totals.metric_rows_thinned;
  db.metric_rows_pruned = totals.metric_rows_pruned;
  db.log_chunks_dropped = totals.log_chunks_dropped;
  return db;
}

// Channel arguments and the resource quota of the gRPC server.
void ConfigureServerBuilder(const CoordinatorOptions& options, grpc::ResourceQuota& quota,
                            grpc::ServerBuilder& builder) {
  // Without this, gRPC sets SO_REUSEPORT and a second coordinator could bind
  // the same port silently.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  // Keepalive: notice dead peers (a worker whose host vanished) within ~30 s
  // even on idle connections, and let clients ping as often as every 10 s.
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 20000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
                             10000);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  builder.SetMaxReceiveMessageSize(options.max_message_bytes);
  builder.SetMaxSendMessageSize(options.max_message_bytes);
  // Bounds on what callers can make the server hold: buffer memory and
  // handler threads in total, calls per connection.
  quota.Resize(static_cast<size_t>(options.grpc_memory_bytes));
  quota.SetMaxThreads(options.grpc_max_threads);
  builder.SetResourceQuota(quota);
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS,
                             options.grpc_max_concurrent_streams);
}

}  // namespace

absl::StatusOr<std::unique_ptr<CoordinatorServer>> CoordinatorServer::Start(
    const CoordinatorOptions& options, const Clock* clock) {
  std::unique_ptr<CoordinatorServer> s(new CoordinatorServer());
  if (clock == nullptr) clock = &s->real_clock_;
  RETURN_IF_ERROR(s->OpenCore(options, clock));
  ASSIGN_OR_RETURN(const TlsIdentity tls, s->ResolveTls(options));
  RETURN_IF_ERROR(s->BuildServices(options, clock));
  RETURN_IF_ERROR(s->StartGrpc(options, tls));
  RETURN_IF_ERROR(s->StartHttp(options, tls));
  s->StartMonitor(options);
  spdlog::info("coordinator serving gRPC{} on {} (port {}), database {}",
               tls.enabled() ? " with TLS" : "", options.listen, s->port_,
               options.db_path);
  return s;
}

absl::Status CoordinatorServer::OpenCore(const CoordinatorOptions& options,
                                         const Clock* clock) {
  SqliteStore::Options store_options;
  store_options.max_size_bytes = options.db_max_bytes;
  ASSIGN_OR_RETURN(std::unique_ptr<SqliteStore> store,
                   SqliteStore::Open(options.db_path, store_options));
  store_ = std::move(store);
  StoreWriter::Options writer_options;
  writer_options.reserve_bytes = options.db_reserve_bytes;
  if (options.db_reserve_percent > 0) {
    absl::StatusOr<DiskSpace> space = store_->GetDiskSpace();
    if (space.ok() && space->total_bytes > 0) {
      writer_options.reserve_bytes = std::min<int64_t>(
          writer_options.reserve_bytes,
          static_cast<int64_t>(space->total_bytes * options.db_reserve_percent / 100));
    }
  }
  if (writer_options.reserve_bytes > 0) {
    spdlog::info(
        "the database's disk keeps a reserve of {} bytes for job state "
        "(--db-reserve): below it metrics and logs are shed",
        writer_options.reserve_bytes);
  }
  db_reserve_bytes_ = writer_options.reserve_bytes;
  writer_ = std::make_unique<StoreWriter>(store_.get(), writer_options);
  retention_ = std::make_unique<DbRetention>(store_.get(), clock, options.retention);
  if (retention_->enabled()) retention_->Start();
  manager_ =
      std::make_unique<JobManager>(store_.get(), writer_.get(), clock, options.manager);
  RETURN_IF_ERROR(manager_->Recover());
  ASSIGN_OR_RETURN(auth_, Authenticator::Create(store_.get(), clock, options.auth));
  if (!options.auth.enabled) {
    spdlog::warn(
        "authentication is OFF (--insecure-no-auth): anyone who can reach this "
        "coordinator can run code on its workers");
  }
  return absl::OkStatus();
}

absl::StatusOr<TlsIdentity> CoordinatorServer::ResolveTls(
    const CoordinatorOptions& options) {
  TlsIdentity tls = options.tls;
  if (!tls.enabled() && options.tls_self_signed) {
    ASSIGN_OR_RETURN(
        tls, LoadOrCreateSelfSignedIdentity(
                 *store_, {HostOfAddress(options.listen), HostOfAddress(options.http)}));
  }
  if (tls.enabled()) {
    ASSIGN_OR_RETURN(tls_fingerprint_, CertificateFingerprint(tls.cert_pem));
    spdlog::info("TLS on for gRPC and HTTP; certificate SHA-256 {}{}", tls_fingerprint_,
                 options.tls.enabled() ? "" : " (self-signed, pinned by join tokens)");
  } else if (!options.listen.empty() || !options.http.empty()) {
    spdlog::warn(
        "gRPC and HTTP listeners are plaintext (no --tls-cert/--tls-key or "
        "--tls-self-signed): tokens and job data cross the network unencrypted");
  }
  return tls;
}

absl::Status CoordinatorServer::BuildServices(const CoordinatorOptions& options,
                                              const Clock* clock) {
  sweeps_ = std::make_unique<SweepManager>(store_.get(), &manager_->jobs(), clock,
                                           options.manager.spec_limits);
  RETURN_IF_ERROR(sweeps_->Recover());
  SearchManager::Options search_options;
  search_options.limits = options.manager.spec_limits;
  search_options.cluster_slots = [view = &manager_->view()] {
    return view->SlotCapacity();
  };
  searches_ = std::make_unique<SearchManager>(store_.get(), &manager_->jobs(), clock,
                                              std::move(search_options));
  RETURN_IF_ERROR(searches_->Recover());
  job_service_ = std::make_unique<JobServiceImpl>(&manager_->jobs(), &manager_->workers(),
                                                  &manager_->quotas(), sweeps_.get(),
                                                  auth_.get(), searches_.get());
  workers_ = std::make_unique<WorkerIdentity>(
      store_.get(), clock, &manager_->workers(),
      WorkerIdentity::Options{.enabled = options.auth.enabled});
  RETURN_IF_ERROR(workers_->Recover());
  worker_service_ = std::make_unique<WorkerServiceImpl>(workers_.get(), auth_.get());
  trainer_service_ =
      std::make_unique<TrainerServiceImpl>(&manager_->ranks(), auth_.get());
  return absl::OkStatus();
}

absl::Status CoordinatorServer::StartGrpc(const CoordinatorOptions& options,
                                          const TlsIdentity& tls) {
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  grpc::ResourceQuota quota("tessera-coordinator");
  ConfigureServerBuilder(options, quota, builder);
  if (!options.listen.empty()) {
    std::shared_ptr<grpc::ServerCredentials> credentials;
    if (options.auth.enabled) {
      // Calls are authenticated on their metadata before their messages are
      // read (grpc_auth_gate.h).
      auth_gate_ = std::make_shared<GrpcAuthGate>(CoordinatorCallCheck(auth_.get()),
                                                  GrpcAuthGate::Options());
      credentials = GrpcAuthGate::Credentials(auth_gate_, tls);
    } else if (tls.enabled()) {
      grpc::SslServerCredentialsOptions ssl;
      ssl.pem_key_cert_pairs.push_back({tls.key_pem, tls.cert_pem});
      credentials = grpc::SslServerCredentials(ssl);
    } else {
      credentials = grpc::InsecureServerCredentials();
    }
    builder.AddListeningPort(options.listen, credentials, &port_);
  }
  builder.RegisterService(job_service_.get());
  builder.RegisterService(worker_service_.get());
  builder.RegisterService(trainer_service_.get());
  server_ = builder.BuildAndStart();
  if (server_ == nullptr || (!options.listen.empty() && port_ == 0)) {
    shut_down_ = true;
    return absl::FailedPreconditionError(
        absl::StrCat("cannot listen on ", options.listen,
                     ": the address is in use or not available on this host"));
  }
  return absl::OkStatus();
}

absl::Status CoordinatorServer::StartHttp(const CoordinatorOptions& options,
                                          const TlsIdentity& tls) {
  if (options.http.empty()) return absl::OkStatus();
  HttpApi::Options http_options;
  http_options.max_streams = options.http_max_streams;
  http_options.static_files = options.static_files;
  http_options.auth = auth_.get();
  http_options.secure_cookies = tls.enabled();
  http_options.database_figures = [this, path = options.db_path,
                                   max = options.db_max_bytes,
                                   budget = options.retention.max_size_bytes > 0] {
    return WithRetention(ReadDatabaseFigures(path, *store_, max, db_reserve_bytes_),
                         retention_->totals(), budget);
  };
  http_api_ = std::make_unique<HttpApi>(
      HttpApi::Core{&manager_->jobs(), &manager_->workers(), &manager_->view()},
      sweeps_.get(), http_options, searches_.get());
  absl::StatusOr<std::unique_ptr<HttpServer>> http = HttpServer::Start(
      options.http, http_api_.get(), options.http_max_streams, options.http_limits, tls);
  if (!http.ok()) {
    Shutdown();
    return http.status();
  }
  http_ = std::move(*http);
  spdlog::info("coordinator serving {} on {} (port {})", tls.enabled() ? "HTTPS" : "HTTP",
               options.http, http_->port());
  return absl::OkStatus();
}

void CoordinatorServer::StartMonitor(const CoordinatorOptions& options) {
  JobManager* manager = manager_.get();
  SweepManager* sweeps = sweeps_.get();
  SearchManager* searches = searches_.get();
  absl::Notification* stop = &stop_monitor_;
  const absl::Duration interval = options.monitor_interval;
  std::function<void()> on_tick = options.on_tick;
  grpc::HealthCheckServiceInterface* health = server_->GetHealthCheckService();
  monitor_ = std::thread([manager, sweeps, searches, stop, interval, on_tick, health] {
    bool serving = true;
    while (!stop->WaitForNotificationWithTimeout(interval)) {
      manager->Tick();
      manager->TickSlurm();
      sweeps->Tick();
      searches->Tick();
      // NOT_SERVING while the store rejects state writes, so load balancers
      // and operators see it; SERVING again once a write goes through. Shed
      // metrics and logs (DEGRADED, on /healthz) still serve.
      const bool healthy = manager->view().StoreHealthy();
      if (health != nullptr && healthy != serving) {
        health->SetServingStatus(healthy);
        serving = healthy;
        if (!healthy) spdlog::error("store is failing writes; health is NOT_SERVING");
      }
      if (on_tick) on_tick();
    }
  });
}

std::shared_ptr<grpc::Channel> CoordinatorServer::InProcessChannel() {
  grpc::ChannelArguments args;
  return server_->InProcessChannel(args);
}

std::shared_ptr<grpc::Channel> CoordinatorServer::InProcessChannel(
    std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>>
        interceptors) {
  grpc::ChannelArguments args;
  return server_->experimental().InProcessChannelWithInterceptors(
      args, std::move(interceptors));
}

void CoordinatorServer::Shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  if (monitor_.joinable()) {
    stop_monitor_.Notify();
    monitor_.join();
  }
  // Ends the event streams, so the HTTP server's threads can finish.
  manager_->changes().Close();
  if (http_ != nullptr) http_->Stop();
  retention_.reset();  // stops its pass between two jobs; /metrics read it
  manager_->Shutdown();
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  server_->Wait();
  if (auth_gate_ != nullptr) auth_gate_->Stop();
  writer_->Flush();
}

CoordinatorServer::~CoordinatorServer() {
  if (server_ != nullptr) Shutdown();
}

}  // namespace tessera
