#include "worker/trainer/data/dataset_check.h"

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <memory>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "worker/trainer/data/data_source.h"
#include "worker/trainer/data/image_decoder.h"

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

SampleResult CheckSample(const absl::StatusOr<StreamSample>& sample) {
  SampleResult r;
  if (!sample.ok()) {
    r.error = std::string(sample.status().message());
    return r;
  }
  absl::StatusOr<DecodedRegion> image = DecodeImage(sample->sample.bytes);
  if (!image.ok()) {
    r.error = absl::StrCat(sample->sample.name, ": ", image.status().message());
    return r;
  }
  r.label = sample->sample.label;
  r.width = image->source_width;
  r.height = image->source_height;
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

// Decodes every sample of the split's streams (one per stream, on `workers`
// threads); streams are sequential, so each is read by one thread.
absl::StatusOr<SplitCheck> CheckSplit(const DataSource& source, const std::string& split,
                                      const CheckOptions& options) {
  // One stream per worker over a world of `workers` ranks, unshuffled and with
  // every sample kept: each rank's results land at its own positions.
  const int workers = std::max(1, options.workers);
  const bool folder = source.kind() == "imagefolder";
  const int ranks = folder ? workers : 1;  // shards: one stream, all samples
  std::vector<std::vector<SampleResult>> per_rank(static_cast<size_t>(ranks));
  std::vector<std::unique_ptr<SampleStream>> streams;
  for (int r = 0; r < ranks; ++r) {
    EpochRequest e{
        .rank = r, .world_size = ranks, .shuffle = false, .drop_remainder = false};
    absl::StatusOr<std::unique_ptr<SampleStream>> s = source.OpenEpoch(e);
    if (!s.ok()) return s.status();
    streams.push_back(*std::move(s));
  }
  std::atomic<int64_t> done{0};
  absl::Mutex mu;
  int finished = 0;  // threads done, guarded by mu
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      for (int64_t k = 0; k < streams[r]->size(); ++k) {
        per_rank[r].push_back(CheckSample(streams[r]->Read(k)));
        done.fetch_add(1, std::memory_order_relaxed);
      }
      absl::MutexLock lock(&mu);
      ++finished;
    });
  }
  const int64_t total = source.size();
  {
    absl::MutexLock lock(&mu);
    auto all_finished = [&] { return finished == ranks; };
    while (
        !mu.AwaitWithTimeout(absl::Condition(&all_finished), absl::Milliseconds(500))) {
      if (options.progress) options.progress(split, done.load(), total);
    }
  }
  for (std::thread& t : threads) t.join();
  // Interleave back to sample order: rank r held positions r, r + ranks, ...
  std::vector<SampleResult> results;
  for (size_t j = 0;; ++j) {
    bool any = false;
    for (auto& list : per_rank) {
      if (j < list.size()) {
        results.push_back(std::move(list[j]));
        any = true;
      }
    }
    if (!any) break;
  }
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
    DataSourceOptions o;
    o.kind = options.kind;
    o.root = options.root;
    o.split = split;
    absl::StatusOr<std::unique_ptr<DataSource>> source = DataSource::Open(o);
    if (split == "val" && absl::IsNotFound(source.status())) continue;  // no val split
    if (!source.ok()) return source.status();
    report.kind = (*source)->kind();
    if (report.classes.empty()) report.classes = (*source)->class_names();
    absl::StatusOr<SplitCheck> check = CheckSplit(**source, split, options);
    if (!check.ok()) return check.status();
    report.splits.push_back(*std::move(check));
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
