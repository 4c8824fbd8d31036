#include "common/job_spec.h"

#include <yaml-cpp/yaml.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "common/byte_size.h"
#include "common/fault_spec.h"
#include "common/profile_steps.h"
#include "common/status_macros.h"
#include "common/trainer_choices.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"

namespace tessera {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::EnumValueDescriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

// Specs are small; anything larger is a mistake or an attack on the parser.
constexpr size_t kMaxSpecYamlBytes = 1 << 20;
// Every string field of a spec ends up in argv, the database or a table.
constexpr size_t kMaxStringBytes = 4096;
constexpr size_t kMaxNameBytes = 128;
// Upper bound on the elements of any repeated field.
constexpr int kMaxRepeatedElements = 1024;

std::string JoinPath(const std::string& prefix, const std::string& key) {
  return prefix.empty() ? key : absl::StrCat(prefix, ".", key);
}

// "spec" names the document itself in messages about the top level.
std::string PathOrSpec(const std::string& path) { return path.empty() ? "spec" : path; }

std::string DescribeNode(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Map:
      return "a map";
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Null:
      return "null";
    case YAML::NodeType::Scalar: {
      // Long values are cut: the message names the field, not the whole value.
      constexpr size_t kMaxShown = 64;
      const std::string& text = node.Scalar();
      if (text.size() <= kMaxShown) return absl::StrCat("'", text, "'");
      return absl::StrCat("'", text.substr(0, kMaxShown), "...' (", text.size(),
                          " bytes)");
    }
    case YAML::NodeType::Undefined:
      break;
  }
  return "nothing";
}

absl::Status MalformedYaml(const YAML::Exception& e) {
  if (e.mark.is_null()) {
    return absl::InvalidArgumentError(absl::StrCat("spec: malformed YAML: ", e.msg));
  }
  return absl::InvalidArgumentError(absl::StrCat("spec: malformed YAML at line ",
                                                 e.mark.line + 1, ", column ",
                                                 e.mark.column + 1, ": ", e.msg));
}

// Offset of the first byte of `text` that is not part of well-formed UTF-8, or
// npos. Spec strings end up in proto3 `string` fields, which protobuf refuses
// to parse unless they are UTF-8 (the store's reads and gRPC would fail).
size_t FirstInvalidUtf8(absl::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    const auto c = static_cast<unsigned char>(text[i]);
    int extra = 0;
    uint32_t cp = 0;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      extra = 1;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      extra = 2;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      extra = 3;
      cp = c & 0x07;
    } else {
      return i;
    }
    if (i + extra >= text.size()) return i;
    for (int k = 1; k <= extra; ++k) {
      const auto cc = static_cast<unsigned char>(text[i + k]);
      if ((cc & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (cc & 0x3F);
    }
    static constexpr uint32_t kMin[] = {0, 0x80, 0x800, 0x10000};
    if (cp < kMin[extra] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
    i += extra + 1;
  }
  return absl::string_view::npos;
}

absl::StatusOr<YAML::Node> LoadYaml(const std::string& yaml_text) {
  if (yaml_text.size() > kMaxSpecYamlBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "spec: YAML text is ", yaml_text.size(), " bytes, limit ", kMaxSpecYamlBytes));
  }
  if (const size_t bad = FirstInvalidUtf8(yaml_text); bad != absl::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("spec: not UTF-8 text (invalid byte at offset ", bad, ")"));
  }
  try {
    return YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    return MalformedYaml(e);
  }
}

absl::Status TypeError(const std::string& path, absl::string_view expected,
                       const YAML::Node& node) {
  return absl::InvalidArgumentError(
      absl::StrCat(path, ": expected ", expected, ", got ", DescribeNode(node)));
}

absl::Status ParseMessage(const YAML::Node& node, const std::string& path, Message* msg);

// What a non-scalar YAML node was expected to be, for the type error.
absl::string_view ExpectedScalar(const FieldDescriptor* field) {
  switch (field->cpp_type()) {
    case FieldDescriptor::CPPTYPE_STRING:
      return "a string";
    case FieldDescriptor::CPPTYPE_BOOL:
      return "true or false";
    case FieldDescriptor::CPPTYPE_DOUBLE:
    case FieldDescriptor::CPPTYPE_FLOAT:
      return "a number";
    default:
      return "an integer";
  }
}

// The four integer types: the text must be an integer that fits the field.
absl::Status SetIntegerValue(const YAML::Node& node, const std::string& path,
                             const FieldDescriptor* field, Message* msg) {
  const Reflection* refl = msg->GetReflection();
  const bool repeated = field->is_repeated();
  const std::string& text = node.Scalar();
  switch (field->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32: {
      int64_t wide = 0;
      if (!absl::SimpleAtoi(text, &wide)) return TypeError(path, "an integer", node);
      if (wide < INT32_MIN || wide > INT32_MAX) {
        return TypeError(path, "a 32-bit integer", node);
      }
      const auto value = static_cast<int32_t>(wide);
      repeated ? refl->AddInt32(msg, field, value) : refl->SetInt32(msg, field, value);
      return absl::OkStatus();
    }
    case FieldDescriptor::CPPTYPE_INT64: {
      int64_t value = 0;
      if (!absl::SimpleAtoi(text, &value)) return TypeError(path, "an integer", node);
      repeated ? refl->AddInt64(msg, field, value) : refl->SetInt64(msg, field, value);
      return absl::OkStatus();
    }
    case FieldDescriptor::CPPTYPE_UINT32: {
      uint32_t value = 0;
      if (!absl::SimpleAtoi(text, &value)) {
        return TypeError(path, "a non-negative 32-bit integer", node);
      }
      repeated ? refl->AddUInt32(msg, field, value) : refl->SetUInt32(msg, field, value);
      return absl::OkStatus();
    }
    case FieldDescriptor::CPPTYPE_UINT64: {
      uint64_t value = 0;
      if (!absl::SimpleAtoi(text, &value)) {
        return TypeError(path, "a non-negative integer", node);
      }
      repeated ? refl->AddUInt64(msg, field, value) : refl->SetUInt64(msg, field, value);
      return absl::OkStatus();
    }
    default:
      return absl::InternalError(absl::StrCat(path, ": unsupported field type"));
  }
}

