// Fuzzes job spec handling (common/job_spec.h): the YAML parser and
// validator, `tessctl submit --set` overrides, and the trainer flags built from
// a valid spec.
//
// Input: the spec's YAML text, then optionally a NUL byte and up to eight
// NUL-separated overrides ("trainer.epochs=3"); anything after a ninth NUL is
// ignored.
//
// Besides crashes and sanitizer reports, these invariants abort the run:
//   - errors are InvalidArgument, never another code;
//   - a valid spec survives what the coordinator does with it: the binary
//     round trip of the store and gRPC, and proto JSON for the HTTP API;
//   - every trainer flag is "--name=value" with no NUL byte (argv cannot carry one);
//   - no overrides return the text unchanged; for text a user would type,
//     applied overrides produce YAML that parses again, with the last
//     override's value at its path.
#include <yaml-cpp/yaml.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "common/job_spec.h"
#include "google/protobuf/util/json_util.h"
#include "google/protobuf/util/message_differencer.h"
#include "tessera/v1/tessera.pb.h"
#include "tests/fuzz/fuzz_check.h"

namespace tessera::fuzz {
namespace {

namespace v1 = ::tessera::v1;

constexpr size_t kMaxParts = 9;  // the spec and eight overrides
// Longest override key the round-trip checks look at; spec paths are short.
constexpr size_t kMaxSaneKeyBytes = 256;

void CheckOnlyInvalidArgument(const absl::Status& status, absl::string_view what) {
  Check(status.ok() || absl::IsInvalidArgument(status), what, status.ToString());
}

// What the coordinator does with an accepted spec: store it as binary, send it
// over gRPC, print it as JSON.
void CheckSpecSurvivesTheCoordinator(const v1::JobSpec& spec) {
  std::string wire;
  Check(spec.SerializeToString(&wire), "valid spec does not serialize");
  v1::JobSpec back;
  Check(back.ParseFromString(wire),
        "valid spec does not parse back from its binary form (the store's GetJob and "
        "gRPC would fail on it)",
        spec.ShortDebugString());
  Check(google::protobuf::util::MessageDifferencer::Equals(spec, back),
        "valid spec changes in the binary round trip", spec.ShortDebugString());

  std::string json;
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  const auto printed = google::protobuf::util::MessageToJsonString(spec, &json, options);
  Check(printed.ok(), "valid spec cannot be printed as JSON (HTTP API)",
        std::string(printed.message()));
}

void CheckTrainerFlags(const v1::TrainerConfig& config) {
  for (const std::string& flag : TrainerConfigToFlags(config)) {
    Check(absl::StartsWith(flag, "--") && flag.find('=') != std::string::npos,
          "trainer flag is not --name=value", flag);
    Check(flag.find('\0') == std::string::npos,
          "trainer flag holds a NUL byte: execve would cut it short", flag);
  }
}

bool HasControlCharacter(const std::string& text) {
  for (const char c : text) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return true;
  }
  return false;
}

// YAML node of `root` at the dotted `key`, or an undefined node.
YAML::Node FindPath(const YAML::Node& root, const std::string& key) {
  YAML::Node current;
  current.reset(root);
  for (const std::string& part : std::vector<std::string>(absl::StrSplit(key, '.'))) {
    if (!current.IsMap()) return YAML::Node(YAML::NodeType::Undefined);
    YAML::Node child = current[part];
    current.reset(child);
  }
  return current;
}

void CheckOverrides(const std::string& yaml_text,
                    const std::vector<std::string>& overrides) {
  const absl::StatusOr<std::string> applied = ApplySpecOverrides(yaml_text, overrides);
  CheckOnlyInvalidArgument(applied.status(),
                           "ApplySpecOverrides: unexpected status code");
  if (!applied.ok()) return;
  if (overrides.empty()) {
    Check(*applied == yaml_text, "no overrides changed the text");
    return;
  }

  // What follows holds for text a user types: UTF-8 without control
  // characters, and keys of a sane length. (The YAML emitter writes invalid
  // UTF-8 as U+FFFD, raw bytes at the start of a document can read back as a
  // UTF-16 BOM, a lone CR or other control character is not kept, and a key
  // past 1024 characters is emitted as an implicit key YAML does not allow.)
  if (!IsValidUtf8(yaml_text)) return;
  for (const std::string& o : overrides) {
    if (!IsValidUtf8(o) || HasControlCharacter(o) || o.find('=') > kMaxSaneKeyBytes)
      return;
  }

  // The result is what tessctl submits: it must be YAML again.
  const absl::StatusOr<v1::JobSpec> reparsed = ParseJobSpec(*applied);
  CheckOnlyInvalidArgument(reparsed.status(),
                           "ParseJobSpec(overridden): unexpected code");
  Check(reparsed.ok() ||
            !absl::StartsWith(reparsed.status().message(), "spec: malformed YAML"),
        "overridden spec is not valid YAML", *applied);

  // The last override's value is where it says, with the same text.
  const std::string& last = overrides.back();
  const size_t eq = last.find('=');
  YAML::Node want;
  YAML::Node root;
  try {
    want = YAML::Load(last.substr(eq + 1));
    root = YAML::Load(*applied);
  } catch (const YAML::Exception& e) {
    Check(false, "overridden spec or override value does not load", e.what());
  }
  const YAML::Node got = FindPath(root, last.substr(0, eq));
  Check(got.IsDefined(), "override's key is missing from the result", *applied);
  if (want.IsNull()) {
    Check(got.IsNull(), "null override came back non-null", *applied);
  } else if (want.IsSequence()) {
    // A list of scalars (trainer.mean=[0.5,0.5,0.5]) comes back element by
    // element.
    Check(got.IsSequence() && got.size() == want.size(),
          "list override came back with another shape",
          last + "\n--- result:\n" + *applied);
    for (size_t i = 0; got.IsSequence() && i < want.size() && i < got.size(); ++i) {
      Check(got[i].IsScalar() && got[i].Scalar() == want[i].Scalar(),
            "list override's element changed on the way through the YAML emitter",
            last + "\n--- result:\n" + *applied);
    }
  } else {
    Check(got.IsScalar() && got.Scalar() == want.Scalar(),
          "override's value changed on the way through the YAML emitter",
          last + "\n--- result:\n" + *applied);
  }
}

}  // namespace
}  // namespace tessera::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera::fuzz;  // NOLINT(build/namespaces): fuzzer entry point
  std::vector<std::string> parts = SplitAtNul(data, size, kMaxParts);
  const std::string yaml_text = std::move(parts.front());
  const std::vector<std::string> overrides(parts.begin() + 1, parts.end());

  tessera::SpecLimits limits;
  limits.max_world_size = 64;
  const absl::StatusOr<tessera::v1::JobSpec> spec =
      tessera::ParseAndValidateJobSpec(yaml_text, limits);
  CheckOnlyInvalidArgument(spec.status(), "ParseAndValidateJobSpec: unexpected code");
  if (spec.ok()) {
    CheckSpecSurvivesTheCoordinator(*spec);
    CheckTrainerFlags(spec->trainer());
  } else {
    // The parser alone must agree or be more lenient.
    const absl::StatusOr<tessera::v1::JobSpec> parsed = tessera::ParseJobSpec(yaml_text);
    CheckOnlyInvalidArgument(parsed.status(), "ParseJobSpec: unexpected code");
    if (parsed.ok()) CheckTrainerFlags(parsed->trainer());
  }
  CheckOverrides(yaml_text, overrides);
  return 0;
}
