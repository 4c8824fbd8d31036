// A rank's checkpoints on their way to disk: each is written on a background
// thread (checkpoint_writer.h) while training goes on, and published (rank 0
// moves `latest` to it and prunes old ones: checkpoint.h) only once every
// rank's part is durable. The ranks learn that by summing their "written"
// flags in one small all-reduce, asked at the same steps on every rank, so the
// publisher is a collective: every rank calls it alike.
//
// Use: per checkpoint, FinishPrevious (one checkpoint is in flight at a time),
// take the snapshot, Start it; then PublishWhenDurable(false) after each step
// while in_flight(), or PublishWhenDurable(true) to wait (the run's end, a
// preemption, synchronous writes). A write that failed fails the run there,
// and its checkpoint is never published.
//
// Thread-safety: the training loop's thread calls it; the writing runs on the
// writer's thread.
#ifndef TESSERA_WORKER_TRAINER_RUN_CHECKPOINT_PUBLISHER_H_
#define TESSERA_WORKER_TRAINER_RUN_CHECKPOINT_PUBLISHER_H_

#include <c10/core/Device.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <ostream>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "worker/trainer/dist/communicator.h"
#include "worker/trainer/run/checkpoint.h"
#include "worker/trainer/run/checkpoint_writer.h"
#include "worker/trainer/run/phase_reporter.h"

namespace tessera::trainer {

struct CheckpointPublisherOptions {
  // Complete checkpoints kept in the directory (older ones removed).
  int keep = 2;
  // Rank 0's lines on waits and publications; null: none (then
  // PublishCheckpoint's warnings go to stderr).
  std::ostream* log = nullptr;
  // TEST HOOK: runs on the writer's thread before it writes the files of
  // `step`; null: none.
  std::function<void(int64_t step)> before_write;
};

class CheckpointPublisher {
 public:
  // `dir`, `communicator` and `phases` must outlive the publisher; the
  // all-reduce's flag lives on `device`, the training device.
  CheckpointPublisher(const CheckpointDirectory& dir, Communicator& communicator,
                      PhaseReporter& phases, c10::Device device,
                      CheckpointPublisherOptions options);
  CheckpointPublisher(const CheckpointPublisher&) = delete;
  CheckpointPublisher& operator=(const CheckpointPublisher&) = delete;

  // The step of the checkpoint being written or agreed on; nullopt when none.
  std::optional<int64_t> in_flight() const { return in_flight_; }

  // When a checkpoint is still in flight at `step` (the previous one has not
  // reached every rank's disk within checkpoint_every steps): says so on rank
  // 0's log and waits until it is published.
  absl::Status FinishPrevious(int64_t step);
  // Starts writing `files`, the snapshot of checkpoint `step` (taken in
  // `snapshot`). FailedPrecondition while another is in flight.
  absl::Status Start(int64_t step, CheckpointFiles files, absl::Duration snapshot);
  // Publishes the checkpoint in flight once every rank's part is durable.
  // `block`: polls until then, reporting the bytes written as progress of the
  // "checkpoint" phase; else asks once. `step`: the loop's, for the log.
  absl::Status PublishWhenDurable(bool block, int64_t step);

 private:
  // The ranks whose part of the checkpoint in flight is durable (one
  // all-reduce in a world of several).
  absl::StatusOr<int> RanksWithDurableCheckpoint();

  const CheckpointDirectory& dir_;  // Not owned.
  Communicator& communicator_;      // Not owned.
  PhaseReporter& phases_;           // Not owned.
  const c10::Device device_;
  const CheckpointPublisherOptions options_;
  const int rank_;
  const int world_;

  CheckpointWriter writer_;
  std::optional<int64_t> in_flight_;  // its step, until published
  bool own_part_durable_ = false;     // this rank's files are written
  int64_t bytes_ = 0;                 // rank 0's files of the one in flight
  absl::Duration snapshot_;           // its serialisation on the loop's thread
  absl::Time started_;                // when its write began
};

}  // namespace tessera::trainer

#endif  // TESSERA_WORKER_TRAINER_RUN_CHECKPOINT_PUBLISHER_H_