absl::Status SetFloatingValue(const YAML::Node& node, const std::string& path,
                              const FieldDescriptor* field, Message* msg) {
  const Reflection* refl = msg->GetReflection();
  const bool repeated = field->is_repeated();
  double value = 0;
  if (!absl::SimpleAtod(node.Scalar(), &value) || !std::isfinite(value)) {
    return TypeError(path, "a finite number", node);
  }
  if (field->cpp_type() == FieldDescriptor::CPPTYPE_DOUBLE) {
    repeated ? refl->AddDouble(msg, field, value) : refl->SetDouble(msg, field, value);
  } else {
    const auto narrow = static_cast<float>(value);
    repeated ? refl->AddFloat(msg, field, narrow) : refl->SetFloat(msg, field, narrow);
  }
  return absl::OkStatus();
}

absl::Status SetBoolValue(const YAML::Node& node, const std::string& path,
                          const FieldDescriptor* field, Message* msg) {
  // YAML 1.1 spellings, as yaml-cpp itself accepts them.
  const std::string lower = absl::AsciiStrToLower(node.Scalar());
  bool value = false;
  if (lower == "true" || lower == "yes" || lower == "on") {
    value = true;
  } else if (lower == "false" || lower == "no" || lower == "off") {
    value = false;
  } else {
    return TypeError(path, "true or false", node);
  }
  const Reflection* refl = msg->GetReflection();
  field->is_repeated() ? refl->AddBool(msg, field, value)
                       : refl->SetBool(msg, field, value);
  return absl::OkStatus();
}

absl::Status SetEnumValue(const YAML::Node& node, const std::string& path,
                          const FieldDescriptor* field, Message* msg) {
  const EnumValueDescriptor* value = field->enum_type()->FindValueByName(node.Scalar());
  if (value == nullptr) {
    std::vector<std::string> names;
    for (int i = 0; i < field->enum_type()->value_count(); ++i) {
      names.push_back(field->enum_type()->value(i)->name());
    }
    return TypeError(path, absl::StrCat("one of ", absl::StrJoin(names, ", ")), node);
  }
  const Reflection* refl = msg->GetReflection();
  field->is_repeated() ? refl->AddEnum(msg, field, value)
                       : refl->SetEnum(msg, field, value);
  return absl::OkStatus();
}

absl::Status SetStringValue(const YAML::Node& node, const std::string& path,
                            const FieldDescriptor* field, Message* msg) {
  const std::string& text = node.Scalar();
  // YAML escapes can spell bytes that are not UTF-8 ("\\xff" is U+00FF, but
  // a lone surrogate is not a character).
  if (field->type() == FieldDescriptor::TYPE_STRING &&
      FirstInvalidUtf8(text) != absl::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not valid UTF-8 text"));
  }
  const Reflection* refl = msg->GetReflection();
  field->is_repeated() ? refl->AddString(msg, field, text)
                       : refl->SetString(msg, field, text);
  return absl::OkStatus();
}

// Parses one scalar-or-message value of `field` from `node`. For a repeated field
// the value is appended; otherwise it is set.
absl::Status ParseValue(const YAML::Node& node, const std::string& path,
                        const FieldDescriptor* field, Message* msg) {
  if (field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
    const Reflection* refl = msg->GetReflection();
    Message* sub = field->is_repeated() ? refl->AddMessage(msg, field)
                                        : refl->MutableMessage(msg, field);
    return ParseMessage(node, path, sub);
  }
  if (!node.IsScalar()) return TypeError(path, ExpectedScalar(field), node);

  switch (field->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
    case FieldDescriptor::CPPTYPE_INT64:
    case FieldDescriptor::CPPTYPE_UINT32:
    case FieldDescriptor::CPPTYPE_UINT64:
      return SetIntegerValue(node, path, field, msg);
    case FieldDescriptor::CPPTYPE_DOUBLE:
    case FieldDescriptor::CPPTYPE_FLOAT:
      return SetFloatingValue(node, path, field, msg);
    case FieldDescriptor::CPPTYPE_BOOL:
      return SetBoolValue(node, path, field, msg);
    case FieldDescriptor::CPPTYPE_ENUM:
      return SetEnumValue(node, path, field, msg);
    case FieldDescriptor::CPPTYPE_STRING:
      return SetStringValue(node, path, field, msg);
    case FieldDescriptor::CPPTYPE_MESSAGE:
      break;  // handled above
  }
  return absl::InternalError(absl::StrCat(path, ": unsupported field type"));
}

// A proto map with scalar keys and values, written as a YAML map
// (`env: {NAME: value}`). Each entry is stored as the map's entry message.
absl::Status ParseMap(const YAML::Node& node, const std::string& path,
                      const FieldDescriptor* field, Message* msg) {
  if (!node.IsMap()) return TypeError(path, "a map", node);
  if (node.size() > static_cast<size_t>(kMaxRepeatedElements)) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": has ", node.size(), " entries, limit ", kMaxRepeatedElements));
  }
  const Descriptor* entry_desc = field->message_type();
  const FieldDescriptor* key_field = entry_desc->map_key();
  const FieldDescriptor* value_field = entry_desc->map_value();
  if (value_field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": maps of messages are not supported in specs"));
  }
  std::set<std::string> seen;
  for (const auto& entry : node) {
    if (!entry.first.IsScalar()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": keys must be scalars, got ", DescribeNode(entry.first)));
    }
    const std::string& key = entry.first.Scalar();
    const std::string entry_path = JoinPath(path, key);
    if (!seen.insert(key).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("spec: duplicate key '", entry_path, "'"));
    }
    if (entry.second.IsNull()) return TypeError(entry_path, "a value", entry.second);
    Message* item = msg->GetReflection()->AddMessage(msg, field);
    RETURN_IF_ERROR(ParseValue(entry.first, entry_path, key_field, item));
    RETURN_IF_ERROR(ParseValue(entry.second, entry_path, value_field, item));
  }
  return absl::OkStatus();
}

