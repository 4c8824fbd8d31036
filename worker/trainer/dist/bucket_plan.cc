#include "worker/trainer/dist/bucket_plan.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

namespace tessera::trainer {

int64_t MebibytesToBytes(double mebibytes) {
  return std::max<int64_t>(1, std::llround(mebibytes * 1024.0 * 1024.0));
}

BucketPlan AssignBuckets(const std::vector<int64_t>& numels, int64_t element_size,
                         const BucketOptions& options) {
  BucketPlan plan;
  const int count = static_cast<int>(numels.size());
  plan.bucket_of.assign(numels.size(), -1);
  plan.slot_of.assign(numels.size(), -1);
  if (count == 0) return plan;

  int64_t bucket_cap = options.bucket_cap_bytes;
  int64_t first_cap = options.first_bucket_cap_bytes;
  if (options.min_buckets > 1) {
    int64_t total = 0;
    for (const int64_t numel : numels) total += numel * element_size;
    const int64_t share =
        std::max((total + options.min_buckets - 1) / options.min_buckets,
                 options.min_bucket_bytes);
    bucket_cap = std::min(bucket_cap, share);
    first_cap = std::min(first_cap, share);
  }
  auto cap = [&]() { return plan.buckets.size() == 1 ? first_cap : bucket_cap; };
  plan.buckets.emplace_back();
  for (int param = count - 1; param >= 0; --param) {
    const int64_t numel = numels[static_cast<size_t>(param)];
    Bucket* bucket = &plan.buckets.back();
    // Close the open bucket rather than let this parameter overflow it.
    if (!bucket->slots.empty() && (bucket->numel + numel) * element_size > cap()) {
      plan.buckets.emplace_back();
      bucket = &plan.buckets.back();
    }
    plan.bucket_of[static_cast<size_t>(param)] =
        static_cast<int>(plan.buckets.size()) - 1;
    plan.slot_of[static_cast<size_t>(param)] = static_cast<int>(bucket->slots.size());
    bucket->slots.push_back(BucketSlot{param, bucket->numel, numel});
    bucket->numel += numel;
    if (bucket->numel * element_size >= cap() && param > 0) plan.buckets.emplace_back();
  }
  return plan;
}

BucketPlan AssignUnitBuckets(const std::vector<int64_t>& numels,
                             const std::vector<int>& unit_of) {
  BucketPlan plan;
  plan.bucket_of.assign(numels.size(), -1);
  plan.slot_of.assign(numels.size(), -1);
  if (numels.empty()) return plan;
  const int units = *std::max_element(unit_of.begin(), unit_of.end()) + 1;
  plan.buckets.resize(static_cast<size_t>(units));
  for (int param = static_cast<int>(numels.size()) - 1; param >= 0; --param) {
    const auto i = static_cast<size_t>(param);
    const int b = units - 1 - unit_of[i];  // the highest unit first
    Bucket& bucket = plan.buckets[static_cast<size_t>(b)];
    plan.bucket_of[i] = b;
    plan.slot_of[i] = static_cast<int>(bucket.slots.size());
    bucket.slots.push_back(BucketSlot{param, bucket.numel, numels[i]});
    bucket.numel += numels[i];
  }
  return plan;
}

void FlattenBucket(const Bucket& bucket, const std::vector<const float*>& params,
                   float* flat) {
  for (const BucketSlot& slot : bucket.slots) {
    std::memcpy(flat + slot.offset, params[static_cast<size_t>(slot.param)],
                static_cast<size_t>(slot.numel) * sizeof(float));
  }
}

void UnflattenBucket(const Bucket& bucket, const float* flat,
                     const std::vector<float*>& params) {
  for (const BucketSlot& slot : bucket.slots) {
    std::memcpy(params[static_cast<size_t>(slot.param)], flat + slot.offset,
                static_cast<size_t>(slot.numel) * sizeof(float));
  }
}

BucketLaunchSequencer::BucketLaunchSequencer(const BucketPlan& plan) : plan_(plan) {
  Reset();
}

void BucketLaunchSequencer::Reset() {
  missing_.clear();
  for (const Bucket& bucket : plan_.buckets) {
    missing_.push_back(static_cast<int>(bucket.slots.size()));
  }
  param_ready_.assign(plan_.bucket_of.size(), false);
  next_launch_ = 0;
}

std::vector<int> BucketLaunchSequencer::MarkReady(int param) {
  std::vector<int> launch;
  if (param < 0 || static_cast<size_t>(param) >= param_ready_.size() ||
      param_ready_[static_cast<size_t>(param)]) {
    return launch;
  }
  param_ready_[static_cast<size_t>(param)] = true;
  const int bucket = plan_.bucket_of[static_cast<size_t>(param)];
  --missing_[static_cast<size_t>(bucket)];
  CollectLaunchable(launch);
  return launch;
}

std::vector<int> BucketLaunchSequencer::LaunchRemaining() {
  std::vector<int> launch;
  const int total = static_cast<int>(plan_.buckets.size());
  for (; next_launch_ < total; ++next_launch_) launch.push_back(next_launch_);
  return launch;
}

void BucketLaunchSequencer::CollectLaunchable(std::vector<int>& out) {
  const int total = static_cast<int>(plan_.buckets.size());
  while (next_launch_ < total && missing_[static_cast<size_t>(next_launch_)] == 0) {
    out.push_back(next_launch_++);
  }
}

int64_t ShardSize(int64_t numel, int world_size) {
  const int64_t world = std::max(1, world_size);
  return (numel + world - 1) / world;
}

ShardRange ShardOf(int64_t numel, int world_size, int rank) {
  const int64_t size = ShardSize(numel, world_size);
  return {std::min(numel, rank * size), std::min(numel, (rank + 1) * size)};
}

std::vector<ShardPiece> AssignShardPieces(const BucketPlan& plan, int world_size,
                                          int rank) {
  std::vector<ShardPiece> pieces;
  for (size_t b = 0; b < plan.buckets.size(); ++b) {
    const Bucket& bucket = plan.buckets[b];
    const ShardRange shard = ShardOf(bucket.numel, world_size, rank);
    std::vector<BucketSlot> slots = bucket.slots;
    std::sort(slots.begin(), slots.end(), [](const BucketSlot& x, const BucketSlot& y) {
      return x.offset < y.offset;
    });
    for (const BucketSlot& slot : slots) {
      const int64_t begin = std::max(shard.begin, slot.offset);
      const int64_t end = std::min(shard.end, slot.offset + slot.numel);
      if (begin >= end) continue;
      pieces.push_back(ShardPiece{slot.param, static_cast<int>(b), begin,
                                  begin - slot.offset, end - begin});
    }
  }
  return pieces;
}

}  // namespace tessera::trainer
