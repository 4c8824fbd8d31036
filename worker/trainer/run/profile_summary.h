// What a step profile says, computed from the profiler's events without
// LibTorch (step_profiler.h feeds it): the operators by self CPU time on a CPU
// rank, the kernels by device time on a GPU rank, the device's events and idle
// time per step, and a Chrome trace (the JSON that Perfetto and
// chrome://tracing open) for LibTorch builds whose profiler has no Kineto to
// write one.
//
// Self CPU time: an operator's time less that of the operators it called on
// the same thread (aten::linear calls aten::addmm: addmm's time is addmm's own,
// linear keeps only its glue). Device time: the span of each event on the
// device (kernels, copies, fills); device events do not nest.
//
// Thread-safety: plain functions over values.
#ifndef TESSERA_WORKER_TRAINER_RUN_PROFILE_SUMMARY_H_
#define TESSERA_WORKER_TRAINER_RUN_PROFILE_SUMMARY_H_

#include <cstdint>
#include <string>
#include <vector>

namespace tessera::trainer {

struct ProfiledEvent {
  std::string name;
  bool on_device = false;  // a kernel, copy or fill on the GPU; else a CPU operator
  uint64_t thread = 0;     // CPU: the thread; device: the stream
  int64_t start_ns = 0;
  int64_t duration_ns = 0;
};

struct ProfileRow {
  std::string name;
  int64_t calls = 0;
  double self_ms = 0;  // self CPU time, or device time
};

struct ProfileSummary {
  bool device = false;  // rows are device events (a GPU rank); else CPU operators
  int64_t steps = 0;
  double wall_ms = 0;  // the window, host clock, device synchronised at both ends
  // Every name once, by time, most first (ties by name).
  std::vector<ProfileRow> rows;
  double total_ms = 0;        // sum of the rows' times
  int64_t device_events = 0;  // kernels, copies and fills in the window
  double device_busy_ms = 0;  // union of their spans
  int64_t cpu_operators = 0;  // CPU operator calls in the window
  double device_idle_ms() const { return device ? wall_ms - device_busy_ms : 0; }
};

// `device`: summarise the device events (a CUDA rank); else the CPU operators.
ProfileSummary SummarizeProfile(const std::vector<ProfiledEvent>& events, bool device,
                                int64_t steps, double wall_ms);

// The top `top` rows with calls and milliseconds per step, and the totals per
// step, as printed in the rank's log.
std::string FormatProfileTable(const ProfileSummary& summary, int top);

// The summary as one JSON object (every row), for scripts that compare runs
// (bench/step_profile/compare.py).
std::string ProfileSummaryJson(const ProfileSummary& summary);

// A Chrome trace of the events: complete ("X") events in microseconds, CPU
// operators under one process row by thread, device events under another by
// stream.
std::string ChromeTraceJson(const std::vector<ProfiledEvent>& events);

}  // namespace tessera::trainer

#endif  // TESSERA_WORKER_TRAINER_RUN_PROFILE_SUMMARY_H_
