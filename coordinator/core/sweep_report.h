// The report of a scaling study (SweepManager::Report). One row per distinct
// (world size, batch size, scaling, shape, ZeRO stage) among the sweep's
// points, in grid order, with figures from the stored metrics of the points'
// jobs that succeeded: epoch time (mean and spread over runs), total training
// time, throughput, communication share, final accuracy, the peak memory per
// rank as measured (the ranks' peak RSS, or the CUDA allocator's peak on GPU
// ranks) with the optimizer state, gradient and parameter bytes per rank that
// the code counts as its breakdown, then speedup and efficiency against the smallest
// measured world size of the same batch size, scaling, shape kind and ZeRO
// stage. docs/api.md defines each figure.
//
// Thread-safety: stateless; safe from any thread (it reads through
// JobRequests' thread-safe methods).
#ifndef TESSERA_COORDINATOR_CORE_SWEEP_REPORT_H_
#define TESSERA_COORDINATOR_CORE_SWEEP_REPORT_H_

#include "absl/status/statusor.h"
#include "coordinator/core/job_requests.h"
#include "tessera/v1/tessera.pb.h"

namespace tessera {

// Builds the report of `sweep` (as SweepManager::Get returns it, with its
// points), reading the points' jobs and metrics from `jobs`.
absl::StatusOr<tessera::v1::SweepReport> BuildSweepReport(const tessera::v1::Sweep& sweep,
                                                          JobRequests& jobs);

}  // namespace tessera

#endif  // TESSERA_COORDINATOR_CORE_SWEEP_REPORT_H_
