// ActiveJob: the coordinator's in-memory view of one job that is queued or
// running, or that has ended while some of its ranks still run: its record and
// events as stored, its current attempt's ranks, ranks of earlier attempts
// still being stopped, and ranks lost with a dead worker that may still run
// until their trainer lease runs out.
//
// JobManager keeps one per active job and drives the job state machine over
// them; the methods here are the bookkeeping of one job that needs no other
// job, no store and no clock of its own (times are passed in).
//
// Thread-safety: none. JobManager's mutex guards every ActiveJob.
#ifndef TESSERA_COORDINATOR_CORE_ACTIVE_JOB_H_
#define TESSERA_COORDINATOR_CORE_ACTIVE_JOB_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "coordinator/core/rank_outputs.h"
#include "coordinator/core/rank_watch.h"
#include "coordinator/core/scheduler.h"
#include "coordinator/store/store.h"
#include "tessera/v1/tessera.pb.h"

namespace tessera {

// A rank whose worker was declared dead (or that a restarted coordinator
// cannot account for): it may still run behind a partition until `deadline`,
// when its trainer lease has run out.
struct LostRank {
  RankRecord rank;
  absl::Time lost_at;
  absl::Time deadline;
};

struct ActiveJob {
  JobRecord record;
  std::vector<RankRecord> ranks;  // current attempt, indexed by rank
  std::vector<bool> kill_sent;    // per rank: stop ordered
  // Ranks of earlier attempts still running (being stopped); their slots stay
  // taken until their workers report them gone.
  std::vector<RankRecord> previous;
  absl::Time placed_at;          // when the current attempt was placed
  absl::Time queued_at;          // when it last entered QUEUED
  bool owner_admin = false;      // submitted by an admin: no per-user limits
  std::vector<JobEvent> events;  // as stored, so status reads need no disk I/O
  // Per (attempt, rank): the latest moment its trainer may have started or
  // renewed its lease (placement, each launch order sent, each renewal
  // received). A lost rank may run until its lease, counted from here, ends.
  std::map<std::pair<int32_t, int32_t>, absl::Time> last_contact;
  // Lost ranks of this job. The next attempt waits until each is confirmed
  // stopped by its worker or its lease has run out.
  std::vector<LostRank> lost;
  // The watchdog over the current attempt, from when it began running.
  std::optional<RankWatch> watch;
  // Why the current attempt is being preempted ("preempted on w2 (drain by
  // alice)"); empty while it is not. Its ranks were sent SIGUSR1 and are
  // expected to checkpoint and exit with the preempted code.
  std::string preempting;
  // The attempt a restarted coordinator adopted from the store (0: none).
  // Its trainers reported their results to the previous coordinator, which
  // may have died before storing them.
  int32_t adopted_attempt = 0;
  // Metric rows plus log lines not stored (shed below the database's
  // reserve) that the job's events already name.
  int64_t shed_named = 0;

  // Starts the next attempt on the placement's slots at `now`: every rank is
  // assigned, none ordered stopped, and each one's lease counts from now.
  void StartAttempt(const Placement& placement, absl::Time now);
  // The current attempt's placement, e.g. "0->a/0, 1->b/0".
  std::string PlacementText() const;

  // Rank `rank` of the current attempt when `attempt` is current and the rank
  // is placed on `worker`; otherwise nullptr.
  RankRecord* CurrentRank(int32_t attempt, int32_t rank, const std::string& worker);

  // Records that the current rank `reported` names exited as it says, with
  // the reason the job shows, and returns it.
  RankRecord& RecordExit(const tessera::v1::LocalRank& reported);
  // The first current rank that failed (exited non-zero or by a signal), or
  // nullptr.
  const RankRecord* FirstFailedRank() const;
  // A current rank of the adopted attempt that exited with code 0 but has no
  // stored result: the previous coordinator took its result and died before
  // storing it. nullptr when there is none.
  const RankRecord* ResultLostRank() const;
  // Whether every current rank exited with code 0.
  bool AllExitedCleanly() const;
  // Whether every current rank has exited, each with code 0 or the preempted
  // code, and at least one was preempted.
  bool AllExitedPreempted() const;
  // Whether every current rank has exited.
  bool AllExited() const;

  // Each current rank's index among the job's ranks on the same worker.
  std::vector<int32_t> LocalRanks() const;

  // Adds the slots that the job's ranks still hold (current ranks that have
  // not exited, earlier ranks being stopped) to `used`, per worker.
  void AddUsedSlots(std::map<std::string, std::vector<int32_t>>& used) const;

  // Whether the job has ended and none of its ranks runs any more.
  bool Finished() const;

  // Counts `rank` as lost at `now`, running at most until `deadline`.
  void LoseRank(const RankRecord& rank, absl::Time now, absl::Time deadline);

  // Stops waiting for rank `rank` of earlier attempt `attempt` on `worker`,
  // which its worker reported exited. Returns whether it was waited for.
  bool ForgetExitedRank(int32_t attempt, int32_t rank, const std::string& worker);

  // Drops the lost ranks whose lease has run out by `now`; returns whether
  // there were any.
  bool ExpireLostRanks(absl::Time now);

  // Why the next attempt may not start yet at `now` (a rank of an earlier
  // attempt may still run: the same rank would run twice); empty when it may.
  std::string HoldReason(absl::Time now) const;

  // What a log read of rank `rank` of `attempt` (0: the current one) needs to
  // know about the job.
  ActiveLog LogOf(int32_t attempt, int32_t rank) const;

  // The job as the API shows it, with its events and, as of `now`, its ranks'
  // progress and the stragglers flagged.
  tessera::v1::Job ToProto(absl::Time now) const;
};

// A job as the API shows it, from its record and its current attempt's ranks.
tessera::v1::Job JobToProto(const JobRecord& record,
                            const std::vector<RankRecord>& ranks);

// Appends `events` to `job`.
void AddEvents(const std::vector<JobEvent>& events, tessera::v1::Job& job);

}  // namespace tessera

#endif  // TESSERA_COORDINATOR_CORE_ACTIVE_JOB_H_