absl::Status ParseField(const YAML::Node& node, const std::string& path,
                        const FieldDescriptor* field, Message* msg) {
  // `key:` with no value (or `~`) leaves the field unset.
  if (node.IsNull()) return absl::OkStatus();
  if (field->is_map()) return ParseMap(node, path, field, msg);
  if (!field->is_repeated()) return ParseValue(node, path, field, msg);

  if (!node.IsSequence()) return TypeError(path, "a list", node);
  if (node.size() > static_cast<size_t>(kMaxRepeatedElements)) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": has ", node.size(), " elements, limit ", kMaxRepeatedElements));
  }
  for (size_t i = 0; i < node.size(); ++i) {
    RETURN_IF_ERROR(ParseValue(node[i], absl::StrCat(path, "[", i, "]"), field, msg));
  }
  return absl::OkStatus();
}

absl::Status ParseMessage(const YAML::Node& node, const std::string& path, Message* msg) {
  if (!node.IsMap()) {
    if (path.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "spec: expected a map of fields at the top level, got ", DescribeNode(node)));
    }
    return TypeError(path, "a map", node);
  }
  const Descriptor* desc = msg->GetDescriptor();
  std::set<std::string> seen;
  for (const auto& entry : node) {
    if (!entry.first.IsScalar()) {
      return absl::InvalidArgumentError(
          absl::StrCat(PathOrSpec(path), ": field names must be strings, got ",
                       DescribeNode(entry.first)));
    }
    const std::string& key = entry.first.Scalar();
    const std::string field_path = JoinPath(path, key);
    const FieldDescriptor* field = desc->FindFieldByName(key);
    if (field == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("spec: unknown field '", field_path, "'"));
    }
    if (!seen.insert(key).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("spec: duplicate field '", field_path, "'"));
    }
    RETURN_IF_ERROR(ParseField(entry.second, field_path, field, msg));
  }
  return absl::OkStatus();
}

// Appends a message for every string field (at any depth) longer than the limit,
// and for every non-finite floating-point value; these rules hold for fields
// added to the proto later as well.
void CheckGenericLimits(const Message& msg, const std::string& path,
                        std::vector<std::string>* errors) {
  const Reflection* refl = msg.GetReflection();
  std::vector<const FieldDescriptor*> fields;
  refl->ListFields(msg, &fields);
  for (const FieldDescriptor* field : fields) {
    const std::string field_path = JoinPath(path, field->name());
    const int count = field->is_repeated() ? refl->FieldSize(msg, field) : 1;
    if (field->is_repeated() && count > kMaxRepeatedElements) {
      errors->push_back(absl::StrCat(field_path, ": has ", count, " elements, limit ",
                                     kMaxRepeatedElements));
      continue;
    }
    for (int i = 0; i < count; ++i) {
      const std::string elem_path =
          field->is_repeated() ? absl::StrCat(field_path, "[", i, "]") : field_path;
      switch (field->cpp_type()) {
        case FieldDescriptor::CPPTYPE_STRING: {
          const std::string value = field->is_repeated()
                                        ? refl->GetRepeatedString(msg, field, i)
                                        : refl->GetString(msg, field);
          if (value.size() > kMaxStringBytes) {
            errors->push_back(absl::StrCat(elem_path, ": too long (", value.size(),
                                           " bytes, limit ", kMaxStringBytes, ")"));
          }
          // Spec strings become argv entries and table cells: a NUL would cut
          // an argument short, and no field needs other control characters.
          for (char c : value) {
            const auto u = static_cast<unsigned char>(c);
            if (u < 0x20 || u == 0x7f) {
              errors->push_back(
                  absl::StrCat(elem_path, ": must not contain control characters"));
              break;
            }
          }
          break;
        }
        case FieldDescriptor::CPPTYPE_DOUBLE:
        case FieldDescriptor::CPPTYPE_FLOAT: {
          double value = 0;
          if (field->cpp_type() == FieldDescriptor::CPPTYPE_DOUBLE) {
            value = field->is_repeated() ? refl->GetRepeatedDouble(msg, field, i)
                                         : refl->GetDouble(msg, field);
          } else {
            value = field->is_repeated() ? refl->GetRepeatedFloat(msg, field, i)
                                         : refl->GetFloat(msg, field);
          }
          if (!std::isfinite(value)) {
            errors->push_back(absl::StrCat(elem_path, ": must be finite, got ", value));
          }
          break;
        }
        case FieldDescriptor::CPPTYPE_MESSAGE:
          CheckGenericLimits(field->is_repeated()
                                 ? refl->GetRepeatedMessage(msg, field, i)
                                 : refl->GetMessage(msg, field),
                             elem_path, errors);
          break;
        default:
          break;
      }
    }
  }
}

template <typename T>
void CheckNonNegative(const std::string& path, T value,
                      std::vector<std::string>* errors) {
  if (value < 0) {
    errors->push_back(absl::StrCat(path, ": must be non-negative, got ", value));
  }
}

// Directories are resolved on each worker and must lie under the worker's
// roots (worker_agent.h); a relative path or a ".." component can never be
// meant, so it is refused here, where the user sees it at once.
void CheckSpecPath(const std::string& path, const std::string& value,
                   std::vector<std::string>* errors) {
  // An overlong value is reported once, by the generic limits.
  if (value.empty() || value.size() > kMaxStringBytes) return;
  if (value.front() != '/') {
    errors->push_back(
        absl::StrCat(path, ": must be an absolute path, got '", value, "'"));
    return;
  }
  for (absl::string_view part : absl::StrSplit(value, '/')) {
    if (part == "..") {
      errors->push_back(absl::StrCat(path, ": must not contain '..', got '", value, "'"));
      return;
    }
  }
}

void CheckEnv(const tessera::v1::JobSpec& spec, std::vector<std::string>* errors) {
  if (spec.env_size() > kMaxEnvEntries) {
    errors->push_back(
        absl::StrCat("env: has ", spec.env_size(), " entries, limit ", kMaxEnvEntries));
  }
  // Sorted, so that messages come in a stable order.
  std::map<std::string, std::string> env(spec.env().begin(), spec.env().end());
  for (const auto& [name, value] : env) {
    if (absl::Status s = CheckEnvName(name); !s.ok()) {
      errors->push_back(std::string(s.message()));
    }
    if (value.size() > kMaxEnvValueBytes) {
      errors->push_back(absl::StrCat("env.", name, ": value too long (", value.size(),
                                     " bytes, limit ", kMaxEnvValueBytes, ")"));
    }
    if (value.find('\0') != std::string::npos) {
      errors->push_back(absl::StrCat("env.", name, ": value must not contain NUL"));
    }
  }
}

