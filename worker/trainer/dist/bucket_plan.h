// How gradients are grouped for the all-reduce, and in which order the groups
// (buckets) go out: the pure bookkeeping behind the Reducer (reducer.h), kept free
// of LibTorch so it can be tested and reasoned about on its own.
//
// AssignBuckets packs parameters into buckets as PyTorch DDP does: in REVERSE
// order of registration (the order backward produces gradients in, roughly), the
// first bucket capped at first_bucket_cap_bytes so communication starts early, the
// others at bucket_cap_bytes. A bucket is closed before a parameter that would
// push it past its cap, so only a parameter larger than the cap on its own makes a
// bucket exceed it (and gets that bucket to itself). With min_buckets > 1, small
// models get smaller caps so that they still split into several buckets.
//
// BucketLaunchSequencer decides when each bucket may be launched: once all its
// parameters' gradients are ready AND every lower-numbered bucket has been
// launched, so all ranks issue their collectives in the same order (bucket 0, 1,
// ...) whatever order their gradients became ready in.
//
// BucketPlan is an immutable value. A BucketLaunchSequencer is not thread-safe;
// its owner serialises calls.
#ifndef TESSERA_WORKER_TRAINER_DIST_BUCKET_PLAN_H_
#define TESSERA_WORKER_TRAINER_DIST_BUCKET_PLAN_H_

#include <cstdint>
#include <vector>

namespace tessera::trainer {

struct BucketOptions {
  int64_t bucket_cap_bytes = int64_t{25} << 20;       // DDP's bucket_cap_mb = 25
  int64_t first_bucket_cap_bytes = int64_t{1} << 20;  // DDP's first bucket: 1 MiB
  // At least this many buckets when the gradients allow it: both caps shrink to
  // total / min_buckets (but not below min_bucket_bytes). With DDP's caps alone a
  // model under 1 MiB is one bucket, launched when backward ends, so none of
  // its communication overlaps. 1: the caps alone, as DDP.
  int min_buckets = 1;
  int64_t min_bucket_bytes = int64_t{64} << 10;
};

// Converts a size in MiB (as --bucket-cap-mb takes it) to bytes, at least 1.
int64_t MebibytesToBytes(double mebibytes);

// One parameter's place in a bucket.
struct BucketSlot {
  int param = 0;       // index in registration order
  int64_t offset = 0;  // first element within the bucket's flat buffer
  int64_t numel = 0;
};

struct Bucket {
  std::vector<BucketSlot>
      slots;          // in the order they were assigned (reverse registration)
  int64_t numel = 0;  // elements of the flat buffer
};

struct BucketPlan {
  std::vector<Bucket> buckets;
  std::vector<int> bucket_of;  // per parameter (registration order): its bucket
  std::vector<int> slot_of;    // per parameter: its index in that bucket's slots
};

// Packs parameters with the given element counts (registration order) into
// buckets; `element_size` is the gradient's bytes per element. Parameters with no
// elements still get a slot (of size 0), so every parameter belongs to a bucket.
BucketPlan AssignBuckets(const std::vector<int64_t>& numels, int64_t element_size,
                         const BucketOptions& options);

// ZeRO stage 3's plan: one bucket per unit (a group of parameters gathered
// and freed together, e.g. a transformer block), `unit_of` giving each
// parameter's unit (0, 1, ... every one used). The highest unit is bucket 0,
// so units whose backward ends first go out first; slots in reverse
// registration order, as AssignBuckets lays them.
BucketPlan AssignUnitBuckets(const std::vector<int64_t>& numels,
                             const std::vector<int>& unit_of);

// Copies `count` values per parameter between per-parameter arrays and a bucket's
// flat buffer, following the plan's offsets. The torch-free reference of what the
// Reducer does with tensors; sources and destinations must not overlap.
void FlattenBucket(const Bucket& bucket, const std::vector<const float*>& params,
                   float* flat);
void UnflattenBucket(const Bucket& bucket, const float* flat,
                     const std::vector<float*>& params);

// ZeRO's shards (zero_optimizer.h): each bucket's flat buffer is cut into
// world_size parts of ShardSize elements, DeepSpeed-style, rank r owning part
// r; the last parts are short (or empty) where the buffer ends, so a parameter
// may be split across ranks and a rank may own nothing of a small bucket.
struct ShardRange {
  int64_t begin = 0;  // first element of the bucket's flat buffer
  int64_t end = 0;    // one past the last
  int64_t size() const { return end - begin; }
};

// ceil(numel / world_size): every rank's share of a bucket, padding included.
int64_t ShardSize(int64_t numel, int world_size);
// Rank `rank`'s part of a bucket of `numel` elements, clipped to the buffer.
ShardRange ShardOf(int64_t numel, int world_size, int rank);

// One parameter's part within a rank's shard: a contiguous run of its
// flattened elements, which lies in one bucket.
struct ShardPiece {
  int param = 0;  // index in registration order
  int bucket = 0;
  int64_t bucket_offset = 0;  // first element within the bucket's flat buffer
  int64_t param_offset = 0;   // first element within the flattened parameter
  int64_t numel = 0;
};

// Rank `rank`'s pieces under `plan`, by bucket, then by position in the
// bucket. Empty parameters and parameters wholly outside the shard have none.
std::vector<ShardPiece> AssignShardPieces(const BucketPlan& plan, int world_size,
                                          int rank);

class BucketLaunchSequencer {
 public:
  // `plan` must outlive the sequencer.
  explicit BucketLaunchSequencer(const BucketPlan& plan);

  // Starts a new backward pass: nothing ready, nothing launched.
  void Reset();

  // Records that parameter `param`'s gradient is final for this pass and returns
  // the buckets that may be launched now, in launch order (possibly none). A
  // parameter reported twice in one pass counts once.
  std::vector<int> MarkReady(int param);

  // Returns every bucket not launched yet in this pass, in order, and counts them
  // as launched: for the end of backward, when parameters that received no
  // gradient will not report, or when launching during backward is off.
  std::vector<int> LaunchRemaining();

  // Buckets launched so far in this pass.
  int launched() const { return next_launch_; }

 private:
  // Appends to `out` the run of ready buckets starting at next_launch_.
  void CollectLaunchable(std::vector<int>& out);

  const BucketPlan& plan_;         // Not owned.
  std::vector<int> missing_;       // per bucket: parameters not yet ready
  std::vector<bool> param_ready_;  // per parameter
  int next_launch_ = 0;            // lowest bucket not launched yet
};

}  // namespace tessera::trainer

#endif  // TESSERA_WORKER_TRAINER_DIST_BUCKET_PLAN_H_
