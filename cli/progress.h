// Live progress of a running job, as `tessctl wait --progress`, `submit --follow`
// and `sweep --follow` show it: a ProgressTracker digests the job's metric points
// as they are fetched, and FormatProgress turns its snapshot into one line, e.g.
//
//   [02:10] RUNNING epoch 1.50/3  step 120/400 (30%)  loss 0.6321  153.2 img/s  ETA 2m31s
//
// On a terminal the caller redraws that line in place (RedrawLine); elsewhere it
// prints it as a plain line every few seconds.
//
// The ETA is the steps still to run (the trainer's "total_steps", reported at
// step 0, minus the newest step every rank reached) divided by the recent step
// rate: steps per second from the newest report at least kEtaWindow old (or the
// oldest one) to the newest, timed by the points' timestamps.
//
// Thread-safety: FormatProgress, EstimateEta and RedrawLine are pure; a
// ProgressTracker is thread-compatible (one follower owns it).
#ifndef TESSERA_CLI_PROGRESS_H_
#define TESSERA_CLI_PROGRESS_H_

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "tessera/v1/tessera.pb.h"

namespace tessera::cli {

// Metric names the trainer reports (docs/api.md) that progress lines use.
inline constexpr char kLossMetric[] = "loss";
inline constexpr char kImagesPerSecMetric[] = "images_per_sec";
inline constexpr char kTestAccuracyMetric[] = "test_accuracy";
inline constexpr char kEpochMetric[] = "epoch";
inline constexpr char kTotalStepsMetric[] = "total_steps";

// How far back the step rate looks: long enough to smooth over evaluation
// pauses, short enough to follow a change of pace.
inline constexpr absl::Duration kEtaWindow = absl::Seconds(60);

// What one progress line shows. Unset fields are left out of the line.
struct ProgressInfo {
  absl::Duration elapsed;  // since the follower started
  std::string label;       // between the clock and the state, e.g. "job 17"
  tessera::v1::JobState state = tessera::v1::JOB_STATE_UNSPECIFIED;
  std::string pending_reason;            // shown while QUEUED and before any metrics
  int32_t attempt = 0;                   // shown when > 1
  std::optional<double> epoch;           // epochs done, fractional
  std::optional<int32_t> total_epochs;   // the spec's epochs, when they bound the run
  std::optional<int64_t> step;           // newest step every rank reported
  std::optional<int64_t> total_steps;    // the run's length, from "total_steps"
  std::optional<double> loss;            // mean over ranks at `step`
  std::optional<double> images_per_sec;  // sum over ranks of each one's newest
  std::optional<absl::Duration> eta;     // time left to `total_steps`
};

// "[02:10] RUNNING epoch 1.50/3  step 120/400 (30%)  loss 0.6321  153.2 img/s
// ETA 2m31s". Without a total: "step 120" and no ETA; with a total but no rate
// yet: "ETA -"; once every step ran (evaluation): "ETA finishing". Before any
// metrics: "[00:05] QUEUED: waiting for 2 free slots". A label goes before the
// state: "[00:05] job 17 RUNNING ...".
std::string FormatProgress(const ProgressInfo& info);

// One timed observation of the newest step every rank reached.
struct StepSample {
  int64_t step = 0;
  absl::Time time;
};

// Time to go from `step` to `total_steps` at the rate between the first and the
// last of `samples` (oldest first), or nullopt when that rate is unknown (fewer
// than two samples, no time or no steps between them). Zero once step >= total.
std::optional<absl::Duration> EstimateEta(const std::deque<StepSample>& samples,
                                          int64_t step, int64_t total_steps);

// `line` for redrawing in place on a terminal: carriage return, the line cut to
// `columns` - 1 characters (so it never wraps; 0: no limit) and clear-to-end-of-
// line.
std::string RedrawLine(const std::string& line, int columns);

// Digests one job's metric points as they arrive, one attempt at a time: a new
// attempt (a restart) starts over, except for the run's total length.
class ProgressTracker {
 public:
  // Feeds freshly fetched points; repeated points are harmless. Points of other
  // attempts than `attempt` are ignored. `now` times points without timestamps.
  void Update(int32_t attempt, int32_t world_size,
              const std::vector<tessera::v1::MetricPoint>& points, absl::Time now);

  // Fetch points with step > this next: the steps not every rank has reported
  // yet are read again. -1 (everything) until the first complete step.
  int64_t FetchAfter() const { return complete_step_; }

  // The line's fields for `job` as of the points seen so far.
  ProgressInfo Info(const tessera::v1::Job& job, absl::Duration elapsed) const;

 private:
  void Reset(int32_t attempt);

  int32_t attempt_ = -1;
  int32_t world_size_ = 0;
  std::optional<int64_t> total_steps_;  // kept across attempts
  // step -> rank -> loss, for the steps above complete_step_ and that step.
  std::map<int64_t, std::map<int32_t, double>> losses_;
  std::map<int64_t, int64_t> step_unix_ms_;  // newest timestamp of a step's losses
  std::map<int32_t, std::pair<int64_t, double>> images_per_sec_;  // rank -> (step, v)
  std::optional<std::pair<int64_t, double>> epoch_;               // (step, value)
  int64_t complete_step_ = -1;  // newest step every rank has reported
  std::deque<StepSample> samples_;
};

}  // namespace tessera::cli

#endif  // TESSERA_CLI_PROGRESS_H_
