#include "coordinator/core/slurm/slurm_client.h"

#include <array>

namespace tessera {

bool IsSlurmStateFinal(std::string_view state) {
  static constexpr std::array<std::string_view, 11> kFinal = {
      "CD", "F", "CA", "TO", "PR", "NF", "OOM", "BF", "DL", "RV", "SE"};
  for (std::string_view s : kFinal) {
    if (s == state) return true;
  }
  return false;
}

bool IsSlurmStatePending(std::string_view state) {
  static constexpr std::array<std::string_view, 5> kPending = {"PD", "RH", "RQ", "RF",
                                                               "RD"};
  for (std::string_view s : kPending) {
    if (s == state) return true;
  }
  return false;
}

}  // namespace tessera