void CheckNameAndWorldSize(const tessera::v1::JobSpec& spec, const SpecLimits& limits,
                           std::vector<std::string>* errors) {
  if (spec.name().empty()) {
    errors->push_back("name: missing");
  } else if (spec.name().size() > kMaxNameBytes) {
    errors->push_back(absl::StrCat("name: too long (", spec.name().size(),
                                   " bytes, limit ", kMaxNameBytes, ")"));
  }
  if (spec.world_size() < 1 || spec.world_size() > limits.max_world_size) {
    errors->push_back(absl::StrCat("world_size: must be between 1 and ",
                                   limits.max_world_size, ", got ", spec.world_size()));
  }
}

// max_restarts, and how the ranks are laid out over workers.
void CheckRestartsAndPlacement(const tessera::v1::JobSpec& spec,
                               std::vector<std::string>* errors) {
  CheckNonNegative("max_restarts", spec.max_restarts(), errors);
  CheckNonNegative("nodes", spec.nodes(), errors);
  CheckNonNegative("per_node", spec.per_node(), errors);
  if (!spec.placement().empty() && spec.placement() != "pack" &&
      spec.placement() != "spread") {
    errors->push_back(absl::StrCat("placement: must be one of pack, spread; got '",
                                   spec.placement(), "'"));
  }
  if (spec.world_size() > 0 && spec.nodes() > 0 &&
      spec.world_size() % spec.nodes() != 0) {
    errors->push_back(absl::StrCat("nodes: world_size ", spec.world_size(),
                                   " does not divide into ", spec.nodes(), " nodes"));
  }
  if (spec.world_size() > 0 && spec.per_node() > 0 &&
      spec.world_size() % spec.per_node() != 0) {
    errors->push_back(absl::StrCat("per_node: world_size ", spec.world_size(),
                                   " is not a multiple of ", spec.per_node()));
  }
  if (spec.nodes() > 0 && spec.per_node() > 0 &&
      static_cast<int64_t>(spec.nodes()) * spec.per_node() != spec.world_size()) {
    errors->push_back("per_node: nodes x per_node must equal world_size");
  }
}

void CheckWatchdog(const tessera::v1::WatchdogSpec& w, std::vector<std::string>* errors) {
  CheckNonNegative("watchdog.rank_silent_after_s", w.rank_silent_after_s(), errors);
  CheckNonNegative("watchdog.stall_after_min_s", w.stall_after_min_s(), errors);
  CheckNonNegative("watchdog.stall_step_factor", w.stall_step_factor(), errors);
  CheckNonNegative("watchdog.straggler_window_s", w.straggler_window_s(), errors);
  if (w.rank_silent_after_s() > 0 && w.rank_silent_after_s() < 1) {
    errors->push_back(
        "watchdog.rank_silent_after_s: must be at least 1 (progress is "
        "reported every 2 s or so)");
  }
  if (w.straggler_ratio() != 0 && w.straggler_ratio() <= 1) {
    errors->push_back(absl::StrCat("watchdog.straggler_ratio: must be above 1, got ",
                                   w.straggler_ratio()));
  }
}

// The trainer's required fields, its run length and its numeric settings.
void CheckTrainerNumbers(const tessera::v1::TrainerConfig& t,
                         std::vector<std::string>* errors) {
  if (t.model().empty()) errors->push_back("trainer.model: missing");
  if (t.dataset().empty()) errors->push_back("trainer.dataset: missing");
  // An evaluation takes no training step: batch size and length may be left
  // unset (the trainer's defaults), as lr may.
  if (t.batch_size() < 0 || (t.batch_size() == 0 && !t.eval_only())) {
    errors->push_back(
        absl::StrCat("trainer.batch_size: must be positive, got ", t.batch_size()));
  }
  CheckNonNegative("trainer.epochs", t.epochs(), errors);
  CheckNonNegative("trainer.max_steps", t.max_steps(), errors);
  if (t.epochs() == 0 && t.max_steps() == 0 && !t.eval_only()) {
    errors->push_back(
        "trainer.epochs: one of trainer.epochs and trainer.max_steps must be positive");
  }
  // lr 0 means "trainer default"; a set value must be a usable rate.
  if (t.lr() < 0) {
    errors->push_back(absl::StrCat("trainer.lr: must be positive, got ", t.lr()));
  }
  CheckNonNegative("trainer.weight_decay", t.weight_decay(), errors);
  CheckNonNegative("trainer.train_subset", t.train_subset(), errors);
  CheckNonNegative("trainer.test_subset", t.test_subset(), errors);
  CheckNonNegative("trainer.metrics_every", t.metrics_every(), errors);
  CheckNonNegative("trainer.threads", t.threads(), errors);
  CheckNonNegative("trainer.grad_accum", t.grad_accum(), errors);
  CheckNonNegative("trainer.checkpoint_every", t.checkpoint_every(), errors);
  CheckNonNegative("trainer.clip_grad_norm", t.clip_grad_norm(), errors);
  CheckNonNegative("trainer.bucket_cap_mb", t.bucket_cap_mb(), errors);
  CheckNonNegative("trainer.first_bucket_mb", t.first_bucket_mb(), errors);
  CheckNonNegative("trainer.image_size", t.image_size(), errors);
  CheckNonNegative("trainer.data_workers", t.data_workers(), errors);
  if (t.has_warmup_steps())
    CheckNonNegative("trainer.warmup_steps", t.warmup_steps(), errors);
}

// A value in [0, 1], or in [0, 1) when 1 is not allowed.
void CheckFraction(const char* field, double v, bool one_allowed,
                   std::vector<std::string>* errors) {
  if (v < 0 || v > 1 || (!one_allowed && v == 1)) {
    errors->push_back(
        absl::StrCat(field, ": must be in [0, 1", one_allowed ? "]" : ")", ", got ", v));
  }
}

// One of `allowed`, or empty for the trainer's default.
void CheckOneOf(const char* field, const std::string& v, ChoiceList allowed,
                std::vector<std::string>* errors) {
  if (v.empty() || IsChoice(allowed, v)) return;
  errors->push_back(absl::StrCat(field, ": must be one of ", ChoicesText(allowed, ", "),
                                 "; got '", v, "'"));
}

