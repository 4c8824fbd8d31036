#include "common/gpu_monitor.h"

#include <dlfcn.h>

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace tessera {
namespace {

// The few NVML types used here, as nvml.h declares them (the header is not
// needed to build: the library is loaded at run time).
using NvmlReturn = int;  // nvmlReturn_t; 0 is NVML_SUCCESS
using NvmlDevice = void*;
struct NvmlUtilization {
  unsigned int gpu;
  unsigned int memory;
};
struct NvmlMemory {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};
constexpr NvmlReturn kNvmlSuccess = 0;
constexpr int kNvmlTemperatureGpu = 0;

struct NvmlFunctions {
  NvmlReturn (*init)();
  NvmlReturn (*shutdown)();
  NvmlReturn (*by_index)(unsigned int, NvmlDevice*);
  NvmlReturn (*by_uuid)(const char*, NvmlDevice*);
  NvmlReturn (*utilization)(NvmlDevice, NvmlUtilization*);
  NvmlReturn (*memory)(NvmlDevice, NvmlMemory*);
  NvmlReturn (*temperature)(NvmlDevice, int, unsigned int*);
  NvmlReturn (*power)(NvmlDevice, unsigned int*);  // milliwatts
};

class NvmlMonitor : public GpuMonitor {
 public:
  NvmlMonitor(void* handle, NvmlFunctions f) : handle_(handle), f_(f) {}
  ~NvmlMonitor() override {
    f_.shutdown();
    dlclose(handle_);
  }

  absl::StatusOr<GpuReading> Read(const std::string& id) override {
    NvmlDevice device = nullptr;
    unsigned int index = 0;
    NvmlReturn found = -1;
    if (absl::SimpleAtoi(id, &index)) {
      found = f_.by_index(index, &device);
    } else if (absl::StartsWith(id, "GPU-")) {
      found = f_.by_uuid(id.c_str(), &device);
    }
    if (found != kNvmlSuccess) {
      return absl::NotFoundError(absl::StrCat("NVML does not know GPU '", id, "'"));
    }
    GpuReading r;
    r.id = id;
    NvmlUtilization utilization{};
    if (f_.utilization(device, &utilization) == kNvmlSuccess) {
      r.utilization_percent = utilization.gpu;
    }
    NvmlMemory memory{};
    if (f_.memory(device, &memory) == kNvmlSuccess) {
      r.memory_used_bytes = static_cast<int64_t>(memory.used);
      r.memory_total_bytes = static_cast<int64_t>(memory.total);
    }
    unsigned int value = 0;
    if (f_.temperature(device, kNvmlTemperatureGpu, &value) == kNvmlSuccess) {
      r.temperature_celsius = value;
    }
    if (f_.power(device, &value) == kNvmlSuccess) r.power_watts = value / 1000.0;
    return r;
  }

 private:
  void* const handle_;  // from dlopen; closed in the destructor
  const NvmlFunctions f_;
};

template <typename F>
bool Bind(void* handle, const char* name, F* out) {
  *out = reinterpret_cast<F>(dlsym(handle, name));
  return *out != nullptr;
}

}  // namespace

absl::StatusOr<std::unique_ptr<GpuMonitor>> OpenNvml(const std::string& library) {
  void* handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    return absl::UnavailableError(absl::StrCat("NVML not loaded: ", dlerror()));
  }
  NvmlFunctions f{};
  const bool bound = Bind(handle, "nvmlInit_v2", &f.init) &&
                     Bind(handle, "nvmlShutdown", &f.shutdown) &&
                     Bind(handle, "nvmlDeviceGetHandleByIndex_v2", &f.by_index) &&
                     Bind(handle, "nvmlDeviceGetHandleByUUID", &f.by_uuid) &&
                     Bind(handle, "nvmlDeviceGetUtilizationRates", &f.utilization) &&
                     Bind(handle, "nvmlDeviceGetMemoryInfo", &f.memory) &&
                     Bind(handle, "nvmlDeviceGetTemperature", &f.temperature) &&
                     Bind(handle, "nvmlDeviceGetPowerUsage", &f.power);
  if (!bound) {
    dlclose(handle);
    return absl::UnavailableError(
        absl::StrCat("NVML in ", library, " lacks a function Tessera reads"));
  }
  if (const NvmlReturn init = f.init(); init != kNvmlSuccess) {
    dlclose(handle);
    return absl::UnavailableError(
        absl::StrCat("NVML failed to start (error ", init, ")"));
  }
  return std::unique_ptr<GpuMonitor>(new NvmlMonitor(handle, f));
}

}  // namespace tessera
