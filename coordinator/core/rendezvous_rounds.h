// RendezvousRounds: gathers the ranks of one job attempt and releases them together.
//
// The JobManager opens a round when it places an attempt, giving each rank's
// local rank. Each trainer then joins with its rank; rank 0 brings the
// collective's bootstrap data (a c10d store address, or an NCCL unique id).
// When the last rank joins, Join returns every waiter's callback paired with
// its result, and the caller runs them (outside its locks). A rank that joins
// twice (a retried call) replaces its earlier waiter, which is told Aborted.
//
// Thread-safety: none. The owner (JobManager) serialises calls under its mutex.
#ifndef TESSERA_COORDINATOR_CORE_RENDEZVOUS_ROUNDS_H_
#define TESSERA_COORDINATOR_CORE_RENDEZVOUS_ROUNDS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace tessera {

struct RendezvousResult {
  int32_t rank = 0;
  int32_t local_rank = 0;
  int32_t world_size = 0;
  int32_t attempt = 0;
  std::string bootstrap;
  std::string backend;
};

class RendezvousRounds {
 public:
  using Callback = std::function<void(absl::StatusOr<RendezvousResult>)>;
  // Callbacks to run, each with its outcome.
  using Releases = std::vector<std::pair<Callback, absl::StatusOr<RendezvousResult>>>;

  // Opens the round for (job, attempt). `local_ranks[r]` is rank r's local rank.
  void Open(int64_t job_id, int32_t attempt, std::vector<int32_t> local_ranks);

  // Adds rank `rank`. Returns InvalidArgument/NotFound/FailedPrecondition right
  // away for a bad request (and does not keep `cb`). Otherwise keeps `cb`, and
  // fills `releases` with the callbacks to run now: all ranks' when this join
  // completes the round, or the replaced waiter's when the rank joined before.
  // Sets `*completed` when this join completed the round.
  absl::Status Join(int64_t job_id, int32_t attempt, int32_t rank,
                    const std::string& bootstrap, const std::string& backend, Callback cb,
                    Releases* releases, bool* completed);

  // Ends the round, failing every waiter with `reason`. No-op if not open.
  Releases Close(int64_t job_id, int32_t attempt, const absl::Status& reason);

  // Ends every round, failing every waiter with `reason`.
  Releases CloseAll(const absl::Status& reason);

  bool IsOpen(int64_t job_id, int32_t attempt) const;
  // Ranks that have not joined yet, or nullopt when the round is not open.
  std::optional<std::vector<int32_t>> Missing(int64_t job_id, int32_t attempt) const;

 private:
  struct Round {
    std::vector<int32_t> local_ranks;
    std::map<int32_t, Callback> waiters;  // rank -> waiter
    std::optional<std::string> bootstrap;
    std::string backend;
    bool released = false;
  };
  std::map<std::pair<int64_t, int32_t>, Round> rounds_;
};

}  // namespace tessera

#endif  // TESSERA_COORDINATOR_CORE_RENDEZVOUS_ROUNDS_H_
