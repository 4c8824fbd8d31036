#include "worker/device_probe.h"

#include <filesystem>
#include <system_error>

namespace tessera {

int CountNvidiaGpus(const std::string& root) {
  std::error_code ec;
  const std::filesystem::path dir =
      std::filesystem::path(root) / "proc/driver/nvidia/gpus";
  int count = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    if (entry.is_directory(ec)) ++count;
  }
  return count;
}

}  // namespace tessera
