// Device probe: which GPUs this worker was given, so that it offers one slot
// per GPU of that set (and CPU slots only where the set is empty) and gives
// each rank a CUDA_VISIBLE_DEVICES inside it, never wider.
//
// NVIDIA's driver lists each GPU of the node as a directory under
// /proc/driver/nvidia/gpus. On a shared node the worker is usually given only
// some of them: Slurm (--gres=gpu:2 sets CUDA_VISIBLE_DEVICES=2,3 and
// SLURM_STEP_GPUS), a container runtime, or an admin who set the variable. The
// set is, in this order of precedence:
//   1. no GPU directory under /proc/driver/nvidia/gpus: none (no driver, so
//      whatever the environment names cannot be used);
//   2. CUDA_VISIBLE_DEVICES when it is set: exactly what the CUDA runtime
//      would let the worker itself see. It comes first because it is what
//      Slurm sets for the step too, renumbered where the site constrains
//      devices with cgroups, which SLURM_*_GPUS are not;
//   3. SLURM_STEP_GPUS, else SLURM_JOB_GPUS: the node's GPU indices of the
//      step or of the allocation;
//   4. every GPU the driver lists, as indices 0..N-1.
// A list is read as the CUDA runtime reads CUDA_VISIBLE_DEVICES: ids are
// indices or UUIDs ("GPU-...", "MIG-..."), and the list ends at the first
// entry that is neither, so "", "-1", "NoDevFiles" and "none" all mean no
// GPU. An index at or above the number of GPUs the driver lists, and an id
// given twice, are errors: the worker refuses to start rather than guess.
//
// Everything is read through DeviceEnvironment, so that tests run over a fake
// /proc tree and a fake environment.
//
// Thread-safety: free functions, no state.
#ifndef TESSERA_WORKER_DEVICE_PROBE_H_
#define TESSERA_WORKER_DEVICE_PROBE_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tessera {

// What the probe reads.
struct DeviceEnvironment {
  // A variable of the worker's environment; nullopt when unset (an empty
  // value is set, and means what it says).
  std::function<std::optional<std::string>(const std::string& name)> getenv;
  // proc/driver/nvidia/gpus is read below this directory.
  std::string root = "/";
};

// The worker's own environment (getenv) and "/".
DeviceEnvironment SystemDeviceEnvironment();

// The GPUs this worker owns: ids as CUDA_VISIBLE_DEVICES takes them, slot i
// being ids[i]; and where the set came from, for the log.
struct GpuSet {
  std::vector<std::string> ids;
  std::string source;  // e.g. "CUDA_VISIBLE_DEVICES=2,3", "/proc/driver/nvidia/gpus"
};

// Number of NVIDIA GPUs the driver lists under `root` (normally "/").
int CountNvidiaGpus(const std::string& root = "/");

// The ids of a CUDA_VISIBLE_DEVICES-style `value` (see the file comment).
// `name` names the variable in errors. InvalidArgument for an id given twice.
absl::StatusOr<std::vector<std::string>> ParseGpuList(absl::string_view name,
                                                      absl::string_view value);

// The set this worker was given (the precedence in the file comment).
absl::StatusOr<GpuSet> ProbeGpus(const DeviceEnvironment& env);

// The set to offer for the worker's --gpus flag: "auto" is the probed set,
// "none" no GPU, a count N the first N of the probed set. InvalidArgument
// for any other flag, and for a count larger than the probed set.
absl::StatusOr<GpuSet> SelectGpus(const std::string& flag, const DeviceEnvironment& env);

// A rank's CUDA_VISIBLE_DEVICES for the worker `slots` it was given (its
// job's slots on this worker, by local rank): the owned ids of those slots,
// comma-separated. InvalidArgument for a slot outside `owned`.
absl::StatusOr<std::string> RankVisibleDevices(const std::vector<std::string>& owned,
                                               const std::vector<int32_t>& slots);

}  // namespace tessera

#endif  // TESSERA_WORKER_DEVICE_PROBE_H_
