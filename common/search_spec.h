// Search spec parsing, validation and expansion, shared by tessctl (which
// validates before sending) and the coordinator (which validates again and
// makes each trial's jobs; coordinator/core/search_manager.h).
//
// A search spec is YAML (docs/search.md):
//
//   name: vit-lr
//   search:
//     method: asha            # grid | random | asha
//     seed: 1                 # the sampler's seed (random, asha)
//     metric: val_accuracy    # a metric the trainer reports (kSearchMetrics)
//     mode: max               # max | min (default: the metric's own)
//     max_trials: 27          # random and asha; grid: at least the grid's size
//     max_concurrent: 2       # trials running at once (default 1)
//     max_length: 2700        # a trial's whole length...
//     length_unit: steps      # ...in steps (default) or epochs
//     parameters:             # any trainer key, and world_size
//       lr: {loguniform: [1e-4, 1e-2]}
//       weight_decay: {choice: [0, 0.05, 0.1]}
//       warmup_steps: {int: [0, 200]}
//       label_smoothing: {uniform: [0, 0.2]}
//       adam_betas: {choice: [[0.9, 0.999], [0.9, 0.95]]}   # a list key
//     asha: {reduction_factor: 3, min_length: 300, max_rungs: 3}
//   base:                     # a job spec; name may be left out
//     world_size: 2
//     trainer: {model: vit-micro, dataset: fashion-mnist, val_fraction: 0.1, ...}
//
// Parsing is strict like a job spec's: unknown keys and wrong types are
// InvalidArgument errors naming the path ("search.parameters.lr.uniform[1]").
//
// A trial is one point of the space. grid takes every point of the choice and
// int parameters in a fixed order (the first parameter varies slowest);
// random and asha draw trial i from SeededRandom stream i of the seed, so a
// trial's values depend only on (seed, i, the space), on every platform. A
// trial's job is the base job with its values applied, trained for
// max_length (trainer.max_steps, or trainer.epochs), in its own checkpoint
// folder under the base's. With asha a trial trains rung by rung, one job per
// rung (SearchRungJob): each trains to its rung's length with the whole
// run's schedule (trainer.stop_fraction) and the next resumes its checkpoint.
//
// Thread-safe: free functions without shared state.
#ifndef TESSERA_COMMON_SEARCH_SPEC_H_
#define TESSERA_COMMON_SEARCH_SPEC_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/job_spec.h"
#include "tessera/v1/tessera.pb.h"

namespace tessera {

// Most trials one search may have.
inline constexpr int kMaxSearchTrials = 1024;

// Parses YAML text into a SearchSpec without range checks.
absl::StatusOr<tessera::v1::SearchSpec> ParseSearchSpec(const std::string& yaml_text);

// One trial of a search: its values and its job at full length.
struct SearchTrialJob {
  int32_t index = 0;
  // (key, value as text), in the spec's order of parameters.
  std::vector<std::pair<std::string, std::string>> parameters;
  tessera::v1::JobSpec job;  // no rung's settings yet (SearchRungJob)
};

// Checks the search's own fields and every trial's job (ExpandSearch).
absl::Status ValidateSearchSpec(const tessera::v1::SearchSpec& spec,
                                const SpecLimits& limits);

// ParseSearchSpec followed by ValidateSearchSpec.
absl::StatusOr<tessera::v1::SearchSpec> ParseAndValidateSearchSpec(
    const std::string& yaml_text, const SpecLimits& limits);

// How many trials the search runs: the grid's size, or max_trials. The spec
// must have passed ValidateSearchSpec.
int32_t SearchTrialCount(const tessera::v1::SearchSpec& spec);

// Trial `index` (0 <= index < SearchTrialCount) of search `search_id` (which
// names its checkpoint folder: <checkpoint_dir>/search-<id>/trial-<index>),
// validated. Errors name the trial and its values: "trial 3 (lr=0.002
// batch_size=64): trainer.batch_size: ...".
absl::StatusOr<SearchTrialJob> MakeSearchTrial(const tessera::v1::SearchSpec& spec,
                                               int64_t search_id, int32_t index,
                                               const SpecLimits& limits);

// Checks the search's fields, then makes and validates every trial (search
// id 0).
absl::StatusOr<std::vector<SearchTrialJob>> ExpandSearch(
    const tessera::v1::SearchSpec& spec, const SpecLimits& limits);

// The length each rung trains to, in length_unit, shortest first; the last is
// max_length. grid and random have one rung. asha: min_length * eta^k below
// max_length, then max_length, at most max_rungs of them (the shortest are
// left out); min_length defaults to max_length / eta^(rungs - 1) with 3
// rungs, or max_rungs when set, so it may be a fraction of a step or epoch.
std::vector<double> SearchRungLengths(const tessera::v1::SearchConfig& config);

// The job that trains `trial` to the end of rung `rung` of `rungs`: rung 0
// starts afresh (as the base says), later rungs resume the trial's
// checkpoint; below the last rung it stops at stop_fraction = rung length /
// max_length. The job name gains "-r<rung>" when there are several rungs.
tessera::v1::JobSpec SearchRungJob(const SearchTrialJob& trial,
                                   const std::vector<double>& rungs, int32_t rung);

// The values of trial `index` (as in SearchTrialJob::parameters), without its
// job.
std::vector<std::pair<std::string, std::string>> SearchTrialParameters(
    const tessera::v1::SearchConfig& config, int32_t index);

// What a valid spec may still get wrong, as sentences for the submitter: an
// asha search whose first rung ends before the longest warmup a trial may
// draw (trainer.warmup_steps, searched or in the base). A trial still warming
// up there has trained at a fraction of its rate, ranks low and is likely
// stopped, however well it would end. Epoch lengths are turned into steps
// where the base says how many images an epoch holds (train_subset); without
// that nothing is said. Empty when there is nothing to say.
std::vector<std::string> SearchSpecWarnings(const tessera::v1::SearchSpec& spec);

// asha's eta: search.asha.reduction_factor, or its default (3).
int32_t SearchReductionFactor(const tessera::v1::SearchConfig& config);

// Whether a higher value of the search's metric is better: mode "max", or
// the metric's own direction (kSearchMetrics) when no mode is given.
bool SearchMaximizes(const tessera::v1::SearchConfig& config);

}  // namespace tessera

#endif  // TESSERA_COMMON_SEARCH_SPEC_H_
