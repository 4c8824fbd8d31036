// The learning-rate schedule of a training run: linear warm-up to the peak
// rate, then cosine decay to a floor (a share of the peak); and each optimizer
// group's rate at a step, from its layer-wise scale and whether a head-only
// warm-up holds it still.
//
// Use: ResolveWarmupSteps once the run's length is known, then at every
// optimizer step ScheduledLearningRate for the step's rate and
// GroupLearningRates for the rates to set on the optimizer's groups.
//
// Thread-safety: pure functions of their arguments.
#ifndef TESSERA_WORKER_TRAINER_RUN_LR_SCHEDULE_H_
#define TESSERA_WORKER_TRAINER_RUN_LR_SCHEDULE_H_

#include <cstdint>
#include <vector>

namespace tessera::trainer {

// The warmup length: `warmup_steps`, or ceil(warmup_fraction * total_steps) when
// it is -1.
int64_t ResolveWarmupSteps(int64_t warmup_steps, int64_t total_steps,
                           double warmup_fraction);

// The learning rate at 0-based `step` of `total_steps`: linear warmup to `peak`
// over `warmup_steps`, then cosine decay to peak * final_lr_fraction.
double ScheduledLearningRate(double peak, int64_t step, int64_t total_steps,
                             int64_t warmup_steps, double final_lr_fraction);

// The rate of each optimizer group at 0-based `step` when the schedule gives
// `lr`: lr x the group's scale (`scales`, layer-wise decay), except that
// during a head-only warm-up (step < head_warmup_steps) every group that does
// not hold the head (`heads`) gets 0. `scales` and `heads` have one entry per
// group, in the optimizer's group order.
std::vector<double> GroupLearningRates(double lr, int64_t step, int64_t head_warmup_steps,
                                       const std::vector<double>& scales,
                                       const std::vector<bool>& heads);

}  // namespace tessera::trainer

#endif  // TESSERA_WORKER_TRAINER_RUN_LR_SCHEDULE_H_
