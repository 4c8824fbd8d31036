// tessera-coordinator: flags -> Options, wiring, signals. No logic here.
#include <pthread.h>

#include <csignal>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>

#include "CLI/CLI.hpp"
#include "coordinator/common/service_notify.h"
#include "coordinator/coordinator_server.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"

int main(int argc, char** argv) {
  tessera::CoordinatorOptions options;
  options.http = "127.0.0.1:8080";
  std::string port_file;
  std::string http_port_file;
  int64_t heartbeat_ms = 1000;
  int64_t dead_after_ms = 15000;
  int64_t suspect_after_ms = 3000;
  int64_t rendezvous_timeout_ms = 300000;

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
  CLI11_PARSE(app, argc, argv);
  options.manager.worker_suspect_after = absl::Milliseconds(suspect_after_ms);
  options.manager.rendezvous_timeout = absl::Milliseconds(rendezvous_timeout_ms);
  options.manager.heartbeat_interval = absl::Milliseconds(heartbeat_ms);
  options.manager.worker_dead_after = absl::Milliseconds(dead_after_ms);

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
  auto server = tessera::CoordinatorServer::Start(options);
  if (!server.ok()) {
    std::cerr << "tessera-coordinator: " << server.status().message() << "\n";
    return 1;
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
