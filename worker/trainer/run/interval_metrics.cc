#include "worker/trainer/run/interval_metrics.h"

#include <algorithm>
#include <cstdint>
#include <utility>

#include "common/metric_names.h"

namespace tessera::trainer {
namespace {

// Steps the means are over: at least one, so that an empty interval reports 0.
double StepsOf(const StepTimes& times) {
  return std::max<double>(1, static_cast<double>(times.steps));
}

double MeanMs(const StepTimes& times, StepPhase phase) {
  return 1000.0 * times.seconds(phase) / StepsOf(times);
}

}  // namespace

FigureValues IntervalMetrics(const IntervalFigures& f) {
  const StepTimes& times = f.times;
  FigureValues values = {
      {"loss", f.loss_sum / static_cast<double>(f.micro_batches)},
      {"images_per_sec",
       times.step_seconds > 0 ? static_cast<double>(f.images) / times.step_seconds : 0.0},
      {"time_data_ms", MeanMs(times, StepPhase::kData)},
      {"time_forward_ms", MeanMs(times, StepPhase::kForward)},
      {"time_backward_ms", MeanMs(times, StepPhase::kBackward)},
      {"time_comm_ms", MeanMs(times, StepPhase::kComm)},
      {"time_optimizer_ms", MeanMs(times, StepPhase::kOptimizer)},
      {"time_step_ms", 1000.0 * times.step_seconds / StepsOf(times)},
      {"lr", f.lr},
      {"epoch", f.epoch}};
  if (f.loss_scale.has_value()) values.emplace_back("loss_scale", *f.loss_scale);
  if (f.bytes_sent.has_value()) {
    values.emplace_back("comm_bytes_per_step",
                        static_cast<double>(*f.bytes_sent) / StepsOf(times));
  }
  if (f.data_skipped > 0) {
    values.emplace_back("data_skipped", static_cast<double>(f.data_skipped));
  }
  values.insert(values.end(), f.device_memory.begin(), f.device_memory.end());
  if (f.sizes.has_value()) {
    values.emplace_back(kOptimizerStateBytesMetricName,
                        static_cast<double>(f.sizes->optimizer_state_bytes));
    values.emplace_back(kGradientBytesMetricName,
                        static_cast<double>(f.sizes->gradient_bytes));
    values.emplace_back(kParameterBytesMetricName,
                        static_cast<double>(f.sizes->parameter_bytes));
  }
  return values;
}

FigureValues DeviceStepMs(const StepTimes& times) {
  FigureValues device_ms;
  for (size_t p = 0; p < kStepPhaseNames.size(); ++p) {
    device_ms.emplace_back(kStepPhaseNames[p], MeanMs(times, static_cast<StepPhase>(p)));
  }
  return device_ms;
}

double EpochsDone(const DataPosition& position, const EpochPlan& plan, int64_t accum) {
  return static_cast<double>(position.epoch) +
         static_cast<double>(position.sample) /
             static_cast<double>(plan.steps_per_epoch() * plan.samples_per_batch() *
                                 accum);
}

}  // namespace tessera::trainer
