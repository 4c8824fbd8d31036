// Job spec parsing and validation, shared by tessctl (which validates before
// sending) and the coordinator (which validates again before storing).
//
// A spec is YAML whose keys mirror tessera.v1.JobSpec field names. Parsing is
// strict: unknown fields, wrong scalar types and malformed YAML are rejected with
// an InvalidArgument status whose message names the field path and the reason,
// e.g. "trainer.batch_size: must be positive, got -4".
//
// Thread-safe: free functions without shared state.
#ifndef TESSERA_COMMON_JOB_SPEC_H_
#define TESSERA_COMMON_JOB_SPEC_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "google/protobuf/message.h"
#include "tessera/v1/tessera.pb.h"

namespace tessera {

// Limits on a spec's `env` map (besides the generic ones on every string).
inline constexpr int kMaxEnvEntries = 64;
inline constexpr size_t kMaxEnvNameBytes = 128;
inline constexpr size_t kMaxEnvValueBytes = 4096;

struct SpecLimits {
  int max_world_size = 1024;  // largest world size accepted at submit
};

// Applies "a.b.c=value" overrides (as given to `tessctl submit --set`) to the YAML
// text and returns the new YAML text. Each override must name a path of the form
// key(.key)*; values are YAML scalars, or flow lists of scalars for repeated
// fields ("trainer.mean=[0.5, 0.5, 0.5]").
absl::StatusOr<std::string> ApplySpecOverrides(const std::string& yaml_text,
                                               const std::vector<std::string>& overrides);

// Parses YAML text into any message whose fields the keys name (the same
// strict rules as job specs), without range checks.
absl::Status ParseSpecMessage(const std::string& yaml_text,
                              google::protobuf::Message* message);

// InvalidArgument, worded as ParseSpecMessage words it, unless `yaml_text` is
// within the size limit, UTF-8 and well-formed YAML: for callers that read a
// part of a spec with yaml-cpp themselves (a search's parameters).
absl::Status CheckSpecText(const std::string& yaml_text);

// Sets the field `key` of `message` from `value_text` by the field's
// descriptor, with the strict rules of a spec's field, replacing any earlier
// value: a number, bool or enum name as YAML writes it, a flow list
// ("[0.9, 0.95]") for a repeated field; for a string field the text is the
// value itself. Errors name `path`. A search's trial parameters reach their
// TrainerConfig this way.
absl::Status SetSpecField(google::protobuf::Message* message, const std::string& key,
                          const std::string& value_text, const std::string& path);

// Parses YAML text into a JobSpec without range checks. Rejects malformed YAML,
// unknown fields and values of the wrong type.
absl::StatusOr<tessera::v1::JobSpec> ParseJobSpec(const std::string& yaml_text);

// Checks presence and ranges: name, world_size in [1, limits.max_world_size],
// trainer.model, trainer.dataset, positive batch size, non-negative counts.
// Also sizes (every string at most 4096 bytes, lists at most 1024 elements,
// env as CheckEnvName and kMaxEnv*), and that trainer.data_dir and
// trainer.checkpoint_dir are absolute paths without ".." components.
absl::Status ValidateJobSpec(const tessera::v1::JobSpec& spec, const SpecLimits& limits);

// InvalidArgument unless `name` may be set through a spec's `env`: it matches
// [A-Z_][A-Z0-9_]*, is at most kMaxEnvNameBytes long, is not one the worker
// sets (TESSERA_*, RANK, WORLD_SIZE, LOCAL_RANK, CUDA_VISIBLE_DEVICES, PATH,
// HOME, USER, LOGNAME) and is on no denylist of names that make a library
// load code or redirect what runs (LD_*, *_PLUGIN*, CUDA_INJECTION*,
// GCONV_PATH, PYTHON*, ...; the list and the reasons are in job_spec.cc and
// docs/security.md). The message names the variable and the reason.
absl::Status CheckEnvName(const std::string& name);

// The least memory_per_rank a spec may ask for: below it no trainer starts,
// so a smaller value is a slip ("memory_per_rank: 3" is three bytes).
inline constexpr int64_t kMinMemoryPerRank = int64_t{64} << 20;

// The spec's memory_per_rank in bytes (common/byte_size.h); 0 when unset.
// InvalidArgument naming the key for a value that is not a size or is below
// kMinMemoryPerRank. ValidateJobSpec applies the same check.
absl::StatusOr<int64_t> MemoryPerRankBytes(const tessera::v1::JobSpec& spec);

// ParseJobSpec followed by ValidateJobSpec.
absl::StatusOr<tessera::v1::JobSpec> ParseAndValidateJobSpec(const std::string& yaml_text,
                                                             const SpecLimits& limits);

// Builds the tessera-train flags for the fields set in `config`, in field order:
// each field `foo_bar` becomes "--foo-bar=<value>" (bools as true/false).
std::vector<std::string> TrainerConfigToFlags(const tessera::v1::TrainerConfig& config);

}  // namespace tessera

#endif  // TESSERA_COMMON_JOB_SPEC_H_
