// Device probe: how many GPUs this node has, so the worker offers one slot per
// GPU (and CPU slots only where there are none).
//
// NVIDIA's driver lists each GPU as a directory under /proc/driver/nvidia/gpus;
// the probe counts them. `root` lets tests point it at a fake tree.
//
// Thread-safety: free function, no state.
#ifndef TESSERA_WORKER_DEVICE_PROBE_H_
#define TESSERA_WORKER_DEVICE_PROBE_H_

#include <string>

namespace tessera {

// Number of NVIDIA GPUs visible under `root` (normally "/").
int CountNvidiaGpus(const std::string& root = "/");

}  // namespace tessera

#endif  // TESSERA_WORKER_DEVICE_PROBE_H_
