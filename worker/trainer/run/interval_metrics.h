// The metrics a rank reports for each metrics interval (every metrics_every
// steps, and at the run's end), from what the training loop tallied over it:
// the mean loss, images/s, the step timer's mean time per step in each phase
// (step_timer.h), the learning rate and the epochs done; then what applies to
// the run: fp16's loss scale, the bytes sent per step in a world of several
// ranks, the samples skipped as unreadable, the device's memory figures, and
// once, the rank's optimizer state, gradient and parameter bytes.
//
// Use: at the end of an interval fill IntervalFigures and report
// IntervalMetrics(figures) (metrics_reporter.h); a rank whose step timer
// measures device time also hands DeviceStepMs(times) to its progress tracker.
//
// Thread-safety: pure functions of their arguments.
#ifndef TESSERA_WORKER_TRAINER_RUN_INTERVAL_METRICS_H_
#define TESSERA_WORKER_TRAINER_RUN_INTERVAL_METRICS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "worker/trainer/data/data_position.h"
#include "worker/trainer/gpu/rank_figures.h"
#include "worker/trainer/gpu/step_timer.h"

namespace tessera::trainer {

// What a rank holds of the model's training state (reported once).
struct RankSizes {
  int64_t optimizer_state_bytes = 0;
  int64_t gradient_bytes = 0;
  int64_t parameter_bytes = 0;
};

struct IntervalFigures {
  StepTimes times;                    // the step timer's totals over the interval
  double loss_sum = 0;                // the micro-batches' mean losses, summed
  int64_t micro_batches = 0;          // the micro-batches trained on
  int64_t images = 0;                 // the images trained on
  double lr = 0;                      // the last step's learning rate
  double epoch = 0;                   // epochs done, fractional (EpochsDone)
  std::optional<double> loss_scale;   // fp16: the loss scaler's scale
  std::optional<int64_t> bytes_sent;  // several ranks: what the collectives sent
  int64_t data_skipped = 0;           // samples skipped as unreadable so far
  FigureValues device_memory;         // gpu/device_memory.h's figures, as they are
  std::optional<RankSizes> sizes;     // the first interval only
};

// The interval's metrics, named and ordered as reported: loss, images_per_sec,
// time_{data,forward,backward,comm,optimizer,step}_ms (means per step), lr,
// epoch; then loss_scale, comm_bytes_per_step and data_skipped where they
// apply (data_skipped when some were), the device memory figures and the sizes
// (common/metric_names.h).
FigureValues IntervalMetrics(const IntervalFigures& figures);

// The mean ms per step in each step-timer phase, named as kStepPhaseNames.
FigureValues DeviceStepMs(const StepTimes& times);

// Epochs done at `position`, fractional: its epoch plus the share of that
// epoch's steps (of `accum` micro-batches each) before its sample.
double EpochsDone(const DataPosition& position, const EpochPlan& plan, int64_t accum);

}  // namespace tessera::trainer

#endif  // TESSERA_WORKER_TRAINER_RUN_INTERVAL_METRICS_H_
