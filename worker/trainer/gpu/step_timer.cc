#include "worker/trainer/gpu/step_timer.h"

#include <functional>
#include <memory>
#include <utility>

#include "absl/time/time.h"

namespace tessera::trainer {
namespace {

class HostStepTimer final : public StepTimer {
 public:
  explicit HostStepTimer(std::function<absl::Time()> now) : now_(std::move(now)) {}

  void BeginStep() override {
    step_start_ = now_();
    last_mark_ = step_start_;
  }

  void Mark(StepPhase phase) override {
    const absl::Time now = now_();
    totals_.phase_seconds[static_cast<size_t>(phase)] +=
        absl::ToDoubleSeconds(now - last_mark_);
    last_mark_ = now;
  }

  void EndStep() override {
    totals_.step_seconds += absl::ToDoubleSeconds(now_() - step_start_);
    ++totals_.steps;
  }

  StepTimes TakeTotals() override { return std::exchange(totals_, StepTimes{}); }
  bool on_device() const override { return false; }

 private:
  const std::function<absl::Time()> now_;
  absl::Time step_start_;
  absl::Time last_mark_;
  StepTimes totals_;
};

}  // namespace

std::unique_ptr<StepTimer> MakeHostStepTimer(std::function<absl::Time()> now) {
  return std::make_unique<HostStepTimer>(std::move(now));
}

}  // namespace tessera::trainer
