#include "worker/trainer/run/fault_injector.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

namespace tessera::trainer {

FaultInjector::FaultInjector(const FaultSpec& spec, int32_t rank, int32_t attempt,
                             FaultInjectorOptions options)
    : spec_(spec),
      rank_(rank),
      active_(spec.AppliesTo(rank, attempt)),
      options_(std::move(options)) {}

void FaultInjector::Act(int64_t completed_steps) {
  if (spec_.kind == FaultSpec::Kind::kHang) {
    if (completed_steps != spec_.step) return;
    if (options_.log) {
      options_.log(absl::StrCat("fault injection (--fault=", FormatFaultSpec(spec_),
                                "): rank ", rank_, " hangs at step ", completed_steps,
                                " in ", RankPhaseName(spec_.phase),
                                "; its other threads run on"));
    }
    options_.hang();
    return;
  }
  if (completed_steps == slowed_at_) return;
  if (slowed_at_ < 0 && options_.log) {
    options_.log(absl::StrCat("fault injection (--fault=", FormatFaultSpec(spec_),
                              "): rank ", rank_, " spends ", spec_.ms, " ms more in ",
                              RankPhaseName(spec_.phase), " every step"));
  }
  slowed_at_ = completed_steps;
  options_.sleep(absl::Milliseconds(spec_.ms));
}

}  // namespace tessera::trainer
