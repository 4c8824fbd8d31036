// Fuzzes sweep spec handling (common/sweep_spec.h): the YAML parser,
// the validator and the expansion of the grid into job specs.
//
// Input: the sweep spec's YAML text.
//
// Besides crashes and sanitizer reports (signed overflow included), these
// invariants abort the run:
//   - errors are InvalidArgument, never another code;
//   - a valid sweep expands to 1..kMaxSweepPoints points, numbered 0..n-1 in
//     order, each a valid job spec whose fields match the point's coordinates;
//   - the sweep spec and every expanded job survive the binary round trip of the
//     store and gRPC, and their trainer flags are "--name=value" without NUL.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "common/job_spec.h"
#include "common/sweep_spec.h"
#include "google/protobuf/message.h"
#include "google/protobuf/util/message_differencer.h"
#include "tessera/v1/tessera.pb.h"
#include "tests/fuzz/fuzz_check.h"

namespace tessera::fuzz {
namespace {

namespace v1 = ::tessera::v1;

void CheckOnlyInvalidArgument(const absl::Status& status, absl::string_view what) {
  Check(status.ok() || absl::IsInvalidArgument(status), what, status.ToString());
}

template <typename M>
void CheckBinaryRoundTrip(const M& message, absl::string_view what) {
  std::string wire;
  Check(message.SerializeToString(&wire), what, "does not serialize");
  M back;
  Check(back.ParseFromString(wire), what, message.ShortDebugString());
  Check(google::protobuf::util::MessageDifferencer::Equals(message, back), what,
        message.ShortDebugString());
}

void CheckExpansion(const v1::SweepSpec& spec, const SpecLimits& limits) {
  const absl::StatusOr<std::vector<SweepJob>> jobs = ExpandSweep(spec, limits);
  Check(jobs.ok(), "a validated sweep does not expand", jobs.status().ToString());
  Check(!jobs->empty() && jobs->size() <= static_cast<size_t>(kMaxSweepPoints),
        "expanded point count out of range", std::to_string(jobs->size()));
  for (size_t i = 0; i < jobs->size(); ++i) {
    const SweepJob& job = (*jobs)[i];
    const v1::SweepPoint& p = job.point;
    Check(p.index() == static_cast<int32_t>(i), "points are not numbered in order");
    Check(p.job_id() == 0, "an expanded point already has a job id");
    Check(p.world_size() == job.job.world_size() &&
              p.batch_size() == job.job.trainer().batch_size() &&
              p.scaling() == job.job.trainer().scaling(),
          "point coordinates differ from its job spec",
          p.ShortDebugString() + " vs " + job.job.ShortDebugString());
    Check(p.repeat() >= 0 && p.repeat() < std::max(spec.repeats(), 1),
          "repeat number out of range", p.ShortDebugString());
    const absl::Status valid = ValidateJobSpec(job.job, limits);
    Check(valid.ok(), "an expanded job spec is invalid", valid.ToString());
    CheckBinaryRoundTrip(job.job,
                         "expanded job spec does not survive the binary round trip");
    for (const std::string& flag : TrainerConfigToFlags(job.job.trainer())) {
      Check(absl::StartsWith(flag, "--") && flag.find('=') != std::string::npos &&
                flag.find('\0') == std::string::npos,
            "bad trainer flag", flag);
    }
  }
}

}  // namespace
}  // namespace tessera::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera::fuzz;  // NOLINT(build/namespaces): fuzzer entry point
  const std::string yaml_text(reinterpret_cast<const char*>(data), size);
  tessera::SpecLimits limits;
  limits.max_world_size = 64;

  const absl::StatusOr<tessera::v1::SweepSpec> parsed =
      tessera::ParseSweepSpec(yaml_text);
  CheckOnlyInvalidArgument(parsed.status(), "ParseSweepSpec: unexpected code");
  const absl::StatusOr<tessera::v1::SweepSpec> spec =
      tessera::ParseAndValidateSweepSpec(yaml_text, limits);
  CheckOnlyInvalidArgument(spec.status(), "ParseAndValidateSweepSpec: unexpected code");
  Check(parsed.ok() || !spec.ok(), "validation accepted what the parser rejected");
  if (!spec.ok()) {
    // Expansion of an invalid but parsed spec must fail cleanly too.
    if (parsed.ok()) {
      CheckOnlyInvalidArgument(tessera::ExpandSweep(*parsed, limits).status(),
                               "ExpandSweep: unexpected code");
    }
    return 0;
  }
  CheckBinaryRoundTrip(*spec, "valid sweep spec does not survive the binary round trip");
  CheckExpansion(*spec, limits);
  return 0;
}
