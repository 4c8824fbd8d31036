#include "worker/trainer/run/profile_summary.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"

namespace tessera::trainer {
namespace {

constexpr double kNsPerMs = 1e6;

// Self time of each CPU event: its duration less its direct children's on the
// same thread (an event inside another's span is its child).
std::vector<int64_t> SelfTimes(const std::vector<ProfiledEvent>& events,
                               const std::vector<size_t>& cpu) {
  std::map<uint64_t, std::vector<size_t>> by_thread;
  for (const size_t i : cpu) by_thread[events[i].thread].push_back(i);
  std::vector<int64_t> self(events.size(), 0);
  for (auto& [thread, ids] : by_thread) {
    // Parents first: earlier start, then longer span.
    std::sort(ids.begin(), ids.end(), [&](size_t a, size_t b) {
      if (events[a].start_ns != events[b].start_ns) {
        return events[a].start_ns < events[b].start_ns;
      }
      return events[a].duration_ns > events[b].duration_ns;
    });
    std::vector<size_t> open;  // the chain of enclosing events
    for (const size_t i : ids) {
      const ProfiledEvent& e = events[i];
      while (!open.empty() &&
             events[open.back()].start_ns + events[open.back()].duration_ns <=
                 e.start_ns) {
        open.pop_back();
      }
      self[i] += e.duration_ns;
      if (!open.empty()) self[open.back()] -= e.duration_ns;
      open.push_back(i);
    }
  }
  for (int64_t& t : self) t = std::max<int64_t>(t, 0);
  return self;
}

// The length of the union of the device events' spans, over all streams.
int64_t BusyNs(const std::vector<ProfiledEvent>& events, const std::vector<size_t>& ids) {
  std::vector<std::pair<int64_t, int64_t>> spans;
  spans.reserve(ids.size());
  for (const size_t i : ids) {
    spans.emplace_back(events[i].start_ns, events[i].start_ns + events[i].duration_ns);
  }
  std::sort(spans.begin(), spans.end());
  int64_t busy = 0;
  int64_t covered_to = INT64_MIN;
  for (const auto& [begin, end] : spans) {
    const int64_t from = std::max(begin, covered_to);
    if (end > from) busy += end - from;
    covered_to = std::max(covered_to, end);
  }
  return busy;
}

}  // namespace

ProfileSummary SummarizeProfile(const std::vector<ProfiledEvent>& events, bool device,
                                int64_t steps, double wall_ms) {
  ProfileSummary summary;
  summary.device = device;
  summary.steps = steps;
  summary.wall_ms = wall_ms;
  std::vector<size_t> cpu;
  std::vector<size_t> on_device;
  for (size_t i = 0; i < events.size(); ++i) {
    (events[i].on_device ? on_device : cpu).push_back(i);
  }
  summary.device_events = static_cast<int64_t>(on_device.size());
  summary.cpu_operators = static_cast<int64_t>(cpu.size());
  summary.device_busy_ms = static_cast<double>(BusyNs(events, on_device)) / kNsPerMs;

  std::vector<int64_t> time(events.size(), 0);
  if (device) {
    for (const size_t i : on_device) time[i] = events[i].duration_ns;
  } else {
    time = SelfTimes(events, cpu);
  }
  std::map<std::string, ProfileRow> rows;
  for (const size_t i : device ? on_device : cpu) {
    ProfileRow& row = rows[events[i].name];
    row.name = events[i].name;
    ++row.calls;
    row.self_ms += static_cast<double>(time[i]) / kNsPerMs;
  }
  for (auto& [name, row] : rows) {
    summary.total_ms += row.self_ms;
    summary.rows.push_back(std::move(row));
  }
  std::sort(summary.rows.begin(), summary.rows.end(),
            [](const ProfileRow& a, const ProfileRow& b) {
              if (a.self_ms != b.self_ms) return a.self_ms > b.self_ms;
              return a.name < b.name;
            });
  return summary;
}

std::string FormatProfileTable(const ProfileSummary& summary, int top) {
  const double steps = static_cast<double>(std::max<int64_t>(summary.steps, 1));
  const char* what =
      summary.device ? "kernels and copies by device time" : "operators by self CPU time";
  std::string out =
      absl::StrFormat("top %d %s, per step (%d steps):\n", top, what, summary.steps);
  absl::StrAppendFormat(&out, "  %-64s %9s %11s %6s\n", "name", "calls", "ms", "%");
  int shown = 0;
  for (const ProfileRow& row : summary.rows) {
    if (shown++ == top) break;
    std::string name = row.name;
    if (name.size() > 64) name = absl::StrCat(name.substr(0, 61), "...");
    absl::StrAppendFormat(
        &out, "  %-64s %9.1f %11.3f %5.1f%%\n", name,
        static_cast<double>(row.calls) / steps, row.self_ms / steps,
        summary.total_ms > 0 ? 100.0 * row.self_ms / summary.total_ms : 0);
  }
  absl::StrAppendFormat(
      &out, "  step: %.3f ms wall; %s %.3f ms per step", summary.wall_ms / steps,
      summary.device ? "device busy" : "operators' self time",
      (summary.device ? summary.device_busy_ms : summary.total_ms) / steps);
  if (summary.device) {
    absl::StrAppendFormat(&out, ", idle %.3f ms; %.1f device events per step",
                          summary.device_idle_ms() / steps,
                          static_cast<double>(summary.device_events) / steps);
  }
  absl::StrAppendFormat(&out, "; %.1f CPU operator calls per step\n",
                        static_cast<double>(summary.cpu_operators) / steps);
  return out;
}

std::string ProfileSummaryJson(const ProfileSummary& summary) {
  nlohmann::json rows = nlohmann::json::array();
  for (const ProfileRow& row : summary.rows) {
    rows.push_back({{"name", row.name}, {"calls", row.calls}, {"ms", row.self_ms}});
  }
  const nlohmann::json out = {{"kind", summary.device ? "device" : "cpu"},
                              {"steps", summary.steps},
                              {"wall_ms", summary.wall_ms},
                              {"total_ms", summary.total_ms},
                              {"device_events", summary.device_events},
                              {"device_busy_ms", summary.device_busy_ms},
                              {"device_idle_ms", summary.device_idle_ms()},
                              {"cpu_operators", summary.cpu_operators},
                              {"rows", std::move(rows)}};
  return out.dump(1);
}

std::string ChromeTraceJson(const std::vector<ProfiledEvent>& events) {
  int64_t origin = INT64_MAX;
  for (const ProfiledEvent& e : events) origin = std::min(origin, e.start_ns);
  nlohmann::json trace = nlohmann::json::array();
  for (const ProfiledEvent& e : events) {
    trace.push_back({{"name", e.name},
                     {"ph", "X"},
                     {"cat", e.on_device ? "kernel" : "cpu_op"},
                     {"pid", e.on_device ? "device" : "CPU"},
                     {"tid", e.thread},
                     {"ts", static_cast<double>(e.start_ns - origin) / 1e3},
                     {"dur", static_cast<double>(e.duration_ns) / 1e3}});
  }
  const nlohmann::json out = {{"traceEvents", std::move(trace)},
                              {"displayTimeUnit", "ms"}};
  return out.dump();
}

}  // namespace tessera::trainer
