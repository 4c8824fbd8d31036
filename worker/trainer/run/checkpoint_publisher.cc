#include "worker/trainer/run/checkpoint_publisher.h"

#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <iostream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/rank_phase.h"
#include "common/status_macros.h"

namespace tessera::trainer {

CheckpointPublisher::CheckpointPublisher(const CheckpointDirectory& dir,
                                         Communicator& communicator,
                                         PhaseReporter& phases, c10::Device device,
                                         CheckpointPublisherOptions options)
    : dir_(dir),
      communicator_(communicator),
      phases_(phases),
      device_(device),
      options_(std::move(options)),
      rank_(communicator.rank()),
      world_(communicator.world_size()) {}

absl::Status CheckpointPublisher::FinishPrevious(int64_t step) {
  if (!in_flight_.has_value()) return absl::OkStatus();
  if (rank_ == 0 && options_.log != nullptr) {
    *options_.log << "[rank 0] checkpoint " << *in_flight_
                  << " is still being written at step " << step
                  << "; waiting for it (checkpoint_every may be shorter than a write)"
                  << std::endl;
  }
  return PublishWhenDurable(/*block=*/true, step);
}

absl::Status CheckpointPublisher::Start(int64_t step, CheckpointFiles files,
                                        absl::Duration snapshot) {
  if (in_flight_.has_value()) {
    return absl::FailedPreconditionError(
        absl::StrCat("checkpoint ", *in_flight_, " is still in flight"));
  }
  bytes_ = files.total_bytes();
  snapshot_ = snapshot;
  started_ = absl::Now();
  RETURN_IF_ERROR(writer_.Start([files = std::move(files), hook = options_.before_write](
                                    const CheckpointWriter::Progress& progress) {
    if (hook) hook(files.step);
    return WriteCheckpointFiles(files, progress);
  }));
  in_flight_ = step;
  own_part_durable_ = false;
  return absl::OkStatus();
}

absl::StatusOr<int> CheckpointPublisher::RanksWithDurableCheckpoint() {
  if (!own_part_durable_ && writer_.done()) {
    // A write that failed fails the run here, before the vote: the
    // checkpoint is never published.
    absl::Status written = writer_.Wait();
    if (!written.ok()) {
      return absl::Status(written.code(), absl::StrCat("writing checkpoint ", *in_flight_,
                                                       ": ", written.message()));
    }
    own_part_durable_ = true;
  }
  const int mine = own_part_durable_ ? 1 : 0;
  if (world_ == 1) return mine;
  torch::Tensor count = torch::full({1}, static_cast<float>(mine),
                                    torch::dtype(torch::kFloat).device(device_));
  RETURN_IF_ERROR(communicator_.AllReduceSum(count));
  return static_cast<int>(
      std::lround(phases_.ReadFromDevice([&] { return count.item<float>(); })));
}

absl::Status CheckpointPublisher::PublishWhenDurable(bool block, int64_t step) {
  constexpr int64_t kBytesPerItem = int64_t{8} << 20;
  int64_t reported = 0;
  while (true) {
    ASSIGN_OR_RETURN(const int durable, RanksWithDurableCheckpoint());
    if (durable == world_) break;
    if (!block) return absl::OkStatus();
    // Waiting for the disk, not for a peer: progress is the bytes written.
    phases_.Report(RankPhase::kCheckpoint);
    const int64_t bytes = writer_.bytes_written();
    for (; phases_.progress() != nullptr && reported + kBytesPerItem <= bytes;
         reported += kBytesPerItem) {
      phases_.AddPhaseItem();
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  const int64_t published = *in_flight_;
  in_flight_.reset();
  own_part_durable_ = false;
  if (rank_ == 0) {
    std::ostream& log = options_.log != nullptr ? *options_.log : std::cerr;
    RETURN_IF_ERROR(PublishCheckpoint(dir_, published, options_.keep, log));
    if (options_.log != nullptr) {
      *options_.log << absl::StrFormat(
                           "[rank 0] checkpoint %d published at step %d: %.1f MB, "
                           "snapshot %.2f s, written and agreed %.2f s later",
                           published, step, static_cast<double>(bytes_) / 1e6,
                           absl::ToDoubleSeconds(snapshot_),
                           absl::ToDoubleSeconds(absl::Now() - started_))
                    << std::endl;
    }
  }
  return absl::OkStatus();
}

}  // namespace tessera::trainer
