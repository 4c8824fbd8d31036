#include "worker/trainer/data/skipped_samples.h"

#include <iostream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tessera::trainer::data {
namespace {

// Skipped samples named in the limit's error.
constexpr size_t kNamedInError = 5;

}  // namespace

SkippedSamples::SkippedSamples(int64_t split_size, double max_fraction,
                               std::function<void(const std::string&)> log)
    : limit_(static_cast<int64_t>(max_fraction * static_cast<double>(split_size))),
      log_(std::move(log)) {}

absl::Status SkippedSamples::Skip(int64_t id, const std::string& why) {
  {
    absl::MutexLock lock(&mu_);
    if (!ids_.insert(id).second) return Check();
    if (first_.size() < kNamedInError) first_.push_back(why);
  }
  const std::string line = absl::StrCat("skipping an unreadable sample: ", why);
  absl::MutexLock log_lock(&log_mu_);  // one log call at a time
  if (log_) {
    log_(line);
  } else {
    std::cerr << "tessera-train: " << line << std::endl;
  }
  absl::MutexLock lock(&mu_);
  return Check();
}

int64_t SkippedSamples::count() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(ids_.size());
}

absl::Status SkippedSamples::Check() const {
  if (static_cast<int64_t>(ids_.size()) <= limit_) return absl::OkStatus();
  return absl::DataLossError(
      absl::StrCat(ids_.size(), " samples could not be read, more than the ", limit_,
                   " allowed (--data-max-skipped of the split); the first: ",
                   absl::StrJoin(first_, "; ")));
}

}  // namespace tessera::trainer::data
