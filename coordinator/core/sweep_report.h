// The report of a scaling study (SweepManager::Report). One row per distinct
// (world size, batch size, scaling, shape) among the sweep's points, in grid
// order, with figures from the stored metrics of the points' jobs that
// succeeded: epoch time (mean and spread over runs), total training time,
// throughput, communication share and final accuracy, then speedup and
// efficiency against the smallest measured world size of the same batch
// size, scaling and shape kind. docs/api.md defines each figure.
//
// Thread-safety: stateless; safe from any thread (it reads through
// JobManager's thread-safe methods).
#ifndef TESSERA_COORDINATOR_CORE_SWEEP_REPORT_H_
#define TESSERA_COORDINATOR_CORE_SWEEP_REPORT_H_

#include "absl/status/statusor.h"
#include "coordinator/core/job_manager.h"
#include "tessera/v1/tessera.pb.h"

namespace tessera {

// Builds the report of `sweep` (as SweepManager::Get returns it, with its
// points), reading the points' jobs and metrics from `jobs`.
absl::StatusOr<tessera::v1::SweepReport> BuildSweepReport(const tessera::v1::Sweep& sweep,
                                                          JobManager& jobs);

}  // namespace tessera

#endif  // TESSERA_COORDINATOR_CORE_SWEEP_REPORT_H_