// The trainer's fractions, named choices and per-channel normalisation.
void CheckTrainerChoices(const tessera::v1::TrainerConfig& t,
                         std::vector<std::string>* errors) {
  CheckFraction("trainer.momentum", t.momentum(), false, errors);
  CheckFraction("trainer.label_smoothing", t.label_smoothing(), false, errors);
  CheckFraction("trainer.dropout", t.dropout(), false, errors);
  CheckFraction("trainer.weak_fraction", t.weak_fraction(), true, errors);
  // Every named choice, against the tables tessera-train validates with.
  const google::protobuf::Reflection* reflection = t.GetReflection();
  for (const ChoiceField& f : kTrainerChoiceFields) {
    const google::protobuf::FieldDescriptor* field =
        t.GetDescriptor()->FindFieldByName(f.field);
    if (field == nullptr)
      continue;  // job_spec_test checks that every table names a field
    CheckOneOf(absl::StrCat("trainer.", f.field).c_str(), reflection->GetString(t, field),
               f.choices, errors);
  }
  if (!IsZeroStage(t.zero_stage())) {
    errors->push_back(absl::StrCat("trainer.zero_stage: must be one of ",
                                   ZeroStageChoicesText(), "; got ", t.zero_stage()));
  } else if (t.zero_stage() > 0 && t.has_allreduce() && !t.allreduce()) {
    errors->push_back(
        "trainer.zero_stage: shards the optimizer over ranks that "
        "average their gradients; it needs trainer.allreduce");
  }
  CheckFraction("trainer.crop_fraction", t.crop_fraction(), true, errors);
  CheckFraction("trainer.data_max_skipped", t.data_max_skipped(), true, errors);
  CheckFraction("trainer.layer_decay", t.layer_decay(), true, errors);
  CheckNonNegative("trainer.head_warmup_steps", t.head_warmup_steps(), errors);
  if (!t.profile_steps().empty()) {
    absl::StatusOr<ProfileSteps> steps = ParseProfileSteps(t.profile_steps());
    if (!steps.ok()) {
      errors->push_back(
          absl::StrCat("trainer.profile_steps: ", steps.status().message()));
    }
  }
  for (const auto& [field, count] : {std::pair{"trainer.mean", t.mean_size()},
                                     std::pair{"trainer.std", t.std_size()}}) {
    if (count != 0 && count != 3) {
      errors->push_back(absl::StrCat(field, ": three values (R, G, B), got ", count));
    }
  }
}

// The validation split, the stop fraction and the optimizer knobs.
void CheckValidationAndOptimizerKeys(const tessera::v1::TrainerConfig& t,
                                     std::vector<std::string>* errors) {
  if (!(t.val_fraction() >= 0 && t.val_fraction() < 1)) {
    errors->push_back(
        absl::StrCat("trainer.val_fraction: must be in [0, 1), got ", t.val_fraction()));
  }
  CheckNonNegative("trainer.val_seed", t.val_seed(), errors);
  CheckNonNegative("trainer.eval_every", t.eval_every(), errors);
  if (!(t.stop_fraction() >= 0 && t.stop_fraction() <= 1)) {
    errors->push_back(absl::StrCat("trainer.stop_fraction: must be in [0, 1], got ",
                                   t.stop_fraction()));
  }
  if (t.adam_betas_size() != 0) {
    if (t.adam_betas_size() != 2) {
      errors->push_back(absl::StrCat(
          "trainer.adam_betas: two values (beta1, beta2), got ", t.adam_betas_size()));
    }
    for (const double beta : t.adam_betas()) {
      if (!(beta >= 0 && beta < 1)) {
        errors->push_back(
            absl::StrCat("trainer.adam_betas: must be in [0, 1), got ", beta));
      }
    }
  }
  CheckNonNegative("trainer.adam_eps", t.adam_eps(), errors);
  CheckNonNegative("trainer.lamb_min_trust", t.lamb_min_trust(), errors);
  CheckNonNegative("trainer.lamb_max_trust", t.lamb_max_trust(), errors);
  if (t.lamb_max_trust() > 0 && t.lamb_min_trust() > t.lamb_max_trust()) {
    errors->push_back(absl::StrCat("trainer.lamb_min_trust: ", t.lamb_min_trust(),
                                   " is above trainer.lamb_max_trust ",
                                   t.lamb_max_trust()));
  }
}

// The trainer's directories, resume and fault hook.
void CheckTrainerPathsAndFault(const tessera::v1::TrainerConfig& t, int32_t world_size,
                               std::vector<std::string>* errors) {
  if (t.resume() && t.checkpoint_dir().empty()) {
    errors->push_back("trainer.resume: needs trainer.checkpoint_dir");
  }
  CheckSpecPath("trainer.data_dir", t.data_dir(), errors);
  CheckSpecPath("trainer.checkpoint_dir", t.checkpoint_dir(), errors);
  CheckSpecPath("trainer.init_from", t.init_from(), errors);
  if (t.fault().empty()) return;
  const absl::StatusOr<FaultSpec> fault = ParseFaultSpec(t.fault());
  if (!fault.ok()) {
    errors->push_back(absl::StrCat("trainer.", fault.status().message()));
  } else if (fault->rank >= world_size) {
    errors->push_back(absl::StrCat("trainer.fault: rank ", fault->rank,
                                   " is not a rank of this job (world_size ", world_size,
                                   ")"));
  }
}

