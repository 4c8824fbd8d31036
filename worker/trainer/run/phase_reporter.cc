#include "worker/trainer/run/phase_reporter.h"

namespace tessera::trainer {

void PhaseReporter::Report(RankPhase phase) {
  phase_ = phase;
  if (progress_ != nullptr) progress_->Enter(phase);
}

void PhaseReporter::AddPhaseItem() {
  if (progress_ != nullptr) progress_->AddPhaseItem();
}

}  // namespace tessera::trainer
