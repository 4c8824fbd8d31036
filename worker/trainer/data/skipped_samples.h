// The one bad-sample policy of the image data: a sample that cannot be read
// or decoded (unreadable, truncated, zero bytes, not an image) is skipped. A
// split's SkippedSamples counts each skipped sample once, names it once
// through `log`, and once more than max_fraction of the split's samples have
// been skipped, every further Skip fails with DataLoss naming the first few,
// which fails the run. Which sample takes a skipped one's place is the
// caller's (image_split.h: the next readable id, so batch sizes never change).
//
//   SkippedSamples skips(split_size, /*max_fraction=*/0.01, log);
//   RETURN_IF_ERROR(skips.Skip(id, "train/ant/1.jpg (truncated)"));
//
// Thread-safe: one instance is shared by every thread loading the split;
// `log` is called one call at a time.
#ifndef TESSERA_WORKER_TRAINER_DATA_SKIPPED_SAMPLES_H_
#define TESSERA_WORKER_TRAINER_DATA_SKIPPED_SAMPLES_H_

#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace tessera::trainer::data {

class SkippedSamples {
 public:
  // `log` names each skipped sample once; empty: a line on stderr.
  SkippedSamples(int64_t split_size, double max_fraction,
                 std::function<void(const std::string&)> log);

  // Records that sample `id` was skipped, for the reason `why` (which names
  // it). DataLoss once more than the limit are skipped; a sample skipped again
  // is neither counted nor named again.
  absl::Status Skip(int64_t id, const std::string& why);

  // Distinct samples skipped so far.
  int64_t count() const;
  // The most samples that may be skipped: floor(max_fraction * split_size).
  int64_t limit() const { return limit_; }

 private:
  absl::Status Check() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int64_t limit_;
  const std::function<void(const std::string&)> log_;
  absl::Mutex log_mu_ ABSL_ACQUIRED_BEFORE(mu_);  // serialises calls of log_
  mutable absl::Mutex mu_;
  std::set<int64_t> ids_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> first_ ABSL_GUARDED_BY(mu_);  // named in the error
};

}  // namespace tessera::trainer::data

#endif  // TESSERA_WORKER_TRAINER_DATA_SKIPPED_SAMPLES_H_
