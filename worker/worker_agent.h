// WorkerAgent: the worker daemon's session with the coordinator.
//
// One loop thread registers the worker's slots, then heartbeats. Each heartbeat
// carries every rank the worker started and has not had acknowledged; the reply
// carries orders to launch ranks and to stop them. When the coordinator is
// unreachable the agent keeps its ranks running and retries with exponential
// backoff, logging each failure; it never gives up. When the coordinator has
// forgotten the session (NOT_FOUND or ABORTED on heartbeat) it registers again.
//
// Thread-safety: Run() blocks on the calling thread until Stop(); Stop() may be
// called from any thread.
#ifndef TESSERA_WORKER_WORKER_AGENT_H_
#define TESSERA_WORKER_WORKER_AGENT_H_

#include <map>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "coordinator/common/service_notify.h"
#include "grpcpp/channel.h"
#include "tessera/v1/tessera.grpc.pb.h"
#include "worker/supervisor.h"

namespace tessera {

struct WorkerOptions {
  // Coordinator address HOST:PORT, also handed to the trainers.
  std::string coordinator = "127.0.0.1:50051";
  // Worker name; unique in the cluster. main.cc defaults it to the hostname.
  std::string name;
  std::string hostname;
  // CPU slots offered when the node has no GPU.
  int cpu_slots = 1;
  // GPUs on this node; when positive the worker offers one slot per GPU and
  // sets CUDA_VISIBLE_DEVICES for its ranks. main.cc fills it from the probe.
  int gpus = 0;
  // Per-rank logs go under this directory.
  std::string work_dir = "tessera-work";
  // tessera-train executable. main.cc defaults it to the one next to tessera-worker.
  std::string trainer_path;
  // Deadline of each register/heartbeat call.
  absl::Duration rpc_timeout = absl::Seconds(5);
  // Retry backoff while the coordinator is unreachable.
  absl::Duration initial_backoff = absl::Milliseconds(500);
  // Kept well below the coordinator's dead threshold (15 s by default), so a
  // worker is back within it after the coordinator restarts.
  absl::Duration max_backoff = absl::Seconds(3);
  // Most log bytes shipped per rank per heartbeat.
  int64_t log_chunk_bytes = 256 * 1024;
  // Time between SIGTERM and SIGKILL when stopping a rank.
  absl::Duration kill_grace = absl::Seconds(10);
  // The cluster join token, sent on every call ("authorization: Bearer ...").
  std::string join_token;
};

class WorkerAgent {
 public:
  // `launcher` and `cgroups` are not owned; `cgroups` may be null (process
  // groups only).
  WorkerAgent(WorkerOptions options, std::shared_ptr<grpc::Channel> channel,
              ProcessLauncher* launcher, CgroupTree* cgroups = nullptr);

  // Serves until Stop(); then stops every rank, reports their exits if the
  // coordinator is reachable, and returns.
  void Run();
  void Stop() { stop_.Notify(); }

 private:
  // Sets the deadline and the join token on a call.
  void Prepare(grpc::ClientContext& ctx) const;
  absl::Status Register();
  absl::Status HeartbeatOnce();
  void Launch(const tessera::v1::LaunchOrder& order);
  // Sends new bytes of every rank's log file to the coordinator; a rank's
  // shipping ends once it has exited and its whole file was sent.
  void ShipLogs();
  // Waits up to `d`, returning early when stopping or when a rank exits.
  void WaitFor(absl::Duration d);

  const WorkerOptions options_;
  std::unique_ptr<tessera::v1::WorkerService::Stub> stub_;
  RealClock clock_;
  ServiceNotifier notifier_;
  Supervisor supervisor_;
  absl::Notification stop_;
  int64_t epoch_ = 0;  // 0: not registered
  struct LogShipper {
    std::string path;
    int64_t offset = 0;  // bytes the coordinator has
  };
  std::map<RankKey, LogShipper> logs_;
  absl::Duration heartbeat_interval_ = absl::Seconds(1);
};

}  // namespace tessera

#endif  // TESSERA_WORKER_WORKER_AGENT_H_
