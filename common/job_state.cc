#include "common/job_state.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "google/protobuf/descriptor.h"

namespace tessera {
namespace {

constexpr absl::string_view kJobStatePrefix = "JOB_STATE_";

}  // namespace

bool IsTerminal(v1::JobState state) {
  return state == v1::JOB_STATE_SUCCEEDED || state == v1::JOB_STATE_FAILED ||
         state == v1::JOB_STATE_CANCELLED;
}

std::string JobStateName(v1::JobState state) {
  if (!v1::JobState_IsValid(state))
    return absl::StrCat("STATE_", static_cast<int>(state));
  absl::string_view name = v1::JobState_Name(state);
  absl::ConsumePrefix(&name, kJobStatePrefix);
  return std::string(name);
}

absl::StatusOr<v1::JobState> ParseJobState(absl::string_view text) {
  std::string name = absl::AsciiStrToUpper(absl::StripAsciiWhitespace(text));
  if (!absl::StartsWith(name, kJobStatePrefix))
    name = absl::StrCat(kJobStatePrefix, name);
  v1::JobState state;
  if (v1::JobState_Parse(name, &state) && state != v1::JOB_STATE_UNSPECIFIED)
    return state;
  // The text is echoed, cut short and on one line.
  std::string shown(text.substr(0, 32));
  for (char& c : shown) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = ' ';
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown job state '", shown, "'; expected one of ",
      absl::StrJoin(JobStateNames(), ", "), " (any case, JOB_STATE_ prefix optional)"));
}

bool IsLegalTransition(v1::JobState from, v1::JobState to) {
  struct Change {
    v1::JobState from;
    v1::JobState to;
  };
  // The table in job_state.h; docs/design.md draws the same one.
  static constexpr Change kLegal[] = {
      {v1::JOB_STATE_QUEUED, v1::JOB_STATE_SCHEDULED},
      {v1::JOB_STATE_QUEUED, v1::JOB_STATE_CANCELLED},
      {v1::JOB_STATE_QUEUED, v1::JOB_STATE_FAILED},
      {v1::JOB_STATE_SCHEDULED, v1::JOB_STATE_RUNNING},
      {v1::JOB_STATE_SCHEDULED, v1::JOB_STATE_QUEUED},
      {v1::JOB_STATE_SCHEDULED, v1::JOB_STATE_FAILED},
      {v1::JOB_STATE_SCHEDULED, v1::JOB_STATE_CANCELLED},
      {v1::JOB_STATE_SCHEDULED, v1::JOB_STATE_SUCCEEDED},
      {v1::JOB_STATE_RUNNING, v1::JOB_STATE_SUCCEEDED},
      {v1::JOB_STATE_RUNNING, v1::JOB_STATE_QUEUED},
      {v1::JOB_STATE_RUNNING, v1::JOB_STATE_FAILED},
      {v1::JOB_STATE_RUNNING, v1::JOB_STATE_CANCELLED},
  };
  for (const Change& c : kLegal) {
    if (c.from == from && c.to == to) return true;
  }
  return false;
}

absl::Status CheckTransition(v1::JobState from, v1::JobState to) {
  if (IsLegalTransition(from, to)) return absl::OkStatus();
  return absl::InternalError(absl::StrCat("illegal job state change ", JobStateName(from),
                                          " -> ", JobStateName(to)));
}

std::vector<std::string> JobStateNames() {
  std::vector<std::string> names;
  const google::protobuf::EnumDescriptor* desc = v1::JobState_descriptor();
  for (int i = 0; i < desc->value_count(); ++i) {
    const auto state = static_cast<v1::JobState>(desc->value(i)->number());
    if (state != v1::JOB_STATE_UNSPECIFIED) names.push_back(JobStateName(state));
  }
  return names;
}

absl::string_view RankStateName(RankState state) {
  switch (state) {
    case RankState::kAssigned:
      return "assigned";
    case RankState::kRunning:
      return "running";
    case RankState::kExited:
      return "exited";
  }
  return "unknown";
}

absl::StatusOr<RankState> ParseRankState(absl::string_view text) {
  for (RankState s : {RankState::kAssigned, RankState::kRunning, RankState::kExited}) {
    if (text == RankStateName(s)) return s;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown rank state '", text.substr(0, 32), "'; use assigned, running or exited"));
}

}  // namespace tessera
