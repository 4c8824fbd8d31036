// Records a window of training steps with LibTorch's profiler (Kineto where the
// build has it: CPU operators, and on a GPU rank the kernels, copies and runtime
// calls) and writes, into its folder:
//   trace.json    a Chrome trace (Perfetto, chrome://tracing): Kineto's own
//                 where it writes one, else one made from the events;
//   summary.json  the table below with every row (profile_summary.h);
// and prints to the log the top operators by self CPU time (CPU rank) or the
// top kernels by device time (GPU rank), with calls and milliseconds per step,
// the device's events and idle time per step.
//
// The loop calls BeforeStep(n) before its n-th optimizer step (counted from
// 1) and AfterStep(n) after it; the window is --profile-steps A-B. On a GPU
// the device is synchronised at both ends of the window, so the window holds
// exactly its steps' work (the steps around it lose their overlap with it,
// nothing more). Finish() ends a window that the run cut short.
//
// Not thread-safe: the training thread owns it. LibTorch's profiler is
// process-wide; one StepProfiler at a time.
#ifndef TESSERA_WORKER_TRAINER_RUN_STEP_PROFILER_H_
#define TESSERA_WORKER_TRAINER_RUN_STEP_PROFILER_H_

#include <chrono>
#include <cstdint>
#include <optional>
#include <ostream>
#include <string>

#include "absl/status/status.h"
#include "common/profile_steps.h"
#include "worker/trainer/run/profile_summary.h"

namespace tessera::trainer {

struct StepProfilerOptions {
  ProfileSteps steps;
  std::string dir;              // created when missing; "" : the current folder
  bool cuda = false;            // the rank trains on a CUDA device
  int rank = 0;                 // for the log lines
  int top = 25;                 // rows printed
  std::ostream* log = nullptr;  // Not owned; null: nothing printed
};

class StepProfiler {
 public:
  explicit StepProfiler(StepProfilerOptions options);
  ~StepProfiler();
  StepProfiler(const StepProfiler&) = delete;
  StepProfiler& operator=(const StepProfiler&) = delete;

  // Starts recording when `step` is the window's first.
  absl::Status BeforeStep(int64_t step);
  // Stops, writes and prints when `step` is the window's last.
  absl::Status AfterStep(int64_t step);
  // Stops a window still open after step `last_done` and writes what it holds.
  absl::Status Finish(int64_t last_done);

  // The files written; empty until the window has ended.
  const std::string& trace_path() const { return trace_path_; }
  const std::string& summary_path() const { return summary_path_; }
  // The summary of the recorded window, once it has ended.
  const std::optional<ProfileSummary>& summary() const { return summary_; }

 private:
  absl::Status Stop(int64_t last_done);

  const StepProfilerOptions options_;
  bool recording_ = false;
  int64_t first_recorded_ = 0;
  std::chrono::steady_clock::time_point started_;
  std::string trace_path_;
  std::string summary_path_;
  std::optional<ProfileSummary> summary_;
};

}  // namespace tessera::trainer

#endif  // TESSERA_WORKER_TRAINER_RUN_STEP_PROFILER_H_
