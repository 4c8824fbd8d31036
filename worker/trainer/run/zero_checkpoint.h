// The optimizer state of a ZeRO run (stages 1-3, dist/zero_optimizer.h) in a
// checkpoint: each rank writes its shard beside the checkpoint's other files,
//   step-000000000120/optimizer-rank-00001.shard
// and model.pt then holds no optimizer state and says the stage
// (checkpoint.h's RankCheckpoint::zero_stage).
//
// Shards are written by parameter, not by bucket, so any layout can read them:
// a run at another world size or stage asks for the element ranges of each
// parameter that it keeps state for (ZeroOptimizer::StateRanges; a stage-0
// run, every parameter whole), and reads only those bytes of the files. The
// file:
//   "TSZSHARD"  8 bytes
//   header length, 8 bytes little-endian, then the header: JSON with the
//     format (2), the writer's rank, world size and step; the model it was
//     written for (parameter count, element count and a hash of the
//     parameters' element counts in order); and per piece: the parameter's
//     index, the piece's first element within it, its element count, its
//     step count, and per state tensor its name, dtype and byte offset
//   the tensors' bytes, little-endian, from the first multiple of 64 after
//     the header; offsets count from there.
// Files of format 1 (optimizer-rank-NNNNN.pt, a LibTorch archive read whole)
// are still read.
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

// "<step dir>/optimizer-rank-<5 digits>.shard".
std::string ZeroShardPath(const CheckpointDirectory& dir, int64_t step, int rank);

// Rank `rank`'s shard file (path, contents) for a model whose parameters have
// `numels` elements (registration order). Internal if a tensor cannot be
// written (an unknown dtype).
absl::StatusOr<std::pair<std::string, std::string>> SerializeZeroShard(
    const CheckpointDirectory& dir, int64_t step, int rank, int world_size,
    const std::vector<ZeroPieceState>& pieces, const std::vector<int64_t>& numels);

// Each parameter's flattened optimizer state over its `wanted` range (indexed
// like `numels`, the parameters' element counts) from the shard files of
// checkpoint `step`, written by `writer_world` ranks: only those bytes are
// read. nullopt for a parameter no rank kept state for, or an empty range.
// NotFound for a missing file; FailedPrecondition for a file written for
// another model; DataLoss for an unreadable file, one written as another rank
// or world size, or pieces that do not cover a wanted range exactly.
absl::StatusOr<std::vector<std::optional<FlatParamState>>> LoadZeroShards(
    const CheckpointDirectory& dir, int64_t step, int writer_world,
    const std::vector<int64_t>& numels, const std::vector<ElementRange>& wanted);

}  // namespace tessera::trainer

#endif  // TESSERA_WORKER_TRAINER_RUN_ZERO_CHECKPOINT_H_
