// WorkerRegistry: the coordinator's view of its workers. It registers workers
// (each registration starts a new session, numbered by the worker's epoch),
// records their heartbeats, says by the injected Clock which workers are alive
// (heard from within suspect_after; only those get new ranks) and which have
// been silent past dead_after, and fences the session of a worker declared
// dead. Worker changes are enqueued on the StoreWriter.
//
// It also owns the reconciliation of a heartbeat: Heartbeat() returns a
// HeartbeatReport, which says what each rank the worker lists, and each rank
// the coordinator waits for there that it does not list, means against what
// the coordinator believes about that rank (a RankVerdict). The JobManager
// applies the verdicts to its jobs; the rules live here.
//
// Use: JobManager owns one. Recover() it from the store at startup; call
// Register() for RegisterWorker and Heartbeat() first on every heartbeat; on
// each tick, DeclareDead() every worker that Silent() returns and count the
// ranks placed there as lost.
//
// Thread-safety: none. The owner (JobManager) calls it only under its one
// mutex, which guards the workers together with the jobs placed on them.
#ifndef TESSERA_COORDINATOR_CORE_WORKER_REGISTRY_H_
#define TESSERA_COORDINATOR_CORE_WORKER_REGISTRY_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/gpu_monitor.h"
#include "common/job_state.h"
#include "coordinator/core/scheduler.h"
#include "coordinator/store/store.h"
#include "coordinator/store/store_writer.h"
#include "tessera/v1/tessera.pb.h"

namespace tessera {

// Most GPU readings kept per worker from one heartbeat.
inline constexpr int kMaxWorkerGpuReadings = 64;

struct WorkerRegistryOptions {
  // How often workers are asked to heartbeat (sent back by Register).
  absl::Duration heartbeat_interval = absl::Seconds(1);
  // A worker silent for longer than this is suspect: it is not Alive(), so it
  // gets no new ranks, but its heartbeats are still accepted.
  absl::Duration suspect_after = absl::Seconds(3);
  // A worker silent for longer than this is returned by Silent(), to be
  // declared dead.
  absl::Duration dead_after = absl::Seconds(15);
};

// What the coordinator believes about one rank (job, attempt, rank) in
// relation to the worker whose heartbeat is reconciled.
struct RankBelief {
  // The rank belongs to its job's current attempt and is placed on this
  // worker. A rank that is not current (of an earlier attempt, or of a job
  // that is no longer active) must not run; at most the coordinator waits for
  // it to stop.
  bool current = false;
  RankState state = RankState::kAssigned;  // of a current rank
  int32_t pid = 0;                         // of a current rank, once known
};

// What to do about one rank after comparing a heartbeat with the belief.
enum class RankVerdict {
  // Report and belief agree.
  kNone,
  // A current rank runs with a pid not recorded yet: record it running.
  kRecordRunning,
  // A current rank exited: record the exit, then acknowledge it.
  kRecordExit,
  // The exit is already recorded: acknowledge it, so the worker forgets the rank.
  kAcknowledgeExit,
  // A rank that is not current has stopped: stop waiting for it (and
  // acknowledge its exit when the worker reported one).
  kForget,
  // A current rank the worker no longer runs, although it did (or a new
  // session of the worker, which runs none of the old one's ranks): count it
  // as lost at once, so its slot is freed and its attempt ends.
  kLost,
  // The rank runs but must not (not current, or counted as exited already):
  // order it stopped.
  kStop,
};

// One heartbeat's report of the ranks a worker runs, or has run and not yet
// had acknowledged, with the rules that reconcile it against the coordinator's
// beliefs. Obtained from WorkerRegistry::Heartbeat; it refers to the request,
// which must outlive it.
class HeartbeatReport {
 public:
  // `registration`: the list comes with a registration (a new session of
  // the worker), not a heartbeat of the current one (it changes only the
  // reasons given).
  explicit HeartbeatReport(const tessera::v1::HeartbeatRequest& request,
                           bool registration = false);

  const std::string& worker() const { return request_->name(); }
  // The ranks as listed, in the order the worker sent them.
  const google::protobuf::RepeatedPtrField<tessera::v1::LocalRank>& ranks() const {
    return request_->ranks();
  }

  // Whether the worker lists rank `rank` of attempt `attempt` of the job.
  bool Lists(int64_t job_id, int32_t attempt, int32_t rank) const;
  // Whether it lists rank `rank` of the job in any attempt.
  bool ListsRank(int64_t job_id, int32_t rank) const;

  // What a rank the worker lists means, given the belief about it.
  RankVerdict Reconcile(const tessera::v1::LocalRank& reported,
                        const RankBelief& belief) const;
  // What a rank the coordinator believes is on this worker means when the
  // worker does not list it. A worker lists every rank it started until told
  // its exit was seen, and a registration lists all that the new session
  // runs, so: one that is not current has stopped (kForget); a current one
  // recorded running is gone (kLost); a current one not seen running yet is
  // left as it is (it is ordered launched, again).
  RankVerdict ReconcileUnlisted(const RankBelief& belief) const;
  bool registration() const { return registration_; }