// A job of kind "eval" (trainer.eval_only): one model source, a split the
// data offers; trainer.eval_step picks a checkpoint of an evaluation only.
void CheckEvaluation(const tessera::v1::JobSpec& spec, std::vector<std::string>* errors) {
  const tessera::v1::TrainerConfig& t = spec.trainer();
  if (!spec.kind().empty() && spec.kind() != "train" && spec.kind() != "eval") {
    errors->push_back(
        absl::StrCat("kind: must be one of train, eval; got '", spec.kind(), "'"));
  }
  if ((spec.kind() == "eval") != t.eval_only()) {
    errors->push_back(t.eval_only() ? "trainer.eval_only: only in a job of kind eval"
                                    : "kind: eval needs trainer.eval_only: true");
  }
  if (!t.eval_split().empty() && t.eval_split() != "test" && t.eval_split() != "val" &&
      t.eval_split() != "train") {
    errors->push_back(
        absl::StrCat("trainer.eval_split: must be one of test, val, train; "
                     "got '",
                     t.eval_split(), "'"));
  }
  CheckNonNegative("trainer.eval_step", t.eval_step(), errors);
  CheckNonNegative("eval_of", spec.eval_of(), errors);
  if (spec.eval_of() > 0 && spec.kind() != "eval") {
    errors->push_back("eval_of: only in a job of kind eval");
  }
  if (t.eval_step() > 0 && !(t.eval_only() && t.resume())) {
    errors->push_back(
        "trainer.eval_step: picks the checkpoint of an evaluation "
        "(trainer.eval_only with trainer.resume)");
  }
  if (t.eval_only() && t.resume() != t.init_from().empty()) {
    errors->push_back(t.resume() ? "trainer.eval_only: takes its model from "
                                   "trainer.init_from or a checkpoint (resume), not both"
                                 : "trainer.eval_only: needs trainer.init_from, or "
                                   "trainer.resume with trainer.checkpoint_dir");
  }
}

// Shortest decimal form that reads back as the same double.
std::string FormatDouble(double value) {
  char buf[64];
  for (int precision = 15; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof(buf), "%.*g", precision, value);
    if (std::strtod(buf, nullptr) == value) break;
  }
  return buf;
}

std::string FormatScalar(const Message& msg, const FieldDescriptor* field, int index) {
  const Reflection* refl = msg.GetReflection();
  const bool rep = field->is_repeated();
  switch (field->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
      return absl::StrCat(rep ? refl->GetRepeatedInt32(msg, field, index)
                              : refl->GetInt32(msg, field));
    case FieldDescriptor::CPPTYPE_INT64:
      return absl::StrCat(rep ? refl->GetRepeatedInt64(msg, field, index)
                              : refl->GetInt64(msg, field));
    case FieldDescriptor::CPPTYPE_UINT32:
      return absl::StrCat(rep ? refl->GetRepeatedUInt32(msg, field, index)
                              : refl->GetUInt32(msg, field));
    case FieldDescriptor::CPPTYPE_UINT64:
      return absl::StrCat(rep ? refl->GetRepeatedUInt64(msg, field, index)
                              : refl->GetUInt64(msg, field));
    case FieldDescriptor::CPPTYPE_DOUBLE:
      return FormatDouble(rep ? refl->GetRepeatedDouble(msg, field, index)
                              : refl->GetDouble(msg, field));
    case FieldDescriptor::CPPTYPE_FLOAT:
      return FormatDouble(rep ? refl->GetRepeatedFloat(msg, field, index)
                              : refl->GetFloat(msg, field));
    case FieldDescriptor::CPPTYPE_BOOL:
      return (rep ? refl->GetRepeatedBool(msg, field, index) : refl->GetBool(msg, field))
                 ? "true"
                 : "false";
    case FieldDescriptor::CPPTYPE_ENUM:
      return (rep ? refl->GetRepeatedEnum(msg, field, index) : refl->GetEnum(msg, field))
          ->name();
    case FieldDescriptor::CPPTYPE_STRING:
      return rep ? refl->GetRepeatedString(msg, field, index)
                 : refl->GetString(msg, field);
    case FieldDescriptor::CPPTYPE_MESSAGE:
      break;
  }
  return "";
}

// Sets `key.path` in `root` to the scalar `value`, creating maps on the way.
absl::Status ApplyOneOverride(YAML::Node& root, const std::string& override_text) {
  const size_t eq = override_text.find('=');
  if (eq == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("override '", override_text, "': expected key=value"));
  }
  const std::string key = override_text.substr(0, eq);
  const std::string value_text = override_text.substr(eq + 1);
  if (key.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("override '", override_text, "': empty key"));
  }
  const std::vector<std::string> parts = absl::StrSplit(key, '.');
  for (const std::string& part : parts) {
    if (part.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "override '", override_text, "': key '", key, "' has an empty component"));
    }
  }

  YAML::Node value;
  try {
    value = YAML::Load(value_text);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(
        "override '", override_text, "': value is not a YAML scalar: ", e.msg));
  }
  // A list of scalars, written as a flow list, sets a repeated field:
  // trainer.mean=[0.5,0.5,0.5]. A block list ("- x") is more likely a string
  // that lost its quotes.
  bool scalar_list = value.IsSequence() &&
                     absl::StartsWith(absl::StripLeadingAsciiWhitespace(value_text), "[");
  for (size_t i = 0; scalar_list && i < value.size(); ++i) {
    scalar_list = value[i].IsScalar();
  }
  if (!value.IsScalar() && !value.IsNull() && !scalar_list) {
    return absl::InvalidArgumentError(
        absl::StrCat("override '", override_text,
                     "': value must be a scalar or a list of scalars, got ",
                     DescribeNode(value), " (quote it to pass a string)"));
  }

  // yaml-cpp nodes are handles: reset() rebinds `current`, whereas assignment
  // would overwrite the node it refers to.
  YAML::Node current;
  current.reset(root);
  std::string walked;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    walked = JoinPath(walked, parts[i]);
    YAML::Node child = current[parts[i]];
    if (!child.IsDefined() || child.IsNull()) {
      current[parts[i]] = YAML::Node(YAML::NodeType::Map);
      child.reset(current[parts[i]]);
    } else if (!child.IsMap()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "override '", override_text, "': '", walked, "' is not a map in the spec"));
    }
    current.reset(child);
  }
  current[parts.back()] = value;
  return absl::OkStatus();
}

