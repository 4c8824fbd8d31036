#include "worker/device_probe.h"

#include <cstdlib>
#include <filesystem>
#include <set>
#include <system_error>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace tessera {
namespace {

constexpr char kProcGpus[] = "/proc/driver/nvidia/gpus";

// An entry the CUDA runtime takes: a device index or a GPU/MIG UUID.
bool IsGpuId(absl::string_view id) {
  if (absl::StartsWith(id, "GPU-") || absl::StartsWith(id, "MIG-")) {
    return id.size() > 4;
  }
  int index = 0;
  return !id.empty() && absl::ascii_isdigit(static_cast<unsigned char>(id[0])) &&
         absl::SimpleAtoi(id, &index) && index >= 0;
}

// InvalidArgument when an index in `ids` names a GPU the driver does not list.
absl::Status CheckIndices(absl::string_view source, const std::vector<std::string>& ids,
                          int count) {
  for (const std::string& id : ids) {
    int index = 0;
    if (absl::SimpleAtoi(id, &index) && index >= count) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, " names GPU ", id, ", but the driver lists ", count,
                       " GPU", count == 1 ? "" : "s", " under ", kProcGpus));
    }
  }
  return absl::OkStatus();
}

}  // namespace

DeviceEnvironment SystemDeviceEnvironment() {
  return DeviceEnvironment{
      .getenv = [](const std::string& name) -> std::optional<std::string> {
        const char* value = std::getenv(name.c_str());
        if (value == nullptr) return std::nullopt;
        return std::string(value);
      },
      .root = "/"};
}

int CountNvidiaGpus(const std::string& root) {
  std::error_code ec;
  const std::filesystem::path dir =
      std::filesystem::path(root) / "proc/driver/nvidia/gpus";
  int count = 0;
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end;
       it.increment(ec)) {
    if (it->is_directory(ec)) ++count;
  }
  return count;
}

absl::StatusOr<std::vector<std::string>> ParseGpuList(absl::string_view name,
                                                      absl::string_view value) {
  std::vector<std::string> ids;
  std::set<std::string> seen;
  for (absl::string_view entry : absl::StrSplit(value, ',')) {
    const std::string id(absl::StripAsciiWhitespace(entry));
    // The CUDA runtime stops at the first entry it cannot take.
    if (!IsGpuId(id)) break;
    if (!seen.insert(id).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, "=", value, " names GPU ", id, " twice"));
    }
    ids.push_back(id);
  }
  return ids;
}

absl::StatusOr<GpuSet> ProbeGpus(const DeviceEnvironment& env) {
  const int count = CountNvidiaGpus(env.root);
  if (count == 0) return GpuSet{{}, absl::StrCat("no GPU under ", kProcGpus)};
  for (const char* name : {"CUDA_VISIBLE_DEVICES", "SLURM_STEP_GPUS", "SLURM_JOB_GPUS"}) {
    const std::optional<std::string> value = env.getenv(name);
    if (!value.has_value()) continue;
    const std::string source = absl::StrCat(name, "=", *value);
    absl::StatusOr<std::vector<std::string>> ids = ParseGpuList(name, *value);
    if (!ids.ok()) return ids.status();
    if (absl::Status s = CheckIndices(source, *ids, count); !s.ok()) return s;
    return GpuSet{*std::move(ids), source};
  }
  GpuSet all{{}, kProcGpus};
  for (int i = 0; i < count; ++i) all.ids.push_back(absl::StrCat(i));
  return all;
}

absl::StatusOr<GpuSet> SelectGpus(const std::string& flag, const DeviceEnvironment& env) {
  if (flag == "none") return GpuSet{{}, "--gpus none"};
  int wanted = 0;
  if (flag != "auto" && (!absl::SimpleAtoi(flag, &wanted) || wanted < 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--gpus must be auto, none or a count, got '", flag, "'"));
  }
  absl::StatusOr<GpuSet> probed = ProbeGpus(env);
  if (!probed.ok() || flag == "auto") return probed;
  if (static_cast<size_t>(wanted) > probed->ids.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--gpus ", wanted, ": this worker was given ", probed->ids.size(), " GPU",
        probed->ids.size() == 1 ? "" : "s", " (", probed->source, ")",
        probed->ids.empty() ? "" : absl::StrCat(": ", absl::StrJoin(probed->ids, ","))));
  }
  probed->ids.resize(static_cast<size_t>(wanted));
  probed->source = absl::StrCat("--gpus ", wanted, " of ", probed->source);
  return probed;
}

absl::StatusOr<std::string> RankVisibleDevices(const std::vector<std::string>& owned,
                                               const std::vector<int32_t>& slots) {
  std::vector<std::string> ids;
  for (const int32_t slot : slots) {
    if (slot < 0 || static_cast<size_t>(slot) >= owned.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("slot ", slot, " is not one of this worker's ", owned.size(),
                       " GPUs (", absl::StrJoin(owned, ","), ")"));
    }
    ids.push_back(owned[static_cast<size_t>(slot)]);
  }
  return absl::StrJoin(ids, ",");
}

}  // namespace tessera
