#include "worker/trainer/gpu/rank_figures.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/device_figures.h"
#include "common/file_io.h"

namespace tessera::trainer {

std::optional<int64_t> PeakRssBytes(const std::string& proc_status) {
  const absl::StatusOr<std::string> text = ReadFile(proc_status, 1 << 20);
  if (!text.ok()) return std::nullopt;
  for (const absl::string_view line : absl::StrSplit(*text, '\n')) {
    absl::string_view rest = line;
    if (!absl::ConsumePrefix(&rest, "VmHWM:")) continue;
    rest = absl::StripAsciiWhitespace(rest);
    // "12345 kB"
    int64_t kib = 0;
    if (!absl::ConsumeSuffix(&rest, "kB")) return std::nullopt;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(rest), &kib)) return std::nullopt;
    return kib * 1024;
  }
  return std::nullopt;
}

std::string RankGpuId(const std::optional<std::string>& visible_devices, int index) {
  if (visible_devices.has_value()) {
    std::vector<std::string> ids = absl::StrSplit(*visible_devices, ',');
    if (index >= 0 && index < static_cast<int>(ids.size())) {
      return std::string(absl::StripAsciiWhitespace(ids[index]));
    }
  }
  return std::to_string(index);
}

void AppendNvmlFigures(GpuMonitor* monitor, const std::string& id, FigureValues& values) {
  if (monitor == nullptr) return;
  absl::StatusOr<GpuReading> reading = monitor->Read(id);
  if (!reading.ok()) return;
  if (reading->utilization_percent.has_value()) {
    values.emplace_back(kGpuUtilizationFigure, *reading->utilization_percent);
  }
  if (reading->memory_used_bytes.has_value()) {
    values.emplace_back(kGpuMemoryUsedFigure,
                        static_cast<double>(*reading->memory_used_bytes));
  }
}

void AppendPeakRss(FigureValues& values, const std::string& proc_status) {
  if (std::optional<int64_t> peak = PeakRssBytes(proc_status); peak.has_value()) {
    values.emplace_back(kPeakRssFigure, static_cast<double>(*peak));
  }
}

}  // namespace tessera::trainer