// Why a spec may not set the variable `name`, or nullptr when it may.
//
// A rank runs a trainer executable the operator chose, as the job's owner or,
// on a worker that is not root, as the worker's own account. A variable that
// makes some library of the trainer's stack (glibc, the dynamic loader, the
// shell, OpenSSL, Kerberos, CUDA, NCCL, OpenMP, ...) load code of the
// submitter's choosing, or that redirects what runs, would turn "run this
// trainer with this config" into "run any code", possibly as the worker's
// account. Those are refused. Variables that only tune the submitter's own
// job (NCCL_DEBUG, OMP_NUM_THREADS, MALLOC_ARENA_MAX, TMPDIR, trust roots
// such as SSL_CERT_FILE, which only its own connections use) pass.
// docs/security.md lists the rules.
const char* RefusedEnvName(const std::string& name) {
  struct Rule {
    enum Kind { kExact, kPrefix, kContains } kind;
    const char* text;
    const char* why;
  };
  static constexpr Rule kRules[] = {
      // Set by the worker for each rank, from its own configuration.
      {Rule::kPrefix, "TESSERA_", "TESSERA_* names are set by the worker"},
      {Rule::kExact, "RANK", "it is set by the worker for each rank"},
      {Rule::kExact, "WORLD_SIZE", "it is set by the worker for each rank"},
      {Rule::kExact, "LOCAL_RANK", "it is set by the worker for each rank"},
      {Rule::kExact, "CUDA_VISIBLE_DEVICES", "it is set by the worker for each rank"},
      {Rule::kExact, "PATH", "it is set by the worker (a fixed default)"},
      {Rule::kExact, "HOME", "it is set by the worker (the account's home)"},
      {Rule::kExact, "USER", "it is set by the worker (the account's name)"},
      {Rule::kExact, "LOGNAME", "it is set by the worker (the account's name)"},
      {Rule::kExact, "SHELL", "it names a program to run"},
      // The dynamic loader and glibc.
      {Rule::kPrefix, "LD_", "LD_* variables make the dynamic loader load code"},
      {Rule::kExact, "GLIBC_TUNABLES",
       "it reaches into the dynamic loader (glibc.rtld.*, hwcaps), whose parser has "
       "had exploitable bugs"},
      {Rule::kExact, "GCONV_PATH", "glibc loads iconv modules (code) from it"},
      {Rule::kExact, "LOCPATH", "glibc loads locale data from it"},
      {Rule::kExact, "NLSPATH", "glibc loads message catalogs (format strings) from it"},
      {Rule::kExact, "MALLOC_TRACE", "glibc writes a file it names"},
      {Rule::kExact, "HOSTALIASES", "it redirects name resolution"},
      {Rule::kExact, "RESOLV_HOST_CONF", "it redirects name resolution"},
      {Rule::kExact, "LOCALDOMAIN", "it redirects name resolution"},
      {Rule::kExact, "RES_OPTIONS", "it redirects name resolution"},
      // Shells and interpreters a trainer or its tools may start.
      {Rule::kExact, "ENV", "sh runs the file it names"},
      {Rule::kPrefix, "BASH_", "bash runs files and functions these name"},
      {Rule::kExact, "SHELLOPTS", "it changes how shells run commands"},
      {Rule::kExact, "BASHOPTS", "it changes how shells run commands"},
      {Rule::kExact, "IFS", "it changes how shells split commands"},
      {Rule::kExact, "PS4", "shells run commands it contains"},
      {Rule::kExact, "PROMPT_COMMAND", "shells run it"},
      {Rule::kPrefix, "PYTHON", "PYTHON* variables make Python load code"},
      {Rule::kPrefix, "PERL", "PERL* variables make Perl load code"},
      {Rule::kPrefix, "RUBY", "RUBY* variables make Ruby load code"},
      {Rule::kPrefix, "NODE_", "NODE_* variables make Node.js load code"},
      {Rule::kExact, "JAVA_TOOL_OPTIONS", "it makes the JVM load agents (code)"},
      {Rule::kExact, "_JAVA_OPTIONS", "it makes the JVM load agents (code)"},
      {Rule::kExact, "JDK_JAVA_OPTIONS", "it makes the JVM load agents (code)"},
      {Rule::kExact, "CLASSPATH", "it makes the JVM load code"},
      // Libraries that load modules named by configuration.
      {Rule::kPrefix, "OPENSSL_",
       "OpenSSL loads engines and providers (code) from these"},
      {Rule::kPrefix, "KRB5", "Kerberos loads plugins (code) named by its configuration"},
      {Rule::kPrefix, "GSS_",
       "GSSAPI loads mechanisms (code) named by its configuration"},
      {Rule::kContains, "_PLUGIN", "*_PLUGIN* variables name libraries to load"},
      {Rule::kPrefix, "PLUGIN", "PLUGIN* variables name libraries to load"},
      {Rule::kPrefix, "CUDA_INJECTION",
       "CUDA loads the library it names into the process"},
      {Rule::kPrefix, "NVTX_INJECTION",
       "NVTX loads the library it names into the process"},
      {Rule::kExact, "NCCL_CONF_FILE", "the file can set NCCL_NET_PLUGIN"},
      {Rule::kExact, "FI_PROVIDER_PATH", "libfabric loads providers (code) from it"},
      {Rule::kPrefix, "OMP_TOOL", "OpenMP loads the tool libraries these name"},
      {Rule::kExact, "HSA_TOOLS_LIB", "ROCm loads the library it names"},
      {Rule::kPrefix, "VK_", "Vulkan loads drivers and layers (code) these name"},
      {Rule::kPrefix, "LIBGL_", "Mesa loads drivers (code) from these"},
      {Rule::kPrefix, "__EGL_", "EGL loads vendor libraries (code) these name"},
      {Rule::kPrefix, "__GLX_", "GLX loads vendor libraries (code) these name"},
  };
  for (const Rule& rule : kRules) {
    const bool hit = rule.kind == Rule::kExact    ? name == rule.text
                     : rule.kind == Rule::kPrefix ? absl::StartsWith(name, rule.text)
                                                  : absl::StrContains(name, rule.text);
    if (hit) return rule.why;
  }
  return nullptr;
}

}  // namespace

