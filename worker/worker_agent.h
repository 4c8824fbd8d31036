// WorkerAgent: the worker daemon's session with the coordinator.
//
// One loop thread registers the worker's slots, then heartbeats. Each heartbeat
// carries every rank the worker started and has not had acknowledged, and what
// each GPU the worker owns is doing (NVML; none without it); the reply
// carries orders to launch ranks and to stop them. When the coordinator is
// unreachable the agent keeps its ranks running and retries with exponential
// backoff, logging each failure; it never gives up. When the coordinator has
// forgotten the session (NOT_FOUND or ABORTED on heartbeat) it registers again.
//
// Launching a rank is where the worker protects its node from the jobs it
// runs. A worker running as root runs each rank as the unix account named by
// the job's owner (AccountForRank), never as root unless
// WorkerOptions::allow_root_jobs; it refuses a rank whose data or checkpoint
// directory resolves outside the operator's roots (CheckTrainerPaths). The
// rank's environment is built from an allowlist (RankEnvironment): nothing of
// the worker's own passes but what the operator names, and the spec's env
// names are checked again (no shell is involved anywhere). Its directories in
// the work dir are created through directory descriptors and never through a
// symlink (work_dir.h). Its CUDA_VISIBLE_DEVICES names only GPUs the worker
// owns (WorkerOptions::gpu_ids), those of its job's slots; an order for a slot
// outside that set is refused. A refused rank is reported to the coordinator as
// exited with code 127 and the reason. A worker not running as root runs every
// rank as itself.
//
// Identity: the first registration, with the join token, brings the worker a
// credential of its own (coordinator/core/worker_identity.h); the agent keeps
// it in WorkerOptions::state_dir (credential_file.h) and sends it on every
// later call, so that it gets its name back at once after a restart. Every
// registration lists the ranks this process runs or ran and has not had
// acknowledged, as a heartbeat does (none for a fresh process): a rank the
// coordinator believes runs here and that is not listed is lost.
//
// Orders: launch, kill (Supervisor::Stop: SIGTERM, SIGKILL after kill_grace;
// SIGKILL at once for a stopped rank), and preempt (SIGUSR1 to the trainer
// process alone, once per rank: it checkpoints and exits with
// kTrainerExitPreempted).
//
// Draining: Drain() (SIGTERM) and Preempt() (a preemption notice, SIGUSR1)
// make every later heartbeat say `draining`, so the coordinator gives the
// worker no new ranks, and send SIGUSR1 to each running rank. After Drain()
// the agent keeps heartbeating and shipping logs until no rank runs and the
// coordinator has acknowledged every exit, or drain_timeout passes; then Run()
// stops what is left and returns. After Preempt() it goes on serving. A launch
// order that arrives while draining is refused as preempted (exit code
// kTrainerExitPreempted, "worker W is draining").
//
// Thread-safety: Run() blocks on the calling thread until it is done; Stop(),
// Drain() and Preempt() may be called from any thread (a signal thread).
#ifndef TESSERA_WORKER_WORKER_AGENT_H_
#define TESSERA_WORKER_WORKER_AGENT_H_

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/gpu_monitor.h"
#include "common/service_notify.h"
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
  // The GPUs this worker owns, as CUDA_VISIBLE_DEVICES ids (indices or
  // UUIDs); slot i is gpu_ids[i]. When not empty the worker offers one slot
  // per GPU and gives each rank a CUDA_VISIBLE_DEVICES made of its slots' ids,
  // never an id outside this list. main.cc fills it from the probe
  // (device_probe.h).
  std::vector<std::string> gpu_ids;
  // NVML (gpu_monitor.h), through which every heartbeat reports what each GPU
  // of gpu_ids is doing: a name dlopen searches for, or a path. When it cannot
  // be loaded (no driver) heartbeats carry no GPU readings.
  std::string nvml_library = kNvmlLibrary;
  // Per-rank logs and credential files go under this directory, which must
  // belong to the worker's user and not be writable by group or others
  // (created 0711 when missing).
  std::string work_dir = "/var/lib/tessera-worker/work";
  // The worker's own credential is kept here (worker-NAME.credential, 0600);
  // the same rules as for work_dir. Empty: kept in memory only.
  std::string state_dir = "/var/lib/tessera-worker";
  // Names of the worker's environment variables that its ranks get too,
  // besides LANG, LC_ALL and TZ (e.g. LD_LIBRARY_PATH for a CUDA install, or
  // NCCL_SOCKET_IFNAME). Nothing else of the worker's environment passes.
  std::vector<std::string> pass_env;
  // tessera-train executable. main.cc defaults it to the one next to tessera-worker.
  std::string trainer_path;
  // Deadline of each register/heartbeat call.
  absl::Duration rpc_timeout = absl::Seconds(5);
  // Retry backoff while the coordinator is unreachable: doubling up to
  // max_backoff, each wait up to a fifth shorter (jitter, common/retry.h).
  absl::Duration initial_backoff = absl::Milliseconds(500);
  // Kept well below the coordinator's dead threshold (15 s by default), so a
  // worker is back within it after the coordinator restarts.
  absl::Duration max_backoff = absl::Seconds(3);
  // Most log bytes shipped per rank per heartbeat.
  int64_t log_chunk_bytes = 256 * 1024;
  // Time between SIGTERM and SIGKILL when stopping a rank.
  absl::Duration kill_grace = absl::Seconds(10);
  // After Drain(): how long the ranks get to checkpoint and exit, and the
  // coordinator to acknowledge their exits, before the worker stops what is
  // left (SIGTERM, then SIGKILL after kill_grace) and exits. Zero: Drain()
  // stops at once, as Stop() does.
  absl::Duration drain_timeout = absl::Seconds(120);
  // Sent at registration: the worker pool this worker belongs to (e.g. the
  // name of a Slurm pool) and the Slurm allocation it runs in. Empty: none.
  std::string pool;
  std::string slurm_job_id;
  // The cluster join token, sent on every call ("authorization: Bearer ...").
  std::string join_token;
  // When the worker runs as root: whether a rank may run as root too (a job
  // whose owner is uid 0 here, or an ownerless job while job_user is empty).
  bool allow_root_jobs = false;
  // When the worker runs as root: the account for jobs without an owner
  // (submitted to a coordinator with --insecure-no-auth), e.g. "nobody".
  std::string job_user;
  // trainer.data_dir must resolve (symlinks followed) to one of these
  // directories or below.
  std::vector<std::string> data_roots = {"/usr/share/datasets", "/var/lib/tessera/data",
                                         "/data"};
  // The same for trainer.checkpoint_dir.
  std::vector<std::string> checkpoint_roots = {"/var/lib/tessera/checkpoints",
                                               "/shared/checkpoints"};
  // TLS to the coordinator, passed on to the trainers: a PEM file of the roots
  // to trust, and the name to check in the coordinator's certificate instead of
  // the dialled host (empty: the host). No file: plaintext.
  std::string tls_ca_file;
  std::string tls_server_name;
};

