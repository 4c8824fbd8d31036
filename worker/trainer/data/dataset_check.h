// A dataset's health report before a job spends GPU hours on it: for each
// split of an image folder or a shard dataset, opened as tessera-train opens
// it (image_split.h), the images per class, the image sizes (min, max, a
// histogram of the shorter side) and every sample that cannot be read or
// fully decoded: the samples a training run would skip.
//
//   CheckOptions o;  o.root = "/data/pets";  o.workers = 4;
//   ASSIGN_OR_RETURN(CheckReport report, CheckDataset(o));
//   std::cout << FormatCheckReport(report);
//   return report.unreadable() == 0 ? 0 : 1;
//
// Every image is decoded whole (a region decode would miss damage below the
// crop), on `workers` threads. Errors: those of ImageSplit::Open (a missing
// directory, a class missing from a split, a malformed index). Unreadable
// samples are results, not errors. Not thread-safe; `progress` is called from
// the calling thread only.
#ifndef TESSERA_WORKER_TRAINER_DATA_DATASET_CHECK_H_
#define TESSERA_WORKER_TRAINER_DATA_DATASET_CHECK_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/trainer/data/shard_packer.h"

namespace tessera::trainer::data {

struct CheckOptions {
  std::string root;
  std::string kind = "auto";  // as ImageSplitOptions::kind
  int workers = 2;
  ProgressFn progress;  // may be empty
};

struct SplitCheck {
  std::string split;
  int64_t samples = 0;
  std::vector<int64_t> per_class;  // decodable images per class
  int min_width = 0;
  int min_height = 0;
  int max_width = 0;
  int max_height = 0;
  // Shorter side: "<64", "64-127", "128-255", "256-511", "512-1023", ">=1024".
  std::map<std::string, int64_t> shorter_side;
  std::vector<std::string> unreadable;  // "name: reason", in sample order
};

struct CheckReport {
  std::string root;
  std::string kind;
  std::vector<std::string> classes;
  std::vector<SplitCheck> splits;

  int64_t unreadable() const;
};

absl::StatusOr<CheckReport> CheckDataset(const CheckOptions& options);

// The report as text: one block per split, class counts, sizes, unreadable files.
std::string FormatCheckReport(const CheckReport& report);

}  // namespace tessera::trainer::data

#endif  // TESSERA_WORKER_TRAINER_DATA_DATASET_CHECK_H_