 private:
  const tessera::v1::HeartbeatRequest* request_;  // Not owned.
  bool registration_ = false;
  std::set<std::tuple<int64_t, int32_t, int32_t>> listed_;  // (job, attempt, rank)
  std::set<std::pair<int64_t, int32_t>> listed_ranks_;      // (job, rank)
};

class WorkerRegistry {
 public:
  // `writer` and `clock` are not owned and must outlive the registry.
  WorkerRegistry(StoreWriter* writer, const Clock* clock, WorkerRegistryOptions options);

  WorkerRegistry(const WorkerRegistry&) = delete;
  WorkerRegistry& operator=(const WorkerRegistry&) = delete;

  // Adopts the workers a previous coordinator stored. Silence while no
  // coordinator ran says nothing about a worker: each gets a full dead_after
  // from now to heartbeat again.
  void Recover(std::vector<WorkerRecord> workers);

  // Registers a worker, or registers it again: a new session with the next
  // epoch, which revives a worker declared dead. InvalidArgument for a bad
  // name or slot count.
  absl::StatusOr<tessera::v1::RegisterWorkerResponse> Register(
      const tessera::v1::RegisterWorkerRequest& request);

  // Accepts a heartbeat of the worker's current session and records when it
  // was heard from, and its GPU readings: those of its registered gpu_ids,
  // each once and at most kMaxWorkerGpuReadings, with a value that is not
  // finite (or a negative size or power) left out and utilisation clamped to
  // 0-100; they replace the previous heartbeat's. NotFound for a worker that never
  // registered; Aborted for a stale session (an older epoch, or the worker was declared
  // dead since).
  absl::StatusOr<HeartbeatReport> Heartbeat(const tessera::v1::HeartbeatRequest& request);

  // OK when (`name`, `epoch`) is the worker's current session, else Aborted.
  // Records nothing.
  absl::Status CheckSession(const std::string& name, int64_t epoch) const;

  // Heard from within suspect_after and not declared dead.
  bool Alive(const std::string& name) const;

  // Drain: the worker gets no new ranks (Inventory marks it not alive) until
  // Undrain; `deadline` is when ranks still running there are stopped.
  // NotFound for an unknown worker. A worker that registers again stays
  // drained (an admin's drain outlives a restart); one that drained itself
  // (SIGTERM) is not, since it came back. An admin's drain is stored with the
  // worker, so Recover() after a coordinator restart keeps it.
  absl::Status Drain(const std::string& name, const std::string& reason,
                     absl::Time deadline, bool self = false);
  absl::Status Undrain(const std::string& name);
  bool Draining(const std::string& name) const;
  // When the drain of `name` stops what still runs (InfiniteFuture: none).
  absl::Time DrainDeadline(const std::string& name) const;
  // The reason given for the drain ("drain by alice", "worker stopping").
  std::string DrainReason(const std::string& name) const;
  // Names of the workers being drained.
  std::vector<std::string> DrainingWorkers() const;

  // The GPU readings of the worker's latest heartbeat in this session, in
  // the order sent; empty for an unknown worker, a CPU worker, and one without
  // NVML.
  std::vector<GpuReading> Gpus(const std::string& name) const;

  // Registered and not declared dead: its name is held (WorkerIdentity).
  bool Live(const std::string& name) const;

  // Workers not declared dead that have been silent for longer than
  // dead_after, in name order.
  std::vector<std::string> Silent() const;

  // Declares a registered worker dead and fences its session: its epoch moves
  // on, so its next heartbeat is refused and it must register again (and then
  // stops every rank that is no longer current). Returns the reason, naming
  // the worker and how long it was silent.
  std::string DeclareDead(const std::string& name);

  // The workers as the scheduler sees them; `used` holds the slots taken on
  // each worker.
  std::vector<WorkerInventory> Inventory(
      const std::map<std::string, std::vector<int32_t>>& used) const;
  // The workers as the API shows them; `used` as for Inventory().
  std::vector<tessera::v1::Worker> List(
      const std::map<std::string, std::vector<int32_t>>& used) const;

  size_t size() const { return workers_.size(); }

 private:
  struct WorkerState {
    WorkerRecord record;
    bool dead = false;  // declared dead; cleared when it registers again
    bool draining = false;
    bool self_drain = false;  // asked for by the worker itself (SIGTERM)
    std::string drain_reason;
    absl::Time drain_deadline = absl::InfiniteFuture();
    std::vector<GpuReading> gpus;  // of the latest heartbeat of this session
  };

  bool AliveState(const WorkerState& w) const;
  absl::Duration SilentFor(const WorkerState& w) const;
  // Writes w's admin drain (or its absence) to the record and the store.
  void StoreAdminDrain(WorkerState& w);

  StoreWriter* const writer_;  // Not owned.
  const Clock* const clock_;   // Not owned.
  const WorkerRegistryOptions options_;

  std::map<std::string, WorkerState> workers_;
};

}  // namespace tessera

#endif  // TESSERA_COORDINATOR_CORE_WORKER_REGISTRY_H_