// `path` with symlinks resolved: the longest existing prefix through
// realpath(3), the rest appended as written (a checkpoint directory need not
// exist yet). InvalidArgument for a relative path or one with a ".."
// component; FailedPrecondition when an existing prefix cannot be resolved
// (e.g. a dangling symlink, which the trainer would follow).
absl::StatusOr<std::string> ResolvePath(const std::string& path);

// ResolvePath(path) if that is one of `roots` (themselves resolved) or lies
// below one; otherwise PermissionDenied naming `what` and the roots.
absl::StatusOr<std::string> ResolveUnderRoots(const std::string& what,
                                              const std::string& path,
                                              const std::vector<std::string>& roots);

// `config` with data_dir and checkpoint_dir (where set) replaced by their
// resolved paths, or the reason the rank is refused.
absl::StatusOr<tessera::v1::TrainerConfig> CheckTrainerPaths(
    const WorkerOptions& options, const tessera::v1::TrainerConfig& config);

// The account a rank of a job owned by `owner` runs as: nullopt for "as the
// worker" (always so when the worker is not root, and for ownerless or root
// jobs when options.allow_root_jobs). An error is the reason the rank is
// refused, e.g. "user alice has no account on worker w1". `worker_is_root` is
// geteuid() == 0 in production.
absl::StatusOr<std::optional<UnixAccount>> AccountForRank(const WorkerOptions& options,
                                                          const std::string& owner,
                                                          bool worker_is_root);

// The spec's env entries as "NAME=value", each name checked again (the
// coordinator checked them at submit): refused names are an error.
absl::StatusOr<std::vector<std::string>> RankEnv(const tessera::v1::LaunchOrder& order);

// Every rank's PATH.
inline constexpr char kRankPath[] = "/usr/local/bin:/usr/bin:/bin";

