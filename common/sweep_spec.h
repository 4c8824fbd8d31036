// Sweep spec parsing, validation and expansion, shared by tessctl (which
// validates before sending) and the coordinator (which validates again and
// expands the grid into jobs).
//
// A sweep spec is YAML:
//
//   name: vit-micro-scaling
//   repeats: 2            # runs per grid point (default 1)
//   max_parallel: 1       # points running at once (default 1)
//   grid:                 # each list optional; the cross product is taken
//     world_size: [1, 2, 4]
//     batch_size: [32, 64]        # per rank
//     scaling: [strong, weak]
//     shape: [pack]               # pack | spread | NxM (then no world_size list)
//     zero_stage: [0, 1, 2, 3]    # ZeRO stage (trainer.zero_stage)
//   base:                 # a job spec; name and world_size may be left out
//     trainer: {model: vit-micro, dataset: synthetic, epochs: 1, ...}
//
// Parsing is strict in the same way as job specs: unknown keys and wrong types
// are InvalidArgument errors naming the field path.
//
// Thread-safe: free functions without shared state.
#ifndef TESSERA_COMMON_SWEEP_SPEC_H_
#define TESSERA_COMMON_SWEEP_SPEC_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/job_spec.h"
#include "tessera/v1/tessera.pb.h"

namespace tessera {

// Most points (grid size times repeats) one sweep may have.
inline constexpr int kMaxSweepPoints = 1024;

// Parses YAML text into a SweepSpec without range checks.
absl::StatusOr<tessera::v1::SweepSpec> ParseSweepSpec(const std::string& yaml_text);

// One point of an expanded sweep: its coordinates and the job to submit.
struct SweepJob {
  tessera::v1::SweepPoint point;  // index, coordinates, repeat; no job yet
  tessera::v1::JobSpec job;       // the base spec with the coordinates applied
};

// Expands the grid in a fixed order (shape, scaling, batch size, ZeRO stage,
// world size, then repeat, the last varying fastest) and validates every
// resulting job spec. Errors name the sweep field or the point, e.g. "point 3
// (world_size=4 batch_size=64 strong pack): trainer.batch_size: ..." (with
// "zero_stage=1" after the batch size when the grid sweeps the ZeRO stage).
// Job names follow the same pattern: "<sweep>/n4-b64-z1-strong-pack-r0".
absl::StatusOr<std::vector<SweepJob>> ExpandSweep(const tessera::v1::SweepSpec& spec,
                                                  const SpecLimits& limits);

// Checks name, repeats, max_parallel, grid values, and that ExpandSweep succeeds
// with at most kMaxSweepPoints points.
absl::Status ValidateSweepSpec(const tessera::v1::SweepSpec& spec,
                               const SpecLimits& limits);

// ParseSweepSpec followed by ValidateSweepSpec.
absl::StatusOr<tessera::v1::SweepSpec> ParseAndValidateSweepSpec(
    const std::string& yaml_text, const SpecLimits& limits);

}  // namespace tessera

#endif  // TESSERA_COMMON_SWEEP_SPEC_H_
