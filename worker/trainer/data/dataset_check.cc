#include "worker/trainer/data/dataset_check.h"

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "worker/trainer/data/image_split.h"

namespace tessera::trainer::data {
namespace {

// What one sample contributed, kept per sample so the report is in order
// whichever thread decoded it.
struct SampleResult {
  int64_t label = -1;  // -1: unreadable
  int width = 0;
  int height = 0;
  std::string error;
};

SampleResult CheckSample(const ImageSplit& split, int64_t id) {
  SampleResult r;
  absl::StatusOr<SampleImage> image = split.DecodeWhole(id);
  if (!image.ok()) {
    r.error = std::string(image.status().message());
    return r;
  }
  r.label = image->label;
  r.width = image->width;
  r.height = image->height;
  return r;
}

std::string SideBucket(int side) {
  if (side < 64) return "<64";
  if (side < 128) return "64-127";
  if (side < 256) return "128-255";
  if (side < 512) return "256-511";
  if (side < 1024) return "512-1023";
  return ">=1024";
}

void Summarise(const std::vector<SampleResult>& results, size_t num_classes,
               SplitCheck& out) {
  out.per_class.assign(num_classes, 0);
  out.samples = static_cast<int64_t>(results.size());
  bool first = true;
  for (const SampleResult& r : results) {
    if (r.label < 0) {
      out.unreadable.push_back(r.error);
      continue;
    }
    if (r.label < static_cast<int64_t>(num_classes)) ++out.per_class[r.label];
    out.min_width = first ? r.width : std::min(out.min_width, r.width);
    out.min_height = first ? r.height : std::min(out.min_height, r.height);
    out.max_width = std::max(out.max_width, r.width);
    out.max_height = std::max(out.max_height, r.height);
    ++out.shorter_side[SideBucket(std::min(r.width, r.height))];
    first = false;
  }
}

// Decodes every sample of the split on `workers` threads, thread t taking
// ids t, t + workers, ...; each result lands at its sample's own slot.
SplitCheck CheckSplit(const ImageSplit& source, const std::string& split,
                      const CheckOptions& options) {
  const int workers = std::max(1, options.workers);
  const int64_t total = source.size();
  std::vector<SampleResult> results(static_cast<size_t>(total));
  std::atomic<int64_t> done{0};
  absl::Mutex mu;
  int finished = 0;  // threads done, guarded by mu
  std::vector<std::thread> threads;
  for (int t = 0; t < workers; ++t) {
    threads.emplace_back([&, t] {
      for (int64_t id = t; id < total; id += workers) {
        results[static_cast<size_t>(id)] = CheckSample(source, id);
        done.fetch_add(1, std::memory_order_relaxed);
      }
      absl::MutexLock lock(&mu);
      ++finished;
    });
  }
  {
    absl::MutexLock lock(&mu);
    auto all_finished = [&] { return finished == workers; };
    while (
        !mu.AwaitWithTimeout(absl::Condition(&all_finished), absl::Milliseconds(500))) {
      if (options.progress) options.progress(split, done.load(), total);
    }
  }
  for (std::thread& t : threads) t.join();
  SplitCheck check;
  check.split = split;
  Summarise(results, source.class_names().size(), check);
  if (options.progress) options.progress(split, total, total);
  return check;
}

}  // namespace

int64_t CheckReport::unreadable() const {
  int64_t n = 0;
  for (const SplitCheck& s : splits) n += static_cast<int64_t>(s.unreadable.size());
  return n;
}

absl::StatusOr<CheckReport> CheckDataset(const CheckOptions& options) {
  CheckReport report;
  report.root = options.root;
  for (const std::string split : {"train", "val"}) {
    ImageSplitOptions o;
    o.kind = options.kind;
    o.root = options.root;
    o.split = split;
    absl::StatusOr<std::unique_ptr<ImageSplit>> source = ImageSplit::Open(o);
    if (split == "val" && absl::IsNotFound(source.status())) continue;  // no val split
    if (!source.ok()) return source.status();
    report.kind = (*source)->kind();
    if (report.classes.empty()) report.classes = (*source)->class_names();
    report.splits.push_back(CheckSplit(**source, split, options));
  }
  return report;
}

std::string FormatCheckReport(const CheckReport& report) {
  std::string out = absl::StrFormat("dataset %s (%s), %d classes\n", report.root,
                                    report.kind, report.classes.size());
  for (const SplitCheck& s : report.splits) {
    absl::StrAppendFormat(&out, "\n%s: %d samples, %d unreadable\n", s.split, s.samples,
                          s.unreadable.size());
    absl::StrAppendFormat(&out, "  %-32s %10s\n", "class", "images");
    for (size_t c = 0; c < s.per_class.size(); ++c) {
      absl::StrAppendFormat(&out, "  %-32s %10d\n", report.classes[c], s.per_class[c]);
    }
    absl::StrAppendFormat(&out, "  image size: min %dx%d, max %dx%d\n", s.min_width,
                          s.min_height, s.max_width, s.max_height);
    out += "  shorter side:";
    for (const char* bucket :
         {"<64", "64-127", "128-255", "256-511", "512-1023", ">=1024"}) {
      const auto it = s.shorter_side.find(bucket);
      if (it != s.shorter_side.end())
        absl::StrAppendFormat(&out, " %s: %d", bucket, it->second);
    }
    out += "\n";
    for (const std::string& u : s.unreadable)
      absl::StrAppend(&out, "  unreadable: ", u, "\n");
  }
  return out;
}

}  // namespace tessera::trainer::data