absl::Status CheckEnvName(const std::string& name) {
  // Shown cut short: the message names the problem, not the whole name.
  const std::string shown = name.size() <= 64 ? name : name.substr(0, 64) + "...";
  if (name.empty() || name.size() > kMaxEnvNameBytes) {
    return absl::InvalidArgumentError(absl::StrCat("env: name '", shown, "' must be 1-",
                                                   kMaxEnvNameBytes, " characters"));
  }
  const auto upper_or_underscore = [](char c) {
    return (c >= 'A' && c <= 'Z') || c == '_';
  };
  bool ok = upper_or_underscore(name[0]);
  for (char c : name) ok = ok && (upper_or_underscore(c) || (c >= '0' && c <= '9'));
  if (!ok) {
    return absl::InvalidArgumentError(
        absl::StrCat("env: name '", shown, "' must match [A-Z_][A-Z0-9_]*"));
  }
  if (const char* why = RefusedEnvName(name); why != nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("env: name '", shown, "' is reserved: ", why));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ApplySpecOverrides(
    const std::string& yaml_text, const std::vector<std::string>& overrides) {
  // Returning the text untouched keeps its comments for the record.
  if (overrides.empty()) return yaml_text;
  ASSIGN_OR_RETURN(YAML::Node root, LoadYaml(yaml_text));
  if (root.IsNull()) {
    root = YAML::Node(YAML::NodeType::Map);
  } else if (!root.IsMap()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "spec: expected a map of fields at the top level, got ", DescribeNode(root)));
  }
  try {
    for (const std::string& override_text : overrides) {
      RETURN_IF_ERROR(ApplyOneOverride(root, override_text));
    }
    YAML::Emitter emitter;
    emitter << root;
    if (!emitter.good()) {
      return absl::InvalidArgumentError(
          absl::StrCat("spec: cannot write YAML: ", emitter.GetLastError()));
    }
    std::string out = std::string(emitter.c_str()) + "\n";
    // The emitter cannot write every key back (control characters, very long
    // keys): refuse rather than hand on text that no longer parses.
    if (absl::Status reread = LoadYaml(out).status(); !reread.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "spec: --set cannot be applied to this text (its keys cannot be written "
          "back as YAML): ",
          reread.message()));
    }
    return out;
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("spec: cannot apply overrides: ", e.msg));
  }
}

absl::Status ParseSpecMessage(const std::string& yaml_text,
                              google::protobuf::Message* message) {
  ASSIGN_OR_RETURN(YAML::Node root, LoadYaml(yaml_text));
  try {
    return ParseMessage(root, "", message);
  } catch (const YAML::Exception& e) {
    return MalformedYaml(e);
  }
}

absl::Status CheckSpecText(const std::string& yaml_text) {
  return LoadYaml(yaml_text).status();
}

absl::Status SetSpecField(google::protobuf::Message* message, const std::string& key,
                          const std::string& value_text, const std::string& path) {
  const FieldDescriptor* field = message->GetDescriptor()->FindFieldByName(key);
  if (field == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("spec: unknown field '", path, "'"));
  }
  if (field->is_map() || field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": is a group of fields, not a value"));
  }
  YAML::Node node;
  if (!field->is_repeated() && field->cpp_type() == FieldDescriptor::CPPTYPE_STRING) {
    node = YAML::Node(value_text);
  } else {
    ASSIGN_OR_RETURN(node, LoadYaml(value_text));
  }
  if (node.IsNull()) return TypeError(path, ExpectedScalar(field), node);
  message->GetReflection()->ClearField(message, field);
  try {
    return ParseField(node, path, field, message);
  } catch (const YAML::Exception& e) {
    return MalformedYaml(e);
  }
}

absl::StatusOr<tessera::v1::JobSpec> ParseJobSpec(const std::string& yaml_text) {
  tessera::v1::JobSpec spec;
  RETURN_IF_ERROR(ParseSpecMessage(yaml_text, &spec));
  return spec;
}

absl::StatusOr<int64_t> MemoryPerRankBytes(const tessera::v1::JobSpec& spec) {
  if (spec.memory_per_rank().empty()) return 0;
  ASSIGN_OR_RETURN(const int64_t bytes,
                   ParseByteSize(spec.memory_per_rank(), "memory_per_rank"));
  if (bytes < kMinMemoryPerRank) {
    return absl::InvalidArgumentError(absl::StrCat(
        "memory_per_rank: '", spec.memory_per_rank(),
        "' is below the least a rank needs (", FormatByteSize(kMinMemoryPerRank), ")"));
  }
  return bytes;
}

absl::Status ValidateJobSpec(const tessera::v1::JobSpec& spec, const SpecLimits& limits) {
  std::vector<std::string> errors;
  CheckGenericLimits(spec, "", &errors);
  CheckNameAndWorldSize(spec, limits, &errors);
  CheckRestartsAndPlacement(spec, &errors);
  CheckWatchdog(spec.watchdog(), &errors);
  CheckTrainerNumbers(spec.trainer(), &errors);
  CheckTrainerChoices(spec.trainer(), &errors);
  CheckValidationAndOptimizerKeys(spec.trainer(), &errors);
  CheckTrainerPathsAndFault(spec.trainer(), spec.world_size(), &errors);
  CheckEvaluation(spec, &errors);
  CheckEnv(spec, &errors);
  if (absl::StatusOr<int64_t> memory = MemoryPerRankBytes(spec); !memory.ok()) {
    errors.push_back(std::string(memory.status().message()));
  }

  if (errors.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrJoin(errors, "; "));
}

absl::StatusOr<tessera::v1::JobSpec> ParseAndValidateJobSpec(const std::string& yaml_text,
                                                             const SpecLimits& limits) {
  ASSIGN_OR_RETURN(tessera::v1::JobSpec spec, ParseJobSpec(yaml_text));
  RETURN_IF_ERROR(ValidateJobSpec(spec, limits));
  return spec;
}

std::vector<std::string> TrainerConfigToFlags(const tessera::v1::TrainerConfig& config) {
  // ListFields yields exactly the set fields in field-number order: proto3
  // scalars when non-default, `optional` fields when present.
  std::vector<const FieldDescriptor*> fields;
  config.GetReflection()->ListFields(config, &fields);
  std::vector<std::string> flags;
  for (const FieldDescriptor* field : fields) {
    // TrainerConfig is flat by contract (one field, one flag); a nested message
    // has no flag spelling.
    if (field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) continue;
    const std::string flag =
        absl::StrCat("--", absl::StrReplaceAll(field->name(), {{"_", "-"}}));
    const int count =
        field->is_repeated() ? config.GetReflection()->FieldSize(config, field) : 1;
    for (int i = 0; i < count; ++i) {
      flags.push_back(absl::StrCat(flag, "=", FormatScalar(config, field, i)));
    }
  }
  return flags;
}

}  // namespace tessera
