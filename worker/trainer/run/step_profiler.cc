#include "worker/trainer/run/step_profiler.h"

#include <torch/csrc/autograd/profiler_kineto.h>

#include <chrono>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <memory>
#include <set>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/file_io.h"
#include "worker/trainer/gpu/device.h"

namespace tessera::trainer {
namespace {

namespace profiler = torch::autograd::profiler;
using torch::profiler::impl::ActivityType;
using torch::profiler::impl::ProfilerConfig;
using torch::profiler::impl::ProfilerState;

// KinetoEvent's clock is in microseconds up to LibTorch 2.x's switch to
// nanoseconds; whichever this build has.
template <typename Event>
int64_t StartNs(const Event& e) {
  if constexpr (requires { e.startNs(); }) {
    return static_cast<int64_t>(e.startNs());
  } else {
    return static_cast<int64_t>(e.startUs()) * 1000;
  }
}

template <typename Event>
int64_t DurationNs(const Event& e) {
  if constexpr (requires { e.durationNs(); }) {
    return static_cast<int64_t>(e.durationNs());
  } else {
    return static_cast<int64_t>(e.durationUs()) * 1000;
  }
}

std::vector<ProfiledEvent> ToProfiledEvents(
    const std::vector<profiler::KinetoEvent>& kineto) {
  std::vector<ProfiledEvent> events;
  events.reserve(kineto.size());
  for (const profiler::KinetoEvent& e : kineto) {
    ProfiledEvent event;
    event.name = e.name();
    event.on_device = e.deviceType() != c10::DeviceType::CPU;
    event.thread =
        event.on_device ? static_cast<uint64_t>(e.deviceResourceId()) : e.startThreadId();
    event.start_ns = StartNs(e);
    event.duration_ns = DurationNs(e);
    events.push_back(std::move(event));
  }
  return events;
}

bool IsNonEmptyFile(const std::string& path) {
  std::error_code error;
  return std::filesystem::file_size(path, error) > 0 && !error;
}

}  // namespace

StepProfiler::StepProfiler(StepProfilerOptions options) : options_(std::move(options)) {}

StepProfiler::~StepProfiler() {
  if (!recording_) return;
  try {
    profiler::disableProfiler();
  } catch (const std::exception&) {
    // The process is leaving the run anyway; nothing to write.
  }
}

absl::Status StepProfiler::BeforeStep(int64_t step) {
  if (recording_ || step != options_.steps.first) return absl::OkStatus();
  const std::string dir = options_.dir.empty() ? "." : options_.dir;
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) {
    return absl::FailedPreconditionError(
        absl::StrCat("profile folder ", dir, ": ", error.message()));
  }
  trace_path_.clear();
  summary_path_.clear();
  try {
    std::set<ActivityType> activities = {ActivityType::CPU};
    if (options_.cuda) {
      activities.insert(ActivityType::CUDA);
      SynchronizeCuda();
    }
    const ProfilerConfig config(ProfilerState::KINETO);
    profiler::prepareProfiler(config, activities);
    profiler::enableProfiler(config, activities);
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("starting the profiler: ", e.what()));
  }
  recording_ = true;
  first_recorded_ = step;
  started_ = std::chrono::steady_clock::now();
  return absl::OkStatus();
}

absl::Status StepProfiler::AfterStep(int64_t step) {
  if (!recording_ || step != options_.steps.last) return absl::OkStatus();
  return Stop(step);
}

absl::Status StepProfiler::Finish(int64_t last_done) {
  if (!recording_) return absl::OkStatus();
  return Stop(last_done);
}

absl::Status StepProfiler::Stop(int64_t last_done) {
  std::unique_ptr<profiler::ProfilerResult> result;
  double wall_ms = 0;
  try {
    if (options_.cuda) SynchronizeCuda();
    wall_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() -
                                                        started_)
                  .count();
    result = profiler::disableProfiler();
  } catch (const std::exception& e) {
    recording_ = false;
    return absl::InternalError(absl::StrCat("stopping the profiler: ", e.what()));
  }
  recording_ = false;
  const std::string dir = options_.dir.empty() ? "." : options_.dir;
  const std::vector<ProfiledEvent> events = ToProfiledEvents(result->events());
  const int64_t steps = last_done - first_recorded_ + 1;
  summary_ = SummarizeProfile(events, options_.cuda, steps, wall_ms);

  // Kineto writes the richer trace (flows from launches to kernels); a build
  // without Kineto writes nothing there, so the events make one.
  const std::string trace = absl::StrCat(dir, "/trace.json");
  std::error_code ignored;
  std::filesystem::remove(trace, ignored);
  try {
    result->save(trace);
  } catch (const std::exception&) {
    // No Kineto trace in this build: written below.
  }
  if (!IsNonEmptyFile(trace)) {
    absl::Status written = tessera::WriteFileAtomically(trace, ChromeTraceJson(events));
    if (!written.ok()) return written;
  }
  const std::string summary = absl::StrCat(dir, "/summary.json");
  absl::Status written =
      tessera::WriteFileAtomically(summary, ProfileSummaryJson(*summary_));
  if (!written.ok()) return written;
  trace_path_ = trace;
  summary_path_ = summary;
  if (options_.log != nullptr) {
    *options_.log << "[rank " << options_.rank << "] profile of steps " << first_recorded_
                  << "-" << last_done << ": "
                  << FormatProfileTable(*summary_, options_.top) << "[rank "
                  << options_.rank << "] profile written: " << trace
                  << " (Chrome trace: Perfetto, chrome://tracing), " << summary
                  << std::endl;
  }
  return absl::OkStatus();
}

}  // namespace tessera::trainer