// A rank's whole environment, sorted by name: PATH (kRankPath); HOME, USER
// and LOGNAME of `account`; LANG, LC_ALL, TZ and options.pass_env where the
// worker's environment has them (read through `lookup`, getenv in
// production); then `tessera` (the names the worker sets: RANK, TESSERA_*,
// CUDA_VISIBLE_DEVICES, ...), then `spec` (RankEnv), each entry replacing one
// of the same name before it.
std::vector<std::string> RankEnvironment(
    const WorkerOptions& options, const UnixAccount& account,
    const std::vector<std::string>& tessera, const std::vector<std::string>& spec,
    const std::function<const char*(const char*)>& lookup);

// The account the worker itself runs as (for the environment of ranks that
// run as the worker).
UnixAccount WorkerAccount();

class WorkerAgent {
 public:
  // `launcher` and `cgroups` are not owned; `cgroups` may be null (process
  // groups only).
  WorkerAgent(WorkerOptions options, std::shared_ptr<grpc::Channel> channel,
              ProcessLauncher* launcher, CgroupTree* cgroups = nullptr);

  // Serves until Stop(), or until a drain ends; then stops every rank still
  // running, reports their exits if the coordinator is reachable, and returns.
  // A worker of a Slurm allocation (slurm_job_id set) whose registration or
  // heartbeat the coordinator refuses as unauthenticated (its join credential
  // was revoked: the coordinator no longer wants the allocation) returns too,
  // after stopping its ranks, so that the allocation ends instead of holding
  // its nodes until its time limit; refused() then says so. Any other worker
  // retries with backoff, as for an unreachable coordinator.
  void Run();
  // Whether Run() returned because the join credential was refused.
  bool refused() const { return refused_; }
  // Stops at once: every rank gets SIGTERM, then SIGKILL after kill_grace.
  void Stop();
  // Drains, then ends Run() (see the class comment); a second call, or any
  // call when drain_timeout is zero, is Stop().
  void Drain();
  // A preemption notice: drains without ending Run().
  void Preempt();

 private:
  // Sets the deadline and the join token on a call.
  void Prepare(grpc::ClientContext& ctx) const;
  absl::Status Register();
  absl::Status HeartbeatOnce();
  // What a failed registration or heartbeat means: retry with backoff,
  // register again at once (the session is gone), or stop (see Run()).
  enum class Refusal { kRetry, kRegisterAgain, kStop };
  Refusal Classify(const absl::Status& s);
  // Every supervised rank as the coordinator sees it, for registrations and
  // heartbeats alike.
  void AddLocalRanks(google::protobuf::RepeatedPtrField<tessera::v1::LocalRank>* out);
  void Launch(const tessera::v1::LaunchOrder& order);
  // No rank left to report: every exit acknowledged, every log shipped.
  bool Drained() const { return supervisor_.Snapshot().empty() && logs_.empty(); }
  // Acts on Drain() and Preempt(). Returns false once Stop() was called.
  bool HandleRequests();
  // After Run()'s loop: heartbeats until every exit is acknowledged, for at
  // most rpc_timeout.
  void ReportFinalExits();
  bool HasRequest() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
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
  // Reads the GPUs of gpu_ids; null on a CPU worker and without NVML.
  const std::unique_ptr<GpuMonitor> gpus_;
  // What other threads asked for; the loop thread acts on it.
  mutable absl::Mutex mu_;
  bool stop_requested_ ABSL_GUARDED_BY(mu_) = false;
  bool drain_requested_ ABSL_GUARDED_BY(mu_) = false;  // Drain() was called
  bool drain_pending_ ABSL_GUARDED_BY(mu_) = false;    // and not acted on yet
  bool preempt_pending_ ABSL_GUARDED_BY(mu_) = false;
  // The rest belongs to the loop thread.
  bool draining_ = false;                     // sent in heartbeats
  std::optional<absl::Time> drain_deadline_;  // set by Drain()
  int64_t epoch_ = 0;                         // 0: not registered
  std::atomic<bool> refused_ = false;         // see Run()
  // This worker's own credential (empty until issued); read from the state
  // dir when Run() starts.
  std::string credential_;
  struct LogShipper {
    std::string path;
    int64_t offset = 0;  // bytes the coordinator has
  };
  std::map<RankKey, LogShipper> logs_;
  absl::Duration heartbeat_interval_ = absl::Seconds(1);
};

}  // namespace tessera

#endif  // TESSERA_WORKER_WORKER_AGENT_H_
