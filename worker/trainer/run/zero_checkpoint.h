// The optimizer state of a ZeRO run (stage 1 or 2, dist/zero_optimizer.h) in
// a checkpoint: each rank writes its shard beside the checkpoint's other files,
//   step-000000000120/optimizer-rank-00001.pt
// holding, per piece of a parameter it keeps state for, the parameter's
// index, the piece's offset within it, the step count and the state tensors
// (flat). model.pt then holds no optimizer state and says the stage
// (checkpoint.h's RankCheckpoint::zero_stage).
//
// Shards are written by parameter, not by bucket, so any layout can read them:
// LoadZeroShards reads every rank's file and joins each parameter's pieces into
// its whole flat state, which a run at another world size cuts into its own
// pieces (ZeroOptimizer::ImportState) and a stage-0 run takes whole
// (optimizer_state.h's WriteFlatState).
//
// Thread-safety: free functions; file I/O on the caller's thread (the bytes
// are written by the checkpoint writer like the other files).
#ifndef TESSERA_WORKER_TRAINER_RUN_ZERO_CHECKPOINT_H_
#define TESSERA_WORKER_TRAINER_RUN_ZERO_CHECKPOINT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/trainer/dist/zero_optimizer.h"
#include "worker/trainer/model/optimizer_state.h"
#include "worker/trainer/run/checkpoint.h"

namespace tessera::trainer {

// "<step dir>/optimizer-rank-<5 digits>.pt".
std::string ZeroShardPath(const CheckpointDirectory& dir, int64_t step, int rank);

// Rank `rank`'s shard file (path, contents). Internal if serialising fails.
absl::StatusOr<std::pair<std::string, std::string>> SerializeZeroShard(
    const CheckpointDirectory& dir, int64_t step, int rank, int world_size,
    const std::vector<ZeroPieceState>& pieces);

// The whole flattened optimizer state of each parameter (`numels`: their
// element counts, registration order) from the shard files of checkpoint
// `step`, written by `writer_world` ranks; nullopt for a parameter no rank
// kept state for. NotFound for a missing file; DataLoss for an unreadable one
// or pieces that do not cover their parameter exactly.
absl::StatusOr<std::vector<std::optional<FlatParamState>>> LoadZeroShards(
    const CheckpointDirectory& dir, int64_t step, int writer_world,
    const std::vector<int64_t>& numels);

}  // namespace tessera::trainer

#endif  // TESSERA_WORKER_TRAINER_RUN_ZERO_CHECKPOINT_H_
